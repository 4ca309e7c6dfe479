"""The host lease (orchestrator/host/lease.py) and its fence (host/fence.py), over a real
LocalTransport on a temporary directory: real mkdir, ls, rm and atomic writes, no host."""

from __future__ import annotations

import asyncio
import json
import os
import shutil
import socket
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from orchestrator.host.fence import FencedControl, FencedTransport, changes_host
from orchestrator.host.lease import (
    Holder,
    HostBusy,
    HostLease,
    LeaseLost,
    LeasePlace,
    LeaseRecord,
    LeaseView,
    earlier_run_of,
    take_or_wait,
    try_take,
)
from orchestrator.host.local import LocalTransport
from orchestrator.host.transport import TransportError
from orchestrator.lifecycle import failure_from


def holder(
    sweep: str = "night", *, pid: int | None = None, controller: str | None = None
) -> Holder:
    sweep_id = sum(map(ord, sweep))  # one id per sweep name
    here = Holder.here(store="/tmp/x.db", kind="run", sweep=sweep, sweep_id=sweep_id)
    if pid is None and controller is None:
        return here
    return Holder(
        controller or here.controller, pid or here.pid, None, here.store, "run", sweep, sweep_id
    )


def place(tmp_path: Path, name: str = "gpu-a") -> LeasePlace:
    return LeasePlace(LocalTransport(name), directory=str(tmp_path / "lease"), timeout=5)


class Clock:
    def __init__(self, start: float = 1000.0) -> None:
        self.now = start

    def __call__(self) -> float:
        return self.now


async def test_a_free_host_is_taken_at_generation_one(tmp_path: Path) -> None:
    taken = await try_take(place(tmp_path), holder())
    assert taken.lease is not None and taken.lease.token == 1 and taken.took_over is None
    stored = json.loads((tmp_path / "lease/gen-0000000001/holder.json").read_text())
    assert stored["holder"]["sweep"] == "night" and stored["token"] == 1
    await taken.lease.check("stop sglang.service")  # ours: passes


async def test_two_contenders_racing_exactly_one_wins(tmp_path: Path) -> None:
    results = await asyncio.gather(*(try_take(place(tmp_path), holder(f"s{i}")) for i in range(8)))
    winners = [r for r in results if r.lease is not None]
    assert len(winners) == 1
    view = await place(tmp_path).read()
    assert view.record is not None and view.record.holder == winners[0].lease.record.holder  # type: ignore[union-attr]


async def test_a_live_lease_refuses_and_names_its_holder(tmp_path: Path) -> None:
    first = await try_take(place(tmp_path), holder("night-b300"))
    second = await try_take(place(tmp_path), holder("other"))
    assert first.lease is not None and second.lease is None
    words = second.view.describe("gpu-a", first.lease.record.renewed_at + 5)
    assert "gpu-a is held by sweep 'night-b300'" in words
    assert f"pid {os.getpid()}" in words and "renewed 5 s ago" in words


async def test_an_expired_lease_is_taken_over_with_a_higher_token(tmp_path: Path) -> None:
    wall = Clock()
    stalled = holder("old", controller="ctl-elsewhere", pid=1)
    first = await try_take(place(tmp_path), stalled, expiry_s=10, wall=wall)
    assert first.lease is not None
    wall.now += 11
    second = await try_take(place(tmp_path), holder("new"), expiry_s=10, wall=wall)
    assert second.lease is not None and second.lease.token == 2
    assert second.took_over is not None and second.took_over.holder.sweep == "old"
    assert not (tmp_path / "lease/gen-0000000001").exists()  # older generations removed
    with pytest.raises(LeaseLost) as lost:
        await first.lease.check("stop sglang.service")
    assert lost.value.why == "taken over" and first.lease.fenced == ["stop sglang.service"]
    assert failure_from(lost.value).cause == "lease-lost"


async def test_a_holder_past_its_own_expiry_changes_nothing_even_untaken(tmp_path: Path) -> None:
    mono = Clock()
    taken = await try_take(place(tmp_path), holder(), expiry_s=8, monotonic=mono)
    assert taken.lease is not None
    mono.now += 6.5  # past three quarters of the expiry
    with pytest.raises(LeaseLost, match="stalled"):
        await taken.lease.check("daemon-reload")
    with pytest.raises(LeaseLost):
        await taken.lease.renew()  # lost stays lost


async def test_a_dead_holder_on_this_machine_is_taken_at_once(tmp_path: Path) -> None:
    child = await asyncio.create_subprocess_exec("true")
    await child.wait()
    dead = holder("crashed", pid=child.pid)
    first = await try_take(place(tmp_path), dead)
    assert first.lease is not None
    second = await try_take(place(tmp_path), holder("next"))
    assert second.lease is not None and second.view.state(0) == "dead"


async def test_release_lets_the_next_take_in_without_a_take_over(tmp_path: Path) -> None:
    first = await try_take(place(tmp_path), holder("a"))
    assert first.lease is not None
    await first.lease.release()
    second = await try_take(place(tmp_path), holder("b"))
    assert second.lease is not None and second.took_over is None and second.lease.token == 2


