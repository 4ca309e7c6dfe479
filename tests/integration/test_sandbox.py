"""The sandbox against hostile code: real processes, real namespaces, real limits.

Every hostile program must end as ERROR or TIMEOUT with the host untouched: no file written
outside, no secret read, no process of ours killed, no connection made, nothing left running.
"""

from __future__ import annotations

import asyncio
import os
import secrets
import subprocess
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest

from orchestrator.bench.sandbox import (
    Containment,
    RunOutcome,
    SandboxConfig,
    resolve_containment,
    run_candidate,
)
from orchestrator.sim.procscan import ProcInfo, scan_processes

REPO = Path(__file__).resolve().parents[2]
IS_ROOT = os.geteuid() == 0
CONTAINED = (RunOutcome.ERROR, RunOutcome.TIMEOUT)
FAST = SandboxConfig(wall_timeout_s=4.0, cpu_s=2, processes=32)


def _ours_or_orphaned(pid: int, procs: Mapping[int, ProcInfo]) -> bool:
    """Started by this test process, or left behind by anyone's sandbox (reparented to init).
    Other xdist workers' sandboxes, still under their own runner, are theirs to check."""
    me = os.getpid()
    parent = procs[pid].ppid
    if parent in (0, 1):
        return True
    while parent in procs and parent not in (0, 1):
        if parent == me:
            return True
        parent = procs[parent].ppid
    return False


def sandbox_pids() -> list[int]:
    """Processes that look like a sandboxed interpreter (`python -I -`) still alive, of this
    test or orphaned."""
    procs = scan_processes()
    found = []
    for pid in procs:
        try:
            argv = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
        except OSError:
            continue
        if argv[1:3] == [b"-I", b"-"] and _ours_or_orphaned(pid, procs):
            found.append(pid)
    return found


