"""A unit's backup as the store keeps it: files, systemctl's state and nothing else in it, the
drop-in's slot and adopt's mark in their own columns; backups written before version 6 (the
slot and the mark under reserved keys of the state) read back the same."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from orchestrator.host import systemd
from orchestrator.host.launchfile import LaunchFile
from orchestrator.sessions import backup_to_snapshot, snapshot_to_backup
from orchestrator.store import DropinSlot, Store, UnitBackup

SWEEP_YAML = "name: demo\nconfigs:\n  - {budget: 8}\n"
DROPIN = "/etc/systemd/system/sglang.service.d/90-orchestrator.conf"
SNAPSHOT = systemd.UnitSnapshot(
    unit="sglang.service",
    state=systemd.unit_state({"ActiveState": "active", "SubState": "running"}),
    files=(systemd.FileBytes("/etc/systemd/system/sglang.service", b"[Service]\nExecStart=x\n"),),
    dropin_path=DROPIN,
    dropin_before=None,
    dropin_dir_existed=False,
    dropin_mode=0o640,
)


async def test_a_backup_round_trips_typed_with_nothing_reserved_in_its_state(
    tmp_path: Path,
) -> None:
    async with await Store.open(tmp_path / "s.db") as store:
        sweep = (await store.submit_sweep("demo", SWEEP_YAML)).sweep
        stored = snapshot_to_backup(SNAPSHOT)
        await store.save_unit_backup(
            sweep.id, "h1", "sglang.service", stored.files, stored.state, dropin=stored.dropin
        )
        backup = await store.get_unit_backup(sweep.id, "h1", "sglang.service")
    assert backup is not None
    assert backup.dropin == DropinSlot(DROPIN, False, 0o640) and backup.adopted is None
    assert not any(key.startswith("__") for key in backup.state)
    assert backup_to_snapshot(backup) == SNAPSHOT


async def test_a_backup_written_before_version_6_reads_back_the_same(tmp_path: Path) -> None:
    path = tmp_path / "s.db"
    async with await Store.open(path) as store:
        sweep = (await store.submit_sweep("demo", SWEEP_YAML)).sweep
        stored = snapshot_to_backup(SNAPSHOT)
        legacy = {
            **stored.state,
            "__dropin_path": DROPIN,
            "__dropin_dir_existed": "no",
            "__dropin_mode": oct(0o640),
            "__adopted": "h1.budget-8.abc",
        }
        await store.save_unit_backup(sweep.id, "h1", "sglang.service", stored.files, legacy)
        backup = await store.get_unit_backup(sweep.id, "h1", "sglang.service")
    assert backup is not None
    assert backup.dropin == DropinSlot(DROPIN, False, 0o640)
    assert backup.adopted == "h1.budget-8.abc"
    assert not any(key.startswith("__") for key in backup.state)
    assert backup_to_snapshot(backup) == SNAPSHOT


async def test_adopt_s_mark_has_its_own_column(tmp_path: Path) -> None:
    async with await Store.open(tmp_path / "s.db") as store:
        sweep = (await store.submit_sweep("demo", SWEEP_YAML)).sweep
        stored = snapshot_to_backup(SNAPSHOT)
        await store.rearm_unit_backup(
            sweep.id,
            "h1",
            "sglang.service",
            stored.files,
            stored.state,
            dropin=stored.dropin,
            adopted="h1.budget-8.abc",
        )
        (pending,) = await store.pending_restores(sweep_id=sweep.id)
    assert pending.adopted == "h1.budget-8.abc" and pending.dropin == stored.dropin
    assert json.dumps(pending.state).count("__") == 0


async def _round_trip(tmp_path: Path, snapshot: systemd.UnitSnapshot) -> UnitBackup:
    async with await Store.open(tmp_path / "s.db") as store:
        sweep = (await store.submit_sweep("demo", SWEEP_YAML)).sweep
        stored = snapshot_to_backup(snapshot)
        await store.save_unit_backup(
            sweep.id, "h1", "sglang.service", stored.files, stored.state, dropin=stored.dropin
        )
        backup = await store.get_unit_backup(sweep.id, "h1", "sglang.service")
    assert backup is not None
    return backup


async def test_the_launch_files_found_beside_the_drop_in_are_kept_and_given_back(
    tmp_path: Path,
) -> None:
    """An operator's file in a launch file's place is among the backup's files and comes back
    as the snapshot's ``launch_before``, with its mode (a restore writes it back so); a stale
    drop-in of ours leaves it there (the read as found left out the files that are ours)."""
    found = LaunchFile(DROPIN.replace(".conf", ".spec-config.json"), b"{}  \n", 0o600)
    snapshot = dataclasses.replace(
        SNAPSHOT, dropin_dir_existed=True, launch_before=(found,), launch_managed=True
    )
    backup = await _round_trip(tmp_path, snapshot)
    assert backup.files[found.path] == b"{}  \n"
    back = backup_to_snapshot(backup)
    assert back == snapshot and back.launch_before == (found,)
    assert back.launch_before[0].mode == 0o600
    assert back.without_stale_dropin().launch_before == (found,)


async def test_a_backup_says_the_engine_launches_from_files_though_none_was_found(
    tmp_path: Path,
) -> None:
    """A restore from the store (a resumed run, ``orchestrator restore``) must list and clear
    the launch files the sweep wrote even where the operator had none: the backup keeps that
    the engine launches from files. An engine that does not keeps nothing reserved."""
    managed = dataclasses.replace(SNAPSHOT, launch_managed=True)
    back = backup_to_snapshot(await _round_trip(tmp_path / "a", managed))
    assert back.launch_managed and back == managed
    plain = await _round_trip(tmp_path / "b", SNAPSHOT)
    assert not backup_to_snapshot(plain).launch_managed
    assert not any(key.startswith("__") for key in plain.state)  # no reserved keys at all
    assert plain.dropin is not None and plain.dropin.to_json() == {
        "path": SNAPSHOT.dropin_path, "dir_existed": SNAPSHOT.dropin_dir_existed,
        "mode": SNAPSHOT.dropin_mode,
    }  # fmt: skip
