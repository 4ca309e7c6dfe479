"""systemd, journal and GPU I/O functions against real subprocesses.

Each function runs its real commands through a small Transport over local subprocesses
(written here, so these tests do not depend on ``host/local.py``). The host's tools are stand-in
scripts put first on PATH: a ``journalctl`` that serves JSON entries from a file and drops its
stream on purpose, an ``nvidia-smi`` whose answers change over time, and a ``systemctl`` that
loads unit files only on ``daemon-reload`` (as the real manager does).
"""

# The test transport's local file operations are instant; blocking calls are fine here.
from __future__ import annotations

import asyncio
import contextlib
import json
import os
import sys
import textwrap
import time
from collections.abc import AsyncIterator, Sequence
from pathlib import Path
from typing import Any

import pytest

from orchestrator.host import gpu, journal, systemd
from orchestrator.host.dropin import TrialInvocation, render_dropin
from orchestrator.host.transport import CommandFailed, CommandTimeout, CompletedCommand
from orchestrator.host.unitcontrol import SystemctlControl


class SubprocessTransport:
    """The Transport protocol over local subprocesses, with ``bin_dir`` first on PATH."""

    def __init__(self, bin_dir: Path, env: dict[str, str]) -> None:
        self.env = {**os.environ, **env, "PATH": f"{bin_dir}:{os.environ['PATH']}"}
        self.calls: list[tuple[str, ...]] = []

    @property
    def name(self) -> str:
        return "local-test"

    async def run(
        self,
        argv: Sequence[str],
        *,
        timeout: float,
        check: bool = False,
        privileged: bool = False,
        idempotent: bool = True,
        stdin: bytes | None = None,
    ) -> CompletedCommand:
        self.calls.append(tuple(argv))
        process = await asyncio.create_subprocess_exec(
            *argv,
            stdin=asyncio.subprocess.PIPE,
            stdout=asyncio.subprocess.PIPE,
            stderr=asyncio.subprocess.PIPE,
            env=self.env,
        )
        try:
            out, err = await asyncio.wait_for(process.communicate(stdin), timeout)
        except TimeoutError:
            process.kill()
            await process.wait()
            raise CommandTimeout(self.name, f"{argv[0]} timed out") from None
        result = CompletedCommand(tuple(argv), process.returncode or 0, out, err)
        if check and not result.ok:
            raise CommandFailed(self.name, result)
        return result

    async def read_file(self, path: str, *, timeout: float) -> bytes:
        return Path(path).read_bytes()

    async def write_file_atomic(
        self, path: str, data: bytes, *, mode: int = 0o644, timeout: float
    ) -> None:
        temporary = Path(path + ".tmp")
        temporary.write_bytes(data)
        temporary.chmod(mode)
        temporary.replace(path)

    async def remove_file(self, path: str, *, timeout: float) -> bool:
        try:
            Path(path).unlink()
        except FileNotFoundError:
            return False
        return True

    @contextlib.asynccontextmanager
    async def _stream(self, argv: Sequence[str]) -> AsyncIterator[AsyncIterator[bytes]]:
        self.calls.append(tuple(argv))
        process = await asyncio.create_subprocess_exec(
            *argv, stdout=asyncio.subprocess.PIPE, env=self.env
        )
        assert process.stdout is not None
        stdout = process.stdout

        async def lines() -> AsyncIterator[bytes]:
            async for line in stdout:
                yield line.rstrip(b"\n")

        try:
            yield lines()
        finally:
            if process.returncode is None:
                process.terminate()
            await process.wait()

    def stream(
        self, argv: Sequence[str], *, privileged: bool = False
    ) -> contextlib.AbstractAsyncContextManager[AsyncIterator[bytes]]:
        return self._stream(argv)

    async def close(self) -> None:
        return None


def _script(bin_dir: Path, name: str, body: str) -> None:
    path = bin_dir / name
    path.write_text(f"#!{sys.executable}\n" + textwrap.dedent(body))
    path.chmod(0o755)


# --- journald --------------------------------------------------------------------------------

