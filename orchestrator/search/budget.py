"""``search.max_restarts``: a hard cap on the unit starts of one host type in one sweep.

Every start counts, whatever it is for (baseline, screening, a promotion, a repeat, a retry, a
confirmation, the re-run of a trial a crash interrupted): the runner asks :meth:`take` right
before each restart and records the start as a ``restart.counted`` event first, so a resumed
run counts what the killed one spent (:meth:`RestartBudget.load`). A start the budget refuses
is not made; its attempt ends ``skipped``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field

from orchestrator.plan import expand_configs
from orchestrator.store import EventRecord, Store
from orchestrator.sweepfile import Sweep

RESTART_EVENT = "restart.counted"
RACE_SHARE = 4
"""Without ``search.race``, the race gets ``max_restarts // RACE_SHARE`` restarts (6 of 25).
Before the pick was smoothed a third was best (on the benchmark's `default` surface, 2 %
restart noise, the top two 0.6 % apart, a fifth left the pick on too few restarts of each
leader, a half left too few screens to find them); once every screen also informs its
neighbours' estimates (:func:`~orchestrator.search.source.smoothed`), a screen near the
leaders is worth more than a third repeat of one: on the development seeds 6000-6049 and
7000-7049 a race of a quarter put the pick within 1 % of the optimum in 71 of 100 seeds, a
third in 65."""


def host_types(sweep: Sweep) -> dict[str, str]:
    """Each host's type, by host name."""
    return {host.name: host.host_type for host in sweep.hosts}


def restarts_used(events: Iterable[EventRecord], type_of: Mapping[str, str]) -> dict[str, int]:
    """Unit starts per host type, from the ``restart.counted`` events."""
    used: dict[str, int] = {}
    for event in events:
        if event.kind == RESTART_EVENT and event.host is not None and event.host in type_of:
            host_type = type_of[event.host]
            used[host_type] = used.get(host_type, 0) + 1
    return used


@dataclass
class RestartBudget:
    """What each host type may still start. ``cap`` None: no cap (a grid without one)."""

    cap: int | None
    type_of: Mapping[str, str]
    used: dict[str, int] = field(default_factory=dict)

    @classmethod
    async def load(cls, store: Store, sweep_id: int, sweep: Sweep) -> RestartBudget:
        type_of = host_types(sweep)
        events = await store.events(sweep_id, kinds=(RESTART_EVENT,))
        return cls(sweep.search.max_restarts, type_of, restarts_used(events, type_of))

    def left(self, host: str) -> int | None:
        if self.cap is None:
            return None
        return self.cap - self.used.get(self.type_of[host], 0)

    def take(self, host: str) -> bool:
        """Spend one start of ``host``'s type, or refuse when its cap is reached. No await
        between the check and the count: hosts of one type ask on one event loop."""
        left = self.left(host)
        if left is not None and left <= 0:
            return False
        host_type = self.type_of[host]
        self.used[host_type] = self.used.get(host_type, 0) + 1
        return True


RESERVE_SHARE = 3
"""When the restarts left after the baselines cannot screen the whole space and still hold
the race and the confirmations, those two together hold at most a third of them (the
confirmations first, then the race): a night first looks at a fair share of its space. With
the defaults (a race of a quarter of ``max_restarts`` and two confirmations) the reserve is
about a third already, so the share binds only on a tight budget: the tester's 6-config grid
on 3 hosts with ``max_restarts: 9`` held 4 of the 6 restarts left after 3 baselines and
explored 2 configs; now it holds 2 and explores 4."""


def race_restarts(sweep: Sweep) -> int:
    """The race's restarts per host type as configured: ``search.race``, else a quarter of
    ``max_restarts`` (:data:`RACE_SHARE`); a tight budget trims it (:func:`reserve`)."""
    if sweep.search.race is not None:
        return sweep.search.race
    return (sweep.search.max_restarts or 0) // RACE_SHARE


@dataclass(frozen=True, slots=True)
class Reserve:
    """What one host type's search holds back from exploring, and what that leaves."""

    race: int
    confirmations: int
    screens: int | None
    """Restarts left to explore with after the baselines and the reserve (None: no cap)."""
    baselines: int
    space: int

    @property
    def can_screen_space(self) -> bool:
        return self.screens is None or self.screens >= self.space


def exploring_cap(sweep: Sweep) -> int | None:
    """What a search may spend of ``max_restarts`` per host type: all of it but the schedule
    trials' restarts, spent last (None: no cap)."""
    cap = sweep.search.max_restarts
    return None if cap is None else max(0, cap - sweep.schedule_restarts())


def reserve(sweep: Sweep, *, baselines: int, space: int) -> Reserve:
    """The race and confirmation restarts a host type with ``baselines`` baseline starts
    holds back over a space of ``space`` configs (:data:`RESERVE_SHARE`): ``search.race``
    (else a quarter of ``max_restarts``) and ``search.confirmations`` when the rest can
    screen every config once; else those the sweep file leaves to their defaults are trimmed
    to the larger of what screening the space leaves and a third of the restarts after the
    baselines (the confirmations first)."""
    cap = exploring_cap(sweep)
    race = race_restarts(sweep)
    confirmations = sweep.search.confirmations
    if cap is None:
        return Reserve(race, confirmations, None, baselines, space)
    room = max(0, cap - baselines)
    if room - race - confirmations < space:
        # What the sweep file sets is the operator's choice (``validate`` warns about it);
        # only the defaults yield.
        chosen = sweep.search.model_fields_set
        most = max(room - space, room // RESERVE_SHARE)
        if "confirmations" not in chosen:
            confirmations = min(confirmations, most)
        if sweep.search.race is None:
            race = min(race, max(0, most - confirmations))
    return Reserve(race, confirmations, max(0, room - race - confirmations), baselines, space)


def screening_warnings(sweep: Sweep) -> list[str]:
    """Per host type, a warning when ``max_restarts`` cannot screen every config of the space
    once after the baselines (and, under a search, the race and confirmations it holds back),
    as ``plan`` warns when the estimate overruns ``finish_by``: the answer will rest on part
    of the space, say how much that risks, and not say "Deploy" while the risk is high."""
    cap = sweep.search.max_restarts
    if cap is None:
        return []
    space = sum(1 for config in expand_configs(sweep) if config)
    warnings = []
    counts: dict[str, int] = {}
    for host in sweep.hosts:
        counts[host.host_type] = counts.get(host.host_type, 0) + 1
    for host_type, hosts in counts.items():
        baselines = hosts if sweep.baseline else 0
        if sweep.search.strategy == "grid":
            held = Reserve(0, 0, max(0, cap - baselines), baselines, space)
        else:
            held = reserve(sweep, baselines=baselines, space=space)
        if held.can_screen_space:
            continue
        assert held.screens is not None
        kept = held.race + held.confirmations
        needed = baselines + space + kept
        after = f" after {baselines} baseline start(s)" if baselines else ""
        holding = (
            f", holding {held.race} back for the race and {held.confirmations} for the "
            "confirmations"
            if kept
            else ""
        )
        warnings.append(
            f"host type {host_type}: search.max_restarts {cap} leaves {held.screens} "
            f"start(s) to explore{after}{holding}: at most {held.screens} of the {space} "
            'configs are measured, and the answer says "Best found so far" rather than '
            '"Deploy" while the unexplored ones may beat it; max_restarts '
            f"{needed} screens every config once"
        )
    return warnings
