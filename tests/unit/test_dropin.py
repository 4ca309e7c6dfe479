"""The drop-in renderer and systemd's unit-file word splitting, and that systemd accepts ours."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from orchestrator.host.dropin import (
    DROPIN_NAME,
    DropinHeader,
    ExecLineError,
    ExtraFlagConflict,
    FlagArg,
    TrialInvocation,
    UnknownKnobError,
    UnsafeValueError,
    apply_knobs,
    dropin_path,
    flag_args,
    is_valid_service_name,
    merge_extra_flags,
    parse_dropin_header,
    parse_environment_line,
    parse_exec_line,
    quote_environment,
    quote_exec_arg,
    render_dropin,
    render_dropin_delta,
    split_unit_words,
)
from orchestrator.sweepfile import KnobMapping
from tests.hostile import knobvalues

# Noncharacters (U+FDD0.., U+xFFFE/F: unassigned, category Cn) are refused by design (systemd
# drops an assignment that holds one), so the round trip is over assigned characters.
LINE_SAFE = st.text(
    alphabet=st.characters(codec="utf-8", exclude_characters="\n\r\0", exclude_categories=("Cn",))
)
ENV_SAFE = st.text(
    alphabet=st.characters(
        codec="utf-8",
        exclude_characters="".join(chr(c) for c in range(0x20) if c != 0x09) + "\x7f",
    )
)
ENV_NAME = st.from_regex(r"\A[A-Za-z_][A-Za-z0-9_]{0,20}\Z")

KNOBS = {
    "algorithm": KnobMapping(flag="--speculative-algorithm"),
    "budget": KnobMapping(flag="--speculative-ddtree-budget"),
    "topk": KnobMapping(env="SGLANG_DDTREE_MAX_TOPK"),
    "graphs": KnobMapping(flag="--disable-cuda-graph"),
}
BASE = (
    "/opt/sglang/bin/python",
    "-m",
    "sglang.launch_server",
    "--speculative-algorithm=DFLASH",
    "--model-path",
    "/m",
    "--disable-cuda-graph",
    "--speculative-ddtree-budget",
    "7",
    "--port",
    "30000",
)


# --------------------------------------------------------------------------- quoting


def test_quote_exec_arg_escapes_exactly_what_systemd_interprets() -> None:
    assert quote_exec_arg("plain") == '"plain"'
    assert quote_exec_arg("") == '""'
    assert quote_exec_arg('a b"c') == '"a b\\"c"'
    assert quote_exec_arg("50%") == '"50%%"'
    assert quote_exec_arg("$HOME") == '"$$HOME"'
    assert quote_exec_arg("C:\\x") == '"C:\\\\x"'


@pytest.mark.parametrize("bad", ["a\nb", "a\rb", "a\0b"])
def test_quote_refuses_line_breaks_and_nul(bad: str) -> None:
    with pytest.raises(UnsafeValueError):
        quote_exec_arg(bad)
    with pytest.raises(UnsafeValueError):
        quote_environment("X", bad)


def test_quote_environment_keeps_dollar_and_refuses_bad_names() -> None:
    assert quote_environment("A", "$x 5%") == '"A=$x 5%%"'
    with pytest.raises(UnsafeValueError):
        quote_environment("A B", "1")
    with pytest.raises(UnsafeValueError):
        quote_environment("A", "bell\x07")


@settings(max_examples=300, deadline=None)
@given(st.lists(LINE_SAFE, min_size=1, max_size=6))
def test_exec_quoting_round_trips_through_systemd_unquoting(argv: list[str]) -> None:
    line = " ".join(quote_exec_arg(arg) for arg in argv)
    assert parse_exec_line(line) == argv


@settings(max_examples=200, deadline=None)
@given(ENV_NAME, ENV_SAFE)
def test_environment_quoting_round_trips(name: str, value: str) -> None:
    assert parse_environment_line(quote_environment(name, value)) == {name: value}


# --------------------------------------------------------------------------- systemd word splitting


@pytest.mark.parametrize(
    ("line", "argv"),
    [
        ("/usr/bin/python -m  sglang.launch_server\t--port 30000", None),
        ("'a b' \"c d\" e", ["a b", "c d", "e"]),
        ('a"b c"d', ["ab cd"]),
        ('""', [""]),
        ('"x" ""', ["x", ""]),
        ("'single \"inner\"'", ['single "inner"']),
        ('"tab\\there"', ["tab\there"]),
        ("\\x41\\101\\u00e9\\s!", ["AAé !"]),
        ('"\\U0001F600"', ["\U0001f600"]),
        ("100%% $$HOME a$b %", ["100%", "$HOME", "a$b", "%"]),
        ("echo \\; x", ["echo", ";", "x"]),
        ('echo ";" x', ["echo", ";", "x"]),
        ("  leading   trailing  ", ["leading", "trailing"]),
        ("", []),
    ],
)
def test_parse_exec_line_follows_systemd(line: str, argv: list[str] | None) -> None:
    expected = argv if argv is not None else line.split()
    assert parse_exec_line(line) == expected


@pytest.mark.parametrize(
    ("line", "reason"),
    [
        ('"unterminated', "unterminated quote"),
        ("trailing\\", "trailing backslash"),
        ("a \\q", "unknown escape"),
        ("a \\000", "NUL"),
        ("a \\xZZ", "bad \\x escape"),
        ("a ; b", "command separator"),
        ("serve %i", "specifier %i"),
        ("serve $PORT", "environment expansion"),
        ("serve --port=${PORT}", "environment expansion"),
    ],
)
def test_parse_exec_line_refuses_what_it_cannot_read_literally(line: str, reason: str) -> None:
    with pytest.raises(ExecLineError, match=reason.replace("\\", "\\\\").replace("$", "\\$")):
        parse_exec_line(line)


def test_split_unit_words_without_exec_rules_keeps_semicolons() -> None:
    assert split_unit_words("a ; b") == ["a", ";", "b"]


def test_parse_environment_line_reads_several_assignments() -> None:
    assert parse_environment_line("A=1 \"B=two words\" C='x y'") == {
        "A": "1",
        "B": "two words",
        "C": "x y",
    }
    with pytest.raises(ExecLineError):
        parse_environment_line("not-an-assignment")


# --------------------------------------------------------------------------- apply_knobs


def test_apply_knobs_strips_every_form_of_a_knob_flag_then_adds_the_trial() -> None:
    invocation = apply_knobs(
        BASE,
        {"SGLANG_DDTREE_MAX_TOPK": "9", "KEEP": "1"},
        KNOBS,
        {"algorithm": "DDTREE", "budget": 8, "topk": 4, "graphs": True},
        ["--enable-metrics"],
        {"SGLANG_LOG_MS": "1"},
    )
    assert invocation.argv == (
        "/opt/sglang/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m",
        "--port",
        "30000",
        "--enable-metrics",
        "--speculative-algorithm",
        "DDTREE",
        "--speculative-ddtree-budget",
        "8",
        "--disable-cuda-graph",
    )
    assert invocation.environment == {
        "KEEP": "1",
        "SGLANG_LOG_MS": "1",
        "SGLANG_DDTREE_MAX_TOPK": "4",
    }
    assert invocation.unset_environment == ()


def test_baseline_removes_every_knob() -> None:
    invocation = apply_knobs(BASE, {"SGLANG_DDTREE_MAX_TOPK": "9"}, KNOBS, {})
    assert invocation.argv == (
        "/opt/sglang/bin/python",
        "-m",
        "sglang.launch_server",
        "--model-path",
        "/m",
        "--port",
        "30000",
    )
    assert invocation.environment == {}
    assert invocation.unset_environment == ("SGLANG_DDTREE_MAX_TOPK",)


def test_false_and_none_mean_absent_and_values_format_plainly() -> None:
    invocation = apply_knobs(
        ["/bin/x"], {}, KNOBS, {"graphs": False, "algorithm": None, "budget": 2.5, "topk": True}
    )
    assert invocation.argv == ("/bin/x", "--speculative-ddtree-budget", "2.5")
    assert invocation.environment == {"SGLANG_DDTREE_MAX_TOPK": "1"}


def test_a_bare_knob_flag_before_another_flag_takes_no_value() -> None:
    argv = ["/bin/x", "--disable-cuda-graph", "--port", "1", "--disable-cuda-graph"]
    assert apply_knobs(argv, {}, KNOBS, {}).argv == ("/bin/x", "--port", "1")


def test_unknown_knob_is_refused() -> None:
    with pytest.raises(UnknownKnobError) as caught:
        apply_knobs(["/bin/x"], {}, KNOBS, {"windw": 1})
    assert caught.value.knob == "windw"


def test_an_extra_flag_the_base_has_with_the_same_value_is_left_out_and_said() -> None:
    """The demo's unit runs --enable-metrics and its sweep added it again: now given once."""
    base = [*BASE, "--enable-metrics", "--decode-log-interval", "40"]
    invocation = apply_knobs(
        base, {}, KNOBS, {"budget": 8}, ["--enable-metrics", "--decode-log-interval=40", "--x"]
    )
    assert invocation.argv.count("--enable-metrics") == 1
    assert invocation.argv[-3:] == ("--x", "--speculative-ddtree-budget", "8")
    assert invocation.repeated_extra_flags == ("--enable-metrics", "--decode-log-interval=40")
    text = render_dropin("demo", "h1.k.0123456789ab", invocation)
    assert (
        "# extra_flags already on the unit's command line, not repeated: "
        "--enable-metrics --decode-log-interval=40\n[Service]\n"
    ) in text


