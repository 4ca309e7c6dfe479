"""An ``extra_flags`` entry that gives a flag of the host's real command line another value.

``validate`` catches the conflict when the sweep carries the unit's ``exec_start``; when it does
not, only the host's own ExecStart shows it, at run time. Which value the server would take is
up to its argument parser, so that trial fails as ``invalid-config`` with the flag as evidence,
nothing restarts for it, the other trials run, and the host ends as found.
"""

from __future__ import annotations

from pathlib import Path

import yaml

from tests.faults.harness import HEALTHY, OTHER, assert_restored, fault_host, run, sweep_yaml

ADDRESS = "127.0.0.213"  # outside the fault tests' 120-139: each test its own address


async def test_a_conflict_with_the_hosts_command_line_fails_the_trial_not_the_host(
    tmp_path: Path,
) -> None:
    async with fault_host(tmp_path, ADDRESS) as host:
        document = yaml.safe_load(sweep_yaml(host, "extra-flag-conflict", [HEALTHY, OTHER]))
        # The simulated unit runs --tp-size 8; this sweep's extra flags ask for 4.
        document["server"]["extra_flags"] = ["--tp-size", "4"]
        done = await run(tmp_path, yaml.safe_dump(document, sort_keys=False))

        for config in (HEALTHY, OTHER):
            trial = done.trial(config)
            assert (trial["state"], trial["cause"]) == ("failed", "invalid-config")
            assert trial["evidence"]["flag"] == "--tp-size"
            assert "--tp-size '4' in extra_flags[0]" in trial["evidence"]["message"]
            assert trial["points"] == []
        assert done.results["hosts"][0]["set_aside"] in (None, False, "")
        kinds = done.kinds()
        trials_phase = kinds[: kinds.index("restore.begin")]
        assert "unit.stopping" not in trials_phase  # nothing restarted for a refused config
        await assert_restored(host)
