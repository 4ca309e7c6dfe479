"""Workloads: prompt sources that look like an operator's traffic, at exact context lengths.

``sample`` parses a traffic sample (JSONL), ``builtin`` builds the realistic sets that ship
with the package, ``source`` turns either into prompts of the matrix's exact lengths.
"""

from orchestrator.bench.workloads.builtin import BUILTIN_WORKLOADS, load_builtin
from orchestrator.bench.workloads.sample import (
    SampleRequest,
    WorkloadFileError,
    WorkloadSample,
    parse_sample,
)
from orchestrator.bench.workloads.source import WorkloadPrompts

__all__ = [
    "BUILTIN_WORKLOADS",
    "SampleRequest",
    "WorkloadFileError",
    "WorkloadPrompts",
    "WorkloadSample",
    "load_builtin",
    "parse_sample",
]
