"""A sweep's host as the lifecycle sees it, and its unit as found as the store keeps it.

The runner, the daemon's restore and adopt all build a host's :class:`HostSession` from the
sweep file the same way, and read and write the backup of its unit the same way: here, not in
the runner, so the daemon needs nothing of the runner to put a host back.

The store keeps a backup as the unit's files (path -> bytes, None where a file did not exist),
its state (``systemctl show``'s properties) and our drop-in's slot (where it goes, whether its
directory existed, its mode) in a column of its own. The operator's launch files found beside
our drop-in are among the files; any other launch file there was absent. For an engine that
launches from files, the slot also says so (a restore must list and clear the launch files even
where the operator had none) and keeps the found files' modes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import PurePosixPath

from orchestrator import engines
from orchestrator.host import systemd
from orchestrator.host.handle import HostHandle
from orchestrator.host.launchfile import LAUNCH_FILE_MODE, LaunchFile, is_launch_file
from orchestrator.lifecycle import EventSink, HostSession, LifecycleTimeouts
from orchestrator.store import DropinSlot, UnitBackup
from orchestrator.sweepfile import HostSpec, Sweep


def host_session(
    sweep: Sweep, host: HostSpec, handle: HostHandle, *, unit: str, events: EventSink
) -> HostSession:
    """The lifecycle's view of one of ``sweep``'s hosts over ``handle``: the same for a trial
    and for a restore by hand or after a crash."""
    return HostSession(
        host=handle,
        unit=unit,
        base_url=str(host.base_url).rstrip("/"),
        api=sweep.benchmark.api,
        model=sweep.server.model,
        gpus=tuple(host.gpus) if host.gpus else None,
        timeouts=lifecycle_timeouts(sweep),
        events=events,
        engine=engines.get(sweep.engine),
    )


def lifecycle_timeouts(sweep: Sweep) -> LifecycleTimeouts:
    """The restart protocol's bounds from a sweep file's ``timeouts``."""
    t = sweep.timeouts
    return LifecycleTimeouts(
        stop=t.stop,
        memory_release=t.memory_release,
        ready=t.ready,
        command=t.connect,
        probe_request=min(t.probe, t.request),
    )


@dataclass(frozen=True, slots=True)
class StoredUnit:
    """A unit as found, in the store's terms: its files (None where one did not exist, so a
    restore deletes it), ``systemctl show``'s state, and our drop-in's slot."""

    files: dict[str, bytes | None]
    state: dict[str, str]
    dropin: DropinSlot


def snapshot_to_backup(snapshot: systemd.UnitSnapshot) -> StoredUnit:
    """What the store keeps of ``snapshot`` (the drop-in's own bytes as found among the
    files: absent, None, when the sweep will create it)."""
    files: dict[str, bytes | None] = {f.path: f.data for f in snapshot.files}
    files[snapshot.dropin_path] = snapshot.dropin_before
    files.update((f.path, f.content) for f in snapshot.launch_before)
    slot = DropinSlot(
        snapshot.dropin_path,
        snapshot.dropin_dir_existed,
        snapshot.dropin_mode,
        launch_managed=snapshot.launch_managed,
        launch_modes={f.path: f.mode for f in snapshot.launch_before},
    )
    return StoredUnit(files, dict(snapshot.state.raw), slot)


def backup_to_snapshot(backup: UnitBackup) -> systemd.UnitSnapshot:
    """The unit as found, read back from its backup."""
    if backup.dropin is None:
        raise ValueError(f"the backup of {backup.unit} on {backup.host} has no drop-in slot")
    slot = backup.dropin
    dropin = PurePosixPath(slot.path)

    def launch(path: str) -> bool:
        here = PurePosixPath(path)
        return here.parent == dropin.parent and is_launch_file(here.name, dropin.name)

    kept = [systemd.FileBytes(p, d) for p, d in backup.files.items() if d is not None]
    return systemd.UnitSnapshot(
        unit=backup.unit,
        state=systemd.unit_state(dict(backup.state)),
        files=tuple(f for f in kept if f.path != slot.path and not launch(f.path)),
        dropin_path=slot.path,
        dropin_before=backup.files.get(slot.path),
        dropin_dir_existed=slot.dir_existed,
        dropin_mode=slot.mode,
        launch_before=tuple(
            LaunchFile(f.path, f.data, slot.launch_modes.get(f.path, LAUNCH_FILE_MODE))
            for f in kept
            if launch(f.path)
        ),
        launch_managed=slot.launch_managed,
    )


__all__ = [
    "StoredUnit",
    "backup_to_snapshot",
    "host_session",
    "lifecycle_timeouts",
    "snapshot_to_backup",
]