async def test_a_wiped_lease_directory_fences_the_old_holder(tmp_path: Path) -> None:
    taken = await try_take(place(tmp_path), holder())
    assert taken.lease is not None
    shutil.rmtree(tmp_path / "lease")  # a reboot clears /run
    with pytest.raises(LeaseLost, match="no lease"):
        await taken.lease.check("start sglang.service")


async def test_renew_pushes_the_expiry_on(tmp_path: Path) -> None:
    wall = Clock()
    taken = await try_take(place(tmp_path), holder(), expiry_s=20, wall=wall)
    assert taken.lease is not None
    wall.now += 4
    await taken.lease.renew()
    view = await place(tmp_path).read()
    assert view.record is not None and view.record.expires_at == wall.now + 20


async def test_the_heartbeat_renews_until_cancelled(tmp_path: Path) -> None:
    taken = await try_take(place(tmp_path), holder(), expiry_s=0.4)
    assert taken.lease is not None
    first = taken.lease.record.renewed_at
    async with taken.lease.renewed():
        # Waited for, not slept for: on a loaded machine the first beat may come late.
        deadline = time.monotonic() + 30
        while taken.lease.record.renewed_at <= first:
            assert time.monotonic() < deadline, "the heartbeat never renewed the lease"
            await asyncio.sleep(0.05)
    assert taken.lease.record.renewed_at > first
    await taken.lease.check("stop x")


async def test_a_generation_abandoned_mid_take_is_passed_after_the_expiry(tmp_path: Path) -> None:
    (tmp_path / "lease/gen-0000000004").mkdir(parents=True)  # mkdir won, holder file never came
    mono, seen = Clock(), {}
    refused = await try_take(
        place(tmp_path), holder(), expiry_s=5, monotonic=mono, taking_seen=seen
    )
    assert refused.lease is None and refused.view.state(0) == "taking"
    mono.now += 6
    taken = await try_take(place(tmp_path), holder(), expiry_s=5, monotonic=mono, taking_seen=seen)
    assert taken.lease is not None and taken.lease.token == 5


async def held_elsewhere(tmp_path: Path, wall: Clock) -> HostLease:
    """A lease of a holder on another controller, expiring 5 s after ``wall``'s now."""
    taken = await try_take(
        place(tmp_path), holder(controller="ctl-x", pid=1), expiry_s=5, wall=wall
    )
    assert taken.lease is not None
    return taken.lease


async def take_over(tmp_path: Path, wall: Clock) -> None:
    """Past the expiry, another sweep takes the lease."""
    wall.now += 6
    assert (await try_take(place(tmp_path), holder("taker"), expiry_s=5, wall=wall)).lease


async def test_fenced_sides_check_before_every_change(tmp_path: Path) -> None:
    wall = Clock()
    lease = await held_elsewhere(tmp_path, wall)
    transport = FencedTransport(LocalTransport("gpu-a"), lease)
    target = tmp_path / "f.conf"
    await transport.write_file_atomic(str(target), b"x", timeout=5)  # held: allowed
    await take_over(tmp_path, wall)
    with pytest.raises(LeaseLost):
        await transport.write_file_atomic(str(target), b"y", timeout=5)
    with pytest.raises(LeaseLost):
        await transport.remove_file(str(target), timeout=5)
    assert target.read_bytes() == b"x"
    assert (await transport.read_file(str(target), timeout=5)) == b"x"  # reads pass

    class Refusing:
        async def stop(self, unit: str, *, timeout: float) -> None:
            raise AssertionError("the job ran although the lease was lost")

    control = FencedControl(Refusing(), lease)  # type: ignore[arg-type]
    with pytest.raises(LeaseLost):
        await control.stop("sglang.service", timeout=5)


async def test_a_fenced_command_that_changes_the_host_is_refused_and_reads_pass(
    tmp_path: Path,
) -> None:
    wall = Clock()
    lease = await held_elsewhere(tmp_path, wall)
    transport = FencedTransport(LocalTransport("gpu-a"), lease)
    made = tmp_path / "sglang.service.d"
    await transport.run(["mkdir", "-p", "--", str(made)], timeout=5)  # held: allowed
    await transport.run(["rmdir", "--", str(made)], timeout=5)
    await take_over(tmp_path, wall)
    with pytest.raises(LeaseLost):
        await transport.run(["mkdir", "-p", "--", str(made)], timeout=5)
    assert not made.exists()
    assert lease.fenced == [f"mkdir -p -- {made}"]
    assert (await transport.run(["ls", "-1", str(tmp_path)], timeout=5)).ok  # reads pass


def test_which_commands_change_a_host() -> None:
    changing = [["mkdir", "-p", "/d"], ["/bin/rm", "-f", "/f"], ["systemctl", "daemon-reload"]]
    changing += [["systemctl", "--no-block", "restart", "u"], ["rmdir", "/d"]]
    reading = [["cat", "/f"], ["ls", "-1", "/d"], ["test", "-d", "/d"], ["stat", "/f"]]
    reading += [["systemctl", "show", "-p", "MainPID", "u"], ["systemctl", "cat", "--", "u"]]
    reading += [["systemctl", "--version"], []]
    assert [changes_host(argv) for argv in changing] == [True] * len(changing)
    assert [changes_host(argv) for argv in reading] == [False] * len(reading)


