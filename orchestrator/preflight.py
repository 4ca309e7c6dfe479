"""Preflight: everything about a host that can be known before anything on it changes.

The seeds lost a whole night to a flag the host's engine build did not know. So before a sweep
touches a host, the preflight asks the host's own engine to parse every config's argv of the
space (``Engine.parse_command`` / ``batch_command`` / ``read_answers``: SGLang's is
:mod:`orchestrator.engines.sglang.argv`; its ``--help`` hides deprecated aliases, so the flag
list is only the fallback where that parser cannot be imported); it also proves SSH with the
verified host key, root or working sudo, a loadable unit with a readable ExecStart, answering
GPUs (and how release will be judged on them), ``/metrics`` and free disk. An unreachable or
broken host is set aside with the reason; an unknown flag fails, before any restart, just the
trials that use it, and the problem names the build's closest flag; a value or config the
parser refuses fails its trial the same way. For an engine that launches from files, each
config's launch files (the bytes the lifecycle would write) are read as the engine would take
them: a file that does not parse as its flag's format, or whose settings the engine's own check
refuses (``LaunchFileRules``), fails its trial as ``invalid-config`` the same way.

The model name the benchmark sends is checked against what the unit's command line serves
(``--served-model-name``, else ``--model-path``) and, when the unit is already running, against
the server's own ``/v1/models``. A mismatch is reported (``check`` fails) but does not set the
host aside: the readiness probe of every trial checks ``/v1/models`` again and fails the trial
with ``config-mismatch``, where the new process's answer is the evidence.
"""

from __future__ import annotations

import asyncio
import contextlib
import difflib
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any

import aiohttp

from orchestrator import engines
from orchestrator.engines.base import (
    Engine,
    LaunchFileRules,
    ParseCommand,
    ParserUnavailable,
    ParseVerdict,
    file_flags,
)
from orchestrator.engines.schedule import PROBE_KEY, NativeSchedule, probe_schedule
from orchestrator.host import systemd
from orchestrator.host.dropin import (
    ExtraFlagConflict,
    FlagArg,
    KnobTarget,
    TrialInvocation,
    UnknownKnobError,
    dropin_path,
    flag_args,
)
from orchestrator.host.gpu import GpuQueryError, GpuSnapshot
from orchestrator.host.handle import HostHandle
from orchestrator.host.launchfile import LaunchFileError, content_problem
from orchestrator.host.transport import TransportError
from orchestrator.host.unitcommand import unit_env_prefix, working_directory
from orchestrator.invocation import ServerRecipe, UnitBase
from orchestrator.plan import expand_configs, first_key, space_trials
from orchestrator.sweepfile import HostSpec, Sweep
from orchestrator.types import ApiKind, KnobValue, LaunchOverlay, MetricsMode

HELP_TIMEOUT_S = 300.0  # importing SGLang on a real host takes tens of seconds
MIN_FREE_BYTES = 1 << 30
LOG_DIR = "/var/log"


ParserKind = str
"""How flags were checked: the engine's own parser (its name) or ``help``."""


@dataclass(frozen=True, slots=True)
class Check:
    name: str
    ok: bool
    detail: str


