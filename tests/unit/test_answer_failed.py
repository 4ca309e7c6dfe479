"""A config the preflight refused (a flag or value the host's engine rejects) failed: the
answer counts and names it as failed, not as "not explored". It started no unit, so it is no
restart. The demo said "Explored 9 of 12 configs ...; 3 not explored" of a space whose two
refused configs the results listed as FAILED."""

from __future__ import annotations

import dataclasses

from orchestrator.answers import answer_sweep
from orchestrator.report.words import answer_words
from tests.unit.test_answers import B4, B8, B16, Bench, make_sweep, only


def _refused(bench: Bench) -> None:
    """budget=16 refused by the preflight on host a: no start, no points."""
    bench.run("a", B16, None, state="failed", cause="bad-flag")
    last = bench.trials[-1]
    bench.trials[-1] = dataclasses.replace(
        last,
        started_at=None,
        finished_at=None,
        evidence={"found_by": "preflight", "unknown_flags": ["--speculative-ddtree-budget"]},
    )


def test_a_config_the_preflight_refused_is_failed_not_unexplored() -> None:
    bench = Bench()
    _refused(bench)
    bench.run("a", {}, 80.0)
    bench.run("a", B4, 100.0)
    answer = only(answer_sweep(bench.results(), make_sweep()))
    assert [(f.label, f.cause) for f in answer.failed] == [("budget=16", "bad-flag")]
    assert answer.restarts_used == 2 and answer.explored == 2 and answer.space == 4
    words = "\n".join(answer_words(answer).details)
    assert "Explored 2 of 4 configs (2 restarts used); 1 failed; 1 not explored." in words
    assert "Failed, never measured: budget=16 (bad-flag)." in words


def test_a_refused_config_measured_on_another_host_is_not_failed() -> None:
    bench = Bench()
    _refused(bench)
    bench.run("b", {}, 80.0)
    bench.run("b", B16, 120.0)
    bench.run("b", B8, 110.0)
    answer = only(answer_sweep(bench.results(hosts=("a", "b")), make_sweep(hosts=("a", "b"))))
    assert answer.failed == ()