def test_records_and_views_round_trip_through_json() -> None:
    record = LeaseRecord(3, holder(), 1.0, 2.0, 3.0, None, holder("prev"))
    assert LeaseRecord.from_json(json.loads(json.dumps(record.to_json()))) == record
    assert LeaseView(0, None).describe("gpu-a", 0) == "gpu-a is free"
    assert socket.gethostname() in record.holder.describe()


async def test_the_same_process_and_sweep_takes_its_own_lease_again(tmp_path: Path) -> None:
    """A host lost mid-sweep keeps its lease; the restore the same process runs later for the
    same sweep is not refused by it (a new generation), another sweep still is."""
    mine = holder("lost")
    first = await try_take(place(tmp_path), mine)
    other = await try_take(place(tmp_path), holder("other"))
    again = await try_take(
        place(tmp_path),
        Holder.here(store=mine.store, kind="restore", sweep="lost", sweep_id=mine.sweep_id),
    )
    assert first.lease is not None and other.lease is None
    assert again.lease is not None and again.lease.token == 2


async def test_taken_over_reads_the_host_and_fences_nothing(tmp_path: Path) -> None:
    """Asked why a server went away, the lease reads the host: None while it is still the
    holder's; the loss once another controller holds a newer generation. Nothing is recorded
    as a fenced change (nothing was attempted)."""
    wall = Clock()
    taken = await try_take(place(tmp_path), holder(pid=1), expiry_s=5, wall=wall)
    assert taken.lease is not None
    assert await taken.lease.taken_over() is None
    wall.now += 6
    assert (await try_take(place(tmp_path), holder("taker"), expiry_s=5, wall=wall)).lease
    lost = await taken.lease.taken_over()
    assert lost is not None and lost.why == "taken over" and lost.found is not None
    assert lost.found.token == 2 and taken.lease.fenced == []
    seen = lost.behind({"cause": "crashed", "message": "the server died"})
    assert seen.cause == "lease-lost" and seen.evidence["seen"]["cause"] == "crashed"


async def test_a_take_whose_holder_write_fails_removes_its_own_generation(tmp_path: Path) -> None:
    """The mkdir won but the holder file could not be written (the connection went): the
    generation is removed again, so no one waits out an expiry for a take that never was."""

    class WriteFails(LocalTransport):
        async def write_file_atomic(
            self, path: str, data: bytes, *, mode: int = 0o644, timeout: float
        ) -> None:
            raise TransportError(self.name, f"sftp write {path}: Connection lost")

    failing = LeasePlace(WriteFails("gpu-a"), directory=str(tmp_path / "lease"), timeout=5)
    with pytest.raises(TransportError):
        await try_take(failing, holder())
    assert list((tmp_path / "lease").iterdir()) == []
    taken = await try_take(place(tmp_path), holder())  # at once, no "taking" left to wait on
    assert taken.lease is not None and taken.lease.token == 1


def daemon_holder(sweep: str, store: str, *, pid: int) -> Holder:
    return Holder("ctl-elsewhere", pid, None, store, "daemon", sweep, sum(map(ord, sweep)))


async def test_a_daemon_taking_a_sweep_over_waits_out_its_earlier_daemon_s_lease(
    tmp_path: Path,
) -> None:
    """Over a shared store, the daemon that took a sweep's claim over waits for the lease its
    earlier daemon still holds on a host, even under ``hosts_busy: set-aside`` (setting the
    host aside would leave the sweep's own trials unrun); another sweep's lease is refused."""
    store = "postgresql://db:5432/orchestrator"
    before = await try_take(place(tmp_path), daemon_holder("night", store, pid=1), expiry_s=60)
    assert before.lease is not None
    view = await place(tmp_path).read()
    assert earlier_run_of(view, daemon_holder("night", store, pid=2))
    assert not earlier_run_of(view, daemon_holder("other", store, pid=2))
    assert not earlier_run_of(view, daemon_holder("night", "/var/lib/o/orchestrator.db", pid=2))
    assert not earlier_run_of(view, holder("night"))  # a foreground run is no daemon

    handle: Any = SimpleNamespace(name="gpu-a", transport=LocalTransport("gpu-a"))
    directory = str(tmp_path / "lease")
    with pytest.raises(HostBusy):
        await take_or_wait(
            handle, daemon_holder("other", store, pid=2), busy="set-aside", directory=directory
        )
    waiting: list[str] = []

    async def told(words: str) -> None:
        waiting.append(words)
        assert before.lease is not None
        await before.lease.release()  # the earlier daemon stops; its lease goes

    taken = await take_or_wait(
        handle,
        daemon_holder("night", store, pid=2),
        busy="set-aside",
        waiting=told,
        expiry_s=1.0,
        directory=directory,
    )
    assert taken.lease is not None and taken.lease.token == 2 and len(waiting) == 1
