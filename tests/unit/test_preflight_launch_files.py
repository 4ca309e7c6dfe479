"""The preflight's reading of a config's launch files (issue 33, item 4): each config's file,
the bytes the lifecycle would write, must parse as its flag's format and pass the engine's own
check of its settings (``LaunchFileRules``), or the config is refused as ``invalid-config``
before any restart, the flag and the file named in the evidence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

from orchestrator.host.dropin import TrialInvocation, apply_knobs
from orchestrator.host.launchfile import LaunchFile, LaunchFormat, content_problem
from orchestrator.preflight import launch_file_problem, launch_file_refusals
from tests.toyengine.engine import SPEC_FLAG, ToyEngine

DROPIN = "/etc/systemd/system/toy.service.d/90-orchestrator.conf"
PATH = "/etc/systemd/system/toy.service.d/90-orchestrator.toy-spec-config.json"
BASE = ["/usr/bin/python3", "-m", "tests.toyengine.server", "--toy-port", "8000"]


class Knob:
    def __init__(self, json_key: str) -> None:
        self.flag, self.json_key, self.env = SPEC_FLAG, json_key, None


KNOBS: dict[str, Any] = {"depth": Knob("draft_depth"), "kernel": Knob("kernel")}


def _invocation(config: dict[str, Any]) -> TrialInvocation:
    formats: dict[str, LaunchFormat] = {SPEC_FLAG: "json"}
    return apply_knobs(BASE, {}, KNOBS, config, file_flags=formats, dropin=DROPIN)


def test_a_file_the_engine_would_refuse_refuses_its_config_naming_flag_and_file() -> None:
    engine = ToyEngine()
    invocations = {
        "fused": _invocation({"depth": 2, "kernel": "fused"}),
        "deep": _invocation({"depth": 12}),
        "turbo": _invocation({"depth": 1, "kernel": "turbo"}),
        "baseline": _invocation({}),  # no file at all
    }
    refused = launch_file_refusals(invocations, engine)
    assert sorted(refused) == ["deep", "turbo"]
    deep = refused["deep"]
    assert (deep.ok, deep.cause, deep.parser) == (False, "invalid-config", "toy")
    assert deep.error == (
        f"launch file {PATH} ({SPEC_FLAG}): draft_depth 12 is not a whole number in 0..8"
    )
    assert "kernel 'turbo' is not one of plain, fused" in (refused["turbo"].error or "")
    assert engine.calls["check_launch_file"] == 3  # every file, once


class PlainEngine:
    """An engine that names a file flag and has no check of its own."""

    name = "plain"
    file_flags: Mapping[str, LaunchFormat] = MappingProxyType({SPEC_FLAG: "yaml"})


def test_a_file_that_does_not_parse_as_its_format_is_refused_without_the_engine() -> None:
    broken = replace(
        _invocation({"depth": 2}), launch_files=(LaunchFile(PATH, b"draft_depth: [2\n"),)
    )
    problem = launch_file_problem(broken, PlainEngine())  # type: ignore[arg-type]
    assert problem is not None and problem.startswith(f"launch file {PATH} ({SPEC_FLAG}): not YAML")
    fine = replace(broken, launch_files=(LaunchFile(PATH, b"draft_depth: 2\n"),))
    assert launch_file_problem(fine, PlainEngine()) is None  # type: ignore[arg-type]


def test_content_problem_reads_each_format_as_a_mapping_of_settings() -> None:
    assert content_problem(b'{"a": 1}', "json") is None
    assert content_problem(b"a: 1\n", "yaml") is None
    assert (content_problem(b'{"a": 1', "json") or "").startswith("not JSON")
    assert content_problem(b"[1, 2]", "json") == "not a JSON mapping of settings: list"
    assert content_problem(b"- a\n", "yaml") == "not a YAML mapping of settings: list"
    assert (content_problem(b"\xff", "yaml") or "").startswith("not YAML")
