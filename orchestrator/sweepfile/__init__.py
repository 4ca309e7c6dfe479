"""Sweep files: YAML in, a typed :class:`Sweep` out, or every problem with file, line and field.

A sweep file is untrusted input that decides what runs as root on GPU hosts overnight. The
package is split by job:

- :mod:`~orchestrator.sweepfile.yamlread`: the hardened YAML reader (no code, no aliases,
  caps on size and depth, YAML 1.2 scalars, no control characters), lines of every field;
- :mod:`~orchestrator.sweepfile.fields`: the field types, each with its check and JSON Schema;
- :mod:`~orchestrator.sweepfile.schema`: the pydantic models, one per section;
- :mod:`~orchestrator.sweepfile.rules`: cross-field rules on the typed parts that parsed;
- :mod:`~orchestrator.sweepfile.load`: the passes in order, problems located, the entry points;
- :mod:`~orchestrator.sweepfile.problems`: :class:`Problem` and :class:`SweepFileError`;
- :mod:`~orchestrator.sweepfile.workloads`: typed workloads and where a file workload's
  content comes from (the disk beside the sweep file, or the store).

The contract: ``load_sweep(path) -> Sweep``, raising :class:`SweepFileError` whose
``problems`` each have ``file``, ``line`` and ``field_path``.
"""

from orchestrator.sweepfile.fields import parse_duration
from orchestrator.sweepfile.load import (
    CheckedSweep,
    check_sweep,
    check_sweep_text,
    load_sweep,
    load_sweep_with_text,
    parse_sweep,
    read_sweep_text,
)
from orchestrator.sweepfile.problems import (
    FieldPath,
    Problem,
    SweepFileError,
    format_path,
    unknown_key_message,
)
from orchestrator.sweepfile.schema import (
    BenchmarkSpec,
    CodingSpec,
    EstimateSpec,
    HostSpec,
    KnobMapping,
    Notify,
    Policy,
    Schedule,
    ServerSpec,
    SloSpec,
    Sweep,
    Timeouts,
    WorkloadRef,
    sweep_json_schema,
)
from orchestrator.sweepfile.workloads import (
    MAX_WORKLOAD_BYTES,
    DiskWorkloads,
    NoWorkloadFiles,
    StoredWorkloads,
    WorkloadContentMissing,
    WorkloadKind,
    WorkloadSource,
    WorkloadSpec,
    WorkloadUnreadable,
    workload_label,
)
from orchestrator.sweepfile.yamlread import MAX_DEPTH, MAX_FILE_BYTES, MAX_NODES

__all__ = [
    "MAX_DEPTH",
    "MAX_FILE_BYTES",
    "MAX_NODES",
    "MAX_WORKLOAD_BYTES",
    "BenchmarkSpec",
    "CheckedSweep",
    "CodingSpec",
    "DiskWorkloads",
    "EstimateSpec",
    "FieldPath",
    "HostSpec",
    "KnobMapping",
    "NoWorkloadFiles",
    "Notify",
    "Policy",
    "Problem",
    "Schedule",
    "ServerSpec",
    "SloSpec",
    "StoredWorkloads",
    "Sweep",
    "SweepFileError",
    "Timeouts",
    "WorkloadContentMissing",
    "WorkloadKind",
    "WorkloadRef",
    "WorkloadSource",
    "WorkloadSpec",
    "WorkloadUnreadable",
    "check_sweep",
    "check_sweep_text",
    "format_path",
    "load_sweep",
    "load_sweep_with_text",
    "parse_duration",
    "parse_sweep",
    "read_sweep_text",
    "sweep_json_schema",
    "unknown_key_message",
    "workload_label",
]