@dataclass(frozen=True, slots=True)
class HostCheck:
    """One host's preflight: ``reason`` set when the host must be set aside."""

    host: str
    checks: tuple[Check, ...]
    unknown_flags: frozenset[str] = frozenset()
    reason: str | None = None
    exec_start: tuple[str, ...] = ()
    gpus: tuple[int, ...] = ()
    suggestions: Mapping[str, str] = field(default_factory=dict)
    """For an unknown flag, the build's closest flag (did you mean ...)."""
    model_mismatch: str | None = None
    """Why the name the benchmark sends is not what the server serves, when that is known."""
    unit_control: str | None = None
    gpu_reader: str | None = None
    """How the host's units and GPUs were reached (``dbus``/``systemctl``, ``nvml``/
    ``nvidia-smi``), once the checks got that far."""
    warnings: tuple[str, ...] = ()
    """What weakens the measurement without failing anything (``server.metrics: off`` on a
    chat sweep whose unit has no ``--enable-metrics``)."""
    parser: ParserKind | None = None
    """How flags were checked: ``sglang`` (the host's own parser, per trial) or ``help``."""
    rejected: Mapping[str, ParseVerdict] = field(default_factory=dict)
    """Trials (by key) whose argv the host's SGLang refused for other than an unknown flag
    (a bad value or choice, a resolution error), or whose launch file the engine would not
    take: each fails with its verdict's cause."""

    def refusal(self, key: str) -> ParseVerdict | None:
        """The parser's refusal of trial ``key``'s config, whichever measurement of it the
        key names (the preflight parses each config once, under its first key)."""
        return self.rejected.get(first_key(key))

    @property
    def ok(self) -> bool:
        """The host can take part (the trials' own problems are in the fields below)."""
        return self.reason is None

    @property
    def clean(self) -> bool:
        """Nothing found at all: the host takes part and no trial is known to fail."""
        return (
            self.ok
            and not self.unknown_flags
            and not self.rejected
            and self.model_mismatch is None
        )

    def to_json(self) -> dict[str, Any]:
        return {
            "host": self.host,
            "ok": self.ok,
            "reason": self.reason,
            "unknown_flags": sorted(self.unknown_flags),
            "suggestions": dict(sorted(self.suggestions.items())),
            "model_mismatch": self.model_mismatch,
            "warnings": list(self.warnings),
            "parser": self.parser,
            "rejected": {
                key: {"cause": verdict.cause, "error": verdict.error}
                for key, verdict in sorted(self.rejected.items())
            },
            "exec_start": list(self.exec_start),
            "gpus": list(self.gpus),
            "unit_control": self.unit_control,
            "gpu_reader": self.gpu_reader,
            "checks": [{"name": c.name, "ok": c.ok, "detail": c.detail} for c in self.checks],
        }


def help_command(
    service: systemd.ServiceConfig, environment: Mapping[str, str] | None, engine: Engine
) -> list[str]:
    """The engine's ``--help`` question (:meth:`Engine.help_argv`) run as the unit runs its
    program: in its ``WorkingDirectory=``, with its ``Environment=`` and the sweep's
    ``environment`` over it. Run bare, an engine that
    imports only through them (``PYTHONPATH``) would not answer, and the host be set aside."""
    variables = {**service.environment, **(environment or {})}
    prefix = unit_env_prefix(variables, (), working_directory(service.settings))
    return [*prefix, *engine.help_argv(service.exec_start)]


def flags_known(help_text: str, flags: Iterable[str]) -> frozenset[str]:
    """The flags of ``flags`` that the help text does not mention as whole words."""
    missing = set()
    for flag in flags:
        if re.search(rf"(?<![\w-]){re.escape(flag)}(?![\w-])", help_text) is None:
            missing.add(flag)
    return frozenset(missing)


_HELP_FLAG = re.compile(r"(?<![\w-])--[A-Za-z0-9][\w-]*")


def help_flags(help_text: str) -> list[str]:
    """Every ``--flag`` the help text names, in order of first mention."""
    return list(dict.fromkeys(_HELP_FLAG.findall(help_text)))


def suggest_flags(help_text: str, unknown: Iterable[str]) -> dict[str, str]:
    """For each unknown flag, the closest flag the build knows (difflib), where one is close."""
    known = help_flags(help_text)
    suggestions: dict[str, str] = {}
    for flag in sorted(unknown):
        close = difflib.get_close_matches(flag, known, n=1, cutoff=0.6)
        if close:
            suggestions[flag] = close[0]
    return suggestions


def flag_problem(unknown: Iterable[str], suggestions: Mapping[str, str]) -> str:
    """``unknown to this build: --a (did you mean --b?), --c``."""
    parts = [
        f"{flag} (did you mean {suggestions[flag]}?)" if flag in suggestions else flag
        for flag in sorted(unknown)
    ]
    return "unknown to this build: " + ", ".join(parts)


async def check_model(
    model: str,
    argv: Sequence[str],
    *,
    running: bool,
    base_url: str | None,
    timeout: float,
    engine: Engine,
) -> Check:
    """Whether the server will serve the name the benchmark sends: from the command line
    the trials keep (``argv``) and, when the unit runs now, from its ``/v1/models``."""
    problems: list[str] = []
    facts: list[str] = []
    served = engine.served_model(argv)
    if served is not None:
        facts.append(f"ExecStart serves {served.name!r} ({served.flag})")
        if served.name != model:
            problems.append(f"ExecStart serves {served.name!r} ({served.flag})")
    if running and base_url:
        async with aiohttp.ClientSession() as session:
            listed = await engine.served_models(session, base_url, timeout)
        if listed is not None:
            facts.append(f"/v1/models lists {', '.join(repr(n) for n in listed)}")
            if model not in listed:
                problems.append(f"the running server's /v1/models lists {list(listed)}")
    if problems:
        detail = f"the benchmark sends model {model!r}, but " + "; ".join(problems)
        return Check("model", False, detail)
    if not facts:
        return Check(
            "model",
            True,
            f"{model!r}: not known before the start (ExecStart names no model and no server "
            "answers /v1/models); checked when each trial's server is ready",
        )
    return Check("model", True, f"{model!r}: " + "; ".join(facts))


