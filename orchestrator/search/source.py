"""The ``random`` and ``adaptive`` trial sources: one trial at a time, from the store.

When a host of type T frees up it asks :meth:`SearchTrialSource.next_trial`, which reads the
sweep's stored trials and results and answers, in this order:

1. a trial already stored for the host and not finished (the one a crash interrupted: it is
   re-run once, and its restart counts);
2. the host's baseline, when the sweep asks for one and the host has not run it;
3. the next exploration, while the type's restarts left (``search.max_restarts`` less every
   start so far) cover it and the confirmation reserve, the deadline's time left covers it
   and the reserve (:mod:`.deadline`), and configs not yet paid for remain (:mod:`.space`).
   Proposal k is :func:`.propose.propose` of the seed and the finished explorations of the
   type (the ``search.proposed`` event records which ones it saw). Under ``adaptive`` a new
   config is *screened* first: the objective's cells, fewer rounds, no coding; the runner
   asks :meth:`extend` once the screen is measured, and a promising config (in the top
   ``promote_fraction`` of the type's screens: successive halving's rung) goes on with the
   full matrix and the coding anchor on the same server;
4. the race (purpose ``measure``, full matrix, its own restart): the reserve's ``race``
   restarts on the leader or its strongest challenger, whichever has fewer restarts
   (:func:`race_pick`, LUCB on the smoothed estimates of :func:`smoothed`), so the answer's
   pick rests on more than one lucky restart;
5. a confirmation of a leader (purpose ``confirm``, full matrix, its own restart): the rest of
   the reserve spent on the two configs with the best smoothed estimates after the race,
   alternately, so
   their estimates come from restarts that did not pick them;
6. nothing: the host is done.

An objective the offered load caps (goodput at an open-loop cell,
:mod:`orchestrator.answers.saturation`) gets no race and no confirmation once two configs sit
at the cap (:func:`capped_reason`; the rate their schedules really offered, read from the
stored points as the answer reads it): more restarts of configs that all keep up measure the
cap again. The reserve goes back to exploring what is not yet measured, and the stop event says why.

Nothing is kept only in memory: a fresh source over the same store answers the same.
"""

from __future__ import annotations

import asyncio
import dataclasses
import datetime as dt
import math
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from orchestrator.answers.saturation import FRACTION_METRICS, at_cap, measured_cap, offered_cap
from orchestrator.answers.smooth import Axes, restart_spread, smooth_picks
from orchestrator.causes import INVALID_CONFIG_CAUSES
from orchestrator.plan import Plan, estimate_plan, repeat_key, trial_key
from orchestrator.points import Point, ThroughputPoint
from orchestrator.search.budget import (
    RESTART_EVENT,
    Reserve,
    exploring_cap,
    host_types,
    reserve,
    restarts_used,
)
from orchestrator.search.deadline import (
    TimeBudget,
    TimedTrial,
    TrialTimes,
    learn_times,
    local_deadline,
)
from orchestrator.search.propose import Seen, Strategy, propose, startup_trials
from orchestrator.search.schedule import with_schedule_trials
from orchestrator.search.score import (
    Objective,
    TrialScore,
    score_trial,
    sweep_objective,
)
from orchestrator.search.space import (
    Config,
    SearchSpace,
    search_space,
    server_identity,
)
from orchestrator.store import (
    NewTrial,
    Store,
    SweepRecord,
    TrialPlan,
    TrialRecord,
    TrialState,
)
from orchestrator.store.records import TrialPurpose
from orchestrator.store.results import is_schedule_plan
from orchestrator.sweepfile import HostSpec, Sweep
from orchestrator.trialsource import (
    SourcedTrial,
    TrialSource,
    TrialSourceFactory,
    plan_trial_source,
    sourced,
    trial_plan,
)
from orchestrator.types import KnobValue

PROPOSED_EVENT = "search.proposed"
STOPPED_EVENT = "search.exploration_stopped"
LEADERS = 2
"""How many leading configs share the confirmation reserve."""
RACE_Z = 1.96
"""How far above its mean (in standard errors) a challenger's value may plausibly be: the
race's upper bounds are 95 % ones, like the answer's intervals."""
_UNFINISHED: frozenset[TrialState] = frozenset({"queued", "running"})


