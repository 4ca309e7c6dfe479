"""benchmarks/coverage.py at its smallest size, on its fixed seed, so it cannot rot: the new
intervals hold the truth about 95 % of the time where the model's assumptions hold, and the
two-restart intervals are far narrower than the old model's (docs/answers.md)."""

from __future__ import annotations

from benchmarks.coverage import main


def test_the_coverage_benchmark_runs_and_the_new_intervals_cover() -> None:
    result = main(["--quick"])
    rows = {row["scenario"]: row for row in result["rows"]}
    assert set(rows) == {"equal", "unequal", "one-unstable", "two-each", "goodput"}
    for name in ("equal", "unequal", "two-each"):
        assert 0.92 <= rows[name]["new"]["all"]["coverage"] <= 0.99, name
    assert rows["goodput"]["new"]["all"]["coverage"] >= 0.93
    # The unstable config is scored apart; its coverage is what docs/answers.md states.
    assert 0.5 <= rows["one-unstable"]["new"]["unstable"]["coverage"] <= 0.8
    two = rows["two-each"]
    assert two["new"]["all"]["median_width"] < 0.5 * two["old"]["all"]["median_width"]
