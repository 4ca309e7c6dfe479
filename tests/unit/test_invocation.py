"""The one invocation builder: which base a trial's argv is built on, and where the engine's
metrics flags are added (plan, preflight, lifecycle and search all ask it)."""

from __future__ import annotations

from orchestrator.invocation import PLACEHOLDER, ServerRecipe, UnitBase
from orchestrator.sweepfile import KnobMapping

KNOBS = {"steps": KnobMapping(flag="--steps"), "topk": KnobMapping(env="TOPK")}
EXEC = ("/py", "-m", "srv", "--steps", "9")


def _recipe(exec_start: tuple[str, ...] = ()) -> ServerRecipe:
    return ServerRecipe(
        KNOBS, ("--x", "1"), {"E": "v"}, metrics_flags=("--metrics",), exec_start=exec_start
    )


def test_the_unit_as_found_is_the_base_and_gets_the_metrics_flags() -> None:
    base = UnitBase(("/bin/s", "--steps", "2", "--metrics"), {"TOPK": "3", "K": "k"})
    invocation = _recipe(EXEC).invocation({"steps": 4}, base)
    assert invocation.argv == ("/bin/s", "--metrics", "--x", "1", "--steps", "4")
    assert invocation.environment == {"K": "k", "E": "v"}
    assert invocation.unset_environment == ("TOPK",)
    assert invocation.added_flags == ()


def test_the_sweeps_exec_start_stands_for_the_unit_when_none_is_given() -> None:
    invocation = _recipe(EXEC).invocation({"topk": 2})
    assert invocation.argv == ("/py", "-m", "srv", "--x", "1", "--metrics")
    assert invocation.environment == {"E": "v", "TOPK": "2"}
    assert invocation.added_flags == ("--metrics",)


def test_the_placeholder_gets_no_metrics_flags_and_the_search_asks_for_none() -> None:
    placeholder = _recipe().invocation({"steps": 1})
    assert placeholder.argv == (PLACEHOLDER, "--x", "1", "--steps", "1")
    assert placeholder.added_flags == ()
    searched = _recipe(EXEC).invocation({}, add_metrics_flags=False)
    assert searched.argv == ("/py", "-m", "srv", "--x", "1")
