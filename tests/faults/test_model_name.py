"""A sweep whose benchmark names a model the server does not serve, and a knob spelled the way
another build spells its flag: ``check`` says both before anything restarts (the flag with the
build's closest spelling), and a run fails the trial at readiness with ``config-mismatch``
within seconds instead of measuring a point of failed requests."""

from __future__ import annotations

import json
from pathlib import Path

from tests.faults.harness import (
    HEALTHY,
    assert_restored,
    fault_host,
    orchestrator_cli,
    run,
    sweep_yaml,
)

ADDRESS = "127.0.0.212"  # outside the fault tests' 120-139: each test its own address
OLD_WINDOW_FLAG = "--speculative-dflash-draft-window-size"  # 0.5.11's spelling
NEW_WINDOW_FLAG = "--speculative-draft-window-size"  # what this build's --help lists
WRONG_MODEL = "kimi-k2"  # the host serves kimi-k2.6


async def _check_json(path: Path) -> tuple[int, dict[str, object], str]:
    """``orchestrator check FILE --json`` as an operator runs it (a real subprocess)."""
    code, out, err = await orchestrator_cli("check", str(path), "--json")
    return code, json.loads(out), err


async def test_wrong_model_and_misspelt_flag_found_by_check_and_at_readiness(
    tmp_path: Path,
) -> None:
    window = {**HEALTHY, "window": 2048}
    async with fault_host(tmp_path, ADDRESS) as host:
        text = sweep_yaml(host, "wrong-model", [HEALTHY, window], knobs={
            "window": {"flag": OLD_WINDOW_FLAG},
        })  # fmt: skip
        assert "model: kimi-k2.6\n" in text
        text = text.replace("model: kimi-k2.6\n", f"model: {WRONG_MODEL}\n")
        path = tmp_path / "wrong-model.yaml"
        path.write_text(text)

        code, document, stderr = await _check_json(path)
        assert code == 1, stderr
        (checked,) = document["hosts"]  # type: ignore[misc]
        assert checked["ok"] is True  # the host takes part: each trial says why it failed
        mismatch = checked["model_mismatch"]
        assert f"the benchmark sends model {WRONG_MODEL!r}" in mismatch
        assert "ExecStart serves 'kimi-k2.6' (--served-model-name)" in mismatch
        assert "the running server's /v1/models lists ['kimi-k2.6']" in mismatch
        assert checked["suggestions"] == {OLD_WINDOW_FLAG: NEW_WINDOW_FLAG}
        flags = next(c for c in checked["checks"] if c["name"] == "flags")
        assert flags["detail"] == (
            f"unknown to this build: {OLD_WINDOW_FLAG} (did you mean {NEW_WINDOW_FLAG}?)"
        )

        done = await run(tmp_path, text)
        trial = done.trial(HEALTHY)
        assert (trial["state"], trial["cause"]) == ("failed", "config-mismatch")
        assert trial["evidence"]["mismatches"] == [
            {"knob": "model", "where": "/v1/models", "expected": WRONG_MODEL,
             "actual": ["kimi-k2.6"]},
        ]  # fmt: skip
        assert trial["points"] == []
        # Decided at readiness, not at the ready timeout: its only cause is ready-timeout.
        by_preflight = done.trial(window)
        assert (by_preflight["state"], by_preflight["cause"]) == ("failed", "bad-flag")
        (preflight,) = done.of_kind("preflight")
        assert preflight["model_mismatch"] == mismatch
        await assert_restored(host)
