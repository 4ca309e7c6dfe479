"""Making a sweep's answer the hosts' lasting configuration: ``orchestrator adopt``.

Adopt installs the winning config of one host type on each of that type's hosts the way a
trial installs its config (the same drop-in rendering, daemon-reload proven, clean restart,
readiness with the config checked in ``/server_info``), but in its own drop-in
(:data:`~orchestrator.host.dropin.ADOPTED_DROPIN_NAME`) that a sweep's restore leaves alone.
Before changing a host it keeps the unit as found as the host's pending backup, so
``orchestrator restore`` puts the unit back byte-identical; a host whose adopted server does
not come up is put back at once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import structlog

from orchestrator.answers import Answer, answer_sweep
from orchestrator.answers.model import named, standing_words
from orchestrator.api import Adoption, AdoptOutcome
from orchestrator.daemon.claims import HostClaims
from orchestrator.daemon.order import host_keys
from orchestrator.daemon.restore import take_for_command
from orchestrator.engines.schedule import NativeSchedule
from orchestrator.host import systemd
from orchestrator.host.connect import open_host
from orchestrator.host.dropin import ExtraFlagConflict, adopted_dropin_path, dropin_path
from orchestrator.host.errors import HostError
from orchestrator.host.fence import held
from orchestrator.host.handle import HostHandle
from orchestrator.host.lease import Controller, HostBusy
from orchestrator.lifecycle import (
    HostSession,
    TrialDropin,
    TrialFailed,
    failure_from,
    reconfigure,
    restore,
    trial_config,
)
from orchestrator.log import get_logger
from orchestrator.plan import trial_key
from orchestrator.sessions import host_session, snapshot_to_backup
from orchestrator.store import BackupPending, Store, SweepRecord
from orchestrator.store.results import config_label
from orchestrator.sweepfile import HostSpec, Sweep
from orchestrator.types import LaunchOverlay

"""Set in an adopt's backup state (to the adopted config's label): its undo restores the unit
as found and running as found, whatever the sweep's own restore policy says."""


class AdoptRefused(ValueError):
    """The sweep's answer does not name one config to adopt, or a host is not ready for it."""


def choose(
    answers: Sequence[Answer], host_type: str, *, allow_tie: bool, allow_unexplored: bool = False
) -> Answer:
    """The answer whose named config (:func:`~orchestrator.answers.model.named`, the one the
    headline names first and the heatmap marks) ``adopt`` may install on ``host_type``, or
    why not: never a tie without ``allow_tie``, never an answer whose exploration risk is
    above its threshold without ``allow_unexplored``."""
    matching = [a for a in answers if a.host_type == host_type]
    if not matching:
        known = sorted({a.host_type for a in answers})
        raise AdoptRefused(
            f"the sweep has no answer for host type {host_type!r}"
            + (f" (its types: {', '.join(known)})" if known else "")
        )
    if len(matching) > 1:
        raise AdoptRefused(
            f"the sweep has no objective, so each matrix cell of {host_type} has its own "
            "verdict and no one config wins: give the sweep an objective"
        )
    answer = matching[0]
    chosen = named(answer)
    if answer.verdict == "no-valid-config" or chosen is None:
        raise AdoptRefused(f"no config is valid on {host_type}: nothing to adopt")
    if answer.verdict == "tie" and not allow_tie:
        tied = ", ".join(c.label for c in (chosen, *answer.tied))
        raise AdoptRefused(
            f"on {host_type} the data cannot tell {tied} apart: measure more repeats, or "
            f"pass --allow-tie to adopt {chosen.label} ({standing_words(answer)})"
        )
    exploration = answer.exploration
    if exploration is not None and exploration.risky and not allow_unexplored:
        ahead = ", ".join(config_label(c) for c in exploration.next)
        raise AdoptRefused(
            f"on {host_type} the search explored {exploration.explored} of "
            f"{exploration.space} configs: a {exploration.risk:.0%} chance that one it did not "
            f"measure beats {chosen.label} by more than {exploration.margin:.0%} (above "
            f"{exploration.threshold:.0%}); run more of the space"
            + (f" ({ahead} next)" if ahead else "")
            + f", or pass --allow-unexplored to adopt {chosen.label}, the best found so far"
        )
    return answer


