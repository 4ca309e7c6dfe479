"""A real host as the host loop drives it: beside the lifecycle, which it calls.

:class:`SessionDriver` is the host loop's :class:`~orchestrator.hostloop.Driver` over a
:class:`~orchestrator.lifecycle.HostSession`: the refusals the preflight showed (nothing is
restarted for them), then ``async with driver.serve(planned, trial) as server``: the trial's
drop-in, the clean restart of :func:`~orchestrator.lifecycle.reconfigure`, and the proven
server as the loop measures it (:class:`~orchestrator.running.RunningServer`), until the next
trial's restart or the restore replaces it. The runner keeps the host's lease, preflight,
backup and restore; what is measured, recorded and shown is the host loop's.
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from orchestrator.cells import WorkloadSamples
from orchestrator.engines.schedule import PROBE_KEY
from orchestrator.evidence import RefusalEvidence
from orchestrator.host.dropin import ExtraFlagConflict
from orchestrator.host.errors import HostError
from orchestrator.host.launchfile import LaunchFileError
from orchestrator.host.lease import HostLease, LeaseLost
from orchestrator.hostloop import Refusal, Stopped
from orchestrator.lifecycle import (
    HostSession,
    TrialDropin,
    failure_from,
    reconfigure,
    trial_config,
)
from orchestrator.plan import Trial
from orchestrator.preflight import HostCheck
from orchestrator.running import RunningServer
from orchestrator.store.records import TrialRecord
from orchestrator.sweepfile import HostSpec, Sweep


class SessionDriver:
    """``host`` of ``sweep``, reached through its ``session``, as ``check`` (its preflight)
    found it and under its ``lease``; ``samples`` are the sweep's workloads."""

    def __init__(
        self,
        sweep: Sweep,
        samples: WorkloadSamples,
        session: HostSession,
        host: HostSpec,
        check: HostCheck,
        lease: HostLease,
    ) -> None:
        self.sweep, self.samples = sweep, samples
        self.session, self.spec, self.check, self.lease = session, host, check, lease
        self.knobs = host.effective_knobs(sweep.server.knobs)
        self._dropins: dict[str, TrialDropin] = {}

    @property
    def host(self) -> str:
        return self.session.name

    async def events(self, kind: str, /, **fields: Any) -> None:
        await self.session.events(kind, **fields)

    async def refusal(self, planned: Trial, trial: TrialRecord) -> Refusal | None:
        """A flag this build does not know, an argv the host's own parser refused (it would
        die at startup the same way), or an extra flag the unit's real command line has with
        another value: nothing is restarted for any of them."""
        unknown = sorted(
            self.knobs[name].flag or ""
            for name, value in planned.config.items()
            if value is not None and self.knobs[name].flag in self.check.unknown_flags
        )
        if unknown:
            return Refusal(
                "bad-flag",
                RefusalEvidence("preflight", unknown_flags=tuple(unknown)),
                f"unknown to this build: {' '.join(unknown)}",
            )
        overlay = trial.plan.overlay if trial.plan is not None else None
        # A schedule trial is refused as the preflight's representative schedule was: its
        # argv differs from that one only in the values the answers chose.
        refused = self.check.refusal(PROBE_KEY if overlay is not None else planned.key)
        if refused is not None and refused.cause is not None:
            return Refusal(refused.cause, RefusalEvidence.of(refused), refused.error or "")
        sweep, session = self.sweep, self.session
        assert session.found is not None
        try:
            self._dropins[trial.key] = trial_config(
                session.found,
                sweep=sweep.name,
                key=trial.key,
                knobs=self.knobs,
                config=planned.config,
                extra_flags=sweep.server.extra_flags,
                environment=sweep.server.environment,
                metrics=sweep.server.metrics,
                engine=session.engine,
                overlay=overlay,
            )
        except ExtraFlagConflict as conflict:
            # Only the host's real command line shows it (validate saw the sweep's
            # exec_start): which value the server would take is up to its parser.
            evidence = RefusalEvidence("drop-in", message=str(conflict), flag=conflict.flag)
            return Refusal("invalid-config", evidence, str(conflict))
        except LaunchFileError as unwritable:
            evidence = RefusalEvidence("drop-in", message=str(unwritable))
            return Refusal("invalid-config", evidence, str(unwritable))
        return None

    @contextlib.asynccontextmanager
    async def serve(self, planned: Trial, trial: TrialRecord) -> AsyncIterator[RunningServer]:
        """The trial's drop-in installed, the unit restarted cleanly, the new process proven
        (the next trial's restart, or the restore, replaces it)."""
        del planned
        try:
            server = await reconfigure(self.session, self._dropins[trial.key])
            yield RunningServer(self.session, server, self.sweep, self.samples)
        except (Stopped, LeaseLost):
            raise
        except Exception as exc:
            # A server that died or never came up while another controller took the host
            # over was restarted by that controller, not crashed: the take-over is the cause.
            try:
                lost = await self.lease.taken_over()
            except HostError:
                lost = None  # the host cannot tell now: the failure stands as it was seen
            if lost is not None:
                raise lost.behind(failure_from(exc).to_json()) from exc
            raise


__all__ = ["SessionDriver"]
