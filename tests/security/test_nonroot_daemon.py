"""The daemon needs no root: run as a fresh unprivileged user (``useradd``, then ``setpriv``), it
takes a sweep over its socket and runs it on a simulated host it reaches over SSH as root there,
its socket is mode 0600 and owned by that user, and every file it writes is that user's.

Needs root to create the user (CI runs as root); elsewhere it skips with the reason. The user
is removed afterwards and every process started here is stopped by its pid.
"""

from __future__ import annotations

import json
import os
import pwd
import shutil
import stat
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest
import yaml

from tests.integration.daemon_proc import ORCHESTRATOR, free_port, stop_process

USER = "orch-sec-test"
SIM_ADDRESS = "127.0.0.144"


def _missing() -> str | None:
    if os.geteuid() != 0:
        return "creating a test user needs root"
    for tool in ("useradd", "userdel", "setpriv", "unshare"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    return None


@dataclass
class DaemonUser:
    name: str
    uid: int
    gid: int
    prefix: list[str]
    """argv prefix that runs a command as this user (through a mount namespace when the
    interpreter lives under a directory the user cannot enter, e.g. /root/.pyenv)."""


def _blocking_directory(path: Path) -> Path | None:
    """The first directory on ``path`` that others cannot traverse."""
    for parent in reversed(path.parents):
        if parent != Path("/") and not parent.stat().st_mode & stat.S_IXOTH:
            return parent
    return None


@pytest.fixture(scope="module")
def user() -> Iterator[DaemonUser]:
    reason = _missing()
    if reason:
        pytest.skip(reason)
    subprocess.run(["userdel", USER], capture_output=True, check=False)
    subprocess.run(
        ["useradd", "--system", "--no-create-home", "--shell", "/usr/sbin/nologin", USER],
        check=True,
        capture_output=True,
    )
    try:
        entry = pwd.getpwnam(USER)
        become = ["setpriv", f"--reuid={entry.pw_uid}", f"--regid={entry.pw_gid}",
                  "--clear-groups", "--inh-caps=-all", "--"]  # fmt: skip
        prefix = become
        blocked = _blocking_directory(Path(os.path.realpath(sys.executable)))
        if blocked is not None:
            if blocked.parent != Path("/"):
                pytest.skip(f"the interpreter is under {blocked}, which {USER} cannot enter")
            # A private mount namespace where `blocked` is a traversable tmpfs holding binds of
            # exactly the children the run needs (the interpreter's tree), nothing else.
            inner = Path(os.path.realpath(sys.executable)).relative_to(blocked).parts[0]
            script = (
                f'set -e; mount --bind "{blocked / inner}" /run/orch-sec-keep; '
                f'mount -t tmpfs -o mode=755 tmpfs "{blocked}"; mkdir "{blocked / inner}"; '
                f'mount --bind /run/orch-sec-keep "{blocked / inner}"; exec "$@"'
            )
            Path("/run/orch-sec-keep").mkdir(exist_ok=True)
            prefix = ["unshare", "-m", "--propagation", "private", "sh", "-c", script, "sh",
                      *become]  # fmt: skip
        probe = subprocess.run(
            [*prefix, sys.executable, "-c", "import os, orchestrator; print(os.geteuid())"],
            capture_output=True,
            text=True,
            timeout=60,
            cwd="/",
        )
        if probe.returncode != 0 or probe.stdout.strip() != str(entry.pw_uid):
            pytest.skip(f"cannot run the orchestrator as {USER}: {probe.stderr[-500:]}")
        yield DaemonUser(USER, entry.pw_uid, entry.pw_gid, prefix)
    finally:
        subprocess.run(["userdel", USER], capture_output=True, check=False)


@pytest.fixture
def workdir(user: DaemonUser) -> Iterator[Path]:
    """A directory the user can reach (pytest's own tmp dirs are root-only)."""
    path = Path(tempfile.mkdtemp(prefix="orch-sec-"))
    path.chmod(0o755)
    try:
        yield path
    finally:
        shutil.rmtree(path, ignore_errors=True)


def test_the_daemon_runs_a_sweep_as_an_unprivileged_user(user: DaemonUser, workdir: Path) -> None:
    sim_out = workdir / "sim.stdout"
    sim = subprocess.Popen(
        [*ORCHESTRATOR, "sim", "up", "--hosts", "1", "--json", "--time-scale", "0.05",
         "--state-dir", str(workdir / "sim"), "--base-address", SIM_ADDRESS,
         "--port", str(free_port(SIM_ADDRESS))],
        stdout=sim_out.open("wb"), stderr=(workdir / "sim.stderr").open("wb"),
    )  # fmt: skip
    daemon: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 60
        while not sim_out.read_bytes().endswith(b"\n"):
            assert sim.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        announced = json.loads(sim_out.read_text().splitlines()[0])
        host = announced["hosts"][0]
        # The user's own copy of the SSH identity and known_hosts, private to it.
        keys = workdir / "keys"
        keys.mkdir(mode=0o700)
        shutil.copy(host["identity_file"], keys / "id_ed25519")
        shutil.copy(host["known_hosts"], keys / "known_hosts")
        sweep = yaml.safe_load(Path(announced["sweep_file"]).read_text())
        sweep.update(name="nonroot", configs=[])
        sweep["benchmark"].update(contexts=[60], concurrency=[1], max_tokens=32)
        sweep["coding"]["select"] = sweep["coding"]["select"][:1]
        sweep["hosts"][0].update(
            identity_file=str(keys / "id_ed25519"), known_hosts=str(keys / "known_hosts")
        )
        sweep_file = keys / "nonroot.yaml"
        sweep_file.write_text(yaml.safe_dump(sweep, sort_keys=False))
        state = workdir / "state"
        state.mkdir(mode=0o700)
        for path in (keys, state, *keys.iterdir()):
            os.chown(path, user.uid, user.gid)
        env = {"PATH": os.environ["PATH"], "HOME": str(state), "LANG": "C.UTF-8",
               "PYTHONUNBUFFERED": "1"}  # fmt: skip
        daemon = subprocess.Popen(
            [*user.prefix, *ORCHESTRATOR, "daemon", "--state-dir", str(state)],
            stdout=(workdir / "daemon.stdout").open("wb"),
            stderr=(workdir / "daemon.stderr").open("wb"),
            env=env,
            cwd="/",
        )
        sock = state / "orchestrator.sock"
        client_env = {**env, "ORCHESTRATOR_SOCKET": str(sock)}

        def cli(*args: str) -> subprocess.CompletedProcess[str]:
            return subprocess.run(
                [*user.prefix, *ORCHESTRATOR, *args],
                capture_output=True, text=True, timeout=60, env=client_env, cwd="/",
            )  # fmt: skip

        deadline = time.monotonic() + 30
        while not sock.exists():
            assert daemon.poll() is None, (workdir / "daemon.stderr").read_text()[-2000:]
            assert time.monotonic() < deadline
            time.sleep(0.2)
        submitted = cli("submit", str(sweep_file))
        assert submitted.returncode == 0, submitted.stderr
        deadline = time.monotonic() + 180
        while True:
            status = json.loads(cli("status", "nonroot", "--json").stdout)
            if status["state"] not in ("queued", "running"):
                break
            assert time.monotonic() < deadline, status
            time.sleep(1)
        assert status["state"] == "done", (status, (workdir / "daemon.stderr").read_text()[-3000:])
        results = json.loads(cli("results", "nonroot", "--json").stdout)
        assert [t["state"] for t in results["trials"]] == ["done"], results["trials"]

        mode = sock.lstat()
        assert stat.S_ISSOCK(mode.st_mode) and stat.S_IMODE(mode.st_mode) == 0o600
        assert (mode.st_uid, mode.st_gid) == (user.uid, user.gid)
        status_lines = Path(f"/proc/{daemon.pid}/status").read_text().splitlines()
        uids = next(line for line in status_lines if line.startswith("Uid:")).split()[1:]
        assert uids == [str(user.uid)] * 4, uids
        capabilities = next(line for line in status_lines if line.startswith("CapEff:"))
        assert int(capabilities.split()[1], 16) == 0, capabilities
        for path in state.rglob("*"):
            assert path.lstat().st_uid == user.uid, f"{path} is not the daemon user's"
    finally:
        for process in (daemon, sim):
            if process is not None:
                stop_process(process)