def release_method_text(snapshot: GpuSnapshot, gpus: Sequence[int] | None) -> str:
    """How memory release will be judged on these GPUs, as the ``gpus`` check says it."""
    if snapshot.host_memory:
        return (
            "no NVIDIA GPU: release judged by the host's RAM in use (MemTotal - MemAvailable) "
            "against its level after the first stop, and the unit's empty control group "
            "(method: host-memory)"
        )
    chosen = [g for g in snapshot.gpus if gpus is None or g.index in gpus]
    silent = [g.index for g in chosen if not g.reports_memory]
    if not silent:
        return "release judged by memory.used against the idle baseline (method: memory)"
    which = "these GPUs report" if len(silent) == len(chosen) else f"GPUs {silent} report"
    return (
        f"{which} no memory (unified memory): release judged by the compute-process list and "
        "the unit's empty control group (method: compute-processes)"
    )


def _trial_invocations(
    service: systemd.ServiceConfig,
    trials: Sequence[tuple[str, Mapping[str, KnobValue]]],
    recipe: ServerRecipe,
    schedule: NativeSchedule | None = None,
) -> dict[str, TrialInvocation | LaunchFileError]:
    """Each trial's invocation as its drop-in will have it (a conflicting extra flag is the
    drop-in's own failure, reported when the trial runs; a launch file that cannot be written
    is the trial's :class:`LaunchFileError`), and the representative schedule's under
    :data:`~orchestrator.engines.schedule.PROBE_KEY`."""
    base = UnitBase.of(service)
    out: dict[str, TrialInvocation | LaunchFileError] = {}
    asked: list[tuple[str, Mapping[str, KnobValue], LaunchOverlay | None]] = [
        (key, config, None) for key, config in trials
    ]
    if schedule is not None:
        asked.append((PROBE_KEY, schedule.config, schedule.overlay))
    for key, config, overlay in asked:
        with contextlib.suppress(ExtraFlagConflict, UnknownKnobError):
            try:
                out[key] = recipe.invocation(config, base, overlay=overlay)
            except LaunchFileError as unwritable:
                out[key] = unwritable
    return out


def launch_file_problem(invocation: TrialInvocation, engine: Engine) -> str | None:
    """Why ``engine`` would not take one of ``invocation``'s launch files as its flag names it
    (the first such file: it does not parse as the flag's format, or the engine's own check
    refuses its settings), or None."""
    named = {
        arg.value: arg.flag
        for arg in flag_args(invocation.argv[1:])
        if isinstance(arg, FlagArg) and arg.value is not None
    }
    formats = file_flags(engine)
    for launch in invocation.launch_files:
        flag = named.get(launch.path)
        fmt = formats.get(flag) if flag is not None else None
        if flag is None or fmt is None:
            return f"launch file {launch.path}: no flag of {engine.name} that takes a file names it"
        problem = content_problem(launch.content, fmt)
        if problem is None and isinstance(engine, LaunchFileRules):
            problem = engine.check_launch_file(flag, launch.content)
        if problem is not None:
            return f"launch file {launch.path} ({flag}): {problem}"
    return None


def launch_file_refusals(
    invocations: Mapping[str, TrialInvocation], engine: Engine
) -> dict[str, ParseVerdict]:
    """The trials (by key) whose launch file ``engine`` would not take
    (:func:`launch_file_problem`), each refused as the server's start would refuse it
    (``invalid-config``), the flag and the file named. Pure: the files are the bytes the
    lifecycle would write, checked before any host changes."""
    refused: dict[str, ParseVerdict] = {}
    for key, invocation in invocations.items():
        problem = launch_file_problem(invocation, engine)
        if problem is not None:
            refused[key] = ParseVerdict(
                ok=False, kind="resolution", error=problem, parser=engine.name
            )
    return refused


