"""Which config adopt may install: the one the answer names (the headline's first, the
heatmap's mark), never a tie or an answer that left too much of the space unexplored unless
asked, in words true of the estimate column."""

from __future__ import annotations

from dataclasses import replace

import pytest

from orchestrator.answers import Answer, Contender, Estimate, Margin, ObjectiveView
from orchestrator.answers.model import Exploration, named
from orchestrator.daemon.adopt import AdoptRefused, choose
from orchestrator.report.space import explored_space
from orchestrator.report.words import answer_words
from orchestrator.types import MatrixCell

OBJECTIVE = ObjectiveView("output_tok_s", (MatrixCell(4096, 32),), minimized=False)


def contender(budget: int, value: float) -> Contender:
    estimate = Estimate(value, (value * 0.98, value * 1.02), "restarts", restarts=3)
    return Contender({"budget": budget}, f"budget={budget}", estimate)


def answer(host_type: str, verdict: str, *contenders: Contender) -> Answer:
    best = contenders[0] if contenders else None
    return Answer(
        host_type,
        OBJECTIVE,
        verdict,  # type: ignore[arg-type]
        best,
        runner_up=contenders[1] if len(contenders) > 1 else None,
        tied=contenders[1:] if verdict == "tie" else (),
    )


def test_a_clear_winner_is_chosen() -> None:
    answers = [answer("b300", "better", contender(16, 900.0), contender(8, 800.0))]
    assert choose(answers, "b300", allow_tie=False).best == contender(16, 900.0)


def test_a_tie_needs_allow_tie_and_names_the_tied() -> None:
    answers = [answer("b300", "tie", contender(16, 900.0), contender(8, 899.0))]
    with pytest.raises(AdoptRefused, match="cannot tell budget=16, budget=8 apart"):
        choose(answers, "b300", allow_tie=False)
    assert choose(answers, "b300", allow_tie=True).best == contender(16, 900.0)


def test_nothing_valid_is_refused() -> None:
    with pytest.raises(AdoptRefused, match="no config is valid on b300"):
        choose([answer("b300", "no-valid-config")], "b300", allow_tie=True)


def test_an_unknown_type_names_the_known_ones() -> None:
    answers = [answer("b300", "better", contender(16, 900.0))]
    with pytest.raises(AdoptRefused, match=r"no answer for host type 'rtx' \(its types: b300\)"):
        choose(answers, "rtx", allow_tie=False)


def test_per_cell_answers_have_no_one_winner() -> None:
    answers = [
        answer("b300", "better", contender(16, 900.0)),
        answer("b300", "better", contender(8, 700.0)),
    ]
    with pytest.raises(AdoptRefused, match="give the sweep an objective"):
        choose(answers, "b300", allow_tie=False)


def _tester_tie() -> Answer:
    """Issue 32, item 3: a tie whose first by rank (budget=4 topk=1, picked on its screens)
    shows 2,100 against budget=8 topk=4's 2,158 in the contenders table."""
    first = Contender(
        {"budget": 4, "topk": 1},
        "budget=4 topk=1",
        Estimate(2100.0, (1990.0, 2216.0), "restarts", restarts=2),
        ranked_on=2240.0,
    )
    higher = Contender(
        {"budget": 8, "topk": 4},
        "budget=8 topk=4",
        Estimate(2158.0, (2040.0, 2283.0), "restarts", restarts=2),
        ranked_on=2190.0,
        vs_best=Margin(-0.027, (-0.08, 0.03)),
    )
    return Answer(
        "b300",
        OBJECTIVE,
        "tie",
        first,
        runner_up=higher,
        tied=(higher,),
        contenders=(first, higher),
    )


def test_allow_tie_installs_what_the_headline_names_first_and_says_so_truly() -> None:
    answer = _tester_tie()
    with pytest.raises(AdoptRefused) as refused:
        choose([answer], "b300", allow_tie=False)
    message = str(refused.value)
    # It said "pass --allow-tie to adopt budget=4 topk=1 (the highest estimate)": false of
    # the estimate column, where budget=8 topk=4 shows 2,158 against 2,100.
    assert "(the highest estimate)" not in message
    assert "first by rank" in message
    assert "budget=8 topk=4 has the highest estimate, 2,158 against 2,100" in message
    chosen = choose([answer], "b300", allow_tie=True).best
    assert chosen is not None and chosen == named(answer)
    headline = answer_words(answer).headline
    assert headline.index("budget=4 topk=1") < headline.index("budget=8 topk=4")
    grid = explored_space(answer)
    assert grid is not None
    marked = [cell.contender for row in grid.cells for cell in row if cell.is_best]
    assert marked == [chosen]


def test_a_tie_whose_first_tops_the_estimates_says_the_highest_estimate() -> None:
    answers = [answer("b300", "tie", contender(16, 900.0), contender(8, 899.0))]
    answers = [replace(answers[0], contenders=(contender(16, 900.0), contender(8, 899.0)))]
    with pytest.raises(AdoptRefused, match=r"adopt budget=16 \(the highest estimate\)"):
        choose(answers, "b300", allow_tie=False)


def _unexplored(risk: float) -> Answer:
    best, other = contender(4, 1520.0), contender(8, 1400.0)
    return replace(
        answer("b300", "better", best, other),
        contenders=(best, other),
        exploration=Exploration(
            explored=3,
            space=7,
            failed=0,
            risk=risk,
            method="exchangeable",
            next=({"budget": 16},),
        ),
    )


def test_an_answer_that_left_too_much_unexplored_is_refused_unless_allowed() -> None:
    risky = _unexplored(0.57)
    with pytest.raises(AdoptRefused) as refused:
        choose([risky], "b300", allow_tie=False)
    message = str(refused.value)
    assert "explored 3 of 7 configs" in message and "57% chance" in message
    assert "budget=16 next" in message and "--allow-unexplored" in message
    assert choose([risky], "b300", allow_tie=False, allow_unexplored=True) is risky
    safe = _unexplored(0.04)
    assert choose([safe], "b300", allow_tie=False) is safe