JOURNALCTL = """
import json, os, sys, time
args = sys.argv[1:]
with open(os.environ["JOURNAL_ARGV_LOG"], "a") as log:
    log.write(json.dumps(args) + "\\n")
after = next((a.split("=", 1)[1] for a in args if a.startswith("--after-cursor=")), None)
lines = next((int(a.split("=", 1)[1]) for a in args if a.startswith("--lines=")), None)
follow = "--follow" in args
drop_after = int(os.environ.get("JOURNAL_DROP_AFTER", "0"))
path = os.environ["JOURNAL_FILE"]

def entries():
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]

current = entries()
cursors = [e["__CURSOR"] for e in current]
if after is not None:
    if after not in cursors:
        print("Failed to seek to cursor: Invalid argument", file=sys.stderr)
        sys.exit(1)
    position = cursors.index(after) + 1
elif lines is not None:
    position = max(0, len(current) - lines)
else:
    position = 0
sent = 0
while True:
    current = entries()
    while position < len(current):
        print(json.dumps(current[position]), flush=True)
        position += 1
        sent += 1
        if drop_after and sent >= drop_after:
            sys.exit(0)  # the stream drops, as when an SSH channel is lost
    if not follow:
        break
    time.sleep(0.02)
"""


def _journal_entry(n: int, message: Any, **extra: str) -> dict[str, Any]:
    return {
        "__CURSOR": f"s=test;i={n:x}",
        "__REALTIME_TIMESTAMP": str(1_700_000_000_000_000 + n),
        "_PID": "4242",
        "_SYSTEMD_UNIT": "sglang.service",
        "MESSAGE": message,
        **extra,
    }


@pytest.fixture
def journal_host(tmp_path: Path) -> tuple[SubprocessTransport, Path, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir, "journalctl", JOURNALCTL)
    entries = tmp_path / "entries.jsonl"
    entries.write_text("")
    argv_log = tmp_path / "argv.jsonl"
    transport = SubprocessTransport(
        bin_dir, {"JOURNAL_FILE": str(entries), "JOURNAL_ARGV_LOG": str(argv_log)}
    )
    return transport, entries, argv_log


def _append(path: Path, *entries: dict[str, Any]) -> None:
    with path.open("a") as f:
        for entry in entries:
            f.write(json.dumps(entry) + "\n")


async def test_follower_resumes_after_drops_without_loss_or_repeats(
    journal_host: tuple[SubprocessTransport, Path, Path],
) -> None:
    transport, entries_file, argv_log = journal_host
    transport.env["JOURNAL_DROP_AFTER"] = "3"
    # Entry 5 is the first half of a split line and the last of the first connection's three
    # (3, 4, 5): the stream drops while it is held, so the resume must read it again.
    initial = [_journal_entry(n, f"line {n}") for n in range(5)]
    initial.append(_journal_entry(5, "A" * 8, _LINE_BREAK="line-max"))
    initial.append(_journal_entry(6, "B" * 4))
    _append(entries_file, *initial)

    follower = journal.JournalFollower(
        transport, "sglang.service", initial[2]["__CURSOR"], reconnect_delay=0.01
    )
    got: list[journal.JournalEntry] = []

    async def consume() -> None:
        async with contextlib.aclosing(aiter(follower)) as entries:
            async for entry in entries:
                got.append(entry)
                if len(got) == 2:  # more lines arrive while following
                    _append(entries_file, *[_journal_entry(n, f"line {n}") for n in range(7, 12)])
                if len(got) == 8:
                    return

    await asyncio.wait_for(consume(), timeout=20)
    messages = [e.message for e in got]
    expected = ["line 3", "line 4", "A" * 8 + "B" * 4]
    expected += [f"line {n}" for n in range(7, 12)]
    assert messages == expected
    assert len({e.cursor for e in got}) == len(got)
    assert follower.last_cursor == got[-1].cursor == "s=test;i=b"
    assert follower.reconnects >= 3

    calls = [json.loads(line) for line in argv_log.read_text().splitlines()]
    resumed_from = [
        next(a for a in call if a.startswith("--after-cursor=")).split("=", 1)[1] for call in calls
    ]
    assert resumed_from[:4] == ["s=test;i=2", "s=test;i=4", "s=test;i=7", "s=test;i=a"]
    assert all("--follow" in call and "--all" in call for call in calls)


