"""A stand-in ``nvidia-smi`` over a simulated host's GPU state directory.

A host whose GPUs report no memory (unified memory, GB10) prints ``[N/A]`` in every ``memory.*``
cell, as the real tool does there, and still lists compute processes.

Answers the queries the orchestrator makes (FACTS: GPU memory) in nvidia-smi's CSV format:
``--query-gpu=FIELDS`` and ``--query-compute-apps=FIELDS`` with ``--format=csv[,noheader]
[,nounits]``, ``-i/--id``, and ``-L``. Anything else fails like nvidia-smi does on bad input.
Runnable on its own, so a real-systemd test host can put it on PATH as ``nvidia-smi``::

    python -m orchestrator.sim.nvidia_smi --state-dir DIR [nvidia-smi arguments]
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.sim.gpu import ComputeApp, GpuReading, GpuSnapshot, GpuState

INVALID_ARGS = 2
_NOT_AVAILABLE = "[N/A]"
NO_DEVICES = 6
_USAGE_ERROR = "Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.\n"


@dataclass(frozen=True, slots=True)
class SmiResult:
    exit_status: int
    stdout: str
    stderr: str = ""


_GpuField = Callable[[GpuReading, GpuSnapshot, str], str]
_GPU_FIELDS: dict[str, tuple[str, _GpuField]] = {
    "index": ("", lambda r, s, d: str(r.device.index)),
    "uuid": ("", lambda r, s, d: r.device.uuid),
    "gpu_uuid": ("", lambda r, s, d: r.device.uuid),
    "name": ("", lambda r, s, d: r.device.name),
    "gpu_name": ("", lambda r, s, d: r.device.name),
    "count": ("", lambda r, s, d: str(len(s.gpus))),
    "driver_version": ("", lambda r, s, d: d),
    "memory.total": ("MiB", lambda r, s, d: str(r.device.total_mib)),
    "memory.used": ("MiB", lambda r, s, d: str(r.used_mib)),
    "memory.free": ("MiB", lambda r, s, d: str(r.free_mib)),
    "pci.bus_id": ("", lambda r, s, d: f"00000000:{0x18 + r.device.index * 0x10:02X}:00.0"),
}

_AppField = Callable[[ComputeApp, dict[int, GpuReading]], str]
_APP_FIELDS: dict[str, tuple[str, _AppField]] = {
    "gpu_uuid": ("", lambda a, g: g[a.gpu_index].device.uuid),
    "gpu_name": ("", lambda a, g: g[a.gpu_index].device.name),
    "gpu_bus_id": ("", lambda a, g: f"00000000:{0x18 + a.gpu_index * 0x10:02X}:00.0"),
    "pid": ("", lambda a, g: str(a.pid)),
    "process_name": ("", lambda a, g: a.process_name),
    "name": ("", lambda a, g: a.process_name),
    "used_memory": ("MiB", lambda a, g: str(a.used_mib)),
    "used_gpu_memory": ("MiB", lambda a, g: str(a.used_mib)),
}


@dataclass(slots=True)
class _Args:
    query_gpu: list[str] | None = None
    query_apps: list[str] | None = None
    csv: bool = False
    header: bool = True
    units: bool = True
    ids: list[str] | None = None
    list_gpus: bool = False


class _UsageError(Exception):
    def __init__(self, message: str = _USAGE_ERROR) -> None:
        super().__init__(message)
        self.message = message


def _take_value(argv: Sequence[str], index: int, arg: str) -> tuple[str, int]:
    if "=" in arg:
        return arg.split("=", 1)[1], index + 1
    if index + 1 >= len(argv):
        raise _UsageError()
    return argv[index + 1], index + 2


def _parse(argv: Sequence[str]) -> _Args:
    args = _Args()
    index = 0
    while index < len(argv):
        arg = argv[index]
        name = arg.split("=", 1)[0]
        if name in ("--query-gpu", "--query-compute-apps"):
            value, index = _take_value(argv, index, arg)
            fields = [part.strip() for part in value.split(",") if part.strip()]
            if name == "--query-gpu":
                args.query_gpu = fields
            else:
                args.query_apps = fields
        elif name == "--format":
            value, index = _take_value(argv, index, arg)
            for part in value.split(","):
                if part == "csv":
                    args.csv = True
                elif part == "noheader":
                    args.header = False
                elif part == "nounits":
                    args.units = False
                else:
                    raise _UsageError(f'"{part}" is not a valid format option.\n')
        elif name in ("-i", "--id"):
            value, index = _take_value(argv, index, arg)
            args.ids = [part for part in value.split(",") if part]
        elif arg.startswith("-i") and len(arg) > 2:
            args.ids = [part for part in arg[2:].split(",") if part]
            index += 1
        elif arg in ("-L", "--list-gpus"):
            args.list_gpus = True
            index += 1
        else:
            raise _UsageError()
    return args


def _select(snapshot: GpuSnapshot, ids: list[str] | None) -> list[GpuReading]:
    if ids is None:
        return list(snapshot.gpus)
    chosen: list[GpuReading] = []
    for wanted in ids:
        match = [
            reading
            for reading in snapshot.gpus
            if wanted == str(reading.device.index) or wanted == reading.device.uuid
        ]
        if not match:
            raise LookupError(wanted)
        chosen.extend(match)
    return chosen


def _row(cells: list[str]) -> str:
    return ", ".join(cells)


def render(argv: Sequence[str], snapshot: GpuSnapshot, driver_version: str) -> SmiResult:
    """nvidia-smi's answer to ``argv`` for a given snapshot (pure)."""
    try:
        args = _parse(argv)
        gpus = _select(snapshot, args.ids)
    except _UsageError as exc:
        return SmiResult(INVALID_ARGS, "", exc.message)
    except LookupError:
        return SmiResult(NO_DEVICES, "No devices were found\n")
    if args.list_gpus and args.query_gpu is None and args.query_apps is None:
        listed = [f"GPU {r.device.index}: {r.device.name} (UUID: {r.device.uuid})" for r in gpus]
        return SmiResult(0, "".join(line + "\n" for line in listed))
    queries = [q for q in (args.query_gpu, args.query_apps) if q is not None]
    if len(queries) != 1:
        return SmiResult(INVALID_ARGS, "", _USAGE_ERROR)
    if not args.csv:
        return SmiResult(INVALID_ARGS, "", "Format not specified. Please use --format=csv\n")
    lines: list[str] = []
    if args.query_gpu is not None:
        unknown = [f for f in args.query_gpu if f not in _GPU_FIELDS]
        if unknown:
            return SmiResult(INVALID_ARGS, _invalid_field(unknown[0]))
        if args.header:
            lines.append(_row([_header(f, _GPU_FIELDS[f][0], args.units) for f in args.query_gpu]))
        for reading in gpus:
            cells = []
            for name in args.query_gpu:
                unit, value = _GPU_FIELDS[name]
                if name.startswith("memory.") and not snapshot.reports_memory:
                    cells.append(_NOT_AVAILABLE)  # no unit suffix on an unavailable value
                    continue
                cells.append(_cell(value(reading, snapshot, driver_version), unit, args.units))
            lines.append(_row(cells))
    else:
        fields = args.query_apps or []
        unknown = [f for f in fields if f not in _APP_FIELDS]
        if unknown:
            return SmiResult(INVALID_ARGS, _invalid_field(unknown[0]))
        if args.header:
            lines.append(_row([_header(f, _APP_FIELDS[f][0], args.units) for f in fields]))
        by_index = {reading.device.index: reading for reading in snapshot.gpus}
        selected = {reading.device.index for reading in gpus}
        for app in snapshot.apps:
            if app.gpu_index in selected:
                cells = [
                    _cell(_APP_FIELDS[name][1](app, by_index), _APP_FIELDS[name][0], args.units)
                    for name in fields
                ]
                lines.append(_row(cells))
    return SmiResult(0, "".join(line + "\n" for line in lines))