def test_an_extra_flag_the_base_has_with_another_value_is_refused() -> None:
    base = [*BASE, "--decode-log-interval", "40"]
    with pytest.raises(ExtraFlagConflict) as caught:
        apply_knobs(base, {}, KNOBS, {}, ["--enable-metrics", "--decode-log-interval", "10"])
    assert (caught.value.flag, caught.value.base_value, caught.value.extra_value) == (
        "--decode-log-interval",
        "40",
        "10",
    )
    assert caught.value.index == 1
    assert "extra_flags[1]" in str(caught.value)


def test_a_knob_flag_in_the_base_never_counts_as_a_repeat() -> None:
    """Knob flags leave the base first, so only the knob's own value is on the line."""
    base = [*BASE, "--speculative-ddtree-budget", "4"]
    invocation = apply_knobs(base, {}, KNOBS, {"budget": 8})
    assert invocation.argv.count("--speculative-ddtree-budget") == 1
    assert invocation.repeated_extra_flags == ()


def test_flag_args_reads_each_spelling() -> None:
    assert flag_args(["-m", "srv", "--a", "1", "--b=2", "--c", "--d"]) == [
        "-m",
        "srv",
        FlagArg("--a", "1", ("--a", "1"), 2),
        FlagArg("--b", "2", ("--b=2",), 4),
        FlagArg("--c", None, ("--c",), 5),
        FlagArg("--d", None, ("--d",), 6),
    ]
    merged = merge_extra_flags(["/bin/x", "--a", "1"], ["--a=1", "--a", "2", "--e", "--e"])
    assert merged.added == ("--e",)
    assert [arg.tokens for arg in merged.repeated] == [("--a=1",), ("--e",)]
    assert [(c.flag, c.base_value, c.extra_value, c.index) for c in merged.conflicts] == [
        ("--a", "1", "2", 1)
    ]


