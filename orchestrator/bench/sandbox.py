"""Runs untrusted (model-written) Python code with its hidden tests, contained.

rlimits alone do not hold a root process: RLIMIT_NPROC does not bind root, and nothing in
them stops network use, signals to the parent, reading the parent's environment through
/proc or writing wherever the user may write. The daemon may run as root, so the strongest
available containment is chosen (see `Containment` and docs/sandbox.md), and the result says
which one held:

- root: util-linux `unshare` (new network, PID, mount, IPC and UTS namespaces, a fresh /proc,
  private tmpfs on /tmp, /var/tmp and /dev/shm) then `setpriv` to an unprivileged uid/gid with
  no supplementary groups, no capabilities and no_new_privs;
- not root: the same namespaces inside a user namespace mapped to the caller's own uid;
- otherwise a dropped uid (root without namespaces) or rlimits only, reported as such.

In every mode: `prlimit` sets CPU time, address space, file size, open files, processes and
core size before anything else is exec'd; the interpreter runs isolated (`python -I`) with a
fixed environment (nothing inherited, so no secret reaches the code); the program arrives on
stdin; a wall timeout kills the whole process group; output is captured up to a cap.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import secrets
import shutil
import signal
import sys
import tempfile
import time
from dataclasses import dataclass, field
from enum import StrEnum

from orchestrator.log import get_logger

_log = get_logger(component="sandbox")

NOBODY = 65534
SETUP_FAILED_EXIT = 125
SETUP_FAILED_TAG = "orchestrator-sandbox: setup failed"

# Exit statuses of the runner program (see `_RUNNER`); anything else is an ERROR.
_EXIT_PASS = 0
_EXIT_SYNTAX = 3
_EXIT_FAIL = 4
_EXIT_ERROR = 5
_EXIT_BAD_TESTS = 6


class RunOutcome(StrEnum):
    """What running a candidate against its tests came to."""

    PASS = "pass"
    FAIL = "fail"  # an assertion of the tests failed
    ERROR = "error"  # an exception, a signal, or an exit before the tests finished
    SYNTAX = "syntax"  # the candidate does not compile
    TIMEOUT = "timeout"  # wall timeout or CPU-time limit


class Containment(StrEnum):
    """How the code was contained; documented in docs/sandbox.md."""

    NAMESPACES = "namespaces+uid"
    """root: new net/pid/mount/ipc/uts namespaces, private /tmp, unprivileged uid, no caps."""
    USER_NAMESPACE = "user-namespace"
    """not root: the same namespaces in a user namespace; files of the caller's uid writable."""
    UID_DROP = "uid-drop"
    """root without namespaces: unprivileged uid; network and the host's /tmp reachable."""
    RLIMITS_ONLY = "rlimits-only"
    """no isolation beyond rlimits, a temp dir and an empty environment."""


class SandboxError(RuntimeError):
    """The sandbox itself could not run (not the code's fault); carries the evidence."""

    def __init__(self, message: str, *, containment: Containment, stderr: str = "") -> None:
        self.containment = containment
        self.stderr = stderr
        super().__init__(f"{message} (containment={containment}): {stderr[-500:]}")


@dataclass(frozen=True)
class SandboxConfig:
    """Limits and identity for one sandboxed run. Timeouts are seconds; sizes are bytes."""

    wall_timeout_s: float = 10.0
    cpu_s: int = 5
    address_space: int = 1 << 30
    file_size: int = 16 << 20
    open_files: int = 64
    processes: int = 64
    tmpfs_size: int = 64 << 20
    output_cap: int = 64 << 10
    uid: int = NOBODY
    gid: int = NOBODY
    interpreter: str | None = None
    """Python to run the code with; default: the first usable of this process's base
    interpreter and /usr/bin/python3 (the sandbox uid must be able to reach it)."""
    containment: Containment | None = None
    """Force a mode (tests); default: the strongest that works here."""
    drain_timeout_s: float = 2.0
    """How long to keep reading output after the process group is gone."""


@dataclass(frozen=True)
class SandboxResult:
    """One run of untrusted code: its outcome and the evidence for it."""

    outcome: RunOutcome
    exit_code: int | None
    signal: int | None
    stdout_tail: str
    stderr_tail: str
    wall_s: float
    containment: Containment
    detail: str = ""
    """One line saying why (the exception line, the signal, the limit hit)."""


@dataclass
class _Capture:
    data: bytearray = field(default_factory=bytearray)
    total: int = 0


