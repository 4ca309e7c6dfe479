"""Workloads: prompt sources that look like an operator's traffic, at exact context lengths.

``sample`` parses a traffic sample (JSONL), ``builtin`` builds the realistic sets that ship
with the package, ``source`` (``WorkloadPrompts``) turns either into prompts of the matrix's
exact lengths. The package itself exports only the first two: the sweep file and the
simulator read samples at load time without importing the bench client that ``source``
needs (import it as ``orchestrator.bench.workloads.source``).
"""

from orchestrator.bench.workloads.builtin import BUILTIN_WORKLOADS, load_builtin
from orchestrator.bench.workloads.sample import (
    SampleRequest,
    WorkloadFileError,
    WorkloadSample,
    parse_sample,
)

__all__ = [
    "BUILTIN_WORKLOADS",
    "SampleRequest",
    "WorkloadFileError",
    "WorkloadSample",
    "load_builtin",
    "parse_sample",
]
