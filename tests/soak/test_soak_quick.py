"""The crash-resume soak, short enough for CI: five seeded SIGKILLs of ``orchestrator run`` and
one SSH outage on two simulated hosts, compared with an uninterrupted run of the same sweep.
The long one (25+ kills) is ``python tests/soak/soak.py --kills 25 --seed S --json``."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.soak.soak import default_trials_per_host, run_soak

ADDRESSES = ("127.0.0.110", "127.0.0.111")
KILLS = 5
SEED = 1
TRIALS_PER_HOST = default_trials_per_host(KILLS)  # 7: ~1.4 trials per host per kill

pytestmark = pytest.mark.slow


@pytest.mark.timeout(400)
async def test_soak_quick(tmp_path: Path) -> None:
    report = await run_soak(
        kills=KILLS,
        seed=SEED,
        workdir=tmp_path,
        addresses=ADDRESSES,
        trials_per_host=TRIALS_PER_HOST,
    )
    assert report.problems == [], report
    assert report.kills_survived == KILLS
    assert report.ssh_outages == 1
    assert report.lost == 0 and report.duplicated == 0 and report.measured_twice == 0
    assert report.points_compared == report.reference_points == 2 * TRIALS_PER_HOST * 2
    assert report.missing_vs_reference == [] and report.extra_vs_reference == []
    assert report.hosts_restored and report.final_state == "done"
    assert report.trials == 2 * TRIALS_PER_HOST
    assert report.resumed_attempts >= 1  # some kill landed inside a trial