@dataclass(frozen=True)
class _RawRun:
    exit_code: int | None
    signal: int | None
    stdout: str
    stderr: str
    wall_s: float
    timed_out: bool


_RUNNER = """\
import sys
import traceback

_CANDIDATE = {candidate!r}
_TESTS = {tests!r}
_MARKER = {marker!r}


def _main():
    try:
        candidate = compile(_CANDIDATE, "<candidate>", "exec")
    except (SyntaxError, ValueError):
        traceback.print_exc()
        return {syntax}
    try:
        tests = compile(_TESTS, "<tests>", "exec")
    except (SyntaxError, ValueError):
        traceback.print_exc()
        return {bad_tests}
    namespace = {{"__name__": "__candidate__", "__builtins__": __builtins__}}
    try:
        exec(candidate, namespace)
    except BaseException:
        traceback.print_exc()
        return {error}
    try:
        exec(tests, namespace)
    except AssertionError:
        traceback.print_exc()
        return {fail}
    except BaseException:
        traceback.print_exc()
        return {error}
    sys.stdout.flush()
    sys.stdout.write("\\n" + _MARKER + "\\n")
    sys.stdout.flush()
    return 0


sys.exit(_main())
"""


def runner_source(candidate: str, tests: str, marker: str) -> str:
    """The program fed to the sandboxed interpreter: candidate, then tests, exit status
    saying which phase failed, and `marker` printed only when every test passed (so an
    early ``os._exit(0)`` in the candidate cannot pass)."""
    return _RUNNER.format(
        candidate=candidate,
        tests=tests,
        marker=marker,
        syntax=_EXIT_SYNTAX,
        bad_tests=_EXIT_BAD_TESTS,
        error=_EXIT_ERROR,
        fail=_EXIT_FAIL,
    )


# Runs as root inside the new namespaces: private tmpfs over the world-writable dirs, then
# the (uid-dropping) command. Not `exec`: this shell stays PID 1 of the namespace, so the
# code is never init (init ignores default-action signals) and cannot signal its parent.
_NS_SETUP = f"""\
size=$1; shift
for d in /tmp /var/tmp /dev/shm; do
  if [ -d "$d" ]; then
    mount -t tmpfs -o "size=$size,mode=1777,nosuid,nodev" sandbox "$d" || {{
      echo "{SETUP_FAILED_TAG}: mount tmpfs on $d" >&2; exit {SETUP_FAILED_EXIT}; }}
  fi
done
cd /tmp || exit {SETUP_FAILED_EXIT}
"$@"
status=$?
exit $status
"""

_NAMESPACE_FLAGS = (
    "--net",
    "--pid",
    "--fork",
    "--kill-child",
    "--mount",
    "--mount-proc",
    "--propagation",
    "private",
    "--ipc",
    "--uts",
)
_DROP_CAPS = ("--no-new-privs", "--inh-caps=-all", "--bounding-set=-all")


def _rlimit_argv(config: SandboxConfig) -> list[str]:
    return [
        "prlimit",
        f"--cpu={config.cpu_s}:{config.cpu_s + 1}",
        f"--as={config.address_space}",
        f"--fsize={config.file_size}",
        f"--nofile={config.open_files}",
        f"--nproc={config.processes}",
        "--core=0",
        "--",
    ]


def build_argv(config: SandboxConfig, containment: Containment, interpreter: str) -> list[str]:
    """The launcher command line for `containment` (pure; the program arrives on stdin)."""
    python = [interpreter, "-I", "-"]
    drop_uid = [
        "setpriv",
        f"--reuid={config.uid}",
        f"--regid={config.gid}",
        "--clear-groups",
        *_DROP_CAPS,
        "--",
    ]
    limits = _rlimit_argv(config)
    sh = ["/bin/sh", "-c", _NS_SETUP, "sandbox-setup", str(config.tmpfs_size)]
    if containment is Containment.NAMESPACES:
        return [*limits, "unshare", *_NAMESPACE_FLAGS, "--", *sh, *drop_uid, *python]
    if containment is Containment.USER_NAMESPACE:
        drop_caps = ["setpriv", *_DROP_CAPS, "--"]
        return [
            *limits,
            "unshare",
            "--user",
            "--map-root-user",
            *_NAMESPACE_FLAGS,
            "--",
            *sh,
            *drop_caps,
            *python,
        ]
    if containment is Containment.UID_DROP:
        return [*limits, *drop_uid, *python]
    return [*limits, *python]


