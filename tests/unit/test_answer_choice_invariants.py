"""Issue 32's invariants (g) and (h), over the stored results issue 22's invariants generate
(:mod:`tests.unit.test_answer_invariants`: restarts of a few configs on two hosts, measuring,
screening and confirming, some failed or cancelled, under every ending), 2,000 examples:

Half the examples answer a sweep whose space is exactly the generated configs (so a night can
explore all of it and say "Deploy"), half the original sweep, whose fifth config is never
generated (so some of the space is always unexplored).

(g) ``adopt``'s choice, the headline's first config and the heatmap's mark are one config,
    :func:`~orchestrator.answers.model.named`; and the words beside it hold for the estimate
    column shown: "the highest estimate" (the lowest, minimized) only when its estimate tops
    every valid config's, a config said to have it does, and "Best found so far" names the
    top of the column;
(h) an answer whose exploration risk is above its threshold never headlines "Deploy", and
    ``adopt`` refuses it unless told ``--allow-unexplored``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.answers import Answer, answer_sweep
from orchestrator.answers.model import named, top_estimate
from orchestrator.daemon.adopt import AdoptRefused, choose
from orchestrator.report.space import explored_space
from orchestrator.report.words import answer_words, readable
from orchestrator.sweepfile import Sweep, parse_sweep
from tests.unit.test_answer_invariants import CONFIGS, SWEEPS, Case, Restart, _sweep_text, cases

EXAMPLES = 2000
WHOLE = {
    metric: parse_sweep(_sweep_text(metric).replace(", {budget: 32, topk: 8}]", "]"), "t.yaml")
    for metric in SWEEPS
}
"""The same sweeps with the space the generator draws from and nothing else."""


@dataclass(frozen=True)
class SpaceCase(Case):
    whole: bool = False

    @property
    def sweep(self) -> Sweep:
        return (WHOLE if self.whole else SWEEPS)[self.metric]


@st.composite
def space_cases(draw: st.DrawFn) -> SpaceCase:
    """A generated case, half of them over the whole-space sweep, and half of those with
    every config of the space measured once more; half of all of them ended as planned (so
    complete explorations, and answers that may say "Deploy", are common)."""
    case = draw(cases())
    if draw(st.booleans()):  # a night that ran to its end, the endings Deploy may follow
        restarts = tuple(r for r in case.restarts if r.state != "cancelled")
        case = replace(case, restarts=restarts, state="done", stopped=None, exploration=None)
    whole = draw(st.booleans())
    restarts = case.restarts
    if whole and draw(st.booleans()):
        cover = []
        for index in range(len(CONFIGS)):
            level = 100.0 * (1 + index)
            value = draw(st.floats(level * 0.9, level * 1.1, allow_nan=False))
            cover.append(
                Restart(index, draw(st.sampled_from(("a", "b"))), value, "measure", "done", ())
            )
        restarts = (*cover, *restarts)
    return SpaceCase(case.metric, restarts, case.state, case.stopped, case.exploration, whole)


def _first_named(headline: str, answer: Answer) -> str | None:
    """The label of the contender the headline names first (whole labels, longest first, so
    ``budget=8`` is never read inside ``budget=8 topk=4``)."""
    labels = sorted({c.label for c in answer.contenders}, key=len, reverse=True)
    found: list[tuple[int, str]] = []
    for label in labels:
        for match in re.finditer(rf"(?<![\w.=]){re.escape(label)}(?![\w.=])", headline):
            found.append((match.start(), label))
    return min(found)[1] if found else None


def _refusal(answer: Answer, **allow: bool) -> str | None:
    try:
        choose([answer], answer.host_type, **allow)  # type: ignore[arg-type]
    except AdoptRefused as refused:
        return str(refused)
    return None


def _check(case: SpaceCase) -> None:
    (raw,) = answer_sweep(case.results(), case.sweep)
    answer = readable(raw)
    chosen = named(answer)
    said = answer_words(answer)
    exploration = answer.exploration
    # (g) one config
    everything_allowed = {"allow_tie": True, "allow_unexplored": True}
    if chosen is None:
        assert _refusal(answer, **everything_allowed) is not None
    else:
        assert choose([answer], answer.host_type, **everything_allowed).best == chosen
        assert _first_named(said.headline, answer) == chosen.label
        grid = explored_space(answer)
        if grid is not None:
            marked = [cell.contender for row in grid.cells for cell in row if cell.is_best]
            assert marked == ([chosen] if chosen.config else [])
    # (g) the words hold for the estimate column
    top = top_estimate(answer)
    extreme = "lowest" if answer.objective.minimized else "highest"
    for text in (
        _refusal(answer, allow_tie=False, allow_unexplored=True),
        said.headline,
        *said.details,
    ):
        if text is None or chosen is None or top is None:
            continue
        if f"({'the ' + extreme} estimate)" in text:
            assert chosen.estimate.value == top.estimate.value
        for claimed in re.findall(rf"; (.+?) has the {extreme} estimate", text):
            assert claimed == top.label
    if said.headline.startswith("Best found so far"):
        assert chosen is not None and top is not None
        assert chosen.estimate.value == top.estimate.value
    # (h) no Deploy on an unexplored space
    if exploration is not None and exploration.risky:
        assert "Deploy" not in said.headline
        if chosen is not None and answer.verdict == "better":
            refused = _refusal(answer, allow_tie=True, allow_unexplored=False)
            assert refused is not None and "--allow-unexplored" in refused
    if said.headline.startswith("Deploy"):
        assert exploration is not None and not exploration.risky


@settings(
    max_examples=EXAMPLES,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
    database=None,
)
@given(space_cases())
def test_one_config_is_named_and_no_deploy_on_an_unexplored_space(case: SpaceCase) -> None:
    _check(case)


def test_the_examples_reach_risky_and_safe_answers_and_ties_led_below_the_top() -> None:
    """The generator is not vacuous for these properties: it reaches answers above and below
    the risk threshold, by the surface and by the share, a Deploy and a "Best found so far",
    and a tie whose first by rank does not top the estimates."""
    seen: set[str] = set()

    @settings(max_examples=400, deadline=None, database=None, derandomize=True)
    @given(space_cases())
    def collect(case: SpaceCase) -> None:
        (answer,) = answer_sweep(case.results(), case.sweep)
        exploration = answer.exploration
        if exploration is not None:
            seen.add("risky" if exploration.risky else "safe")
            seen.add(exploration.method)
        headline = answer_words(answer).headline
        seen.add(headline.split(" ")[0])
        top = top_estimate(answer)
        best = answer.best
        if answer.verdict == "tie" and best is not None and top is not None:
            seen.add("tie-led-below-top" if top.estimate.value != best.estimate.value else "tie")

    collect()
    wanted = {"risky", "safe", "surface", "exchangeable", "complete", "Deploy", "Best"}
    wanted.add("tie-led-below-top")
    assert wanted <= seen, seen
