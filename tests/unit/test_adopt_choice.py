"""Which config adopt may install: only one answer's best, never a tie unless asked."""

from __future__ import annotations

import pytest

from orchestrator.answers import Answer, Contender, Estimate, ObjectiveView
from orchestrator.daemon.adopt import AdoptRefused, choose
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