MAX_BATCH_CHARS = 60_000
"""The argv text one parse process carries at most: an SSH command reaches the host as one
argument of its shell's ``-c``, which Linux caps at 128 KiB (``MAX_ARG_STRLEN``)."""
PARSE_S_PER_ARGV = 10.0
"""What each argv adds to its batch's timeout, beyond the import's: resolution may read the
model's config from disk."""


@dataclass(frozen=True, slots=True)
class ParseBatch:
    """Argvs asked of one process: one interpreter and environment (``prefix``), one import."""

    prefix: tuple[str, ...]
    argvs: tuple[tuple[str, ...], ...]


def parse_batches(
    commands: Iterable[ParseCommand], *, max_chars: int = MAX_BATCH_CHARS
) -> list[ParseBatch]:
    """The distinct argvs of ``commands``, grouped by prefix in first-seen order, each group
    cut into batches whose argv text fits ``max_chars`` (an argv alone always makes one)."""
    groups: dict[tuple[str, ...], dict[tuple[str, ...], None]] = {}
    for command in commands:
        groups.setdefault(command.prefix, {})[command.argv] = None
    batches: list[ParseBatch] = []
    for prefix, argvs in groups.items():
        current: list[tuple[str, ...]] = []
        size = 0
        for argv in argvs:
            cost = len(json.dumps(list(argv))) + 3  # quoting and the separating space
            if current and size + cost > max_chars:
                batches.append(ParseBatch(prefix, tuple(current)))
                current, size = [], 0
            current.append(argv)
            size += cost
        batches.append(ParseBatch(prefix, tuple(current)))
    return batches


@dataclass(frozen=True, slots=True)
class _Parsed:
    verdicts: dict[str, ParseVerdict]
    processes: int


async def _parse_all(
    host: HostHandle,
    service: systemd.ServiceConfig,
    invocations: Mapping[str, TrialInvocation],
    *,
    timeout: float,
    engine: Engine,
) -> _Parsed | ParserUnavailable:
    """Every distinct argv parsed by the host's SGLang, as few processes as the command line's
    size allows (each imports SGLang: tens of seconds). The first batch runs alone, so that a
    host without SGLang (the import fails) costs one run before the ``--help`` fallback."""
    directory = working_directory(service.settings)
    commands: dict[str, ParseCommand] = {}
    for key, invocation in invocations.items():
        command = engine.parse_command(service.exec_start, invocation, directory)
        if command is None:
            return ParserUnavailable("the unit's program is not run as PYTHON -m MODULE")
        commands[key] = command
    batches = parse_batches(commands.values())

    async def ask(batch: ParseBatch) -> list[ParseVerdict] | ParserUnavailable:
        result = await host.transport.run(
            engine.batch_command(batch.prefix, batch.argvs),
            timeout=timeout + PARSE_S_PER_ARGV * len(batch.argvs),
            privileged=True,
        )
        return engine.read_answers(result.stdout_text(), result.stderr_text(), len(batch.argvs))

    first = await ask(batches[0])
    if isinstance(first, ParserUnavailable):
        return first
    rest = await asyncio.gather(*(ask(batch) for batch in batches[1:]))
    verdict_of: dict[ParseCommand, ParseVerdict] = {}
    for batch, answers in zip(batches, [first, *rest], strict=True):
        if isinstance(answers, ParserUnavailable):
            answers = [ParseVerdict(ok=None, kind="unchecked", error=answers.reason)] * len(
                batch.argvs
            )
        for argv, verdict in zip(batch.argvs, answers, strict=True):
            verdict_of[ParseCommand(batch.prefix, argv)] = verdict
    verdicts = {key: verdict_of[command] for key, command in commands.items()}
    return _Parsed(verdicts, processes=len(batches))


def check_metrics(
    argv: Sequence[str], metrics: MetricsMode, api: ApiKind, engine: Engine
) -> tuple[Check, str | None]:
    """Whether trials get ``/metrics`` (a second accept-length source), and the warning when a
    chat sweep gets neither it nor per-request spec stats: the chat API carries none, so its
    accept_len would rest on the journal alone."""
    metrics_flag = engine.metrics_flag
    if not metrics_flag:  # the engine serves /metrics without being asked (vLLM)
        return Check("metrics", True, "the engine serves /metrics without a flag"), None
    present = any(isinstance(a, FlagArg) and a.flag == metrics_flag for a in flag_args(argv[1:]))
    if present:
        return Check("metrics", True, f"the unit runs {metrics_flag}: /metrics is read"), None
    if metrics == "auto":
        detail = f"{metrics_flag} added to each trial's drop-in (server.metrics: auto)"
        return Check("metrics", True, detail), None
    if api == "generate":
        detail = "server.metrics: off; accept_len from /generate's meta_info and the journal"
        return Check("metrics", True, detail), None
    warning = (
        f"server.metrics is off and the unit has no {metrics_flag}: the chat API carries no "
        "spec stats, so accept_len depends on the journal alone"
    )
    return Check("metrics", True, warning), warning