@dataclass(frozen=True, slots=True)
class Observation:
    """One stored trial as the search reads it: its latest attempt's state and points."""

    record: TrialRecord
    host_type: str
    identity: str
    state: TrialState
    cause: str | None
    points: tuple[Point, ...]
    started_at: float | None
    finished_at: float | None

    @property
    def plan(self) -> TrialPlan:
        assert self.record.plan is not None
        return self.record.plan

    @property
    def explores(self) -> bool:
        """A proposal of the search (not the baseline, not a confirmation)."""
        return not self.record.is_baseline and self.plan.purpose != "confirm"

    @property
    def finished(self) -> bool:
        return self.state in ("done", "failed")


def is_full(plan: TrialPlan, full: TrialPlan) -> bool:
    """The plan measures the whole matrix and the coding anchor (whatever its purpose)."""
    return set(plan.cells) == set(full.cells) and set(plan.problems) == set(full.problems)


def screen_plan(sweep: Sweep, objective: Objective) -> TrialPlan:
    """A screening look: the objective's cells, ``search.screen_rounds`` rounds, no coding."""
    full = trial_plan(sweep)
    rounds = sweep.search.screen_rounds or max(1, sweep.benchmark.rounds // 2)
    return dataclasses.replace(
        full,
        cells=objective.cells,
        rounds=rounds,
        problems=(),
        coding_temperature=None,
        purpose="screen",
    )


def assumed_times(sweep: Sweep, screen: TrialPlan | None) -> TrialTimes:
    """The sweep's ``estimate:`` as times, until the type's own trials say better."""
    estimate = estimate_plan(Plan(sweep.name, ()), sweep)
    full_s = estimate.trial_s
    if screen is None:
        return TrialTimes(estimate.restart_s, full_s, full_s, learned=False)
    cells = len(sweep.benchmark.matrix_cells())
    share = len(screen.cells) / cells * screen.rounds / max(sweep.benchmark.rounds, 1)
    return TrialTimes(
        estimate.restart_s, estimate.restart_s + estimate.bench_s * share, full_s, learned=False
    )


@dataclass(frozen=True, slots=True)
class Standing:
    """An explored config and the values it is picked on (larger is better), with its
    smoothed estimate once :func:`smoothed` has borrowed strength from its neighbours."""

    config: Config
    values: tuple[float, ...]
    estimate: float | None = None
    rel_se: float | None = None
    cap: float | None = None
    """What the values could reach at most, where the offered load bounds them: the mean over
    its restarts of the rate each schedule really offered
    (:func:`~orchestrator.answers.saturation.measured_cap`); None where a restart stored no
    such bound."""

    @property
    def mean(self) -> float:
        return sum(self.values) / len(self.values)

    @property
    def pick(self) -> float:
        """What the config is ranked on: its smoothed estimate, else its own mean."""
        return self.mean if self.estimate is None else self.estimate


def smoothed(standings: Sequence[Standing], axes: Axes) -> list[Standing]:
    """``standings`` with each config's estimate shrunk toward a smooth surface fitted over
    all of them (:func:`orchestrator.answers.smooth.smooth_picks`: each restart weighed by
    the restart spread of the same standings, as :func:`restart_cv` gives it), as the answer
    picks."""
    if not standings:
        return []
    fits = smooth_picks(axes, [s.config for s in standings], [s.values for s in standings])
    return [
        dataclasses.replace(s, estimate=fit.value, rel_se=fit.rel_se)
        for s, fit in zip(standings, fits, strict=True)
    ]


def restart_cv(standings: Sequence[Standing]) -> float:
    """The relative restart-to-restart spread of the configs measured more than once, pooled
    and shrunk toward the prior (:func:`~orchestrator.answers.smooth.restart_spread`)."""
    return restart_spread([standing.values for standing in standings])


def race_pick(standings: Sequence[Standing]) -> Config | None:
    """The config the race measures next: of the leader (the best estimate: smoothed when
    :func:`smoothed` fitted one, else the mean) and its strongest challenger (the highest
    upper 95 % bound among the others: the smoothed estimate plus 1.96 of its posterior
    errors, else the mean plus 1.96 standard errors), the one with fewer restarts (the leader
    on equal counts). This is LUCB's rule for finding the best arm: restarts go where the pick
    is still in doubt, so a config that got one lucky restart is measured again before it can
    win, and one whose bound falls below the leader's estimate gets no more."""
    if not standings:
        return None
    cv = restart_cv(standings)

    def upper(standing: Standing) -> float:
        if standing.rel_se is not None:
            return standing.pick + RACE_Z * standing.rel_se * abs(standing.pick)
        return standing.mean + RACE_Z * cv * abs(standing.mean) / math.sqrt(len(standing.values))

    leader = max(standings, key=lambda s: s.pick)
    others = [s for s in standings if s is not leader]
    if not others:
        return leader.config
    challenger = max(others, key=upper)
    if len(challenger.values) < len(leader.values):
        return challenger.config
    return leader.config


def capped_reason(objective: Objective, standings: Sequence[Standing]) -> str | None:
    """Why the race and the confirmations would learn nothing, in words; None when they can.

    The objective is one the offered load caps (a rate or a fraction of requests at
    open-loop cells: :func:`~orchestrator.answers.saturation.offered_cap`) and at least
    :data:`LEADERS` explored configs' own means sit at the cap: every config that keeps up
    scores the cap, so a restart more of any of them measures the cap again, and only a higher
    offered rate can tell them apart. The cap is the rate the schedules really offered
    (``Standing.cap``, as the answer's capped rule reads it), the nominal rate only where the
    points stored no schedule."""
    if objective.minimized:
        return None
    nominal = offered_cap(objective.metric, objective.cells, objective.weights)
    if nominal is None:
        return None
    at = [s for s in standings if at_cap(s.mean, nominal if s.cap is None else s.cap)]
    level = len(at)
    if level < LEADERS:
        return None
    caps = [nominal if s.cap is None else s.cap for s in at]
    rates = ", ".join(f"{cell.rate:g}" for cell in objective.cells if cell.rate is not None)
    shown = (
        f"{max(caps):.3g} req/s (nominal {rates})"
        if any(abs(cap - nominal) > 0.005 * nominal for cap in caps)
        else f"{nominal:.3g} req/s"
    )
    bound = (
        "capped at 1 (every request met the SLO)"
        if objective.metric in FRACTION_METRICS
        else f"capped by the offered rate {shown}"
    )
    return (
        f"the objective {objective.metric} is {bound}: {level} configs are at the cap and more "
        "restarts cannot tell them apart, so none is raced or confirmed; raise benchmark rate "
        "to tell configs apart"
    )


def _mean_cap(caps: Sequence[float | None]) -> float | None:
    """The restarts' caps averaged, as the answer averages its samples'; None unless each
    restart has one."""
    known = [cap for cap in caps if cap is not None]
    return sum(known) / len(known) if known and len(known) == len(caps) else None


def baseline_points(observed: Sequence[Observation]) -> tuple[Point, ...] | None:
    """The points of the first done baseline among ``observed`` (what constraints against
    the baseline read), or None before one is done."""
    for seen in observed:
        if seen.record.is_baseline and seen.state == "done":
            return seen.points
    return None


class SearchTrialSource:
    """A :class:`~orchestrator.trialsource.TrialSource` for ``random`` and ``adaptive``."""

    def __init__(
        self,
        store: Store,
        record: SweepRecord,
        sweep: Sweep,
        *,
        clock: Callable[[], float] = time.time,
    ) -> None:
        assert sweep.search.strategy in ("random", "adaptive")
        self.store, self.record, self.sweep = store, record, sweep
        self.strategy: Strategy = "adaptive" if sweep.search.strategy == "adaptive" else "random"
        self.clock = clock
        self.space: SearchSpace = search_space(sweep)
        self.objective = sweep_objective(sweep)
        self.full = trial_plan(sweep)
        self.screen = screen_plan(sweep, self.objective) if self.strategy == "adaptive" else None
        self.type_of = host_types(sweep)
        self._identities: dict[str, list[str]] = {}
        for host in sweep.hosts:
            if host.host_type not in self._identities:
                self._identities[host.host_type] = [
                    server_identity(sweep, host, config) for config in self.space.configs
                ]
        self._representative: dict[str, HostSpec] = {}
        for host in sweep.hosts:
            self._representative.setdefault(host.host_type, host)
        self.finish_at: float | None = None
        if sweep.schedule and sweep.schedule.finish_by:
            now = dt.datetime.fromtimestamp(clock())
            self.finish_at = local_deadline(sweep.schedule.finish_by, now).timestamp()
        self._pending: dict[str, list[SourcedTrial]] = {}
        self._stopped: dict[str, bool] = {}
        """Host types whose stop event is recorded, and whether it named a capped objective."""
        self._lock = asyncio.Lock()

    @classmethod
    async def open(
        cls,
        store: Store,
        record: SweepRecord,
        sweep: Sweep,
        *,
        clock: Callable[[], float] = time.time,
    ) -> SearchTrialSource:
        """A source over ``record``'s store; trials a crash left unfinished are offered first."""
        source = cls(store, record, sweep, clock=clock)
        for seen in await source.observe():
            if seen.state in _UNFINISHED:
                source._pending.setdefault(seen.record.host, []).append(
                    sourced(seen.record)
                )
        return source

    # --- the TrialSource protocol ------------------------------------------------------------

    @property
    def known(self) -> int | None:
        return None

    async def next_trial(self, host: str) -> SourcedTrial | None:
        async with self._lock:
            pending = self._pending.get(host)
            if pending:
                return pending.pop(0)
            return await self._next(host)

    async def tell(self, trial: SourcedTrial, outcome: object) -> None:
        del trial, outcome  # the store holds the outcome; every decision reads it from there

    def withdraw(self, host: str) -> list[SourcedTrial]:
        return self._pending.pop(host, [])

    async def extend(self, trial: TrialRecord, points: Sequence[Point]) -> TrialPlan | None:
        """After a screen: the full plan when the config is promising, else None."""
        plan = trial.plan
        if plan is None or plan.purpose != "screen" or is_full(plan, self.full):
            return None
        host_type = self.type_of[trial.host]
        observed = [o for o in await self.observe() if o.host_type == host_type]
        baseline = baseline_points(observed)
        score = score_trial(self.sweep, self.objective, points, baseline)
        if not score.feasible:
            return None
        assert score.value is not None
        rivals = []  # the type's other screens that measured their cells within the rules
        for other in observed:
            if other.record.id == trial.id or other.plan.purpose != "screen":
                continue
            rival = score_trial(self.sweep, self.objective, other.points, baseline)
            if rival.feasible and rival.value is not None:
                rivals.append(rival.value)
        ahead = sum(value > score.value for value in rivals)
        if ahead >= math.ceil(self.sweep.search.promote_fraction * (len(rivals) + 1)):
            return None
        return dataclasses.replace(self.full, purpose="screen", repeat=plan.repeat)

    # --- reading the store -------------------------------------------------------------------

    async def observe(self) -> list[Observation]:
        """Every stored trial of the sweep with its latest attempt, in proposal order."""
        results = await self.store.results(self.record.id)
        latest = {(o.key, o.host): o for o in results.latest()}
        out = []
        for record in await self.store.trials(self.record.id):
            if record.host not in self.type_of or is_schedule_plan(record.plan):
                continue  # a schedule is no config of the space: its trials are not observed
            host_type = self.type_of[record.host]
            if record.plan is None:
                record = dataclasses.replace(record, plan=self.full)
            outcome = latest.get((record.key, record.host))
            out.append(
                Observation(
                    record=record,
                    host_type=host_type,
                    identity=self._identity(host_type, record.config),
                    state=outcome.state if outcome else "queued",
                    cause=outcome.cause if outcome else None,
                    points=outcome.points if outcome else (),
                    started_at=outcome.started_at if outcome else None,
                    finished_at=outcome.finished_at if outcome else None,
                )
            )
        return out

    def _identity(self, host_type: str, config: dict[str, KnobValue]) -> str:
        return server_identity(self.sweep, self._representative[host_type], config)

    def _score(self, seen: Observation, baseline: Sequence[Point] | None) -> TrialScore:
        if seen.state != "done":
            return TrialScore(None)
        return score_trial(self.sweep, self.objective, seen.points, baseline)

    # --- deciding ----------------------------------------------------------------------------

    async def _next(self, host: str) -> SourcedTrial | None:
        host_type = self.type_of[host]
        everything = await self.observe()
        observed = [o for o in everything if o.host_type == host_type]
        cap = exploring_cap(self.sweep)
        events = await self.store.events(self.record.id, kinds=(RESTART_EVENT,))
        used = restarts_used(events, self.type_of).get(host_type, 0)
        left = math.inf if cap is None else cap - used
        capped = capped_reason(self.objective, self._standings(observed))
        if left <= 0:
            await self._stop_exploring(host_type, "max_restarts reached", observed, capped)
            return None
        if self.space.baseline and not any(
            o.record.is_baseline and o.record.host == host for o in observed
        ):
            return await self._store_trial(host, {}, self.full, baseline=True)
        confirms = [o for o in observed if o.plan.purpose == "confirm"]
        raced = [o for o in observed if o.explores and o.plan.repeat > 1]
        # A capped objective holds nothing back: the race and the confirmations would measure
        # the cap again, so their restarts go to configs not yet measured.
        held = self.reserve(host_type)
        confirm_left = 0 if capped else max(0, held.confirmations - len(confirms))
        race_left = 0 if capped else max(0, held.race - len(raced))
        reserve = confirm_left + race_left
        # Under a deadline the time held back covers the confirmations and a race of at most
        # half the configs screened so far: a short night still explores, and races what it
        # found with the time that is left.
        screened = sum(1 for o in observed if o.explores and o.plan.repeat == 1)
        timing = await self._time_budget(
            host_type, observed, confirm_left + min(race_left, screened // 2)
        )
        candidates = self._candidates(host_type, everything, observed)
        reason = self._no_exploring(candidates, left, reserve, timing)
        if reason is None:
            return await self._explore(host, host_type, observed, candidates)
        await self._stop_exploring(host_type, reason, observed, capped)
        if reserve > 0 and (timing is None or timing.may_confirm()):
            return await self._spend_reserve(
                host, host_type, observed, left=left, confirm_left=confirm_left,
                race_left=race_left, confirmed=len(confirms), timing=timing,
            )  # fmt: skip
        return None

    def _no_exploring(
        self, candidates: Sequence[int], left: float, reserve: int, timing: TimeBudget | None
    ) -> str | None:
        """Why a type explores no further (``left``: its restarts left; ``reserve``: those
        held for the race and the confirmations), or None while it may."""
        if not candidates:
            return "every config of the space was tried"
        if left - 1 < reserve:
            return "only the confirmation reserve of max_restarts is left"
        if timing is not None and not timing.may_explore(self._exploration_cost(timing)):
            return "only the confirmation reserve of the time to finish_by is left"
        return None

    async def _spend_reserve(
        self,
        host: str,
        host_type: str,
        observed: Sequence[Observation],
        *,
        left: float,
        confirm_left: int,
        race_left: int,
        confirmed: int,
        timing: TimeBudget | None,
    ) -> SourcedTrial | None:
        """Once a type explores no further, its reserve: a race trial of a leader while the
        race has restarts (and time) that no confirmation needs, else the leaders confirmed
        in turn (``confirmed``: the confirmations so far); None when neither is due."""
        # The race never takes a confirmation's restart (a retry may have spent one).
        if (
            race_left > 0
            and left > confirm_left
            and (
                timing is None
                or dataclasses.replace(timing, reserve_restarts=confirm_left).may_explore(
                    timing.times.full_s
                )
            )
        ):
            # The race: the pick must rest on more than one restart of each leader, or a
            # 2 % restart noise picks whichever got lucky among configs 1 % apart.
            config = race_pick(smoothed(self._standings(observed), self.space.axes))
            if config is not None:
                return await self._store_trial(
                    host, config, self._again(observed, config, host_type, "measure")
                )
        leaders = self._leaders(observed)
        if leaders and confirm_left > 0:
            config = leaders[confirmed % len(leaders)]
            return await self._store_trial(
                host, config, self._again(observed, config, host_type, "confirm")
            )
        return None

    def reserve(self, host_type: str) -> Reserve:
        """What ``host_type`` holds back from exploring for the race and the confirmations:
        as configured, unless the restarts after its baselines could not then screen its
        space (:func:`~orchestrator.search.budget.reserve`)."""
        hosts = sum(1 for kind in self.type_of.values() if kind == host_type)
        return reserve(
            self.sweep,
            baselines=hosts if self.space.baseline else 0,
            space=len(set(self._identities[host_type])),
        )

    def _measured(self, observed: Sequence[Observation], config: Config, host_type: str) -> int:
        """How many of ``observed`` measured ``config``'s server."""
        identity = self._identity(host_type, config)
        return sum(o.identity == identity for o in observed)

    def _again(
        self,
        observed: Sequence[Observation],
        config: Config,
        host_type: str,
        purpose: TrialPurpose,
    ) -> TrialPlan:
        """The full plan for one more restart of ``config``: a race (``measure``) or a
        confirmation, numbered after the config's earlier measurements."""
        repeat = 1 + self._measured(observed, config, host_type)
        return dataclasses.replace(self.full, purpose=purpose, repeat=repeat)

    def _candidates(
        self, host_type: str, everything: Sequence[Observation], observed: Sequence[Observation]
    ) -> list[int]:
        """Configs whose server the type has not paid for, and none SGLang refused as an
        impossible config on any type (a bad flag is a build's, so only its type's)."""
        paid = {o.identity for o in observed}
        refused = {
            self._identity(host_type, o.record.config)
            for o in everything
            if o.state == "failed" and o.cause in INVALID_CONFIG_CAUSES
        }
        identities = self._identities[host_type]
        out, chosen = [], paid | refused
        for index in range(len(self.space.configs)):
            identity = identities[index]
            if identity in chosen:
                continue
            chosen.add(identity)  # of configs that are one server, the first stands for all
            out.append(index)
        return out

    async def _explore(
        self, host: str, host_type: str, observed: Sequence[Observation], candidates: list[int]
    ) -> SourcedTrial:
        baseline = baseline_points(observed)
        explored = [o for o in observed if o.explores]
        seen = [o for o in explored if o.finished]
        results = []
        for o in seen:
            score = self._score(o, baseline)
            results.append(Seen(o.record.config, score.value if score.feasible else None))
        k = len(explored) + 1
        # The sweep's own configs first, in file order (Optuna's enqueue_trial: known
        # candidates warm-start the model), then what the strategy proposes from the grid.
        listed = [i for i in candidates if i < self.space.explicit]
        index = (
            listed[0]
            if listed
            else propose(
                self.strategy,
                self.space,
                candidates,
                results,
                seed=self.sweep.search.seed,
                host_type=host_type,
                k=k,
                n_startup=startup_trials(self.sweep.search.max_restarts or 0),
            )
        )
        config = dict(self.space.configs[index])
        plan = self.screen or self.full
        sourced = await self._store_trial(host, config, plan)
        await self.store.add_event(
            self.record.id,
            PROPOSED_EVENT,
            host=host,
            fields={
                "host_type": host_type,
                "k": k,
                "strategy": self.strategy if not listed else "configs",
                "config": config,
                "key": sourced.record.key,
                "seen": [o.record.key for o in seen],
                "candidates": len(candidates),
            },
        )
        return sourced

    def _standings(self, observed: Sequence[Observation]) -> list[Standing]:
        """Each explored config's values as the answer picks on them: every restart that
        screened, measured or raced it, pooled (a screen is a restart of the objective's own
        cells); confirmations never count (they must not pick what they report). Space order
        of first measurement."""
        baseline = baseline_points(observed)
        values: dict[str, list[float]] = {}
        caps: dict[str, list[float | None]] = {}
        configs: dict[str, Config] = {}
        for o in observed:
            if not o.explores or o.state != "done":
                continue
            score = self._score(o, baseline)
            if not score.feasible or score.value is None:
                continue
            values.setdefault(o.identity, []).append(score.value)
            caps.setdefault(o.identity, []).append(self._cap(o))
            configs.setdefault(o.identity, dict(o.record.config))
        return [
            Standing(configs[identity], tuple(values[identity]), cap=_mean_cap(caps[identity]))
            for identity in configs
        ]

    def _cap(self, observation: Observation) -> float | None:
        """The most the objective could reach at this restart's points, by the rate their
        schedules really offered (:func:`~orchestrator.answers.saturation.measured_cap`)."""
        by_cell = {p.cell: p for p in observation.points if isinstance(p, ThroughputPoint)}
        points = [by_cell.get(cell) for cell in self.objective.cells]
        present = [p for p in points if p is not None]
        if len(present) != len(points):
            return None
        return measured_cap(self.objective.metric, present)

    def _leaders(self, observed: Sequence[Observation], count: int = LEADERS) -> list[Config]:
        """The best ``count`` configs by the smoothed estimate the answer picks them on."""
        ranked = sorted(smoothed(self._standings(observed), self.space.axes), key=lambda s: -s.pick)
        return [standing.config for standing in ranked[:count]]

    def _exploration_cost(self, timing: TimeBudget) -> float:
        times = timing.times
        if self.screen is None:
            return times.full_s
        return times.screen_s + self.sweep.search.promote_fraction * (times.full_s - times.screen_s)

    async def _time_budget(
        self, host_type: str, observed: Sequence[Observation], reserve: int
    ) -> TimeBudget | None:
        if self.finish_at is None:
            return None
        timed = []
        for o in observed:
            if o.state != "done" or o.started_at is None or o.finished_at is None:
                continue
            starts = [p.provenance.started_at for p in o.points if p.provenance.started_at]
            timed.append(
                TimedTrial(
                    started_at=o.started_at,
                    finished_at=o.finished_at,
                    first_point_at=min(starts) if starts else None,
                    full=is_full(o.plan, self.full),
                )
            )
        times = learn_times(timed, assumed_times(self.sweep, self.screen))
        hosts = [
            h
            for h in await self.store.hosts(self.record.id)
            if h.type == host_type and not h.set_aside_reason
        ]
        return TimeBudget(self.finish_at - self.clock(), times, reserve, len(hosts))

    async def _stop_exploring(
        self,
        host_type: str,
        reason: str,
        observed: Sequence[Observation],
        capped: str | None = None,
    ) -> None:
        """Record once per type why exploring stopped, and again when a capped objective
        (``capped``, :func:`capped_reason`) is first why nothing is raced or confirmed."""
        if host_type in self._stopped and (capped is None or self._stopped[host_type]):
            return
        self._stopped[host_type] = capped is not None
        if capped is not None:
            reason = f"{reason}; {capped}"
        explored = {o.identity for o in observed if o.explores}
        await self.store.add_event(
            self.record.id,
            STOPPED_EVENT,
            fields={
                "host_type": host_type,
                "reason": reason,
                "explored": len(explored),
                "space": len(set(self._identities[host_type])),
            },
        )

    # --- storing -----------------------------------------------------------------------------

    async def _store_trial(
        self, host: str, config: Config, plan: TrialPlan, *, baseline: bool = False
    ) -> SourcedTrial:
        """Store the proposal as a trial now (its key unique per host: repeats get ``~rN``)."""
        key = repeat_key(trial_key(host, self.sweep.unit, config), plan.repeat)
        stored = await self.store.trials(self.record.id)
        ordinal = max((t.ordinal for t in stored), default=-1) + 1
        rows = await self.store.add_trials(
            self.record.id,
            [NewTrial(key, host, config, ordinal, is_baseline=baseline, plan=plan)],
        )
        (row,) = [r for r in rows if r.key == key and r.host == host]
        return sourced(row)


def search_trial_source(clock: Callable[[], float] = time.time) -> TrialSourceFactory:
    """The factory ``run_sweep`` calls for a random or adaptive sweep."""

    async def factory(store: Store, record: SweepRecord, sweep: Sweep) -> TrialSource:
        return await SearchTrialSource.open(store, record, sweep, clock=clock)

    return factory


def trial_source_for(sweep: Sweep, *, clock: Callable[[], float] = time.time) -> TrialSourceFactory:
    """Where ``sweep``'s trials come from: the plan for ``grid``, else the search; then, when
    the sweep asks for them, each host type's schedule trials (:mod:`.schedule`)."""
    factory = plan_trial_source if sweep.search.strategy == "grid" else search_trial_source(clock)
    return with_schedule_trials(factory) if sweep.schedule_restarts() else factory