def _invalid_field(name: str) -> str:
    return f'Field "{name}" is not a valid field to query.\n\n'


def _header(name: str, unit: str, units: bool) -> str:
    return f"{name} [{unit}]" if unit and units else name


def _cell(value: str, unit: str, units: bool) -> str:
    return f"{value} {unit}" if unit and units else value


def run(argv: Sequence[str], state: GpuState) -> SmiResult:
    """Read the state directory (stamping release lags) and answer ``argv``."""
    snapshot = state.snapshot()
    return render(argv, snapshot, state.spec().driver_version)


def main(argv: Sequence[str] | None = None) -> int:
    words = list(sys.argv[1:] if argv is None else argv)
    state_dir: str | None = None
    if words and words[0].startswith("--state-dir"):
        if "=" in words[0]:
            state_dir, words = words[0].split("=", 1)[1], words[1:]
        elif len(words) > 1:
            state_dir, words = words[1], words[2:]
    if state_dir is None:
        sys.stderr.write("usage: python -m orchestrator.sim.nvidia_smi --state-dir DIR ...\n")
        return INVALID_ARGS
    result = run(words, GpuState(Path(state_dir)))
    sys.stdout.write(result.stdout)
    sys.stderr.write(result.stderr)
    return result.exit_status


if __name__ == "__main__":
    raise SystemExit(main())