def _free_bytes(df_output: str) -> int | None:
    """Available bytes from ``df -P -B1 PATH``."""
    lines = df_output.strip().splitlines()
    if len(lines) < 2:
        return None
    cells = lines[-1].split()
    return int(cells[3]) if len(cells) >= 4 and cells[3].isdigit() else None


@dataclass
class _Checks:
    items: list[Check] = field(default_factory=list)

    def add(self, name: str, ok: bool, detail: str) -> bool:
        self.items.append(Check(name, ok, detail))
        return ok


@dataclass(frozen=True, slots=True)
class _Reached:
    """What the first checks found of a host that can take part."""

    service: systemd.ServiceConfig
    running: bool
    gpus: tuple[int, ...]


class _SetAside(Exception):
    """A check found the host cannot take part: why (and the ExecStart, once it was read)."""

    def __init__(self, reason: str, exec_start: tuple[str, ...] = ()) -> None:
        super().__init__(reason)
        self.reason, self.exec_start = reason, exec_start


async def _reach(
    host: HostHandle, checks: _Checks, *, unit: str, gpus: Sequence[int] | None, timeout: float
) -> _Reached:
    """SSH, privileges, the unit and its ExecStart, the GPUs: in that order, each needing the
    one before. Raises :class:`_SetAside` at the first that fails."""
    transport = host.transport
    whoami = await transport.run(["id", "-u"], timeout=timeout, check=True)
    uid = whoami.stdout_text().strip()
    checks.add("ssh", True, "reachable, host key verified")
    if uid != "0":
        sudo = await transport.run(["true"], timeout=timeout, privileged=True)
        if not checks.add("privileges", sudo.ok, f"uid {uid}, sudo -n: rc {sudo.exit_status}"):
            raise _SetAside("not root and sudo -n fails")
    else:
        checks.add("privileges", True, "root")
    state = await host.control.show(unit, timeout=timeout)
    if not checks.add("unit", state.load_state == "loaded", f"LoadState={state.load_state}"):
        raise _SetAside(f"{unit}: LoadState={state.load_state}")
    service = systemd.merged_service(await host.control.cat(unit, timeout=timeout))
    if not checks.add("exec_start", bool(service.exec_start), " ".join(service.exec_start)):
        raise _SetAside(f"{unit} has no ExecStart")
    try:
        snapshot = await host.gpu.snapshot()
    except GpuQueryError as exc:
        checks.add("gpus", False, str(exc))
        raise _SetAside(f"GPU query failed: {exc}") from exc
    access = host.access
    checks.add("access", True, access.detail or f"{access.unit_control}, {access.gpu_reader}")
    present = tuple(g.index for g in snapshot.gpus)
    missing = sorted(set(gpus or ()) - set(present))
    detail = f"{len(present)} GPUs: {list(present)}; {release_method_text(snapshot, gpus)}"
    if not checks.add("gpus", bool(present) and not missing, detail):
        raise _SetAside(f"GPUs {missing or 'none'} not present")
    return _Reached(service, state.active_state == "active", present)


@dataclass(frozen=True, slots=True)
class _FlagFindings:
    parser: ParserKind
    unknown: frozenset[str] = frozenset()
    suggestions: Mapping[str, str] = field(default_factory=dict)
    refused: Mapping[str, ParseVerdict] = field(default_factory=dict)


