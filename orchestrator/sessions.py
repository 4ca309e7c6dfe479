"""A sweep's host as the lifecycle sees it, and its unit as found as the store keeps it.

The runner, the daemon's restore and adopt all build a host's :class:`HostSession` from the
sweep file the same way, and read and write the backup of its unit the same way: here, not in
the runner, so the daemon needs nothing of the runner to put a host back.

The store keeps a backup as the unit's files (path -> bytes, None where a file did not exist)
and its state (``systemctl show``'s properties); where our drop-in goes, whether its
directory existed and its mode ride in that state under the reserved ``__dropin_*`` keys, a
format stores already written keep.
"""

from __future__ import annotations

from collections.abc import Mapping

from orchestrator import engines
from orchestrator.host import systemd
from orchestrator.host.handle import HostHandle
from orchestrator.lifecycle import EventSink, HostSession, LifecycleTimeouts
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


def snapshot_to_backup(
    snapshot: systemd.UnitSnapshot,
) -> tuple[dict[str, bytes | None], dict[str, str]]:
    files: dict[str, bytes | None] = {f.path: f.data for f in snapshot.files}
    files[snapshot.dropin_path] = snapshot.dropin_before
    state = dict(snapshot.state.raw)
    state["__dropin_path"] = snapshot.dropin_path
    state["__dropin_dir_existed"] = "yes" if snapshot.dropin_dir_existed else "no"
    state["__dropin_mode"] = oct(snapshot.dropin_mode)
    return files, state


def backup_to_snapshot(
    unit: str, files: Mapping[str, bytes | None], state: Mapping[str, str]
) -> systemd.UnitSnapshot:
    raw = {k: v for k, v in state.items() if not k.startswith("__")}
    dropin = state["__dropin_path"]
    decoded = dict(files)
    return systemd.UnitSnapshot(
        unit=unit,
        state=systemd.unit_state(raw),
        files=tuple(
            systemd.FileBytes(p, d) for p, d in decoded.items() if d is not None and p != dropin
        ),
        dropin_path=dropin,
        dropin_before=decoded.get(dropin),
        dropin_dir_existed=state["__dropin_dir_existed"] == "yes",
        dropin_mode=int(state["__dropin_mode"], 8),
    )


__all__ = ["backup_to_snapshot", "host_session", "lifecycle_timeouts", "snapshot_to_backup"]
