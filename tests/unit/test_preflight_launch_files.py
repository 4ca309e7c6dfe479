"""The preflight's reading of a config's launch files (issue 33, item 4): each config's file,
the bytes the lifecycle would write, must parse as its flag's format and pass the engine's own
check of its settings (``LaunchFileRules``), or the config is refused as ``invalid-config``
before any restart, the flag and the file named in the evidence."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from types import MappingProxyType
from typing import Any

import pytest

from orchestrator.host.dropin import TrialInvocation, apply_knobs
from orchestrator.host.launchfile import LaunchFile, LaunchFileError, LaunchFormat, content_problem
from orchestrator.host.systemd import UnitFile, merged_service
from orchestrator.invocation import ServerRecipe
from orchestrator.preflight import _trial_invocations, launch_file_problem, launch_file_refusals
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


def test_a_file_that_cannot_be_written_is_a_refusal_not_a_crash() -> None:
    """Two knobs whose keys nest one below the other's value (``a`` and ``a.b``): the file has
    no way to hold both, so the config is refused before any restart, naming the key."""
    knobs: dict[str, Any] = {"outer": Knob("spec"), "inner": Knob("spec.depth")}
    formats: dict[str, LaunchFormat] = {SPEC_FLAG: "json"}
    with pytest.raises(LaunchFileError) as caught:
        apply_knobs(BASE, {}, knobs, {"outer": 1, "inner": 2}, file_flags=formats, dropin=DROPIN)
    assert "launch-file key 'spec.depth' is below a value" in str(caught.value)
    recipe = ServerRecipe(knobs, file_flags=formats, dropin=DROPIN)
    unit = UnitFile("/etc/systemd/system/toy.service", "[Service]\nExecStart=" + " ".join(BASE))
    trials = [("k", {"outer": 1, "inner": 2}), ("ok", {"outer": 1})]
    built = _trial_invocations(merged_service([unit]), trials, recipe)
    assert isinstance(built["k"], LaunchFileError) and isinstance(built["ok"], TrialInvocation)