async def _by_parser(
    host: HostHandle,
    checks: _Checks,
    service: systemd.ServiceConfig,
    invocations: Mapping[str, TrialInvocation],
    *,
    asked_help: Sequence[str],
    timeout: float,
    engine: Engine,
) -> _FlagFindings | None:
    """The host's own parser's verdict on every invocation; None where it cannot be asked
    (the ``--help`` fallback's turn)."""
    parsed = (
        await _parse_all(host, service, invocations, timeout=timeout, engine=engine)
        if invocations
        else ParserUnavailable("no trial argv to parse")
    )
    if isinstance(parsed, ParserUnavailable):
        checks.add(
            f"{engine.name}_parser", True, f"not used ({parsed.reason}): flags checked by --help"
        )
        return None
    rejected = {key: v for key, v in parsed.verdicts.items() if v.ok is False}
    distinct = len({i.argv for i in invocations.values()})
    checks.add(
        f"{engine.name}_parser",
        True,
        f"the host's {engine.name} parser parsed {len(parsed.verdicts)} configs' argv "
        f"({distinct} distinct) in {parsed.processes} process(es) (the unit's interpreter, "
        f"environment and working directory): {len(rejected)} rejected",
    )
    unknown = frozenset(flag for verdict in rejected.values() for flag in verdict.unknown_flags)
    suggestions: dict[str, str] = {}
    if unknown:
        shown = await host.transport.run(asked_help, timeout=timeout, privileged=True)
        suggestions = suggest_flags(shown.stdout_text(), unknown) if shown.ok else {}
        checks.add("flags", False, flag_problem(unknown, suggestions))
    refused = {k: v for k, v in rejected.items() if not v.unknown_flags}
    if refused:
        detail = "; ".join(f"{key}: {verdict.error}" for key, verdict in sorted(refused.items()))
        checks.add("argv", False, detail)
    return _FlagFindings(engine.name, unknown, suggestions, refused)


async def _by_help(
    host: HostHandle,
    checks: _Checks,
    service: systemd.ServiceConfig,
    flags: Iterable[str],
    *,
    asked_help: Sequence[str],
    timeout: float,
    engine: Engine,
) -> _FlagFindings:
    """The fallback: the sweep's flags looked up in the program's ``--help``. Raises
    :class:`_SetAside` when the program does not answer it."""
    wanted = sorted(set(flags))
    if not wanted:
        return _FlagFindings("help")
    shown = await host.transport.run(asked_help, timeout=timeout, privileged=True)
    text = shown.stdout_text() + shown.stderr_text()
    if not checks.add(f"{engine.name}_help", shown.ok, f"--help exited {shown.exit_status}"):
        raise _SetAside("the unit's program does not answer --help", service.exec_start)
    unknown = flags_known(text, wanted)
    suggestions = suggest_flags(text, unknown)
    checks.add(
        "flags", not unknown, flag_problem(unknown, suggestions) if unknown else "all known"
    )
    return _FlagFindings("help", unknown, suggestions)


async def _check_flags(
    host: HostHandle,
    checks: _Checks,
    service: systemd.ServiceConfig,
    invocations: Mapping[str, TrialInvocation],
    recipe: ServerRecipe,
    flags: Iterable[str],
    *,
    timeout: float,
    engine: Engine,
) -> _FlagFindings:
    """Every trial's argv asked of the host's own parser, else ``flags`` looked up in the
    program's ``--help``: both run as the unit runs its program (:func:`help_command`)."""
    asked = help_command(service, recipe.environment, engine)
    return await _by_parser(
        host, checks, service, invocations, asked_help=asked, timeout=timeout, engine=engine
    ) or await _by_help(
        host, checks, service, flags, asked_help=asked, timeout=timeout, engine=engine
    )


def _check_launch_files(
    checks: _Checks,
    invocations: Mapping[str, TrialInvocation],
    engine: Engine,
    unwritable: Mapping[str, LaunchFileError],
) -> dict[str, ParseVerdict]:
    """The ``launch_files`` check, where any config launches from a file (``unwritable``: the
    configs whose file cannot even be written, refused alike)."""
    with_files = {key: i for key, i in invocations.items() if i.launch_files}
    if not with_files and not unwritable:
        return {}
    refused = launch_file_refusals(with_files, engine)
    for key, error in unwritable.items():
        refused[key] = ParseVerdict(ok=False, kind="resolution", error=str(error),
                                    parser=engine.name)  # fmt: skip
    detail = "; ".join(f"{key}: {verdict.error}" for key, verdict in sorted(refused.items()))
    taken = f"{len(with_files)} configs' launch files read as {engine.name} takes them"
    checks.add("launch_files", not refused, detail or f"{taken}: all taken")
    return refused


