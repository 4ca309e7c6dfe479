"""Property: any knob value renders into a drop-in systemd accepts without a word, or is refused
with a clear error. Offline half: ``systemd-analyze verify`` (any stderr is a failure), plus our
own reading of the file back to the same argv. The real manager's half (the argv the process
really gets) is ``tests/realhost/test_fidelity_argv.py``."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from orchestrator.host.dropin import parse_environment_line, parse_exec_line
from orchestrator.types import KnobValue
from tests.hostile.knobvalues import (
    CONFIG,
    DUMPER,
    NONCHARACTERS,
    Refused,
    Rendered,
    render,
    systemd_analyze,
    write_units,
)


@pytest.fixture(scope="module")
def analyze() -> str:
    return systemd_analyze()


def _read_back(text: str) -> tuple[list[str], dict[str, str]]:
    """Our reader of the drop-in (the inverse the orchestrator uses on hosts)."""
    argv: list[str] = []
    env: dict[str, str] = {}
    for line in text.split("\n"):  # systemd splits on newlines only (not U+0085, U+2028, ...)
        if line.startswith("ExecStart=") and line != "ExecStart=":
            argv = parse_exec_line(line.removeprefix("ExecStart="))
        elif line.startswith("Environment="):
            env.update(parse_environment_line(line.removeprefix("Environment=")))
    return argv, env


@settings(
    max_examples=8,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(configs=st.lists(CONFIG, min_size=1, max_size=12))
def test_any_knob_value_verifies_or_is_refused(
    analyze: str, configs: list[Mapping[str, KnobValue]]
) -> None:
    with tempfile.TemporaryDirectory(prefix="knobs-") as scratch:
        directory = Path(scratch)
        dumper = directory / "dump.py"
        dumper.write_text(DUMPER)
        outcomes = [render(c, dumper, str(directory / f"{i}.json")) for i, c in enumerate(configs)]
        rendered = [o for o in outcomes if isinstance(o, Rendered)]
        for item in rendered:
            argv, env = _read_back(item.text)
            assert argv == list(item.invocation.argv)
            assert env == item.invocation.environment
        if not rendered:
            assert all(isinstance(o, Refused) for o in outcomes)
            return
        names = write_units(directory, rendered, "knob", oneshot=False)
        result = subprocess.run(
            [analyze, "verify", *(str(directory / n) for n in names)],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
        assert result.returncode == 0 and result.stderr == "", (result.stderr, rendered)


def test_refusals_name_the_reason() -> None:
    """The refusals the property relies on, spelled out once."""
    dumper = Path("/nonexistent/dump.py")
    for value in ("a\nb", "c\rd", "nul\0"):
        outcome = render({"algorithm": value}, dumper, "/tmp/x")
        assert isinstance(outcome, Refused)
        assert "newline, carriage return or NUL" in str(outcome.error)
    outcome = render({"topk": "\x1b[31m"}, dumper, "/tmp/x")
    assert isinstance(outcome, Refused)
    assert "control character in an environment value" in str(outcome.error)
    assert isinstance(render({"topk": "tab\there $x %n"}, dumper, "/tmp/x"), Rendered)


@pytest.mark.parametrize("value", NONCHARACTERS)
def test_noncharacters_are_refused(value: str) -> None:
    for knob in ("algorithm", "topk"):
        outcome = render({knob: f"x{value}"}, Path("/nonexistent/dump.py"), "/tmp/x")
        assert isinstance(outcome, Refused), (knob, value)


@pytest.mark.parametrize("separator", ["\x85", "\u2028", "\x0c"])
def test_the_orchestrators_reader_agrees_with_systemd_on_line_ends(separator: str) -> None:
    from orchestrator.host.systemd import UnitFile, merged_service

    outcome = render({"algorithm": f"a{separator}b"}, Path("/srv/dump.py"), "/tmp/x")
    assert isinstance(outcome, Rendered)
    fragment = UnitFile("/etc/systemd/system/s.service", "[Service]\nExecStart=/bin/true\n")
    dropin = UnitFile("/etc/systemd/system/s.service.d/90-orchestrator.conf", outcome.text)
    merged = merged_service([fragment, dropin])
    assert list(merged.exec_start) == list(outcome.invocation.argv)
