"""vLLM writes its ``SpecDecoding metrics`` line on a timer (``VLLM_LOG_STATS_INTERVAL``, 10 s by
default), so a point shorter than that may fall between two lines. Such a point was flagged
``L`` ("no decode line with accept len") while its row showed an exact accept length from the
counters. A missing line is flagged only when the point outlasted the engine's log period;
engines whose lines follow the decoding (SGLang, llama.cpp) still flag every missing one."""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any, cast

import pytest

from orchestrator.bench.acceptlen import combine, from_journal
from orchestrator.engines.base import Engine
from orchestrator.engines.llamacpp.engine import LLAMACPP
from orchestrator.engines.sglang.engine import SGLANG
from orchestrator.engines.vllm.engine import VLLM
from orchestrator.running import RunningServer
from orchestrator.store.results import AcceptEstimate


def _running(engine: Engine, environment: dict[str, str] | None = None) -> RunningServer:
    session = SimpleNamespace(engine=engine)
    server = SimpleNamespace(provenance=SimpleNamespace(environment=environment or {}))
    return RunningServer(cast(Any, session), cast(Any, server), cast(Any, None), cast(Any, None))


def _flags(running: RunningServer, wall_s: float | None) -> tuple[str, ...]:
    """A point whose journal window was read and held no line, with counters that saw drafts."""
    accept = combine(
        from_journal([]),
        AcceptEstimate(None, 0, "no verify steps"),
        AcceptEstimate(2.4, 300),
        lines_expected=running.decode_lines_expected(wall_s),
    )
    return accept.flags


def test_vllms_period_is_its_stats_interval_from_the_servers_environment() -> None:
    assert VLLM.decode_log_period_s({}) == 10.0
    assert VLLM.decode_log_period_s({"VLLM_LOG_STATS_INTERVAL": "2.5"}) == 2.5
    for unusable in ("", "soon", "0", "-1", "nan"):
        assert VLLM.decode_log_period_s({"VLLM_LOG_STATS_INTERVAL": unusable}) == 10.0
    assert SGLANG.decode_log_period_s({}) is None
    assert LLAMACPP.decode_log_period_s({}) is None


def test_a_vllm_point_shorter_than_the_stats_interval_is_not_flagged_for_a_missing_line() -> None:
    assert _flags(_running(VLLM), wall_s=4.0) == ()
    assert _flags(_running(VLLM, {"VLLM_LOG_STATS_INTERVAL": "2"}), wall_s=4.0) == (
        "no_decode_lines",
    )


def test_a_vllm_point_that_outlasted_the_interval_without_a_line_is_flagged() -> None:
    assert _flags(_running(VLLM), wall_s=12.0) == ("no_decode_lines",)


@pytest.mark.parametrize("engine", [SGLANG, LLAMACPP], ids=["sglang", "llamacpp"])
def test_an_engine_whose_lines_follow_the_decoding_flags_every_missing_line(engine: Engine) -> None:
    assert _flags(_running(engine), wall_s=0.5) == ("no_decode_lines",)
    assert _flags(_running(engine), wall_s=None) == ("no_decode_lines",)
