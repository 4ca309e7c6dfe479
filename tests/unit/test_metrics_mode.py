"""``server.metrics``: auto adds --enable-metrics to a trial whose unit lacks it (the chat API
carries no spec stats, so /metrics is the second accept-length source); off leaves the unit
alone and the preflight warns on a chat sweep."""

from __future__ import annotations

import pytest

from orchestrator import engines
from orchestrator.host import systemd
from orchestrator.host.dropin import apply_knobs, render_dropin
from orchestrator.lifecycle import trial_config
from orchestrator.preflight import check_metrics
from orchestrator.sweepfile import SweepFileError, parse_sweep
from tests.unit.test_sweepfile import MINIMAL

SGLANG = engines.get("sglang")

UNIT = "sglang.service"
BASE = ["/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "/m"]
SWEEP = MINIMAL + "baseline: true\n"


def _found(argv: list[str]) -> systemd.UnitSnapshot:
    text = "[Service]\nExecStart=" + " ".join(argv) + "\n"
    return systemd.UnitSnapshot(
        UNIT,
        systemd.unit_state({"LoadState": "loaded"}),
        (systemd.FileBytes(f"/etc/systemd/system/{UNIT}", text.encode()),),
        f"/etc/systemd/system/{UNIT}.d/90-orchestrator.conf",
        None,
        False,
    )


def test_sweep_file_key_defaults_to_auto() -> None:
    assert parse_sweep(SWEEP, "s.yaml").server.metrics == "auto"
    off = SWEEP.replace("  model: m\n", "  model: m\n  metrics: off\n")
    assert parse_sweep(off, "s.yaml").server.metrics == "off"
    with pytest.raises(SweepFileError, match=r"server\.metrics"):
        parse_sweep(SWEEP.replace("  model: m\n", "  model: m\n  metrics: on\n"), "s.yaml")


def test_auto_adds_the_flag_where_the_unit_lacks_it() -> None:
    config = trial_config(
        _found(BASE), sweep="s", key="k", knobs={}, config={}, metrics="auto",
        engine=SGLANG,
    )
    assert config.invocation.argv == (*BASE, "--enable-metrics")
    assert config.invocation.added_flags == ("--enable-metrics",)
    assert (
        "# added because the unit's command line lacks them (server.metrics: auto): "
        "--enable-metrics"
    ) in config.dropin_text
    assert config.readiness.invocation is config.invocation  # provenance records it


def test_auto_never_repeats_a_flag_the_unit_has_and_off_adds_nothing() -> None:
    has = trial_config(
        _found([*BASE, "--enable-metrics"]), sweep="s", key="k", knobs={}, config={},
        engine=SGLANG,
    )
    assert has.invocation.argv.count("--enable-metrics") == 1
    assert has.invocation.added_flags == ()
    off = trial_config(
        _found(BASE), sweep="s", key="k", knobs={}, config={}, metrics="off", engine=SGLANG
    )
    assert "--enable-metrics" not in off.invocation.argv and off.invocation.added_flags == ()
    assert "server.metrics" not in off.dropin_text


def test_a_flag_given_by_extra_flags_or_owned_by_a_knob_is_not_added() -> None:
    extra = apply_knobs(BASE, {}, {}, {}, ["--enable-metrics"], ensure_flags=["--enable-metrics"])
    assert extra.argv.count("--enable-metrics") == 1 and extra.added_flags == ()

    class Knob:
        flag = "--enable-metrics"
        env = None
        json_key = None

    owned = apply_knobs(BASE, {}, {"m": Knob()}, {"m": None}, ensure_flags=["--enable-metrics"])
    assert "--enable-metrics" not in owned.argv and owned.added_flags == ()
    assert "server.metrics" not in render_dropin("s", "k", owned)


def test_preflight_warns_only_for_a_chat_sweep_without_metrics() -> None:
    check, warning = check_metrics(BASE, "off", "chat", SGLANG)
    assert warning is not None and "journal alone" in warning and check.name == "metrics"
    assert check_metrics(BASE, "off", "generate", SGLANG)[1] is None
    assert check_metrics(BASE, "auto", "chat", SGLANG)[1] is None
    assert "added to each trial" in check_metrics(BASE, "auto", "chat", SGLANG)[0].detail
    assert check_metrics([*BASE, "--enable-metrics"], "off", "chat", SGLANG)[1] is None
