"""Configs that cannot start: each is failed within seconds with its cause and journal evidence,
the sweep goes on to the next config, and the host ends as it was found."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from tests.faults.harness import (
    ENGINES,
    FAULTY,
    HEALTHY,
    assert_restored,
    excerpt_text,
    fault_host,
    point_count,
    run,
    sweep_yaml,
    unit_text,
)

REMOVED_FLAG = "--speculative-dflash-draft-window-size"  # gone from SGLang 0.5.20 on


def _took(trial: dict[str, object]) -> float:
    return float(trial["finished_at"]) - float(trial["started_at"])  # type: ignore[arg-type]


async def test_bad_flag_is_failed_by_preflight(tmp_path: Path) -> None:
    """The host's own SGLang parser (the preflight's ``PYTHON -c SCRIPT ARGV``) refuses an
    unknown flag, a flag value argparse rejects and a config its resolution refuses, before
    anything restarts: the unit is never
    touched for either (issue 14: bad values are the parser's to catch, not the start's)."""
    unknown = {**HEALTHY, "window": 2048}
    bad_value = {"algorithm": "NGRAM", "draft_tokens": "seven"}
    unknown_algorithm = {"algorithm": "FOO", "draft_tokens": 5}
    async with fault_host(tmp_path, "127.0.0.120") as host:
        text = sweep_yaml(
            host,
            "bad-flag",
            [unknown, bad_value, unknown_algorithm, HEALTHY],
            knobs={"window": {"flag": REMOVED_FLAG}},
        )
        done = await run(tmp_path, text)

        (preflight,) = done.of_kind("preflight")
        assert preflight["parser"] == "sglang"
        by_preflight = done.trial(unknown)
        assert (by_preflight["state"], by_preflight["cause"]) == ("failed", "bad-flag")
        assert by_preflight["evidence"] == {
            "found_by": "preflight",
            "unknown_flags": [REMOVED_FLAG],
        }
        by_parser = done.trial(bad_value)
        assert (by_parser["state"], by_parser["cause"]) == ("failed", "bad-flag")
        assert by_parser["evidence"] == {
            "found_by": "preflight",
            "parser": "sglang",
            "error": "launch_server.py: error: argument --speculative-num-draft-tokens: "
            "invalid int value: 'seven'",
        }
        refused = done.trial(unknown_algorithm)  # ServerArgs' resolution: a ValueError
        assert (refused["state"], refused["cause"]) == ("failed", "invalid-config")
        assert refused["evidence"]["error"] == (
            "ValueError: Unknown speculative algorithm name: FOO"
        )
        # one restart only: the healthy trial's (and the restore's)
        assert len(done.of_kind("dropin.installed")) == 1
        healthy = done.trial(HEALTHY)
        assert healthy["state"] == "done" and point_count(healthy) == 1
        # a bad flag is deterministic: no second attempt even though retries are allowed
        assert [t["attempt"] for t in done.results["trials"]] == [1, 1, 1, 1]
        await assert_restored(host)


@pytest.mark.parametrize(
    ("on_failure", "engine"), [("continue", "sglang"), ("abort", "sglang"), ("continue", "vllm")]
)
async def test_cuda_oom_at_start(tmp_path: Path, on_failure: str, engine: str) -> None:
    """A CUDA OOM while loading: ``oom`` with the engine's own words, in seconds. With
    ``on_trial_failure: abort`` the sweep stops there (the next config is never tried, the
    sweep is failed) and the host is restored all the same."""
    case = ENGINES[engine]
    address = {"continue": "127.0.0.121", "abort": "127.0.0.139"}[on_failure]
    if engine == "vllm":
        address = "127.0.0.242"
    async with fault_host(
        tmp_path, address, server_faults={"crash_at_start": case.on_faulty("oom")}, engine=engine
    ) as host:
        text = case.sweep_yaml(
            host, "oom", [case.faulty, case.healthy], policy={"on_trial_failure": on_failure}
        )
        done = await run(tmp_path, text)

        failed = done.trial(case.faulty)
        assert (failed["state"], failed["cause"]) == ("failed", "oom")
        evidence = failed["evidence"]
        assert case.oom_text in excerpt_text(evidence), excerpt_text(evidence)
        assert evidence["exit_status"] == 1 and evidence["invocation_id"]
        assert point_count(failed) == 0
        # Seen at the exit, not at the ready timeout (whose only cause is ready-timeout).
        assert done.of_kind("server.exited")[0]["cause"] == "oom"
        if on_failure == "continue":
            assert done.outcome.state == "done"
            healthy = done.trial(case.healthy)
            assert healthy["state"] == "done" and point_count(healthy) == 1
        else:
            assert done.outcome.state == "failed"
            assert done.results["summary"]["stopped"].startswith("abort")
            assert done.trial(case.healthy, attempt=None)["state"] == "queued"  # never attempted
        await assert_restored(host)


@pytest.mark.parametrize("engine", ["sglang", "vllm"])
async def test_load_slower_than_the_ready_timeout(tmp_path: Path, engine: str) -> None:
    """A server still loading at the ready timeout is failed (not waited on forever), and the
    next trial's stop ends the loading process before anything else starts."""
    case = ENGINES[engine]
    async with fault_host(
        tmp_path,
        "127.0.0.122" if engine == "sglang" else "127.0.0.228",
        server_faults={"slow_load_s": case.on_faulty(400.0)},
        engine=engine,
    ) as host:  # 400 s x time_scale 0.05 = 20 s of loading
        text = case.sweep_yaml(
            host, "slow-load", [case.faulty, case.healthy], timeouts={"ready": 4}
        )
        done = await run(tmp_path, text)

        failed = done.trial(case.faulty)
        assert (failed["state"], failed["cause"]) == ("failed", "ready-timeout")
        evidence = failed["evidence"]
        assert evidence["ready_line_seen"] is False
        assert case.loading_text in excerpt_text(evidence)
        # It waited out the whole timeout; not forever, or the 20 s load would have ended
        # ready and the trial done.
        assert _took(failed) >= 4
        healthy = done.trial(case.healthy)
        assert healthy["state"] == "done" and point_count(healthy) == 1
        await assert_restored(host)