async def check_sweep_host(
    handle: HostHandle, sweep: Sweep, host: HostSpec, *, engine: Engine | None = None
) -> HostCheck:
    """:func:`check_host` with everything ``sweep`` says of ``host``: its knobs and flags,
    its model and API, every config of the space and a representative schedule when the
    sweep will measure schedules, the sweep's engine (``check`` and the runner's preflight
    ask the same)."""
    knobs = host.effective_knobs(sweep.server.knobs)
    engine = engine or engines.get(sweep.engine)
    return await check_host(
        handle,
        unit=sweep.unit,
        flags=mapped_flags(knobs, sweep.server.extra_flags),
        gpus=host.gpus,
        command_timeout=sweep.timeouts.connect,
        model=sweep.server.model,
        api=sweep.benchmark.api,
        base_url=str(host.base_url).rstrip("/"),
        extra_flags=sweep.server.extra_flags,
        metrics=sweep.server.metrics,
        trials=space_trials(sweep, host.name),
        knobs=knobs,
        environment=sweep.server.environment,
        engine=engine,
        schedule=_probe(sweep, engine, knobs),
    )


def _probe(sweep: Sweep, engine: Engine, knobs: Mapping[str, KnobTarget]) -> NativeSchedule | None:
    """The schedule the preflight asks the host's engine about, when the sweep will measure
    schedules (``search.schedule_trials``)."""
    if not sweep.schedule_restarts():
        return None
    return probe_schedule(engine, expand_configs(sweep), knobs)


async def check_host(
    host: HostHandle,
    *,
    unit: str,
    flags: Iterable[str],
    gpus: Sequence[int] | None,
    command_timeout: float = 30.0,
    help_timeout: float = HELP_TIMEOUT_S,
    model: str | None = None,
    api: ApiKind = "chat",
    base_url: str | None = None,
    extra_flags: Sequence[str] = (),
    engine: Engine,
    metrics: MetricsMode = "auto",
    trials: Sequence[tuple[str, Mapping[str, KnobValue]]] = (),
    knobs: Mapping[str, KnobTarget] | None = None,
    environment: Mapping[str, str] | None = None,
    schedule: NativeSchedule | None = None,
) -> HostCheck:
    """Run every check on one host; never changes anything on it.

    ``model`` is the name the benchmark sends (checked on the chat API only: ``/generate``
    sends none); ``extra_flags`` are appended to every trial's command line, so they take
    part in what the server will serve; ``base_url`` is where a running server answers.

    ``trials`` (key, config) are parsed by the host's own SGLang, each as the trial would run
    (``knobs``, ``extra_flags``, ``environment``, ``metrics`` as the trial's drop-in has them),
    in one process per batch: a rejected argv fails its trial before anything restarts. Where
    that parser cannot be asked (its import fails), ``flags`` are checked against ``--help``
    instead; the ``sglang_parser`` check says which. ``schedule`` (a representative schedule
    in the engine's form) is parsed and its files checked the same way, under
    :data:`~orchestrator.engines.schedule.PROBE_KEY`: a build that refuses it refuses every
    schedule trial before any restart."""
    name = host.name
    checks = _Checks()
    model_mismatch: str | None = None
    try:
        reached = await _reach(host, checks, unit=unit, gpus=gpus, timeout=command_timeout)
        model_mismatch, metrics_warning = await _check_serving(
            checks, reached, [*reached.service.exec_start, *extra_flags], model=model, api=api,
            base_url=base_url, metrics=metrics, timeout=command_timeout, engine=engine,
        )  # fmt: skip
        await _check_disk(host, checks, timeout=command_timeout)
        recipe = _trial_recipe(unit, knobs, extra_flags, environment, metrics, engine)
        found = await _check_trials(
            host, checks, reached.service, trials, recipe, schedule, flags,
            timeout=help_timeout, engine=engine,
        )  # fmt: skip
    except _SetAside as aside:
        return HostCheck(
            name, tuple(checks.items), reason=aside.reason, exec_start=aside.exec_start,
            model_mismatch=model_mismatch,
        )  # fmt: skip
    except TransportError as exc:
        checks.add("ssh", False, exc.message)
        return HostCheck(name, tuple(checks.items), reason=str(exc))
    except (systemd.SystemdError, systemd.UnitFileError) as exc:
        checks.add("unit", False, str(exc))
        return HostCheck(name, tuple(checks.items), reason=str(exc))
    return _taking_part(host, checks, reached, found, model_mismatch, metrics_warning)