async def test_follower_from_now_and_a_bad_cursor(
    journal_host: tuple[SubprocessTransport, Path, Path],
) -> None:
    transport, entries_file, argv_log = journal_host
    _append(entries_file, *[_journal_entry(n, f"old {n}") for n in range(3)])
    follower = journal.JournalFollower(transport, "sglang.service", None, reconnect_delay=0.01)
    iterator = aiter(follower)
    first = asyncio.ensure_future(anext(iterator))
    await asyncio.sleep(0.3)
    _append(entries_file, _journal_entry(3, "new"))
    entry = await asyncio.wait_for(first, timeout=10)
    assert entry.message == "new"
    await iterator.aclose()
    assert "--lines=0" in json.loads(argv_log.read_text().splitlines()[0])

    broken = journal.JournalFollower(
        transport, "sglang.service", "s=nope", reconnect_delay=0.01, max_failures=2
    )
    with pytest.raises(journal.JournalError):
        async for _ in broken:
            pass


async def test_read_entries_and_malformed_cursor(
    journal_host: tuple[SubprocessTransport, Path, Path],
) -> None:
    transport, entries_file, _ = journal_host
    _append(
        entries_file,
        _journal_entry(0, "before"),
        _journal_entry(1, list(b"\x1b[31merror\x1b[0m: unrecognized arguments: --x 1")),
        _journal_entry(2, None),
    )
    entries = await journal.read_entries(transport, "sglang.service", "s=test;i=0", timeout=10)
    assert [e.message for e in entries] == ["error: unrecognized arguments: --x 1", None]
    assert entries[1].message_truncated
    with pytest.raises(journal.JournalError) as caught:
        await journal.read_entries(transport, "sglang.service", "garbage", timeout=10)
    assert caught.value.exit_status == 1 and "cursor" in caught.value.stderr


async def test_a_failure_line_that_lands_after_systemds_exit_line_still_names_the_cause(
    journal_host: tuple[SubprocessTransport, Path, Path],
) -> None:
    """journald takes PID 1's "Main process exited" and the server's own stderr by different
    paths, so the traceback's last line can be stored after it. The excerpt waits a grace for
    it instead of ending at systemd's line, and the cause stays ``invalid-config``."""
    from types import SimpleNamespace

    from orchestrator.engines.sglang.engine import SGLANG
    from orchestrator.lifecycle import LifecycleTimeouts, _classify, _excerpt

    transport, entries_file, _ = journal_host
    _append(
        entries_file,
        _journal_entry(0, "Loading weights"),
        _journal_entry(1, "sglang.service: Main process exited, code=exited, status=1/FAILURE"),
    )
    session: Any = SimpleNamespace(
        transport=transport, unit="sglang.service", timeouts=LifecycleTimeouts(), engine=SGLANG
    )

    async def late_traceback() -> None:
        await asyncio.sleep(0.25)
        _append(entries_file, _journal_entry(2, "ValueError: window 8 is below the block 16"))

    writer = asyncio.create_task(late_traceback())
    lines = await _excerpt(session, None, None, settle=2.0)
    await writer
    assert "ValueError: window 8 is below the block 16" in lines
    state: Any = SimpleNamespace(exec_main_status=1, result="exit-code")
    cause, _ = _classify(SGLANG, lines, state)
    assert cause == "invalid-config"


# --- GPU memory ------------------------------------------------------------------------------

NVIDIA_SMI = """
import json, os, sys, time
with open(os.environ["GPU_TIMELINE"]) as f:
    timeline = json.load(f)
if timeline.get("fail"):
    print("NVIDIA-SMI has failed because it couldn't communicate with the NVIDIA driver.")
    sys.exit(9)
elapsed = time.time() - timeline["start"]
phase = [p for p in timeline["phases"] if p["at"] <= elapsed][-1]
query = sys.argv[1]
if query.startswith("--query-gpu=index"):
    for i, (uuid, used) in enumerate(zip(timeline["uuids"], phase["used"])):
        print(f"{i}, {uuid}, {used}, 81559")
elif query.startswith("--query-compute-apps"):
    for uuid_index, pid, mib in phase["apps"]:
        print(f"{timeline['uuids'][uuid_index]}, {pid}, {mib}")
elif query.startswith("--query-gpu=name"):
    print("NVIDIA H200, 570.86.15")
"""


