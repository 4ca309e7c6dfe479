"""The engine registry and the sweep file's ``engine:``: which serving engine a sweep drives."""

from __future__ import annotations

from pathlib import Path

import pytest

import orchestrator.sglang
from orchestrator import engines
from orchestrator.engines.base import Engine
from orchestrator.engines.sglang import ENGINE as SGLANG_ENGINE
from orchestrator.sweepfile import SweepFileError, load_sweep

BASE = """\
name: t
hosts:
  - {name: a, address: 127.0.0.1, base_url: "http://127.0.0.1:30000", type: gpu}
server:
  model: m
  knobs: {budget: {flag: --speculative-ddtree-budget}}
configs: [{budget: 8}]
"""


def test_the_default_engine_is_sglang_and_fills_the_seam() -> None:
    engine = engines.get(engines.DEFAULT_ENGINE)
    assert engine is engines.get("sglang") is SGLANG_ENGINE
    assert isinstance(engine, Engine) and engine.name == "sglang"
    assert "sglang" in engines.names()


def test_an_engine_is_always_named() -> None:
    """A caller that named no engine once got SGLang's parser and counters without a word: now
    it is a TypeError (and mypy's call-arg error), never a silent default."""
    with pytest.raises(TypeError):
        engines.get()  # type: ignore[call-arg]


def test_an_unknown_engine_names_the_known_ones() -> None:
    known = ", ".join(engines.names())
    assert "sglang" in known
    expected = f"unknown engine 'tgi': known engines are {known}$"
    with pytest.raises(engines.UnknownEngine, match=expected):
        engines.get("tgi")


def test_a_registered_engine_is_known_until_it_is_removed() -> None:
    class Other:
        name = "other"

    engines.register(Other())  # type: ignore[arg-type]
    try:
        assert "other" in engines.names()
        assert engines.get("other").name == "other"
    finally:
        engines.unregister("other")
    assert "other" not in engines.names()


def test_the_documented_log_parser_is_the_engines() -> None:
    line = "[2026-10-30 12:00:00] The server is fired up and ready to roll!"
    assert orchestrator.sglang.parse_log_line(line) == SGLANG_ENGINE.parse_log_line(line)
    assert orchestrator.sglang.parse_log_line(line) is not None


def test_a_sweep_names_its_engine_and_defaults_to_sglang(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE)
    assert load_sweep(path).engine == "sglang"
    path.write_text("engine: sglang\n" + BASE)
    assert load_sweep(path).engine == "sglang"


def test_an_unknown_engine_in_a_sweep_is_an_error_at_its_line(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(BASE + "engine: vllm-typo\n")
    with pytest.raises(SweepFileError) as caught:
        load_sweep(path)
    (problem,) = caught.value.problems
    text = str(problem)
    assert problem.line == 8 and "engine" in text
    known = ", ".join(engines.names())
    assert f"unknown engine 'vllm-typo': known engines are {known}" in text and "sglang" in known


def test_a_sweep_asks_only_for_an_api_its_engine_serves(tmp_path: Path) -> None:
    class ChatOnly:
        name = "chat-only"
        apis = frozenset({"chat"})

    engines.register(ChatOnly())  # type: ignore[arg-type]
    try:
        path = tmp_path / "s.yaml"
        path.write_text("engine: chat-only\n" + BASE + "benchmark: {api: generate}\n")
        with pytest.raises(SweepFileError) as caught:
            load_sweep(path)
        assert "api 'generate' is not one engine 'chat-only' serves (chat)" in str(caught.value)
        path.write_text("engine: chat-only\n" + BASE + "benchmark: {api: chat}\n")
        assert load_sweep(path).engine == "chat-only"
    finally:
        engines.unregister("chat-only")
