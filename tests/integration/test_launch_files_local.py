"""Launch files on a host's real file system, killed at every step (issue 33, item 4).

The operator's own file at a launch file's path comes back with its bytes and its mode. A run
killed anywhere between writing a file of ours and removing it (before its drop-in exists, or
after the drop-in is gone) leaves nothing a later run takes for the operator's: a later run
that reads the unit as found clears every file of ours and keeps every operator's file that
is still there; the killed run's own backup puts the unit back exactly.

Files go through the test transport of ``test_host_io_local`` (the real ``ls``, ``stat`` and
``rmdir`` in local subprocesses); the unit manager is a small one in this process, which loads
the unit's ``*.conf`` files on ``daemon-reload`` as systemd does (a sweep killed at each of its
steps runs dozens of times).
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

from orchestrator.host import systemd
from orchestrator.host.dropin import TrialInvocation, render_dropin
from orchestrator.host.launchfile import (
    MARK_SUFFIX,
    LaunchFile,
    launch_file_path,
    render_mark,
)
from tests.integration.test_host_io_local import FRAGMENT, INVOCATION, SubprocessTransport

UNIT = "sglang.service"
FLAG = "--spec-config"
OPERATORS = b'{"draft_depth": 1}  \n'
"""The operator's own file at the launch file's path, mode 0600."""
FIRST = b'{\n  "draft_depth": 2\n}\n'


class Killed(Exception):
    """The run was killed here (SIGKILL: nothing after it ran)."""


class KilledAt(SubprocessTransport):
    """The test transport, killed at its ``at``-th file write or removal (0: never), or at
    the first that touches ``at_path``."""

    def __init__(
        self, bin_dir: Path, env: dict[str, str], at: int = 0, at_path: str | None = None
    ) -> None:
        super().__init__(bin_dir, env)
        self.at, self.at_path, self.changes = at, at_path, 0

    def _step(self, path: str) -> None:
        self.changes += 1
        if self.changes == self.at or path == self.at_path:
            raise Killed(self.changes, path)

    async def write_file_atomic(
        self, path: str, data: bytes, *, mode: int = 0o644, timeout: float
    ) -> None:
        self._step(path)
        await super().write_file_atomic(path, data, mode=mode, timeout=timeout)

    async def remove_file(self, path: str, *, timeout: float) -> bool:
        self._step(path)
        return await super().remove_file(path, timeout=timeout)


class Manager:
    """systemd's view of the unit: its files as the last ``daemon-reload`` found them."""

    def __init__(self, root: Path) -> None:
        self.root, self.loaded = root, [systemd.UnitFile(str(root / UNIT), FRAGMENT.decode())]

    async def daemon_reload(self, *, timeout: float) -> None:
        dropins = sorted((self.root / f"{UNIT}.d").glob("*.conf"))
        self.loaded = [
            systemd.UnitFile(str(p), p.read_text()) for p in (self.root / UNIT, *dropins)
        ]

    async def show(
        self, unit: str, props: Sequence[str] = systemd.STATE_PROPERTIES, *, timeout: float
    ) -> systemd.UnitState:
        return systemd.unit_state(
            {
                "LoadState": "loaded",
                "ActiveState": "inactive",
                "FragmentPath": self.loaded[0].path,
                "DropInPaths": " ".join(f.path for f in self.loaded[1:]),
                "NeedDaemonReload": "no",
            }
        )

    async def cat(self, unit: str, *, timeout: float) -> list[systemd.UnitFile]:
        return list(self.loaded)


@dataclass(frozen=True)
class Host:
    root: Path
    bin_dir: Path
    manager: Manager

    @property
    def dropin(self) -> str:
        return str(self.root / f"{UNIT}.d" / "90-orchestrator.conf")

    @property
    def launch(self) -> Path:
        return Path(launch_file_path(self.dropin, FLAG, "json"))

    def transport(self, at: int = 0, at_path: str | None = None) -> KilledAt:
        return KilledAt(self.bin_dir, {}, at, at_path)

    def directory(self) -> dict[str, bytes]:
        """What the drop-in's directory holds (empty when it is gone)."""
        here = self.root / f"{UNIT}.d"
        return {p.name: p.read_bytes() for p in sorted(here.iterdir())} if here.exists() else {}


def _host(tmp_path: Path) -> Host:
    """A unit whose drop-in directory holds only the operator's file at our launch path."""
    bin_dir, root = tmp_path / "bin", tmp_path / "etc-systemd-system"
    bin_dir.mkdir(parents=True)
    root.mkdir()
    (root / UNIT).write_bytes(FRAGMENT)
    host = Host(root, bin_dir, Manager(root))
    host.launch.parent.mkdir()
    host.launch.write_bytes(OPERATORS)
    host.launch.chmod(0o600)
    return host