@pytest.fixture
def gpu_host(tmp_path: Path) -> tuple[SubprocessTransport, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir, "nvidia-smi", NVIDIA_SMI)
    timeline = tmp_path / "timeline.json"
    return SubprocessTransport(bin_dir, {"GPU_TIMELINE": str(timeline)}), timeline


def _timeline(path: Path, phases: list[dict[str, Any]], **extra: Any) -> None:
    uuids = ["GPU-aaaa", "GPU-bbbb"]
    path.write_text(json.dumps({"start": time.time(), "uuids": uuids, "phases": phases, **extra}))


async def test_wait_released_waits_for_processes_then_memory(
    gpu_host: tuple[SubprocessTransport, Path],
) -> None:
    transport, timeline = gpu_host
    probe = gpu.NvidiaSmiProbe(transport, timeout=10)
    _timeline(timeline, [{"at": 0, "used": [4, 4], "apps": []}])
    baseline = await gpu.record_baseline(probe, [0])
    assert dict(baseline.used_mib) == {0: 4}
    assert (await probe.identities())[0].name == "NVIDIA H200"

    _timeline(
        timeline,
        [
            {"at": 0, "used": [70004, 4], "apps": [[0, 4242, 70000]]},
            {"at": 0.5, "used": [60000, 4], "apps": []},  # the driver's teardown lag
            {"at": 1.0, "used": [6, 4], "apps": [[1, 777, 100]]},  # another GPU's process
        ],
    )
    started = time.monotonic()
    status = await gpu.wait_released(probe, baseline, [0], timeout=10, poll_interval=0.1)
    waited = time.monotonic() - started
    assert status.released and status.excess_mib == {0: 2}
    assert 0.9 <= waited < 5


async def test_wait_released_checks_unit_pids_first(
    gpu_host: tuple[SubprocessTransport, Path],
) -> None:
    transport, timeline = gpu_host
    probe = gpu.NvidiaSmiProbe(transport, timeout=10)
    _timeline(timeline, [{"at": 0, "used": [4, 4], "apps": []}])
    baseline = await gpu.record_baseline(probe, None)
    gone_at = time.monotonic() + 0.5

    async def unit_pids_gone() -> bool:
        return time.monotonic() >= gone_at

    status = await gpu.wait_released(
        probe, baseline, None, unit_pids_gone=unit_pids_gone, timeout=10, poll_interval=0.1
    )
    assert status.released and time.monotonic() >= gone_at


async def test_wait_released_times_out_with_leftovers(
    gpu_host: tuple[SubprocessTransport, Path],
) -> None:
    transport, timeline = gpu_host
    probe = gpu.NvidiaSmiProbe(transport, timeout=10)
    baseline = gpu.Baseline(used_mib={0: 4, 1: 4})
    _timeline(timeline, [{"at": 0, "used": [70004, 4], "apps": [[0, 4243, 70000]]}])
    started = time.monotonic()
    with pytest.raises(gpu.MemoryNotReleased) as caught:
        await gpu.wait_released(probe, baseline, [0, 1], timeout=0.6, poll_interval=0.1)
    # It waited its whole timeout, then gave up: the memory is never released here, so only
    # the timeout can have ended the wait.
    assert time.monotonic() - started >= 0.6
    assert [(x.pid, x.gpu, x.used_mib) for x in caught.value.leftovers] == [(4243, 0, 70000)]
    assert caught.value.status.excess_mib[0] == 70000


async def test_nvidia_smi_failure_is_a_typed_error(
    gpu_host: tuple[SubprocessTransport, Path],
) -> None:
    transport, timeline = gpu_host
    _timeline(timeline, [], fail=True)
    with pytest.raises(gpu.GpuQueryError, match="couldn't communicate"):
        await gpu.NvidiaSmiProbe(transport, timeout=10).snapshot()


async def test_nvml_probe_real_library() -> None:
    probe = gpu.NvmlProbe()
    try:
        snapshot = await probe.snapshot()
    except gpu.NvmlUnavailable as exc:
        assert "NVML library not found" in str(exc)
        return
    finally:
        probe.close()
    # A machine with a driver: every GPU reports its memory.
    assert snapshot.gpus and all(g.total_mib for g in snapshot.gpus)


# --- systemd ---------------------------------------------------------------------------------