# --------------------------------------------------------------------------- rendering


def test_render_dropin_exact_text() -> None:
    invocation = TrialInvocation(
        argv=("/usr/bin/python3", "-m", "srv", "--x", "a b"),
        environment={"B": "2", "A": "1$"},
        unset_environment=("C",),
    )
    text = render_dropin("demo", "h1.budget-8.0123456789ab", invocation)
    assert text == (
        "# managed-by: orchestrator sweep=demo trial=h1.budget-8.0123456789ab\n"
        "# Written by the orchestrator for one trial; removed when the sweep restores the unit.\n"
        "[Service]\n"
        "ExecStart=\n"
        'ExecStart="/usr/bin/python3" "-m" "srv" "--x" "a b"\n'
        'Environment="A=1$"\n'
        'Environment="B=2"\n'
        'UnsetEnvironment="C"\n'
        "LogRateLimitIntervalSec=0\n"
    )
    assert parse_dropin_header(text) == DropinHeader(sweep="demo", trial="h1.budget-8.0123456789ab")
    exec_line = text.splitlines()[4].removeprefix("ExecStart=")
    assert parse_exec_line(exec_line) == list(invocation.argv)


def test_the_plans_delta_is_the_installed_dropin_without_its_exec_lines() -> None:
    """One renderer: what ``plan`` shows without exec_start cannot drift from what is
    installed (it used to be a copy of render_dropin's tail)."""
    invocation = TrialInvocation(
        argv=("<ExecStart>", "--x", "a b"),
        environment={"B": "2"},
        unset_environment=("C",),
        repeated_extra_flags=("--m",),
    )
    installed = render_dropin("demo", "h1.k.0123456789ab", invocation).splitlines()
    delta = render_dropin_delta("demo", "h1.k.0123456789ab", invocation, ["--x"]).splitlines()
    assert delta[0] == installed[0]
    assert delta[1:4] == [
        "# server.exec_start is not given, so this is the change to the unit's own ExecStart:",
        "#   removed: --x",
        '#   added:   "--x" "a b"',
    ]
    body = [line for line in installed[2:] if not line.startswith("ExecStart=")]
    assert delta[4:] == body


