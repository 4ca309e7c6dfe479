"""The restart protocol: point a host's SGLang unit at a trial's config and prove that the NEW
process serves it.

The seeds lost a night because ``systemctl restart`` returned while the old process still
answered HTTP and the readiness check believed it, and because the new process started before
the old one had released its GPU memory. So: stop, wait until the GPUs are back at their idle
baseline, start, and declare ready only when the unit has a new InvocationID and MainPID, the
running server reports the trial's config, and a real generation returned tokens. A config that
cannot start is failed within a poll interval of its exit, with its cause and journal excerpt.
See docs/architecture.md for the step table and what each cause means.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import math
import re
import time
import traceback
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import aiohttp

from orchestrator.engines.base import (
    ConfigCheck,
    ConfigDifference,
    Engine,
    EnvKnob,
    FailureEvent,
    InitEvent,
    KnobResolution,
    KnobRules,
    Provenance,
    ProvenanceSources,
    file_flags,
)
from orchestrator.engines.shared import env_differences
from orchestrator.evidence import ServerEvidence, Timeline
from orchestrator.host import gpu, journal, systemd
from orchestrator.host.dropin import (
    KnobTarget,
    TrialInvocation,
    adopted_dropin_path,
    parse_dropin_header,
    render_dropin,
)
from orchestrator.host.errors import HostError
from orchestrator.host.handle import HostHandle
from orchestrator.host.procfs import parse_proc_environ
from orchestrator.host.transport import HostUnreachable, Transport
from orchestrator.host.unitcontrol import JobFailed, UnitControl
from orchestrator.invocation import ServerRecipe, UnitBase
from orchestrator.log import get_logger
from orchestrator.types import ApiKind, FailureCause, LaunchOverlay, MetricsMode, RestorePolicy

EXCERPT_LINES = 60
STREAM_GRACE_S = 2.0
"""How long after systemd's line that the process ended a dying server's own last lines may
still arrive through its stdout stream (a separate path into journald). Half a second lost
an ``invalid-config`` line on a loaded host (the real-systemd test read ``exited``); the wait
is paid only by a death whose excerpt names no cause."""
EXCERPT_HEAD_LINES = 20


def excerpt(lines: Sequence[str]) -> list[str]:
    """The evidence kept from one invocation's log: its first lines (what it was loading) and
    its last ones (how it ended), with the count of those left out between."""
    if len(lines) <= EXCERPT_HEAD_LINES + EXCERPT_LINES:
        return list(lines)
    left_out = len(lines) - EXCERPT_HEAD_LINES - EXCERPT_LINES
    return [
        *lines[:EXCERPT_HEAD_LINES],
        f"[... {left_out} lines left out ...]",
        *lines[-EXCERPT_LINES:],
    ]


_ACCESS_LOG = re.compile(r'"(GET|POST|PUT|DELETE|HEAD) \S+ HTTP/[\d.]+" \d{3}')
# systemd's own journal line when a unit's main process is gone (PID-1 hosts log it under the
# unit; it shortens the wait for a dying server's last lines to STREAM_GRACE_S).
_UNIT_ENDED = re.compile(
    r"Main process exited, code=|Failed with result '|Deactivated successfully"
)
# Every line systemd writes when the unit's state moves (someone else's stop or restart
# included): the unit-state watch checks at once instead of polling often over SSH.
_UNIT_STATE_MOVED = re.compile(
    _UNIT_ENDED.pattern
    + r"|^Stopping |^Stopped |Scheduled restart job|State '[a-z-]+' timed out|Killing process"
)


class TrialFailed(Exception):
    """A trial's server could not be brought up; ``cause`` is one of :data:`FailureCause` and
    the journal excerpt of that invocation and the exit status are the evidence."""

    def __init__(
        self,
        cause: FailureCause,
        message: str,
        *,
        excerpt: Sequence[str] = (),
        exit_status: int | None = None,
        invocation_id: str | None = None,
        evidence: Mapping[str, Any] | None = None,
    ) -> None:
        super().__init__(f"{cause}: {message}")
        self.cause: FailureCause = cause
        self.message = message
        self.excerpt = tuple(excerpt)
        self.exit_status = exit_status
        self.invocation_id = invocation_id
        self.evidence = dict(evidence or {})

    def to_json(self) -> dict[str, Any]:
        return {
            "cause": self.cause,
            "message": self.message,
            "exit_status": self.exit_status,
            "invocation_id": self.invocation_id,
            "excerpt": list(self.excerpt),
            **self.evidence,
        }


def failure_from(exc: Exception) -> TrialFailed:
    """The one mapping from an error to an attempt's (or a restore's) failure.

    A :class:`TrialFailed` is already one. A :class:`HostError` (transport, journal, systemd and
    its jobs, D-Bus, GPU query) is a host failure with the cause and evidence it carries. Any
    other exception is a bug of ours: ``orchestrator-error``, with its traceback as evidence.
    """
    if isinstance(exc, TrialFailed):
        return exc
    if isinstance(exc, HostError):
        return TrialFailed(
            exc.cause, str(exc), evidence={"error_type": type(exc).__name__, **exc.evidence}
        )
    return TrialFailed(
        "orchestrator-error",
        repr(exc),
        evidence={
            "error": repr(exc),
            "traceback": "".join(traceback.format_exception(exc))[-4000:],
        },
    )


class KnobSpec(KnobTarget, Protocol):
    """How one knob reaches the server (the sweep file's knob mapping), and where the running
    server reports it."""

    @property
    def server_info_key(self) -> str | None: ...

    @property
    def overridden_by_server(self) -> bool: ...


class EventSink(Protocol):
    """Where lifecycle steps go (the store's event table): a noun and its fields."""

    async def __call__(self, kind: str, /, **fields: Any) -> None: ...


async def no_events(kind: str, /, **fields: Any) -> None:
    """An :class:`EventSink` that drops events (tools and tests that keep no store)."""


@dataclass(frozen=True, slots=True)
class LifecycleTimeouts:
    """Every bound of the protocol, in seconds; none is hidden in the code."""

    stop: float = 180.0
    memory_release: float = 300.0
    ready: float = 900.0
    command: float = 30.0
    state_poll: float = 10.0
    """A safety net only: systemd's own journal lines for the unit trigger the check at once."""
    start_poll: float = 0.1
    memory_poll: float = 0.2
    probe_initial: float = 0.25
    probe_max: float = 8.0
    """The probe's backoff cap while the server's journal is silent; any new line of the
    server resets it to ``probe_initial`` (a server that becomes ready logs)."""
    probe_min_gap: float = 0.1
    """Between two probes woken by lines: a chatty server (progress bars) is not flooded, and
    a probe that came a line too early is retried at the next line without a long wait."""
    probe_request: float = 60.0
    failure_settle: float = 2.0


@dataclass(frozen=True, slots=True)
class Readiness:
    """What proves a restarted unit's NEW process ready, beyond a real generation: a trial's
    flag knobs in ``/server_info`` and env knobs in the process's environment. The unit as
    found (a restore) has nothing more to prove: :data:`AS_FOUND`."""

    flag_knobs: tuple[KnobResolution, ...] = ()
    env_knobs: tuple[EnvKnob, ...] = ()
    server_may_override: frozenset[str] = frozenset()
    """Knobs the sweep marks ``overridden_by_server``: a differing value is a warning."""
    invocation: TrialInvocation | None = None
    """What the unit was asked to run, for the server's provenance (None: as found)."""
    refused_line: str = ""
    """The start of the log line with which the engine says it ignored the trial's schedule
    and runs static settings (:class:`~orchestrator.types.LaunchOverlay`); "" for none."""


AS_FOUND = Readiness()


@dataclass(frozen=True, slots=True)
class TrialDropin:
    """What one trial asks of a host: the drop-in to install and how to prove it took."""

    sweep: str
    key: str
    invocation: TrialInvocation
    dropin_text: str
    readiness: Readiness
    dropin_path: str | None = None
    """Where the drop-in goes (None: the trial drop-in's place)."""


def _reported_key(engine: Engine, spec: KnobSpec) -> str | None:
    """Where the running server reports a flag knob: the sweep file's ``server_info_key``,
    else, for a key of a JSON-valued flag, where the engine's :class:`KnobRules` say."""
    if spec.server_info_key is not None or spec.json_key is None or spec.flag is None:
        return spec.server_info_key
    if not isinstance(engine, KnobRules):
        return None
    return engine.json_key_report(spec.flag, spec.json_key)


def trial_config(
    found: systemd.UnitSnapshot,
    *,
    sweep: str,
    key: str,
    knobs: Mapping[str, KnobSpec],
    config: Mapping[str, Any],
    extra_flags: Sequence[str] = (),
    environment: Mapping[str, str] | None = None,
    engine: Engine,
    adopted: bool = False,
    metrics: MetricsMode = "auto",
    overlay: LaunchOverlay | None = None,
) -> TrialDropin:
    """A trial's drop-in and proofs, derived from the unit AS FOUND: its merged ExecStart and
    Environment with every knob removed, then the trial's knobs added; ``engine`` says how a
    flag knob shows in the running server's config;
    ``metrics`` ``auto`` adds the engine's metrics flag where the unit lacks it
    (``Engine.metrics_flags``). ``adopted``: the same config as the unit's lasting one, in
    adopt's own drop-in (proven like a trial's). ``overlay``: a schedule trial's launch
    beyond its knobs; a server that logs its ``refused_line`` fails ``invalid-config``."""
    service = systemd.merged_service(
        systemd.UnitFile(f.path, f.data.decode("utf-8", errors="replace")) for f in found.files
    )
    dropin = str(adopted_dropin_path(found.unit)) if adopted else found.dropin_path
    recipe = ServerRecipe(
        knobs,
        extra_flags,
        environment,
        tuple(engine.metrics_flags(metrics)),
        file_flags=file_flags(engine),
        dropin=dropin,
    )
    invocation = recipe.invocation(config, UnitBase.of(service), overlay=overlay)
    readiness = _readiness(engine, knobs, config, invocation)
    if overlay is not None:
        readiness = dataclasses.replace(readiness, refused_line=overlay.refused_line)
    return TrialDropin(
        sweep=sweep,
        key=key,
        invocation=invocation,
        dropin_text=render_dropin(sweep, key, invocation, adopted=adopted),
        dropin_path=str(adopted_dropin_path(found.unit)) if adopted else None,
        readiness=readiness,
    )


def _readiness(
    engine: Engine,
    knobs: Mapping[str, KnobSpec],
    config: Mapping[str, Any],
    invocation: TrialInvocation,
) -> Readiness:
    """What proves the new process runs ``config``: each flag knob where the running server
    reports it, each environment knob in its environ, and the knobs it may override."""
    flag_knobs = tuple(
        engine.resolve_flag_knob(
            name, spec.flag, config.get(name), server_info_key=_reported_key(engine, spec)
        )
        for name, spec in knobs.items()
        # A key of a JSON-valued flag is checked only where the sweep or the engine says
        # where the server reports it: the flag's own name says nothing of its keys.
        if spec.flag is not None
        and name in config
        and (spec.json_key is None or _reported_key(engine, spec) is not None)
    )
    env_knobs = tuple(
        EnvKnob(name, spec.env, config.get(name))
        for name, spec in knobs.items()
        if spec.env is not None
    )
    return Readiness(
        flag_knobs=flag_knobs,
        env_knobs=env_knobs,
        server_may_override=frozenset(n for n, s in knobs.items() if s.overridden_by_server),
        invocation=invocation,
    )


@dataclass
class HostSession:
    """One host for the length of a sweep: how to reach it, what was found, the idle baseline."""

    host: HostHandle
    unit: str
    base_url: str
    api: ApiKind
    model: str
    gpus: tuple[int, ...] | None = None
    timeouts: LifecycleTimeouts = field(default_factory=LifecycleTimeouts)
    events: EventSink = no_events
    engine: Engine = field(kw_only=True)
    """The serving engine (the sweep's ``engine:``): its log lines, config check, readiness
    config and probe. Always named: a session that fell back to SGLang would read another
    engine's log lines as SGLang's without an error."""
    found: systemd.UnitSnapshot | None = None
    baseline: gpu.Baseline | None = None

    @property
    def name(self) -> str:
        return self.host.name

    @property
    def transport(self) -> Transport:
        return self.host.transport

    @property
    def control(self) -> UnitControl:
        return self.host.control

    @property
    def launches_from_files(self) -> bool:
        """Whether the engine names files in its argv
        (:class:`~orchestrator.engines.base.FileFlags`): only then are the files beside our
        drop-in read, written and restored."""
        return bool(file_flags(self.engine))

    async def read_found(self) -> systemd.UnitSnapshot:
        """The unit as found before this sweep changed anything (read once, then kept).

        A drop-in of ours left by a crashed earlier run is recognised by its header and is not
        part of what we restore to: the operator never wrote it.
        """
        if self.found is None:
            snapshot = await systemd.read_unit(
                self.transport,
                self.unit,
                control=self.control,
                timeout=self.timeouts.command,
                launch_files=self.launches_from_files,
            )
            stale = snapshot.stale_dropin
            if stale is not None:
                await self.events(
                    "dropin.stale_found", sweep=stale.sweep, trial=stale.trial, host=self.name
                )
                snapshot = snapshot.without_stale_dropin()
            self.found = snapshot
        return self.found


@dataclass(frozen=True, slots=True)
class Server:
    """A server proven to run a trial's config: the NEW process, with what identifies it."""

    base_url: str
    api: ApiKind
    model: str
    invocation_id: str
    main_pid: int
    start_cursor: str | None
    timeline: Timeline
    overridden: tuple[ConfigDifference, ...]
    server_info: Mapping[str, Any]
    provenance: Provenance

    def evidence(self) -> ServerEvidence:
        """What a done attempt on this server keeps of it."""
        return ServerEvidence(
            self.invocation_id, self.main_pid, self.timeline, self.provenance, self.overridden
        )


async def reconfigure(session: HostSession, trial: TrialDropin) -> Server:
    """Install ``trial``'s drop-in, restart the unit cleanly and return the proven server.

    Raises :class:`TrialFailed` with a cause and evidence (a host error mapped by
    :func:`failure_from`); the unit is never started while GPU memory is still held.
    """
    log = get_logger(host=session.name, sweep=trial.sweep, trial=trial.key)
    timeline = Timeline()
    timeline.mark("begin")
    t = session.timeouts
    try:
        await session.read_found()
        await systemd.install_dropin(
            session.transport,
            session.unit,
            trial.dropin_text,
            trial.invocation,
            control=session.control,
            path=trial.dropin_path,
            timeout=t.command,
            launch_files=session.launches_from_files,
        )
        timeline.mark("dropin_installed")
        await session.events("dropin.installed", trial=trial.key)
        server = await restart_clean(session, trial.readiness, timeline)
    except HostError as exc:
        raise failure_from(exc) from exc
    log.info("server.ready", invocation=server.invocation_id, main_pid=server.main_pid)
    return server


async def restart_clean(
    session: HostSession, readiness: Readiness, timeline: Timeline | None = None
) -> Server:
    """Restart the unit cleanly and prove the NEW process ready: the protocol's steps 4-11,
    shared by a trial (its config to prove) and a restore (:data:`AS_FOUND`).

    Stop; take the idle GPU baseline the first time (before the stop when the running
    process's memory is readable); wait until the memory is released; clear a failed state
    (one rule: :func:`needs_reset_failed`); start; then readiness as ``readiness`` asks.
    Raises :class:`TrialFailed` (host errors mapped by :func:`failure_from`).
    """
    timeline = Timeline() if timeline is None else timeline
    t = session.timeouts
    try:
        old = await session.control.show(session.unit, timeout=t.command)
        cursor = await last_cursor(session.transport, session.unit, t.command)
        if session.baseline is None:
            session.baseline = await gpu.record_idle_baseline(session.host.gpu, session.gpus)
            if session.baseline is not None:
                await session.events(
                    "gpu.baseline",
                    used_mib=dict(session.baseline.used_mib),
                    read="before-stop",
                    method=session.baseline.method,
                )
        await _stop(session, old, timeline)
        if session.baseline is None:
            # A process's memory was unreadable: the best left is a reading once it is stopped.
            session.baseline = await gpu.record_baseline(session.host.gpu, session.gpus)
            await session.events(
                "gpu.baseline",
                used_mib=dict(session.baseline.used_mib),
                read="after-stop",
                method=session.baseline.method,
            )
        await _wait_memory_released(session, timeline)
        state = await session.control.show(session.unit, timeout=t.command)
        if needs_reset_failed(state):
            await session.control.reset_failed(session.unit, timeout=t.command)
        new = await _start(session, old.invocation_id, cursor, timeline)
        return await _await_ready(session, readiness, new, cursor, timeline)
    except HostError as exc:
        raise failure_from(exc) from exc


def needs_reset_failed(state: systemd.UnitState) -> bool:
    """Whether a stopped unit must be ``reset-failed`` before its start: it is failed, or its
    last run did not end ``success`` (a stop that needed SIGKILL leaves ``Result=timeout``),
    since systemd's start rate limit counts such runs and our manual starts alike."""
    return state.active_state == "failed" or state.result not in ("success", "")


# --- steps ---------------------------------------------------------------------------------


async def last_cursor(transport: Transport, unit: str, timeout: float) -> str | None:
    """The unit's newest journal cursor: everything after it belongs to what we start next."""
    entries = await journal.read_entries(transport, unit, lines=1, timeout=timeout)
    return entries[-1].cursor if entries else None


async def _stop(session: HostSession, old: systemd.UnitState, timeline: Timeline) -> None:
    t = session.timeouts
    timeline.mark("stop_requested")
    await session.events(
        "unit.stopping", invocation=old.invocation_id, main_pid=old.main_pid, state=old.active_state
    )
    # A stop job past its bound, or one that failed, is ``stop-timeout`` (its error's cause).
    await session.control.stop(session.unit, timeout=t.stop)
    timeline.mark("stopped")
    # A stop job is "done" even when systemd had to SIGKILL (Result=timeout) or processes
    # stayed around after it: the result is the evidence of what the memory wait faces next.
    after = await session.control.show(session.unit, ("Result", "ActiveState"), timeout=t.command)
    await session.events(
        "unit.stopped",
        waited_s=round(timeline.span("stop_requested", "stopped"), 3),
        result=after.result,
        state=after.active_state,
    )


async def _wait_memory_released(session: HostSession, timeline: Timeline) -> None:
    t = session.timeouts
    assert session.baseline is not None

    async def unit_processes_gone() -> bool:
        # systemd keeps a unit's ControlGroup while any process is left in it (KillMode=process,
        # D-state): on a GPU that reports no memory, that and the compute list are all we have.
        state = await session.control.show(
            session.unit, ("ActiveState", "MainPID", "ControlGroup"), timeout=t.command
        )
        stopped = state.main_pid is None and state.active_state in ("inactive", "failed")
        return stopped and not state.raw.get("ControlGroup")

    try:
        status = await gpu.wait_released(
            session.host.gpu,
            session.baseline,
            session.gpus,
            unit_pids_gone=unit_processes_gone,
            timeout=t.memory_release,
            poll_interval=t.memory_poll,
        )
    except gpu.MemoryNotReleased as exc:
        await session.events(
            "memory.not_released",
            leftovers=exc.evidence["leftovers"],
            method=exc.status.method,
            unit_processes_alive=exc.status.unit_processes_alive,
        )
        raise TrialFailed(
            exc.cause,
            f"GPU memory still held after {exc.waited_s:.1f}s; the unit was not started",
            evidence=exc.evidence,
        ) from exc
    timeline.mark("memory_released")
    await session.events(
        "memory.released",
        waited_s=round(timeline.span("stopped", "memory_released"), 3),
        excess_mib=dict(status.excess_mib),
        method=status.method,
    )


async def _start(
    session: HostSession, old_invocation: str | None, cursor: str | None, timeline: Timeline
) -> systemd.UnitState:
    """``systemctl start``, never run twice: after a dropped connection the unit's InvocationID
    says whether the start happened."""
    t = session.timeouts
    timeline.mark("start_requested")
    await session.events("unit.starting")
    try:
        await session.control.start(session.unit, timeout=t.command)
    except HostUnreachable:
        state = await session.control.show(session.unit, timeout=t.command)
        if state.invocation_id in (None, old_invocation):
            await session.control.start(session.unit, timeout=t.command)
    except JobFailed as exc:
        state = await session.control.show(session.unit, timeout=t.command)
        if state.result == "start-limit-hit":  # nothing ran: no failure line to wait for
            lines = await _excerpt(session, cursor, state.invocation_id)
            raise TrialFailed(
                "start-limit",
                "systemd's start rate limit refused the start",
                excerpt=lines,
            ) from exc
        # The process died before it was up (a notify unit's start job fails with it): its
        # last lines may reach the journal after the job's end, so wait for them as the
        # readiness watch does, or a busy host reads a ValueError as a bare exit.
        lines = await _excerpt(session, cursor, state.invocation_id, settle=t.failure_settle)
        cause, message = _classify(session.engine, lines, state)
        raise TrialFailed(
            cause,
            message or str(exc),
            excerpt=lines,
            exit_status=state.exec_main_status,
            invocation_id=state.invocation_id,
        ) from exc
    deadline = time.monotonic() + t.command
    while True:
        state = await session.control.show(session.unit, timeout=t.command)
        if state.invocation_id not in (None, old_invocation):
            break
        if time.monotonic() > deadline:
            raise TrialFailed("exited", "the unit has no new invocation after start")
        await asyncio.sleep(t.start_poll)
    timeline.mark("started")
    await session.events("unit.started", invocation=state.invocation_id, main_pid=state.main_pid)
    return state


@dataclass
class _Watch:
    """What the journal follower has seen of the new invocation so far."""

    invocation_id: str
    engine: Engine
    lines: list[str] = field(default_factory=list)
    failure: FailureEvent | None = None
    init_events: list[InitEvent] = field(default_factory=list)
    """The speculative workers' init lines, for the provenance."""
    ready_line: asyncio.Event = field(default_factory=asyncio.Event)
    activity: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by every new line: a server that logs may have just become able to serve."""
    state_moved: asyncio.Event = field(default_factory=asyncio.Event)
    """Set by systemd's own lines that the unit's state moved: check the state at once."""

    def take(self, entry: journal.JournalEntry) -> None:
        if entry.invocation_id not in (None, self.invocation_id) or entry.message is None:
            return
        self.lines.append(entry.message)
        if not _ACCESS_LOG.search(entry.message):
            # Not our own probes' access-log lines: those would wake the probe again at once.
            self.activity.set()
        if _UNIT_STATE_MOVED.search(entry.message):
            self.state_moved.set()
        event = self.engine.parse_log_line(entry.message)
        if event is None:
            return
        if event.kind == "ready":
            self.ready_line.set()
        elif isinstance(event, FailureEvent) and self.failure is None:
            self.failure = event
        elif isinstance(event, InitEvent):
            self.init_events.append(event)


async def _await_ready(
    session: HostSession,
    readiness: Readiness,
    started: systemd.UnitState,
    cursor: str | None,
    timeline: Timeline,
) -> Server:
    """Watch the journal, the unit state and the HTTP API at once until the new process has
    proven itself, or one of them shows it cannot."""
    t = session.timeouts
    assert started.invocation_id is not None
    watch = _Watch(started.invocation_id, session.engine)

    async def follow() -> None:
        follower = journal.JournalFollower(session.transport, session.unit, cursor)
        async with contextlib.aclosing(aiter(follower)) as entries:
            async for entry in entries:
                watch.take(entry)

    follower_task = asyncio.create_task(follow(), name=f"journal:{session.name}")
    watchers: list[asyncio.Task[Any]] = [follower_task]
    try:
        async with asyncio.timeout(t.ready), aiohttp.ClientSession() as http:
            state_task = asyncio.create_task(_watch_state(session, started, watch))
            probe_task = asyncio.create_task(
                _probe_until_ready(session, readiness, watch, http)
            )
            watchers += [state_task, probe_task]
            done, _pending = await asyncio.wait(
                {state_task, probe_task}, return_when=asyncio.FIRST_COMPLETED
            )
            if probe_task in done:
                server_info, check = probe_task.result()
                _refuse_ignored_overlay(readiness, watch, started.invocation_id)
                return await _server(
                    session, readiness, started, cursor, server_info, check, timeline,
                    tuple(watch.init_events),
                )
            ended = state_task.result()
    except TimeoutError:
        kept = excerpt(watch.lines)
        raise TrialFailed(
            "ready-timeout",
            f"no generation from the new process within {t.ready:g}s",
            excerpt=kept,
            invocation_id=started.invocation_id,
            evidence={"ready_line_seen": watch.ready_line.is_set()},
        ) from None
    finally:
        # Whatever ended the wait (a result, the deadline, a cancel), no watcher outlives it:
        # a leaked prober or state poll would go on talking to the host after the trial.
        for task in watchers:
            task.cancel()
        await asyncio.gather(*watchers, return_exceptions=True)
    raise await _exited(session, cursor, started.invocation_id, ended)


def _refuse_ignored_overlay(readiness: Readiness, watch: _Watch, invocation_id: str) -> None:
    """A server that said it ignored the trial's schedule (and runs its static settings)
    serves, but not what the trial asks: ``invalid-config``, with the engine's line."""
    if not readiness.refused_line:
        return
    said = next((line for line in watch.lines if readiness.refused_line in line), None)
    if said is not None:
        raise TrialFailed(
            "invalid-config",
            f"the engine ignored the schedule and runs static settings: {said}",
            excerpt=excerpt(watch.lines),
            invocation_id=invocation_id,
            evidence={"refused_line": said},
        )


async def _exited(
    session: HostSession, cursor: str | None, invocation_id: str, ended: systemd.UnitState
) -> TrialFailed:
    """The new process died before it was ready: wait briefly for its last lines to reach the
    journal, and name the cause they show."""
    settle = session.timeouts.failure_settle
    lines = await _excerpt(session, cursor, invocation_id, settle=settle)
    cause, message = _classify(session.engine, lines, ended)
    await session.events("server.exited", cause=cause, exit_status=ended.exec_main_status)
    return TrialFailed(
        cause,
        message,
        excerpt=lines,
        exit_status=ended.exec_main_status,
        invocation_id=invocation_id,
    )


async def _watch_state(
    session: HostSession, started: systemd.UnitState, watch: _Watch
) -> systemd.UnitState:
    """Return the unit's state as soon as the started invocation is no longer running: checked
    at once when systemd's journal lines say the unit's state moved, and every ``state_poll``
    seconds in case those lines are lost (one SSH exec per host per poll is the daemon's main
    cost while a fleet waits on loads)."""
    t = session.timeouts
    while True:
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(t.state_poll):
                await watch.state_moved.wait()
        watch.state_moved.clear()
        state = await session.control.show(session.unit, timeout=t.command)
        restarted = state.invocation_id not in (None, started.invocation_id)
        if restarted or state.active_state in ("failed", "inactive", "deactivating"):
            return state


async def _probe_until_ready(
    session: HostSession, readiness: Readiness, watch: _Watch, http: aiohttp.ClientSession
) -> tuple[dict[str, Any], ConfigCheck]:
    """Probe with backoff while the server is silent; a new journal line of the invocation
    (the ready line above all; not our own probes' access-log lines) probes at once and starts
    the backoff over. Returns the server's /server_info and the config check once a real
    generation succeeded."""
    t = session.timeouts
    delay = t.probe_initial
    while True:
        probed_at = time.monotonic()
        try:
            info = await session.engine.server_config(http, session.base_url, t.probe_request)
        except aiohttp.ClientConnectorError:
            # Nothing listens yet (SGLang binds its port only after the load): a probe costs
            # the server nothing, so the next line of the log probes with no minimum gap.
            info, probed_at = None, -t.probe_min_gap
        if info is not None:
            probe = await session.engine.probe_generation(
                http, session.base_url, session.api, session.model, t.probe_request
            )
            if probe.ok or probe.model_mismatch is not None:
                check = await _check_config(session, readiness, info)
                return info, check.also(probe.model_mismatch)
        watch.activity.clear()
        try:
            async with asyncio.timeout(delay):
                await watch.activity.wait()
            delay = t.probe_initial
            await asyncio.sleep(max(0.0, probed_at + t.probe_min_gap - time.monotonic()))
        except TimeoutError:
            delay = min(delay * 2, t.probe_max)


async def _check_config(
    session: HostSession, readiness: Readiness, info: Mapping[str, Any]
) -> ConfigCheck:
    """Flag knobs against /server_info, env knobs against the main process's environment."""
    environ: dict[str, str] = {}
    if readiness.env_knobs:
        state = await session.control.show(
            session.unit, ("MainPID",), timeout=session.timeouts.command
        )
        if state.main_pid is not None:
            result = await session.transport.run(
                ["cat", f"/proc/{state.main_pid}/environ"],
                timeout=session.timeouts.command,
                privileged=True,
            )
            environ = parse_proc_environ(result.stdout) if result.ok else {}
    check = session.engine.check_server_config(info, readiness.flag_knobs).also(
        *env_differences(readiness.env_knobs, environ)
    )
    allowed = [d for d in check.mismatches if d.knob in readiness.server_may_override]
    if not allowed:
        return check
    return ConfigCheck(
        mismatches=tuple(d for d in check.mismatches if d not in allowed),
        overridden=(*check.overridden, *allowed),
    )


async def _server(
    session: HostSession,
    readiness: Readiness,
    started: systemd.UnitState,
    cursor: str | None,
    info: Mapping[str, Any],
    check: ConfigCheck,
    timeline: Timeline,
    init_events: tuple[InitEvent, ...] = (),
) -> Server:
    """The last proofs: same invocation still running, config as asked. Then the Server."""
    t = session.timeouts
    state = await session.control.show(session.unit, timeout=t.command)
    if state.invocation_id != started.invocation_id or not state.running:
        raise TrialFailed(
            "exited",
            "the unit changed invocation while the probe ran",
            invocation_id=started.invocation_id,
        )
    if not check.ok:
        mismatches = [
            {"knob": d.knob, "where": d.where, "expected": d.expected, "actual": d.actual}
            for d in check.mismatches
        ]
        raise TrialFailed(
            "config-mismatch",
            "the running server does not report the trial's config",
            invocation_id=started.invocation_id,
            evidence={"mismatches": mismatches},
        )
    timeline.mark("ready")
    provenance = await _provenance(session, readiness, info, init_events)
    await session.events(
        "server.ready",
        invocation=started.invocation_id,
        main_pid=state.main_pid,
        load_s=round(timeline.span("started", "ready"), 3),
        overridden=[
            {"knob": d.knob, "expected": d.expected, "actual": d.actual, "why": d.reason}
            for d in check.overridden
        ],
    )
    assert started.invocation_id is not None and state.main_pid is not None
    return Server(
        base_url=session.base_url,
        api=session.api,
        model=session.model,
        invocation_id=started.invocation_id,
        main_pid=state.main_pid,
        start_cursor=cursor,
        timeline=timeline,
        overridden=tuple(check.overridden),
        server_info=dict(info),
        provenance=provenance,
    )


async def _provenance(
    session: HostSession,
    readiness: Readiness,
    info: Mapping[str, Any],
    init_events: tuple[InitEvent, ...],
) -> Provenance:
    """What exactly ran: the engine's account of the server (its reported config and startup
    lines) on these GPUs, with the argv and environment asked, and what the trial added to the
    unit's command line (flags, launch files)."""
    asked = readiness.invocation
    provenance = session.engine.build_provenance(
        ProvenanceSources(
            info,
            gpus=await _gpu_identities(session),
            exec_start=asked.argv if asked is not None else (),
            environment=asked.environment if asked is not None else {},
            init_events=init_events,
        )
    )
    if asked is not None and (asked.added_flags or asked.launch_files):
        provenance = dataclasses.replace(
            provenance, added_flags=asked.added_flags, launch_files=asked.launch_files
        )
    return provenance


async def _gpu_identities(session: HostSession) -> tuple[gpu.GpuIdentity, ...]:
    """The GPUs' names and driver for the provenance; unknown (empty) when the query fails:
    a trial is not failed for its provenance."""
    try:
        return tuple(await session.host.gpu.identities())
    except HostError:
        return ()


async def _excerpt(
    session: HostSession,
    cursor: str | None,
    invocation_id: str | None,
    *,
    settle: float = 0.0,
) -> list[str]:
    """The journal lines of one invocation after ``cursor``; waits up to ``settle`` seconds
    for a failure line, since journald can lag behind a process's death. systemd's own line
    that the process ended shortens the wait to :data:`STREAM_GRACE_S` after it, not to
    nothing: it reaches the journal from PID 1, the process's last lines through its stdout
    stream, and journald may store the first before the second (a ValueError read as a plain
    exit would lose the ``invalid-config`` cause)."""
    now = time.monotonic()
    deadline, ended_by = now + settle, math.inf
    while True:
        entries = await journal.read_entries(
            session.transport, session.unit, cursor, timeout=session.timeouts.command
        )
        lines = [
            e.message
            for e in entries
            if e.message is not None and e.invocation_id in (None, invocation_id)
        ]
        last = lines[-EXCERPT_LINES:]
        if any(isinstance(session.engine.parse_log_line(line), FailureEvent) for line in last):
            return excerpt(lines)
        now = time.monotonic()
        if ended_by == math.inf and any(_UNIT_ENDED.search(line) for line in last):
            ended_by = now + STREAM_GRACE_S
        if now >= min(deadline, ended_by):
            return excerpt(lines)
        await asyncio.sleep(0.2)


def _classify(
    engine: Engine, excerpt: Sequence[str], state: systemd.UnitState
) -> tuple[FailureCause, str]:
    """The cause of a startup death: the first failure line of the excerpt, else ``exited``."""
    for line in excerpt:
        event = engine.parse_log_line(line)
        if isinstance(event, FailureEvent):
            return event.cause, event.message
    status = state.exec_main_status
    return "exited", f"the process exited (status {status}, result {state.result})"


# --- restore -------------------------------------------------------------------------------


async def restore(
    session: HostSession, policy: RestorePolicy, *, owner: str | None = None, force: bool = False
) -> list[systemd.ForeignChange]:
    """Put the host back: unit files byte-identical to the backup, and the unit running iff
    it was (``as-found``: the same clean restart as a trial's), ``stopped``, or left as is
    (``leave``). Returns other people's files that changed meanwhile (reported, never
    overwritten). A trial drop-in another sweep than ``owner`` wrote in our drop-in's place is
    one of them, named by its sweep: the unit is then left entirely alone (files and state:
    it runs that sweep's trial), unless ``force``. Raises :class:`TrialFailed` (host errors
    mapped by :func:`failure_from`): restore is idempotent, so a caller may try again."""
    t = session.timeouts
    try:
        snapshot = await session.read_found()
        await session.events("restore.begin", policy=policy)
        other = await _other_sweeps_dropin(session, snapshot, owner)
        if other is not None and not force:
            await session.events("restore.left_alone", **other.to_json())
            return [other]
        foreign = await systemd.restore_files(
            session.transport, snapshot, control=session.control, timeout=t.command
        )
        want_running = snapshot.state.running if policy == "as-found" else None
        if policy == "stopped" or want_running is False:
            await session.control.stop(session.unit, timeout=t.stop)
        elif want_running:
            await _restart_as_found(session)
        final = await session.control.show(session.unit, timeout=t.command)
    except HostError as exc:
        raise failure_from(exc) from exc
    if want_running is not None and final.running != want_running:
        raise TrialFailed(
            "exited" if want_running else "stop-timeout",
            f"restore wanted it {'running' if want_running else 'stopped'},"
            f" found ActiveState={final.active_state}",
        )
    await session.events(
        "restore.done",
        policy=policy,
        active_state=final.active_state,
        foreign_changes=[f.to_json() for f in foreign],
    )
    return foreign


async def _other_sweeps_dropin(
    session: HostSession, snapshot: systemd.UnitSnapshot, owner: str | None
) -> systemd.ForeignChange | None:
    """The trial drop-in in our drop-in's place when another sweep than ``owner`` wrote it
    (and it is not what the backup holds there)."""
    if owner is None:
        return None
    try:
        now = await session.transport.read_file(
            snapshot.dropin_path, timeout=session.timeouts.command
        )
    except FileNotFoundError:
        return None
    header = parse_dropin_header(now.decode("utf-8", errors="replace"))
    if header is None or header.sweep == owner or now == snapshot.dropin_before:
        return None
    return systemd.ForeignChange(snapshot.dropin_path, sweep=header.sweep, trial=header.trial)


async def clear_stale(session: HostSession) -> bool:
    """After taking over a dead or stalled holder's lease, before anything else: its trial
    drop-in (a ``# managed-by:`` header that is not ours to keep) removed, with its directory
    when nothing else is in it, ``daemon-reload``, and a unit that runs restarted on its own
    files, so the host is as its owner left it before this sweep reads it as found. Returns
    whether there was a stale drop-in.

    The dead holder's backup (in its own store) alone knew whether it made the directory; one
    that held nothing but its drop-in is taken as made for it, as sweeps make it, and removed
    (``rmdir`` of an empty directory: an operator's drop-ins beside it keep it)."""
    t = session.timeouts
    try:
        found = await systemd.read_unit(
            session.transport,
            session.unit,
            control=session.control,
            timeout=t.command,
            launch_files=session.launches_from_files,
        )
        stale = found.stale_dropin
        if stale is None:
            return False
        await session.events("takeover.clearing", sweep=stale.sweep, trial=stale.trial)
        await systemd.restore_files(
            session.transport,
            dataclasses.replace(found.without_stale_dropin(), dropin_dir_existed=False),
            control=session.control,
            timeout=t.command,
        )
        if found.state.running:
            await _restart_as_found(session)
    except HostError as exc:
        raise failure_from(exc) from exc
    await session.events("takeover.cleared", sweep=stale.sweep, trial=stale.trial)
    return True


RESTORE_ATTEMPTS = 3
RESTORE_RETRY_S = 1.0


async def restore_retrying(
    session: HostSession,
    policy: RestorePolicy,
    *,
    attempts: int = RESTORE_ATTEMPTS,
    owner: str | None = None,
    force: bool = False,
) -> list[systemd.ForeignChange]:
    """:func:`restore`, tried again on any host failure, ``reset-failed`` between tries: it
    is the last thing between the host and the morning, and idempotent. Such failures are a
    journal read or daemon-reload that failed, a stop job past its bound, and a start refused
    by systemd's start rate limit, which deliberate starts fill as crashes do (a sweep's last
    trials, an adopt and a restore within ``StartLimitIntervalSec``) and ``reset-failed``
    clears. Raises the last :class:`TrialFailed`; a bug of ours is not one and propagates."""
    for attempt in range(1, attempts + 1):
        try:
            return await restore(session, policy, owner=owner, force=force)
        except TrialFailed as exc:
            if attempt == attempts:
                raise
            await session.events("restore.retry", attempt=attempt, cause=exc.cause, error=str(exc))
            await asyncio.sleep(RESTORE_RETRY_S * attempt)
            with contextlib.suppress(HostError):
                await session.control.reset_failed(session.unit, timeout=session.timeouts.command)
    raise AssertionError("unreachable: attempts >= 1")


async def _restart_as_found(session: HostSession) -> None:
    """The unit back on its own files, restarted cleanly. Running but not (yet) serving a
    generation within ``timeouts.ready`` is reported, not a failure of the restore, whose job
    is the files and the running state; a process that dies at startup is one."""
    try:
        await restart_clean(session, AS_FOUND)
    except TrialFailed as exc:
        if exc.cause != "ready-timeout":
            raise TrialFailed(
                exc.cause,
                f"the restored unit did not come up: {exc.message}",
                excerpt=exc.excerpt,
                exit_status=exc.exit_status,
                invocation_id=exc.invocation_id,
                evidence=exc.evidence,
            ) from exc
        await session.events("restore.not_serving", waited_s=session.timeouts.ready)
        return
    await session.events("restore.serving")
