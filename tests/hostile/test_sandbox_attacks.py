"""Generated programs that attack the coding anchor's sandbox, beyond those of
``tests/integration/test_sandbox.py``: read the host's secrets (/etc/shadow, a root-only SSH key,
PID 1's environment), ptrace or stop another process, reach the daemon's unix socket, flood the
output. Each must end as ERROR/TIMEOUT or read nothing, with the host untouched."""

from __future__ import annotations

import os
import secrets
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.bench.sandbox import (
    Containment,
    RunOutcome,
    SandboxConfig,
    resolve_containment,
    run_candidate,
)

FAST = SandboxConfig(wall_timeout_s=4.0, cpu_s=2, processes=32)


@pytest.fixture
async def contained() -> Containment:
    containment, _ = await resolve_containment(SandboxConfig())
    if containment not in (Containment.NAMESPACES, Containment.USER_NAMESPACE):
        pytest.skip(f"no namespace containment here (got {containment}); see docs/sandbox.md")
    return containment


@pytest.fixture
def victim() -> Iterator[subprocess.Popen[bytes]]:
    """A process of ours the sandboxed code must not be able to touch."""
    proc = subprocess.Popen(["sleep", "60"])
    try:
        yield proc
    finally:
        proc.kill()
        proc.wait()


def _state(pid: int) -> str:
    return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]


async def test_etc_shadow_is_not_readable(contained: Containment) -> None:
    if not Path("/etc/shadow").exists():
        pytest.skip("this machine has no /etc/shadow")
    code = "print(open('/etc/shadow').read()[:200])\n"
    result = await run_candidate(code, "", config=FAST)
    assert result.outcome is RunOutcome.ERROR, result
    assert "PermissionError" in result.detail or "FileNotFoundError" in result.detail
    assert "root:" not in result.stdout_tail


async def test_a_root_only_private_key_is_not_readable(
    contained: Containment, tmp_path: Path
) -> None:
    key = tmp_path / "id_ed25519"
    marker = f"PRIVATE-{secrets.token_hex(8)}"
    key.write_text(f"-----BEGIN OPENSSH PRIVATE KEY-----\n{marker}\n")
    key.chmod(0o600)
    code = f"print(open({str(key)!r}).read())\n"
    result = await run_candidate(code, "", config=FAST)
    assert result.outcome is RunOutcome.ERROR, result
    assert marker not in result.stdout_tail and marker not in result.detail


async def test_pid1_and_our_environment_are_out_of_reach(contained: Containment) -> None:
    secret = f"orch-token-{secrets.token_hex(8)}"
    os.environ["ORCH_HOSTILE_TOKEN"] = secret
    try:
        code = (
            "found = []\n"
            "for path in ('/proc/1/environ', f'/proc/{os.getppid()}/environ', "
            "'/proc/self/environ'):\n"
            "    try:\n"
            "        found.append(open(path, 'rb').read())\n"
            "    except OSError as exc:\n"
            "        found.append(type(exc).__name__.encode())\n"
            "print(found)\n"
        )
        result = await run_candidate("import os\n" + code, "", config=FAST)
    finally:
        del os.environ["ORCH_HOSTILE_TOKEN"]
    assert secret not in result.stdout_tail and secret not in result.detail
    assert b"ORCH_HOSTILE_TOKEN".decode() not in result.stdout_tail


async def test_ptrace_attach_to_another_process_fails(
    contained: Containment, victim: subprocess.Popen[bytes]
) -> None:
    code = (
        "import ctypes\n"
        "libc = ctypes.CDLL(None, use_errno=True)\n"
        f"rc = libc.ptrace(16, {victim.pid}, None, None)  # PTRACE_ATTACH\n"
        "print('ATTACH', rc, ctypes.get_errno())\n"
        "assert rc != 0, 'attached'\n"
        "raise SystemExit(3)\n"
    )
    result = await run_candidate(code, "", config=FAST)
    assert result.outcome is RunOutcome.ERROR, result
    assert "attached" not in result.detail
    assert _state(victim.pid) not in ("t", "T"), "the victim is being traced or stopped"
    assert victim.poll() is None


async def test_signals_to_other_processes_do_nothing(
    contained: Containment, victim: subprocess.Popen[bytes]
) -> None:
    code = (
        "import os, signal\n"
        f"for sig in (signal.SIGSTOP, signal.SIGTERM, signal.SIGKILL):\n"
        f"    for pid in ({victim.pid}, {os.getpid()}, 1):\n"
        "        try:\n"
        "            os.kill(pid, sig)\n"
        "        except OSError:\n"
        "            pass\n"
    )
    await run_candidate(code, "", config=FAST)
    time.sleep(0.1)
    assert victim.poll() is None and _state(victim.pid) not in ("t", "T")
    os.kill(os.getpid(), 0)


async def test_the_daemons_unix_socket_is_unreachable(
    contained: Containment, tmp_path: Path
) -> None:
    """Network namespaces do not cover path-named unix sockets: the file mode must."""
    path = tmp_path / "orchestrator.sock"
    server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    server.bind(str(path))
    path.chmod(0o600)
    server.listen(1)
    server.settimeout(0.1)
    try:
        code = (
            "import socket\n"
            "s = socket.socket(socket.AF_UNIX)\n"
            f"s.connect({str(path)!r})\n"
            "s.sendall(b'POST /restore HTTP/1.0\\r\\n\\r\\n')\n"
        )
        result = await run_candidate(code, "", config=FAST)
        accepted = True
        try:
            server.accept()[0].close()
        except TimeoutError:
            accepted = False
    finally:
        server.close()
    assert result.outcome is RunOutcome.ERROR, result
    assert not accepted, "the sandbox reached the socket"


async def test_an_output_flood_is_cut_and_capped(contained: Containment) -> None:
    code = "import sys\nchunk = 'A' * 65536\nwhile True:\n    sys.stdout.write(chunk)\n"
    began = time.monotonic()
    result = await run_candidate(code, "", config=FAST)
    assert time.monotonic() - began < FAST.wall_timeout_s + 60  # cut, not left flooding
    assert result.outcome in (RunOutcome.ERROR, RunOutcome.TIMEOUT), result
    assert len(result.stdout_tail) <= 64 * 1024


async def test_a_stopped_sandbox_leaves_nothing_running(contained: Containment) -> None:
    """A child that escapes into its own session still dies with the sandbox."""
    code = (
        "import os, sys, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n"
        "    os.setsid()\n"
        "    time.sleep(60)\n"
        "print('PIDS', os.getpid(), pid, flush=True)\n"
        "time.sleep(60)\n"
    )
    result = await run_candidate(code, "", config=FAST)
    assert result.outcome is RunOutcome.TIMEOUT, result
    words = result.stdout_tail.split()
    assert "PIDS" in words, result.stdout_tail
    # The candidate and the child it set loose, by their own word: other tests' sandboxes
    # (other workers run some at the same time) are not this test's to count.
    ours = {int(words[words.index("PIDS") + 1]), int(words[words.index("PIDS") + 2])}
    deadline = time.monotonic() + 30  # for a process that never goes: the poll ends sooner
    while (left := ours & _sandbox_pids()) and time.monotonic() < deadline:
        time.sleep(0.1)
    assert not left, left


def _sandbox_pids() -> set[int]:
    """Processes that look like a sandboxed interpreter (``python -I -``)."""
    found = set()
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if argv[1:3] == [b"-I", b"-"]:
                found.add(int(entry.name))
    return found