def test_render_dropin_refuses_unsafe_header_and_extra_lines() -> None:
    invocation = TrialInvocation(argv=("/bin/true",))
    with pytest.raises(UnsafeValueError):
        render_dropin("bad name", "k", invocation)
    with pytest.raises(UnsafeValueError):
        render_dropin("s", "k", invocation, extra_service_lines=["A=1\nExecStart=/bin/sh"])
    assert render_dropin("s", "k", invocation, extra_service_lines=["TimeoutStopSec=60"]).endswith(
        "LogRateLimitIntervalSec=0\nTimeoutStopSec=60\n"
    )


@pytest.mark.parametrize(
    "text",
    [
        "",
        "[Service]\nExecStart=\n",
        "# managed-by: someone-else sweep=a trial=b\n",
        " # managed-by: orchestrator sweep=a trial=b\n",
    ],
)
def test_foreign_dropins_are_not_ours(text: str) -> None:
    assert parse_dropin_header(text) is None


def test_dropin_path_and_service_names() -> None:
    assert str(dropin_path("sglang.service")) == (
        f"/etc/systemd/system/sglang.service.d/{DROPIN_NAME}"
    )
    assert is_valid_service_name("sglang@gpu0.service")
    for bad in ("../../x", "sglang", "a/b.service", "sglang.socket", ".service", "x y.service"):
        assert not is_valid_service_name(bad), bad
    with pytest.raises(UnsafeValueError):
        dropin_path("../../etc/passwd")


# --------------------------------------------------------------------------- systemd itself


@pytest.fixture(scope="session")
def systemd_analyze() -> str:
    return knobvalues.systemd_analyze()


def _verify(tool: str, unit_dir: Path, dropin_text: str) -> subprocess.CompletedProcess[str]:
    unit = unit_dir / "sglang.service"
    unit.write_text(
        "[Unit]\nDescription=stand-in\n[Service]\nType=simple\n"
        f"Environment=SGLANG_DDTREE_MAX_TOPK=9\nExecStart={sys.executable} -V\n"
    )
    dropin_dir = unit_dir / "sglang.service.d"
    dropin_dir.mkdir(exist_ok=True)
    (dropin_dir / DROPIN_NAME).write_text(dropin_text)
    return subprocess.run(
        [tool, "verify", str(unit)], capture_output=True, text=True, timeout=60, check=False
    )


TRICKY: list[dict[str, Any]] = [
    {"algorithm": "DDTREE", "budget": 8, "topk": 4},
    {"algorithm": 'we"ird $HOME %n \\ ;', "budget": "a b\tc", "topk": "$x %y"},
    {},
]


@pytest.mark.parametrize("config", TRICKY)
def test_systemd_analyze_accepts_rendered_dropins(
    systemd_analyze: str, tmp_path: Path, config: dict[str, Any]
) -> None:
    invocation = apply_knobs(
        [sys.executable, "-m", "srv", "--speculative-algorithm", "DFLASH"],
        {},
        KNOBS,
        config,
        ["--enable-metrics", ";", "%%"],
        {"SGLANG_LOG_MS": "1"},
    )
    result = _verify(systemd_analyze, tmp_path, render_dropin("s", "h.k.0", invocation))
    assert result.returncode == 0, result.stderr
    assert result.stderr == ""


def test_systemd_analyze_catches_a_missing_reset(systemd_analyze: str, tmp_path: Path) -> None:
    """The control: without the ``ExecStart=`` reset the same check fails."""
    text = render_dropin("s", "k", TrialInvocation(argv=(sys.executable, "-V")))
    result = _verify(systemd_analyze, tmp_path, text.replace("ExecStart=\n", "", 1))
    assert result.returncode != 0
    assert "more than one ExecStart" in result.stderr