SYSTEMCTL = """
import json, os, sys
root = os.environ["UNIT_ROOT"]
state_path = os.path.join(root, "manager.json")
args = [a for a in sys.argv[1:] if a != "--"]
verb, unit = args[0], args[-1]

def files(unit):
    fragment = os.path.join(root, unit)
    d = fragment + ".d"
    dropins = sorted(os.path.join(d, n) for n in os.listdir(d)) if os.path.isdir(d) else []
    return fragment, [p for p in dropins if p.endswith(".conf")]

def load():
    return json.load(open(state_path)) if os.path.exists(state_path) else {}

if verb == "daemon-reload":
    fragment, dropins = files(os.environ["UNIT_NAME"])
    json.dump({"fragment": fragment, "dropins": dropins,
               "snapshot": {p: open(p).read() for p in [fragment, *dropins]}},
              open(state_path, "w"))
elif verb == "show":
    loaded = load()
    _, on_disk = files(unit)
    stale = on_disk != loaded["dropins"] or any(
        open(p).read() != text for p, text in loaded["snapshot"].items() if os.path.exists(p))
    print("Type=simple\\nMainPID=0\\nInvocationID=\\nActiveState=inactive\\nSubState=dead")
    print("LoadState=loaded\\nFragmentPath=" + loaded["fragment"])
    print("DropInPaths=" + " ".join(loaded["dropins"]))
    print("NeedDaemonReload=" + ("yes" if stale else "no"))
    print("TimeoutStopUSec=1min 30s\\nKillMode=control-group")
elif verb == "cat":
    loaded = load()
    out = []
    for path in [loaded["fragment"], *loaded["dropins"]]:
        out.append(f"# {path}\\n" + open(path).read())
    sys.stdout.write("\\n".join(out))
else:
    print(f"unknown verb {verb}", file=sys.stderr)
    sys.exit(1)
"""

FRAGMENT = b"[Unit]\nDescription=SGLang\n\n[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server --port 30000\nEnvironment=A=1\n"  # noqa: E501


@pytest.fixture
def unit_host(tmp_path: Path) -> tuple[SubprocessTransport, Path]:
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    _script(bin_dir, "systemctl", SYSTEMCTL)
    root = tmp_path / "etc-systemd-system"
    root.mkdir()
    (root / "sglang.service").write_bytes(FRAGMENT)
    transport = SubprocessTransport(
        bin_dir, {"UNIT_ROOT": str(root), "UNIT_NAME": "sglang.service"}
    )
    return transport, root


INVOCATION = TrialInvocation(
    argv=("/usr/bin/python3", "-m", "sglang.launch_server", "--port", "30000", "--x", "5%"),
    environment={"A": "1", "SGLANG_DDTREE_MAX_TOPK": "4"},
)


async def test_install_verify_and_restore_byte_identical(
    unit_host: tuple[SubprocessTransport, Path],
) -> None:
    transport, root = unit_host
    control = SystemctlControl(transport)
    await systemd.daemon_reload(transport)
    ours = str(root / "sglang.service.d" / "90-orchestrator.conf")
    snapshot = await systemd.read_unit(transport, "sglang.service", control=control, path=ours)
    assert snapshot.files == (systemd.FileBytes(str(root / "sglang.service"), FRAGMENT),)
    assert snapshot.dropin_before is None and not snapshot.dropin_dir_existed
    assert snapshot.state.timeout_stop_s == 90.0

    text = render_dropin("night", "t1", INVOCATION)
    loaded = await systemd.install_dropin(
        transport, "sglang.service", text, INVOCATION, control=control, path=ours, timeout=10
    )
    assert loaded.service.exec_start == INVOCATION.argv
    assert Path(ours).read_text() == text

    # restore: our file and the directory we made are gone, the fragment untouched.
    foreign = await systemd.restore_files(transport, snapshot, control=control, timeout=10)
    assert foreign == []
    assert not (root / "sglang.service.d").exists()
    assert (root / "sglang.service").read_bytes() == FRAGMENT
    state = await systemd.show(transport, "sglang.service")
    assert state.drop_in_paths == () and state.need_daemon_reload is False