def _environment(home: str) -> dict[str, str]:
    """A fixed environment: nothing of the orchestrator's (tokens, keys) is inherited."""
    return {
        "PATH": "/usr/local/bin:/usr/bin:/bin",
        "HOME": home,
        "TMPDIR": home,
        "LANG": "C.UTF-8",
        "LC_ALL": "C.UTF-8",
    }


def _candidate_modes() -> list[Containment]:
    if os.geteuid() == 0:
        return [Containment.NAMESPACES, Containment.UID_DROP]
    return [Containment.USER_NAMESPACE, Containment.RLIMITS_ONLY]


def _candidate_interpreters() -> list[str]:
    found: list[str] = []
    for path in (getattr(sys, "_base_executable", ""), sys.executable, "/usr/bin/python3"):
        if path and os.path.exists(path):
            real = os.path.realpath(path)
            if real not in found:
                found.append(real)
    return found


_probe_cache: dict[
    tuple[int, Containment | None, str | None, int, int], tuple[Containment, str]
] = {}


async def resolve_containment(config: SandboxConfig) -> tuple[Containment, str]:
    """The strongest containment that works here and an interpreter usable inside it.

    Found by running ``python -c pass`` through each launcher once (cached per process):
    whether namespaces work depends on the kernel, the container and its seccomp profile,
    which no static check tells reliably.
    """
    key = (os.geteuid(), config.containment, config.interpreter, config.uid, config.gid)
    if key in _probe_cache:
        return _probe_cache[key]
    modes = [config.containment] if config.containment else _candidate_modes()
    interpreters = [config.interpreter] if config.interpreter else _candidate_interpreters()
    failures: list[str] = []
    for mode in modes:
        for interpreter in interpreters:
            run = await _run_program(
                "pass\n", config=config, containment=mode, interpreter=interpreter
            )
            if run.exit_code == 0:
                _probe_cache[key] = (mode, interpreter)
                _log.info("sandbox.containment", containment=str(mode), python=interpreter)
                return mode, interpreter
            failures.append(f"{mode}/{interpreter}: rc={run.exit_code} {run.stderr[-200:]}")
    raise SandboxError(
        "no sandbox launcher works here",
        containment=modes[-1],
        stderr="\n".join(failures),
    )


async def run_candidate(
    code: str, tests: str, *, config: SandboxConfig | None = None
) -> SandboxResult:
    """Run `code` then `tests` in the sandbox and classify the outcome."""
    config = config or SandboxConfig()
    containment, interpreter = await resolve_containment(config)
    marker = f"orchestrator-sandbox-pass-{secrets.token_hex(16)}"
    run = await _run_program(
        runner_source(code, tests, marker),
        config=config,
        containment=containment,
        interpreter=interpreter,
    )
    if run.exit_code == SETUP_FAILED_EXIT and SETUP_FAILED_TAG in run.stderr:
        raise SandboxError("sandbox setup failed", containment=containment, stderr=run.stderr)
    passed_marker = marker in run.stdout
    outcome, detail = classify_run(run, passed_marker=passed_marker)
    if outcome is RunOutcome.ERROR and run.exit_code == _EXIT_BAD_TESTS:
        raise SandboxError(
            "the hidden tests do not compile", containment=containment, stderr=run.stderr
        )
    stdout = run.stdout.replace(f"\n{marker}\n", "").replace(marker, "")
    return SandboxResult(
        outcome=outcome,
        exit_code=run.exit_code,
        signal=run.signal,
        stdout_tail=stdout,
        stderr_tail=run.stderr,
        wall_s=run.wall_s,
        containment=containment,
        detail=detail,
    )


def classify_run(run: _RawRun, *, passed_marker: bool) -> tuple[RunOutcome, str]:
    """Map exit status, signal and timeout to an outcome and a one-line reason."""
    last_line = _last_line(run.stderr)
    if run.timed_out:
        return RunOutcome.TIMEOUT, "wall timeout"
    if run.signal is not None:
        name = _signal_name(run.signal)
        if run.signal == signal.SIGXCPU:
            return RunOutcome.TIMEOUT, f"cpu time limit ({name})"
        return RunOutcome.ERROR, f"killed by {name}"
    if run.exit_code == _EXIT_PASS:
        if passed_marker:
            return RunOutcome.PASS, ""
        return RunOutcome.ERROR, "exited 0 before the tests finished"
    if run.exit_code == _EXIT_SYNTAX:
        return RunOutcome.SYNTAX, last_line
    if run.exit_code == _EXIT_FAIL:
        return RunOutcome.FAIL, last_line or "AssertionError"
    return RunOutcome.ERROR, last_line or f"exit status {run.exit_code}"