async def test_start_limit_hit(tmp_path: Path) -> None:
    """systemd's start rate limit counts the orchestrator's own starts: the refused start is
    recorded as ``start-limit`` with systemd's words; the retry resets the unit and measures."""
    unit = unit_text("127.0.0.123", extra_unit=("StartLimitBurst=2", "StartLimitIntervalSec=60"))
    async with fault_host(tmp_path, "127.0.0.123", unit=unit) as host:
        text = sweep_yaml(host, "start-limit", [HEALTHY, FAULTY], policy={"trial_retries": 1})
        done = await run(tmp_path, text)

        first = done.trial(HEALTHY)
        assert first["state"] == "done"
        refused = done.trial(FAULTY, attempt=1)
        assert (refused["state"], refused["cause"]) == ("failed", "start-limit")
        assert "Start request repeated too quickly." in excerpt_text(refused["evidence"])
        retried = done.trial(FAULTY, attempt=2)
        assert retried["state"] == "done" and point_count(retried) == 1
        await assert_restored(host)


async def test_a_hidden_alias_runs_though_help_does_not_list_it(tmp_path: Path) -> None:
    """A build newer than 0.5.23 takes the old draft-window spelling as a deprecated alias
    that ``--help`` hides: the preflight asks the build's parser, so the trial runs (checked
    against ``--help`` it failed ``bad-flag`` without ever being tried)."""
    aliased = {**HEALTHY, "window": 2048}
    async with fault_host(tmp_path, "127.0.0.129", settings={"sglang_version": "0.5.24"}) as host:
        help_text = await host.run(f"{sys.executable} -m orchestrator.sim.sglang_server --help")
        assert REMOVED_FLAG not in str(help_text.stdout)
        text = sweep_yaml(host, "alias", [aliased], knobs={"window": {"flag": REMOVED_FLAG}})
        done = await run(tmp_path, text)

        (preflight,) = done.of_kind("preflight")
        assert preflight["parser"] == "sglang" and preflight["unknown_flags"] == []
        trial = done.trial(aliased)
        assert trial["state"] == "done" and point_count(trial) == 1, trial
        assert "--speculative-dflash-draft-window-size is deprecated" in "\n".join(
            await host.journal()
        )
        await assert_restored(host)