async def test_install_detects_a_later_dropin_overriding_ours(
    unit_host: tuple[SubprocessTransport, Path],
) -> None:
    transport, root = unit_host
    control = SystemctlControl(transport)
    dropin_dir = root / "sglang.service.d"
    dropin_dir.mkdir()
    admin = b"[Service]\nExecStart=\nExecStart=/bin/admin-override\n"
    (dropin_dir / "99-admin.conf").write_bytes(admin)
    await systemd.daemon_reload(transport)
    ours = str(dropin_dir / "90-orchestrator.conf")
    snapshot = await systemd.read_unit(transport, "sglang.service", control=control, path=ours)
    assert snapshot.dropin_dir_existed

    with pytest.raises(systemd.DropInNotApplied) as caught:
        await systemd.install_dropin(
            transport,
            "sglang.service",
            render_dropin("night", "t1", INVOCATION),
            INVOCATION,
            control=control,
            path=ours,
            timeout=10,
        )
    assert any("99-admin.conf" in p for p in caught.value.problems)
    await systemd.restore_files(transport, snapshot, control=control, timeout=10)
    assert sorted(p.name for p in dropin_dir.iterdir()) == ["99-admin.conf"]
    assert (dropin_dir / "99-admin.conf").read_bytes() == admin


async def test_stale_dropin_of_ours_is_recognised_and_restore_puts_back_bytes(
    unit_host: tuple[SubprocessTransport, Path],
) -> None:
    transport, root = unit_host
    control = SystemctlControl(transport)
    dropin_dir = root / "sglang.service.d"
    dropin_dir.mkdir()
    stale = render_dropin("crashed-sweep", "t9", INVOCATION).encode()
    (dropin_dir / "90-orchestrator.conf").write_bytes(stale)
    (dropin_dir / "90-orchestrator.conf").chmod(0o600)
    await systemd.daemon_reload(transport)
    ours = str(dropin_dir / "90-orchestrator.conf")
    snapshot = await systemd.read_unit(transport, "sglang.service", control=control, path=ours)
    assert snapshot.dropin_before == stale
    header = snapshot.stale_dropin
    assert header is not None and header.sweep == "crashed-sweep"

    await systemd.install_dropin(
        transport,
        "sglang.service",
        render_dropin("night", "t1", INVOCATION),
        INVOCATION,
        control=control,
        path=ours,
        timeout=10,
    )
    # As found (byte-identical) ...
    await systemd.restore_files(transport, snapshot, control=control, timeout=10)
    assert Path(ours).read_bytes() == stale
    assert Path(ours).stat().st_mode & 0o777 == 0o600
    # ... or, as the lifecycle decides for a stale one of ours, removed.
    await systemd.restore_files(
        transport, snapshot.without_stale_dropin(), control=control, timeout=10
    )
    assert not Path(ours).exists() and dropin_dir.exists()


async def test_systemctl_failure_is_a_typed_error(
    unit_host: tuple[SubprocessTransport, Path],
) -> None:
    transport, _ = unit_host
    with pytest.raises(systemd.SystemdError) as caught:
        await systemd.reset_failed(transport, "sglang.service")
    assert caught.value.result is not None and caught.value.result.exit_status == 1
    with pytest.raises(ValueError):
        await systemd.show(transport, "--all")


async def test_restore_removes_temp_files_a_killed_write_left_and_nothing_else(
    unit_host: tuple[SubprocessTransport, Path],
) -> None:
    transport, root = unit_host
    control = SystemctlControl(transport)
    await systemd.daemon_reload(transport)
    ours = str(root / "sglang.service.d" / "90-orchestrator.conf")
    snapshot = await systemd.read_unit(transport, "sglang.service", control=control, path=ours)
    await systemd.install_dropin(
        transport,
        "sglang.service",
        render_dropin("night", "t1", INVOCATION),
        INVOCATION,
        control=control,
        path=ours,
        timeout=10,
    )
    dropin_dir = root / "sglang.service.d"
    # What a SIGKILL between write and rename leaves behind, and an admin's file that only
    # looks similar.
    (dropin_dir / "90-orchestrator.conf.orchestrator-tmp-0123456789ab").write_bytes(b"half")
    (dropin_dir / "90-orchestrator.conf.bak").write_bytes(b"admin's")

    await systemd.restore_files(transport, snapshot, control=control, timeout=10)
    assert sorted(p.name for p in dropin_dir.iterdir()) == ["90-orchestrator.conf.bak"]