async def no_sandbox_left(timeout_s: float = 3.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while sandbox_pids():
        if time.monotonic() > deadline:
            return False
        await asyncio.sleep(0.05)
    return True


@pytest.fixture
def sentinel() -> Iterator[subprocess.Popen[bytes]]:
    """A process standing in for the daemon: it holds a secret in its environment and must
    survive whatever the sandboxed code does."""
    secret = f"orch-secret-{secrets.token_hex(8)}"
    proc = subprocess.Popen(
        ["sleep", "60"], env={"PATH": "/usr/bin:/bin", "ORCH_FAKE_API_TOKEN": secret}
    )
    proc.secret = secret  # type: ignore[attr-defined]
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


@pytest.fixture
async def contained() -> Containment:
    containment, _ = await resolve_containment(SandboxConfig())
    if containment not in (Containment.NAMESPACES, Containment.USER_NAMESPACE):
        pytest.skip(f"no namespace containment here (got {containment}); see docs/sandbox.md")
    return containment


# ---------------------------------------------------------------------------------- outcomes


async def test_pass_fail_syntax_error_timeout_classification() -> None:
    code = "def add(a, b):\n    return a + b\n"
    assert (await run_candidate(code, "assert add(1, 2) == 3", config=FAST)).outcome is (
        RunOutcome.PASS
    )
    failed = await run_candidate(code, "assert add(1, 2) == 4, 'off by one'", config=FAST)
    assert failed.outcome is RunOutcome.FAIL
    assert "off by one" in failed.detail
    syntax = await run_candidate("def add(a, b)\n    return a + b\n", "", config=FAST)
    assert syntax.outcome is RunOutcome.SYNTAX
    assert "SyntaxError" in syntax.detail
    error = await run_candidate(code, "add(1, None)", config=FAST)
    assert error.outcome is RunOutcome.ERROR
    assert "TypeError" in error.detail
    cpu_bound = SandboxConfig(wall_timeout_s=30.0, cpu_s=1)  # CPU limit hits first
    busy = await run_candidate("while True:\n    pass\n", "", config=cpu_bound)
    assert busy.outcome is RunOutcome.TIMEOUT
    assert "cpu" in busy.detail
    sleeper = await run_candidate(
        "import time\ntime.sleep(60)\n", "", config=SandboxConfig(wall_timeout_s=1.0)
    )
    assert sleeper.outcome is RunOutcome.TIMEOUT
    assert sleeper.detail == "wall timeout"
    assert sleeper.wall_s < 30  # killed at its timeout, long before the sleep would end
    assert await no_sandbox_left()


async def test_exiting_early_is_never_a_pass() -> None:
    for code in ("import os\nos._exit(0)\n", "import sys\nsys.exit(0)\n", "exit()\n"):
        result = await run_candidate(code, "assert False", config=FAST)
        assert result.outcome is RunOutcome.ERROR, (code, result)


async def test_main_guard_usage_block_does_not_run() -> None:
    code = "def f():\n    return 1\nif __name__ == '__main__':\n    input()\n"
    assert (await run_candidate(code, "assert f() == 1", config=FAST)).outcome is RunOutcome.PASS


async def test_output_is_capped_to_its_tail() -> None:
    config = SandboxConfig(wall_timeout_s=8.0, output_cap=4096)
    code = "import sys\nfor i in range(200000):\n    print('line', i)\nprint('the end')\n"
    result = await run_candidate(code, "", config=config)
    assert result.outcome is RunOutcome.PASS
    assert len(result.stdout_tail.encode()) <= 4096
    assert "the end" in result.stdout_tail


@pytest.mark.parametrize("mode", list(Containment))
async def test_every_containment_mode_runs_and_classifies(mode: Containment) -> None:
    if mode in (Containment.NAMESPACES, Containment.UID_DROP) and not IS_ROOT:
        pytest.skip("needs root")
    config = SandboxConfig(containment=mode, wall_timeout_s=4.0, cpu_s=2)
    try:
        await resolve_containment(config)
    except Exception as exc:  # a kernel without user namespaces, say
        pytest.skip(f"{mode} unavailable here: {exc}")
    code = "import os\ndef who():\n    return sorted(os.environ)\n"
    result = await run_candidate(
        code, "print(who())\nassert 'SECRET' not in str(who())", config=config
    )
    assert result.outcome is RunOutcome.PASS, result
    assert result.containment is mode
    assert "ORCH" not in result.stdout_tail
    assert (await run_candidate("def f(:\n", "", config=config)).outcome is RunOutcome.SYNTAX


# ----------------------------------------------------------------------------- containment


async def test_fork_bomb_is_contained(contained: Containment) -> None:
    bomb = (
        "import os\nwhile True:\n    try:\n        os.fork()\n    except OSError:\n        pass\n"
    )
    started = time.monotonic()
    result = await run_candidate(
        bomb, "", config=SandboxConfig(wall_timeout_s=2.0, cpu_s=1, processes=24)
    )
    assert result.outcome in CONTAINED, result
    assert time.monotonic() - started < 60  # a hang only: a bomb that outlived its kill
    assert await no_sandbox_left(), sandbox_pids()
    # The host can still start processes.
    proc = await asyncio.create_subprocess_exec("true")
    assert await proc.wait() == 0


async def test_plain_fork_bomb_errors_out(contained: Containment) -> None:
    bomb = "import os\nwhile True:\n    os.fork()\n"
    result = await run_candidate(bomb, "", config=SandboxConfig(wall_timeout_s=3.0, processes=24))
    assert result.outcome in CONTAINED, result
    assert await no_sandbox_left(), sandbox_pids()


async def test_huge_allocation_is_an_error() -> None:
    result = await run_candidate("x = bytearray(64 * 1024**3)\n", "", config=FAST)
    assert result.outcome is RunOutcome.ERROR
    assert "MemoryError" in result.detail
    grow = "chunks = []\nwhile True:\n    chunks.append(bytearray(50 * 1024**2))\n"
    assert (await run_candidate(grow, "", config=FAST)).outcome in CONTAINED


async def test_writes_outside_the_temp_dir_do_not_reach_the_host(contained: Containment) -> None:
    tag = secrets.token_hex(6)
    targets = [
        Path("/root") / f"escape-{tag}",
        REPO / f"escape-{tag}",
        Path("/tmp") / f"escape-{tag}",
        Path("/var/tmp") / f"escape-{tag}",
        Path("/dev/shm") / f"escape-{tag}",
    ]
    for target in targets:
        code = f"with open({str(target)!r}, 'w') as f:\n    f.write('pwned')\n"
        result = await run_candidate(code, "", config=FAST)
        assert not target.exists(), f"sandbox wrote {target}"
        if target.parent in (Path("/root"), REPO) and contained is Containment.NAMESPACES:
            assert result.outcome is RunOutcome.ERROR
            # Refused, or not even visible (a checkout under /tmp is hidden by the private /tmp).
            assert "PermissionError" in result.detail or "FileNotFoundError" in result.detail


async def test_file_size_limit() -> None:
    config = SandboxConfig(file_size=1 << 20, wall_timeout_s=4.0)
    code = "with open('big', 'wb') as f:\n    f.write(b'x' * (4 << 20))\n"
    result = await run_candidate(code, "", config=config)
    assert result.outcome is RunOutcome.ERROR
    assert "SIGXFSZ" in result.detail or "File too large" in result.detail


async def test_secrets_of_the_orchestrator_are_not_readable(
    sentinel: subprocess.Popen[bytes], monkeypatch: pytest.MonkeyPatch
) -> None:
    secret = sentinel.secret  # type: ignore[attr-defined]
    monkeypatch.setenv("ORCH_FAKE_API_TOKEN", secret)
    code = (
        "import glob, os\n"
        f"SECRET = {secret!r}\n"
        "leaks = [k for k, v in os.environ.items() if SECRET in v]\n"
        "for path in glob.glob('/proc/*/environ'):\n"
        "    try:\n"
        "        if SECRET.encode() in open(path, 'rb').read():\n"
        "            leaks.append(path)\n"
        "    except OSError:\n"
        "        pass\n"
        "print('LEAKS', leaks)\n"
        "token = os.environ['ORCH_FAKE_API_TOKEN']\n"
    )
    result = await run_candidate(code, "", config=FAST)
    assert result.outcome is RunOutcome.ERROR
    assert "KeyError" in result.detail
    assert "LEAKS []" in result.stdout_tail


async def test_killing_the_parent_and_everything_is_contained(
    sentinel: subprocess.Popen[bytes], contained: Containment
) -> None:
    code = (
        "import os, signal\n"
        "os.kill(-1, signal.SIGKILL)\n"
        f"for pid in ({os.getpid()}, {sentinel.pid}):\n"
        "    try:\n"
        "        os.kill(pid, signal.SIGKILL)\n"
        "    except OSError:\n"
        "        pass\n"
        "os.kill(os.getppid(), signal.SIGKILL)\n"
    )
    result = await run_candidate(code, "", config=FAST)
    assert result.outcome in CONTAINED, result
    assert sentinel.poll() is None, "the sentinel process was killed"
    os.kill(os.getpid(), 0)  # still here


async def test_no_network_even_to_loopback(contained: Containment) -> None:
    connections: list[str] = []

    async def on_connect(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        connections.append("connected")
        writer.close()

    server = await asyncio.start_server(on_connect, "127.0.0.1", 0)
    port = server.sockets[0].getsockname()[1]
    try:
        code = (
            "import socket\n"
            f"socket.create_connection(('127.0.0.1', {port}), timeout=2).sendall(b'hi')\n"
        )
        result = await run_candidate(code, "", config=FAST)
    finally:
        server.close()
        await server.wait_closed()
    assert result.outcome is RunOutcome.ERROR
    assert "OSError" in result.detail or "Error" in result.detail
    assert connections == []