def _last_line(text: str) -> str:
    lines = [line.strip() for line in text.strip().splitlines() if line.strip()]
    return lines[-1][:300] if lines else ""


def _signal_name(number: int) -> str:
    try:
        return signal.Signals(number).name
    except ValueError:
        return f"signal {number}"


async def _run_program(
    program: str, *, config: SandboxConfig, containment: Containment, interpreter: str
) -> _RawRun:
    workdir = tempfile.mkdtemp(prefix="orchestrator-sandbox-")
    try:
        if containment is Containment.UID_DROP:
            os.chown(workdir, config.uid, config.gid)
        home = "/tmp" if containment in _NS_MODES else workdir
        argv = build_argv(config, containment, interpreter)
        return await _spawn_and_wait(
            argv,
            program.encode(),
            env=_environment(home),
            cwd=workdir,
            config=config,
            in_namespace=containment in _NS_MODES,
        )
    finally:
        shutil.rmtree(workdir, ignore_errors=True)


_NS_MODES = (Containment.NAMESPACES, Containment.USER_NAMESPACE)


async def _spawn_and_wait(
    argv: list[str],
    stdin: bytes,
    *,
    env: dict[str, str],
    cwd: str,
    config: SandboxConfig,
    in_namespace: bool,
) -> _RawRun:
    started = time.monotonic()
    proc = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.PIPE,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd=cwd,
        start_new_session=True,
    )
    out, err = _Capture(), _Capture()
    assert proc.stdout is not None and proc.stderr is not None and proc.stdin is not None
    readers = [
        asyncio.create_task(_read_tail(proc.stdout, out, config.output_cap)),
        asyncio.create_task(_read_tail(proc.stderr, err, config.output_cap)),
    ]
    timed_out = False
    try:
        await _feed(proc.stdin, stdin)
        try:
            async with asyncio.timeout(config.wall_timeout_s):
                await proc.wait()
        except TimeoutError:
            timed_out = True
        wall_s = time.monotonic() - started
    finally:
        _kill_group(proc.pid)
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(config.drain_timeout_s):
                await proc.wait()
        _, pending = await asyncio.wait(readers, timeout=config.drain_timeout_s)
        for task in pending:
            task.cancel()
    exit_code, sig = _decode_status(proc.returncode, in_namespace=in_namespace)
    return _RawRun(
        exit_code=exit_code,
        signal=sig,
        stdout=out.data.decode("utf-8", errors="replace"),
        stderr=err.data.decode("utf-8", errors="replace"),
        wall_s=wall_s,
        timed_out=timed_out,
    )


async def _feed(stream: asyncio.StreamWriter, data: bytes) -> None:
    try:
        stream.write(data)
        await stream.drain()
        stream.close()
    except (BrokenPipeError, ConnectionResetError):
        pass  # the process died before reading its program: its exit status tells why


async def _read_tail(stream: asyncio.StreamReader, capture: _Capture, cap: int) -> None:
    """Read to EOF, keeping only the last `cap` bytes (tracebacks are at the end)."""
    while chunk := await stream.read(65536):
        capture.total += len(chunk)
        capture.data += chunk
        if len(capture.data) > cap:
            del capture.data[: len(capture.data) - cap]


def _kill_group(pgid: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pgid, signal.SIGKILL)


def _decode_status(returncode: int | None, *, in_namespace: bool) -> tuple[int | None, int | None]:
    """(exit code, signal). Inside namespaces the code runs under a shell that reports a
    signal death as 128+N, which is decoded back to the signal."""
    if returncode is None:
        return None, None
    if returncode < 0:
        return None, -returncode
    if in_namespace and 128 < returncode < 128 + 65 and returncode != SETUP_FAILED_EXIT:
        return None, returncode - 128
    return returncode, None


def describe(containment: Containment) -> str:
    """What a containment mode does and does not hold (for reports and logs)."""
    return {
        Containment.NAMESPACES: "no network, own PID namespace, private /tmp, unprivileged uid, "
        "no capabilities, rlimits",
        Containment.USER_NAMESPACE: "no network, own PID namespace, private /tmp, rlimits; files "
        "the daemon's user can write stay writable",
        Containment.UID_DROP: "unprivileged uid, rlimits; network and the host's /tmp reachable",
        Containment.RLIMITS_ONLY: "rlimits, temp dir and empty environment only; network, the "
        "daemon's files and its processes reachable",
    }[containment]