def _invocation(host: Host, content: bytes | None) -> TrialInvocation:
    if content is None:
        return INVOCATION
    path = str(host.launch)
    return replace(
        INVOCATION,
        argv=(*INVOCATION.argv, FLAG, path),
        launch_files=(LaunchFile(path, content),),
    )


TRIALS: Sequence[bytes | None] = (FIRST, OPERATORS, None, FIRST)
"""What each trial puts at the launch path: a file of ours, one with the operator's very
bytes, none (the flag absent), ours again."""


async def _read_found(host: Host, transport: SubprocessTransport) -> systemd.UnitSnapshot:
    """The unit as a run reads it before it changes anything (the lifecycle's rule: a stale
    drop-in of ours is not part of it)."""
    found = await systemd.read_unit(
        transport, UNIT, control=host.manager, path=host.dropin, launch_files=True
    )
    return found if found.stale_dropin is None else found.without_stale_dropin()


async def _sweep(host: Host, transport: SubprocessTransport, found: systemd.UnitSnapshot) -> None:
    """Every trial's files and drop-in installed in turn, then the unit restored."""
    control = host.manager
    for number, content in enumerate(TRIALS):
        invocation = _invocation(host, content)
        await systemd.install_dropin(
            transport, UNIT, render_dropin("night", f"t{number}", invocation), invocation,
            control=control, path=host.dropin, timeout=10, launch_files=True,
        )  # fmt: skip
    await systemd.restore_files(transport, found, control=control, timeout=10)


async def test_the_operators_file_comes_back_with_its_bytes_and_its_mode(tmp_path: Path) -> None:
    host = _host(tmp_path)
    transport = host.transport()
    found = await _read_found(host, transport)
    assert found.launch_before == (LaunchFile(str(host.launch), OPERATORS, 0o600),)
    await _sweep(host, transport, found)
    assert host.directory() == {host.launch.name: OPERATORS}
    assert host.launch.stat().st_mode & 0o777 == 0o600


async def test_a_file_of_ours_left_without_its_drop_in_is_cleared_not_adopted(
    tmp_path: Path,
) -> None:
    """Killed after the first trial's file was written, before its drop-in: the next run
    reads no launch file as found, and its restore removes ours."""
    host = _host(tmp_path)
    host.launch.unlink()
    host.launch.parent.rmdir()
    transport = host.transport()
    found = await _read_found(host, transport)
    invocation = _invocation(host, FIRST)
    killed = host.transport(at_path=host.dropin)
    with pytest.raises(Killed):
        await systemd.install_dropin(
            killed, UNIT, render_dropin("night", "t0", invocation), invocation,
            control=host.manager, path=host.dropin, timeout=10, launch_files=True,
        )  # fmt: skip
    assert host.launch.read_bytes() == FIRST and not Path(host.dropin).exists()

    again = await _read_found(host, transport)
    assert again.launch_before == () and again.stale_dropin is None
    await systemd.restore_files(transport, again, control=host.manager, timeout=10)
    assert host.directory() == {}
    await systemd.restore_files(transport, found, control=host.manager, timeout=10)
    assert not host.launch.parent.exists()  # the killed run's own backup: no directory


async def test_killed_at_any_step_nothing_of_ours_is_taken_for_the_operators(
    tmp_path: Path,
) -> None:
    """For every file write or removal of a whole sweep (four trials and the restore), the run
    killed there: a later run that reads the unit as found, with no store, ends with nothing
    of ours and the operator's file wherever it still was; the killed run's own backup (a
    resumed run, ``orchestrator restore``) ends with the unit exactly as found."""
    step = 0
    while True:
        step += 1
        outcomes = []
        for rescuer in ("fresh", "backup"):
            host = _host(tmp_path / f"{step}-{rescuer}")
            transport = host.transport()
            found = await _read_found(host, transport)
            try:
                await _sweep(host, host.transport(at=step), found)
            except Killed:
                outcomes.append(True)
            else:
                outcomes.append(False)
            left = host.directory()
            if rescuer == "fresh":
                await systemd.restore_files(
                    transport, await _read_found(host, transport),
                    control=host.manager, timeout=10,
                )  # fmt: skip
                after = host.directory()
                assert set(after) <= {host.launch.name}, (step, left, after)
                assert after.get(host.launch.name, OPERATORS) == OPERATORS, (step, left, after)
                theirs = left.get(host.launch.name) == OPERATORS and left.get(
                    host.launch.name + MARK_SUFFIX
                ) != render_mark(OPERATORS)
                assert host.launch.name in after or not theirs, (step, left, after)
            else:
                await systemd.restore_files(transport, found, control=host.manager, timeout=10)
                assert host.directory() == {host.launch.name: OPERATORS}, (step, left)
                assert host.launch.stat().st_mode & 0o777 == 0o600, step
        if not any(outcomes):
            break
    assert step > 10  # every step of four installs and a restore was a place to die
    assert not any(name.endswith(MARK_SUFFIX) for name in os.listdir(host.launch.parent))
