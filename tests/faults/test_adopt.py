"""``orchestrator adopt`` on a simulated host: the winner becomes the unit's lasting config in
its own drop-in, proven like a trial; ``orchestrator restore`` puts the unit back byte-identical.

Uses address 127.0.0.149 of the fault tests' range (see harness.py).
"""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path
from typing import Any

import yaml

from orchestrator.host.dropin import ADOPTED_DROPIN_NAME
from orchestrator.sim.host import UNIT_NAME
from tests.faults.harness import (
    DRAFT_FLAG,
    HEALTHY,
    OTHER,
    UNIT_DIR,
    assert_restored,
    fault_host,
    orchestrator_cli,
    run,
    sweep_yaml,
    unit_text,
)

ADDRESS = "127.0.0.149"


async def test_adopt_installs_the_winner_and_restore_undoes_it(tmp_path: Path) -> None:
    """The unit keeps systemd's default burst (5 starts) in a window every start of this test
    falls in, as a real unit's 10 s window does when the host is fast: the sim's first start,
    two trials, the sweep's restore and the adopt fill it, so the operator's restore is refused
    by the rate limit and must clear it (``reset-failed``) and start again."""
    unit = unit_text(ADDRESS, extra_unit=("StartLimitBurst=5", "StartLimitIntervalSec=600"))
    async with fault_host(tmp_path, ADDRESS, unit=unit) as host:
        document: dict[str, Any] = yaml.safe_load(
            sweep_yaml(host, "adopt-sim", [HEALTHY, OTHER], benchmark={"concurrency": [1]})
        )
        document["objective"] = {"metric": "output_tok_s", "context": 60, "concurrency": 1}
        finished = await run(tmp_path, yaml.safe_dump(document, sort_keys=False))
        assert finished.outcome.all_succeeded, finished.results
        db = str(tmp_path / "orchestrator.db")

        code, out, err = await orchestrator_cli(
            "adopt", "adopt-sim", "--type", host.name, "--db", db, "--allow-tie", "--json"
        )
        assert code == 0, err
        adoption = json.loads(out)
        assert adoption["ok"] and adoption["host_type"] == host.name
        winner = adoption["config"]
        assert winner in (HEALTHY, OTHER)

        dropin = host.root / UNIT_DIR / f"{UNIT_NAME}.d" / ADOPTED_DROPIN_NAME
        text = dropin.read_text()
        assert f'"{DRAFT_FLAG}" "{winner["draft_tokens"]}"' in text
        assert "orchestrator restore" in text.splitlines()[1]
        info = await host.server_info()
        assert info["speculative_algorithm"] == "NGRAM", info
        assert info["speculative_num_draft_tokens"] == winner["draft_tokens"], info
        # No trial drop-in is left: adopt's own file is the only change.
        changed = set(host.unit_files()) ^ set(host.unit_files_before)
        assert changed == {f"{UNIT_NAME}.d/{ADOPTED_DROPIN_NAME}"}

        code, out, err = await orchestrator_cli("restore", "--all", "--db", db, "--json")
        assert code == 0, err
        assert [entry["ok"] for entry in json.loads(out)["restored"]] == [True]
        with sqlite3.connect(db) as conn:
            retries = conn.execute(
                "SELECT json_extract(fields, '$.cause') FROM events WHERE kind = 'restore.retry'"
            ).fetchall()
        assert retries == [("start-limit",)], err
        await assert_restored(host)


async def test_adopt_refuses_a_sweep_without_one_answer_and_changes_nothing(
    tmp_path: Path,
) -> None:
    async with fault_host(tmp_path, ADDRESS) as host:
        finished = await run(tmp_path, sweep_yaml(host, "adopt-none", [HEALTHY]))
        assert finished.outcome.all_succeeded, finished.results
        db = str(tmp_path / "orchestrator.db")
        code, _, err = await orchestrator_cli("adopt", "adopt-none", "--type", "gpu", "--db", db)
        assert code == 2
        assert "no answer for host type 'gpu'" in err
        await assert_restored(host)
