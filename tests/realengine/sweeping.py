"""What both engines' sweeps in the tier share: running ``orchestrator run`` as an operator
does, and reading its JSON document (trials by config, attempts the shared machine failed)."""

from __future__ import annotations

import json
import sqlite3
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

SHARED_MACHINE_CAUSES = frozenset({"memory-not-released"})
"""Causes the machine's other work gives an attempt: its RAM grew by more than the host-memory
gate's margin while the trial waited for the last server's memory (docs/operator-guide.md).
Such an attempt is retried (``trial_retries``) and set aside by :func:`settled`."""


def running(trial_retries: int, ready_s: int = 120) -> str:
    """The sweep file's timeouts and policy: ``ready_s`` for a start."""
    return (
        f"timeouts: {{connect: 15, stop: 30, memory_release: 30, ready: {ready_s}, "
        "request: 120}\n"
        f"policy: {{trial_retries: {trial_retries}, restore: as-found}}\n"
    )


def run_sweep(
    text: str, tmp_path: Path, name: str, timeout: float = 1500
) -> tuple[int, dict[str, Any], str]:
    """``orchestrator run FILE --json`` as an operator runs it: (exit code, document, log)."""
    sweep = tmp_path / f"{name}.yaml"
    sweep.write_text(text)
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(sweep), "--db",
         str(tmp_path / f"{name}.db"), "--json"],
        capture_output=True, text=True, timeout=timeout,
    )  # fmt: skip
    (tmp_path / f"{name}.json").write_text(done.stdout)
    (tmp_path / f"{name}.log").write_text(done.stderr)
    try:
        document = json.loads(done.stdout)
    except ValueError:
        pytest.fail(f"run gave no JSON (exit {done.returncode}): {done.stderr[-4000:]}")
    return done.returncode, document, done.stderr


def key(config: dict[str, Any]) -> str:
    return json.dumps(config, sort_keys=True)


def settled(attempts: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """The attempts without those the shared machine failed (:data:`SHARED_MACHINE_CAUSES`),
    after checking that each such one was followed by another attempt of its trial."""
    retried = [t for t in attempts if t["cause"] in SHARED_MACHINE_CAUSES]
    for failed in retried:
        later = [t for t in attempts if t["key"] == failed["key"] and t is not failed]
        assert later and later[-1]["cause"] not in SHARED_MACHINE_CAUSES, (failed, later)
    return [t for t in attempts if t["cause"] not in SHARED_MACHINE_CAUSES]


def by_config(attempts: list[dict[str, Any]]) -> dict[str, list[dict[str, Any]]]:
    """The settled attempts by their config (:func:`key`)."""
    trials: dict[str, list[dict[str, Any]]] = {}
    for trial in settled(attempts):
        trials.setdefault(key(trial["config"]), []).append(trial)
    return trials


def throughput_point(trial: dict[str, Any]) -> dict[str, Any]:
    (point,) = [p for p in trial["points"] if p["kind"] == "throughput"]
    return point


def throughput(trial: dict[str, Any]) -> float:
    return float(throughput_point(trial)["metrics"]["output_tok_s"])


def check_answer(
    document: dict[str, Any],
    measured: dict[str, list[dict[str, Any]]],
    name_of: Callable[[dict[str, Any]], str],
    repeats: int,
) -> dict[str, Any]:
    """The answer, read: the best config with its interval over restarts, every measured
    config a contender and no failed one; its summary, configs named by ``name_of`` (whether
    it decides is each tier's own check)."""
    (answer,) = document["answers"]
    best = answer["best"]
    low, high = best["ci95"]
    assert low <= best["estimate"] <= high and best["restarts"] >= repeats, best
    contenders = {key(c["config"]) for c in answer["contenders"]}
    assert contenders == {key(attempts[0]["config"]) for attempts in measured.values()}
    return {
        "verdict": answer["verdict"],
        "best": name_of(best["config"]),
        "estimate": round(best["estimate"], 1),
        "ci95": [round(low, 1), round(high, 1)],
        "speedup_vs_baseline": best["speedup_vs_baseline"],
        "speedup_ci95": best["speedup_ci95"],
        "tied": [name_of(c) for c in answer["tied"]],
    }


def host_events(db: Path) -> list[tuple[str, dict[str, Any]]]:
    """The sweep's events as the store kept them, in order."""
    with sqlite3.connect(f"file:{db}?mode=ro", uri=True) as store:
        rows = store.execute("SELECT kind, fields FROM events ORDER BY id").fetchall()
    return [(kind, json.loads(fields)) for kind, fields in rows]


def check_host_events(db: Path, parser: str) -> dict[str, dict[str, Any]]:
    """The preflight asked the host's own ``parser`` and judged memory by the host's RAM, as
    every release after it; the preflight's checks by name."""
    events = host_events(db)
    (preflight,) = [fields for kind, fields in events if kind == "preflight"]
    assert preflight["parser"] == parser and preflight["gpu_reader"] == "host-memory"
    checks = {c["name"]: c for c in preflight["checks"]}
    assert "method: host-memory" in checks["gpus"]["detail"], checks["gpus"]
    assert "rejected" in checks[f"{parser}_parser"]["detail"], checks
    released = [fields for kind, fields in events if kind == "memory.released"]
    assert released and {r["method"] for r in released} == {"host-memory"}, released
    return checks