async def adopt_host(
    store: Store,
    record: SweepRecord,
    sweep: Sweep,
    host: HostSpec,
    config: Mapping[str, Any],
    *,
    controller: Controller | None = None,
    overlay: LaunchOverlay | None = None,
) -> AdoptOutcome:
    """Install ``config`` (with ``overlay``, a measured schedule's launch) as ``host``'s
    lasting configuration, holding the host's lease meanwhile (refused, naming the holder,
    while another controller's live lease holds it)."""
    controller = controller or Controller("adopt", str(store.path))
    handle = open_host(host, connect_timeout=sweep.timeouts.connect)
    try:
        try:
            taken = await take_for_command(handle, controller, sweep, record)
            lease = taken.lease
        except HostBusy as busy:
            return AdoptOutcome(host.name, ok=False, error=str(busy))
        except HostError as exc:
            mapped = failure_from(exc)
            return AdoptOutcome(host.name, ok=False, error=f"{mapped.cause}: {mapped.message}")
        assert lease is not None
        async with held(lease, handle) as fenced_handle:
            outcome = await _adopt_held(
                store, record, sweep, host, config, fenced_handle, overlay
            )
        await lease.release()
        return outcome
    finally:
        await handle.close()


async def _adopt_held(
    store: Store,
    record: SweepRecord,
    sweep: Sweep,
    host: HostSpec,
    config: Mapping[str, Any],
    handle: HostHandle,
    overlay: LaunchOverlay | None = None,
) -> AdoptOutcome:
    """Adopt on a host whose lease is held: never leaves it worse: a failed start puts the
    unit back as found, and a host error is reported, the backup kept."""
    unit = sweep.unit

    async def events(kind: str, /, **fields: Any) -> None:
        await store.add_event(record.id, kind, host=host.name, fields=fields)

    session = host_session(sweep, host, handle, unit=unit, events=events)
    timeout = session.timeouts.command
    target = str(adopted_dropin_path(unit))
    try:
        with structlog.contextvars.bound_contextvars(sweep=record.name, host=host.name):
            await _refuse_trial_leftover(session, host.name, unit)
            found = await systemd.read_unit(
                session.transport,
                unit,
                control=session.control,
                path=target,
                timeout=timeout,
                launch_files=session.launches_from_files,
            )
            session.found = found
            key = trial_key(host.name, unit, config)
            trial = _adopted_trial(found, sweep, host, config, key, session, overlay)
            stored = snapshot_to_backup(found)
            await store.rearm_unit_backup(
                record.id, host.name, unit, stored.files, stored.state, dropin=stored.dropin,
                adopted=key,
            )  # fmt: skip
            await events("adopt.begin", trial=key, dropin=target)
            return await _install(store, record, host.name, session, trial, target)
    except (AdoptRefused, BackupPending) as refused:
        return AdoptOutcome(host.name, ok=False, error=str(refused))
    except TrialFailed as failed:
        return AdoptOutcome(host.name, ok=False, error=f"{failed.cause}: {failed.message}")
    except HostError as exc:
        mapped = failure_from(exc)
        return AdoptOutcome(host.name, ok=False, error=f"{mapped.cause}: {mapped.message}")


def _adopted_trial(
    found: systemd.UnitSnapshot,
    sweep: Sweep,
    host: HostSpec,
    config: Mapping[str, Any],
    key: str,
    session: HostSession,
    overlay: LaunchOverlay | None = None,
) -> TrialDropin:
    """The lasting drop-in of ``config`` on the unit as found (raises :class:`AdoptRefused`
    where an extra flag conflicts with the unit's command line)."""
    try:
        return trial_config(
            found,
            sweep=sweep.name,
            key=key,
            knobs=host.effective_knobs(sweep.server.knobs),
            config=config,
            extra_flags=sweep.server.extra_flags,
            environment=sweep.server.environment,
            metrics=sweep.server.metrics,
            engine=session.engine,
            adopted=True,
            overlay=overlay,
        )
    except ExtraFlagConflict as conflict:
        raise AdoptRefused(f"{host.name}: {conflict}") from conflict