async def _check_trials(
    host: HostHandle,
    checks: _Checks,
    service: systemd.ServiceConfig,
    trials: Sequence[tuple[str, Mapping[str, KnobValue]]],
    recipe: ServerRecipe,
    schedule: NativeSchedule | None,
    flags: Iterable[str],
    *,
    timeout: float,
    engine: Engine,
) -> _FlagFindings:
    """Every trial's argv (and the representative schedule's) asked of the host's engine, and
    their launch files read as it takes them: what each trial will meet, refusals by argv
    first, then by file."""
    built = _trial_invocations(service, trials, recipe, schedule)
    invocations = {k: i for k, i in built.items() if isinstance(i, TrialInvocation)}
    found = await _check_flags(
        host, checks, service, invocations, recipe, flags, timeout=timeout, engine=engine
    )
    unwritable = {k: e for k, e in built.items() if isinstance(e, LaunchFileError)}
    unfit_files = _check_launch_files(checks, invocations, engine, unwritable)
    return replace(found, refused={**unfit_files, **found.refused})  # argv before file


async def _check_serving(
    checks: _Checks,
    reached: _Reached,
    command_line: Sequence[str],
    *,
    model: str | None,
    api: ApiKind,
    base_url: str | None,
    metrics: MetricsMode,
    timeout: float,
    engine: Engine,
) -> tuple[str | None, str | None]:
    """What the trials' command line (the unit's, with the extra flags) will serve: the
    ``model`` check (the chat API sends a name) and the ``metrics`` check. Returns why the
    name is not served and the metrics warning (None each where there is none)."""
    model_mismatch: str | None = None
    if model and api == "chat":
        model_check = await check_model(
            model, command_line, running=reached.running, base_url=base_url, timeout=timeout,
            engine=engine,
        )  # fmt: skip
        checks.items.append(model_check)
        model_mismatch = None if model_check.ok else model_check.detail
    metrics_check, metrics_warning = check_metrics(command_line, metrics, api, engine)
    checks.items.append(metrics_check)
    return model_mismatch, metrics_warning


def _trial_recipe(
    unit: str,
    knobs: Mapping[str, KnobTarget] | None,
    extra_flags: Sequence[str],
    environment: Mapping[str, str] | None,
    metrics: MetricsMode,
    engine: Engine,
) -> ServerRecipe:
    """What every trial asks of the unit's server, as the lifecycle builds it: the knobs,
    extra flags and variables, the metrics flags, and the engine's file flags with the
    drop-in path their launch files go beside."""
    files = file_flags(engine)
    return ServerRecipe(
        knobs or {}, extra_flags, environment, tuple(engine.metrics_flags(metrics)),
        file_flags=files, dropin=str(dropin_path(unit)) if files else None,
    )  # fmt: skip


def _taking_part(
    host: HostHandle,
    checks: _Checks,
    reached: _Reached,
    found: _FlagFindings,
    model_mismatch: str | None,
    metrics_warning: str | None,
) -> HostCheck:
    """The preflight of a host that takes part, with what its trials will meet."""
    access = host.access
    return HostCheck(
        host.name,
        tuple(checks.items),
        unknown_flags=found.unknown,
        exec_start=reached.service.exec_start,
        gpus=reached.gpus,
        suggestions=found.suggestions,
        model_mismatch=model_mismatch,
        unit_control=access.unit_control,
        gpu_reader=access.gpu_reader,
        warnings=() if metrics_warning is None else (metrics_warning,),
        parser=found.parser,
        rejected=found.refused,
    )


async def _check_disk(host: HostHandle, checks: _Checks, *, timeout: float) -> None:
    """Free space where the journal and logs go (a full disk kills a server mid-night)."""
    df = await host.transport.run(["df", "-P", "-B1", LOG_DIR], timeout=timeout)
    free = _free_bytes(df.stdout_text()) if df.ok else None
    checks.add(
        "disk",
        free is None or free >= MIN_FREE_BYTES,
        "unknown" if free is None else f"{free / (1 << 30):.1f} GiB free in {LOG_DIR}",
    )


def mapped_flags(knobs: Mapping[str, Any], extra_flags: Sequence[str]) -> set[str]:
    """Every flag a sweep may put on a host's command line."""
    flags = {spec.flag for spec in knobs.values() if getattr(spec, "flag", None)}
    flags.update(f.split("=", 1)[0] for f in extra_flags if f.startswith("--"))
    return flags
