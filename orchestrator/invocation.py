"""What a trial's server runs: one builder for plan, preflight, lifecycle and search.

A trial's command line and environment are the base (the unit as found on the host, or the
sweep's representative ``server.exec_start``) with every knob removed, the sweep's
``extra_flags`` and ``environment`` added, the trial's knobs added, and the engine's metrics
flags added where the command line lacks them (``server.metrics: auto``). The plan shows the
drop-in, the preflight asks the host's engine about its argv, the lifecycle installs it and the
search compares it: if each assembled it from the sweep's fields itself, the four could drift
apart and the plan would show a drop-in other than the one installed. Here it is assembled once.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING

from orchestrator import engines
from orchestrator.engines.base import Engine, file_flags
from orchestrator.host import systemd
from orchestrator.host.dropin import KnobTarget, TrialInvocation, apply_knobs, dropin_path
from orchestrator.host.launchfile import LaunchFormat
from orchestrator.types import KnobValue, LaunchOverlay

if TYPE_CHECKING:  # the lifecycle builds recipes without a sweep file: no import at run time
    from orchestrator.sweepfile import HostSpec, Sweep

PLACEHOLDER = "<ExecStart>"
"""The base's one word when neither the unit nor ``server.exec_start`` is known (``plan``
offline): what follows it in a built argv is what the trial adds."""


@dataclass(frozen=True, slots=True)
class UnitBase:
    """The unit as found on its host: its merged ExecStart and Environment."""

    exec_start: tuple[str, ...]
    environment: Mapping[str, str] = field(default_factory=dict)

    @classmethod
    def of(cls, service: systemd.ServiceConfig) -> UnitBase:
        return cls(tuple(service.exec_start), dict(service.environment))


@dataclass(frozen=True, slots=True)
class ServerRecipe:
    """What a sweep asks of one host's server whatever the config: the host's knob spellings,
    the extra flags and variables, the flags the engine adds for ``/metrics``, and the
    representative command line (empty when the sweep gives none), and the engine's flags
    that take a launch file with the drop-in path such files go beside."""

    knobs: Mapping[str, KnobTarget]
    extra_flags: Sequence[str] = ()
    environment: Mapping[str, str] | None = None
    metrics_flags: Sequence[str] = ()
    exec_start: Sequence[str] = ()
    file_flags: Mapping[str, LaunchFormat] = field(default_factory=dict)
    dropin: str | None = None

    @classmethod
    def of(cls, sweep: Sweep, host: HostSpec, engine: Engine | None = None) -> ServerRecipe:
        """Everything ``sweep`` says of ``host``'s server (the sweep's engine when None)."""
        engine = engine or engines.get(sweep.engine)
        files = file_flags(engine)
        return cls(
            knobs=host.effective_knobs(sweep.server.knobs),
            extra_flags=sweep.server.extra_flags,
            environment=sweep.server.environment,
            metrics_flags=tuple(engine.metrics_flags(sweep.server.metrics)),
            exec_start=tuple(sweep.server.exec_start or ()),
            file_flags=files,
            dropin=str(dropin_path(sweep.unit)) if files else None,
        )

    def invocation(
        self,
        config: Mapping[str, KnobValue],
        base: UnitBase | None = None,
        *,
        add_metrics_flags: bool = True,
        overlay: LaunchOverlay | None = None,
    ) -> TrialInvocation:
        """``config``'s invocation on ``base`` (None: the representative command line, else
        :data:`PLACEHOLDER`). The metrics flags are added only to a real command line: the
        placeholder has no flags to judge their absence by (the plan says them as "added
        where the unit lacks it" instead). Raises ``ExtraFlagConflict`` and
        ``UnknownKnobError`` as :func:`~orchestrator.host.dropin.apply_knobs` does."""
        if base is None:
            base = UnitBase(tuple(self.exec_start) or (PLACEHOLDER,))
            real = bool(self.exec_start)
        else:
            real = True
        return apply_knobs(
            base.exec_start,
            base.environment,
            self.knobs,
            config,
            self.extra_flags,
            self.environment,
            ensure_flags=self.metrics_flags if real and add_metrics_flags else (),
            file_flags=self.file_flags,
            dropin=self.dropin,
            overlay=overlay,
        )