async def _install(
    store: Store,
    record: SweepRecord,
    host: str,
    session: HostSession,
    trial: TrialDropin,
    target: str,
) -> AdoptOutcome:
    """The adopted drop-in installed and its server proven; a failed start puts the unit back
    as found (the backup then restored)."""
    log = get_logger(host=host, sweep=record.name)
    try:
        server = await reconfigure(session, trial)
    except TrialFailed as failed:
        log.warning("adopt.failed", cause=failed.cause, error=failed.message)
        await session.events("adopt.failed", cause=failed.cause, error=failed.message)
        await restore(session, "as-found")
        await store.mark_restored(record.id, host)
        return AdoptOutcome(host, ok=False, error=f"{failed.cause}: {failed.message} (put back)")
    await session.events("adopt.done", trial=trial.key, invocation=server.invocation_id)
    log.info("adopt.done", invocation=server.invocation_id)
    return AdoptOutcome(host, ok=True, dropin=target, invocation_id=server.invocation_id)


async def _refuse_trial_leftover(session: HostSession, host: str, unit: str) -> None:
    """A trial's drop-in still on the host means a sweep did not restore it: adopting over it
    would make the trial's config lasting by accident."""
    trial_path = str(dropin_path(unit))
    leftover = await session.transport.run(
        ["test", "-e", trial_path], timeout=session.timeouts.command, privileged=True
    )
    if leftover.ok:
        raise AdoptRefused(
            f"{host}: a trial drop-in ({trial_path}) is still on the host: "
            f"`orchestrator restore {host}` first"
        )


async def adopt_type(
    store: Store,
    record: SweepRecord,
    sweep: Sweep,
    answers: Sequence[Answer],
    host_type: str,
    *,
    allow_tie: bool = False,
    allow_unexplored: bool = False,
) -> Adoption:
    """Adopt the answer's named config on every host of ``host_type`` the sweep names, one
    host at a time (a fleet keeps serving on the others while one restarts)."""
    answer = choose(answers, host_type, allow_tie=allow_tie, allow_unexplored=allow_unexplored)
    chosen = named(answer)
    assert chosen is not None
    schedule = recommended_schedule(answer)
    config = chosen.config if schedule is None else dict(schedule.config)
    overlay = None if schedule is None else schedule.overlay
    hosts = [h for h in sweep.hosts if h.host_type == host_type]
    outcomes = []
    for host in hosts:
        outcomes.append(
            await adopt_host(store, record, sweep, host, config, overlay=overlay)
        )
    return Adoption(
        record.name, record.id, host_type, chosen, tuple(outcomes), schedule=schedule
    )


def recommended_schedule(answer: Answer) -> NativeSchedule | None:
    """The schedule ``adopt`` installs instead of the best fixed config: one measured against
    it at every load and recommended (:func:`~orchestrator.answers.schedule.judge_schedule`)."""
    schedule = answer.schedule
    if schedule is None or schedule.native is None or schedule.verdict is None:
        return None
    return schedule.native if schedule.verdict.recommended else None


class HostsBusy(RuntimeError):
    """A host of the type is in use by a running sweep or a restore."""


async def adopt_sweep(
    store: Store,
    record: SweepRecord,
    sweep: Sweep,
    host_type: str,
    claims: HostClaims,
    *,
    allow_tie: bool = False,
    allow_unexplored: bool = False,
) -> Adoption:
    """Answer ``record``'s sweep from the store and adopt its best config on ``host_type``,
    holding the type's hosts meanwhile. Raises :class:`AdoptRefused` (nothing changed) or
    :class:`HostsBusy`."""
    answers = answer_sweep(await store.results(record.id), sweep)
    # refuse before holding anything
    choose(answers, host_type, allow_tie=allow_tie, allow_unexplored=allow_unexplored)
    keys = frozenset().union(*(host_keys(h) for h in sweep.hosts if h.host_type == host_type))
    if not claims.is_free(keys):
        raise HostsBusy(f"a host of type {host_type} is busy: adopt once its sweep has ended")
    claims.claim(keys)
    try:
        return await adopt_type(
            store,
            record,
            sweep,
            answers,
            host_type,
            allow_tie=allow_tie,
            allow_unexplored=allow_unexplored,
        )
    finally:
        claims.release(keys)
