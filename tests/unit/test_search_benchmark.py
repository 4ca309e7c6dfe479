"""benchmarks/search.py at its smallest size, so it cannot rot: one seed of the adaptive
search and of the cut grid on the `default` surface, through its command line, with the
scores docs/benchmarks.md records (regret, verdicts, the exploration risk against the truth)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_search_benchmark_runs_at_its_smallest_size() -> None:
    done = subprocess.run(
        [
            sys.executable,
            str(ROOT / "benchmarks" / "search.py"),
            "--quick",
            "--json",
            "--seeds",
            "1",
            "--seed-start",
            "41000",
            "--strategies",
            "adaptive,grid-cut",
            "--surfaces",
            "default",
        ],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=ROOT,
        check=False,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    result = json.loads(done.stdout)
    assert result["seed_range"] == [41000, 41000]
    rows = result["surfaces"]["default"]["strategies"]
    for strategy in ("adaptive", "grid-cut"):
        row = rows[strategy]
        assert row["seeds"] == 1
        assert 0.0 <= row["median_regret"] < 0.05, row
        assert 0.0 <= row["mean_exploration_risk"] <= 1.0
        assert row["unexplored_beats_rate"] in (0.0, 1.0)
        assert sum(row["verdicts"].values()) == 1
    # The cut grid stops at 25 of 85 configs in file order: too much is left to say Deploy.
    assert rows["grid-cut"]["mean_exploration_risk"] > 0.1
