"""``make demo`` as the README tells a new user to run it: at a terminal (tmux), in a fresh home.

One run serves two tests, which check different things of the same run:
tests/integration/test_demo_tty.py reads the screen (live display, quiet log, the outcome) and
tests/integration/test_docs_commands.py runs the README's report command on the store the run
left in ``~/.local/state/orchestrator/demo``. The demo takes a minute or more of two cores, so
it runs once per test session (:func:`shared_terminal_demo`): the first pytest-xdist worker
that needs it runs it under a lock in the directory the session's workers share, the others
read what it left (the tmux server and every process of the demo are gone by then). The demo
off a terminal (``--json``) is tests/integration/test_demo.py's own run.
Uses the demo's fixed loopback addresses, which each test worker has in a network of its own
(tests/parallel.py).
"""

from __future__ import annotations

import fcntl
import json
import os
import shlex
import shutil
import subprocess
import sys
import tempfile
import time
import uuid
from dataclasses import asdict, dataclass
from pathlib import Path

import pytest

from tests.sysdeps import CannotInstall, apt_install

REPO = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
WIDTH, HEIGHT = 100, 50
RUN_TIMEOUT_S = 300


@dataclass(frozen=True)
class TerminalDemo:
    """What a person at the terminal saw, and where the demo left its files."""

    home: str
    """The run's $HOME: the demo's default state directory is under it."""
    command: str
    exit_status: str
    frames: list[str]
    """Each distinct screen that showed the live display, in order."""
    everything: str
    """The whole pane at the end, its scrollback included (wrapped lines joined)."""

    @property
    def state_dir(self) -> Path:
        return Path(self.home) / ".local" / "state" / "orchestrator" / "demo"


def fresh_home_env(home: Path) -> dict[str, str]:
    """The environment of a new user whose home is ``home``: none of this machine's state or
    socket overrides, this interpreter's bin first on PATH, temporary files under the home."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("XDG_STATE_HOME", "ORCHESTRATOR_SOCKET", "COLUMNS", "TMUX")
    }
    scratch = home / "tmp"  # `sim up` without --state-dir makes its directory there
    scratch.mkdir(parents=True, exist_ok=True)
    env.update(HOME=str(home), TMPDIR=str(scratch), PATH=f"{BIN}:{os.environ.get('PATH', '')}")
    return env


def demo_command() -> str:
    """``make demo`` in this checkout when its .venv is the one under test and up to date (the
    target would otherwise install one); else the command the target runs."""
    stamp = subprocess.run(
        ["make", "-q", ".venv/.installed-run"], cwd=REPO, capture_output=True, timeout=30
    )
    if Path(sys.prefix).resolve() == (REPO / ".venv").resolve() and stamp.returncode == 0:
        return "make demo"
    return f"{shlex.quote(str(BIN / 'orchestrator'))} demo"


def _tmux() -> str:
    """tmux, installed with apt-get when missing (CI may start without it)."""
    found = shutil.which("tmux")
    if found is None:
        try:
            apt_install("tmux")
        except CannotInstall as reason:
            pytest.skip(f"tmux could not be installed: {reason}")
        found = shutil.which("tmux")
    assert found is not None, "apt-get installed tmux but it is not on PATH"
    return found


def _capture(tmux: list[str], *history: str) -> str:
    """The pane as a person sees it (``-J``: a line the terminal wrapped comes back whole)."""
    done = subprocess.run(
        [*tmux, "capture-pane", "-p", "-J", "-t", "demo", *history],
        capture_output=True,
        text=True,
        timeout=30,
    )
    return done.stdout


def run_terminal_demo(root: Path) -> TerminalDemo:
    """Run the demo in a private tmux server (its own socket, killed afterwards), reading the
    pane as it runs."""
    home = root / "home"
    env = fresh_home_env(home)
    marker = root / "exit-status"
    command = demo_command()
    script = f"{command}; echo $? > {shlex.quote(str(marker))}; sleep 600"
    tmux = [_tmux(), "-L", f"orch-test-{uuid.uuid4().hex[:8]}", "-f", "/dev/null"]
    try:
        subprocess.run(
            [*tmux, "new-session", "-d", "-s", "demo", "-x", str(WIDTH), "-y", str(HEIGHT),
             "-c", str(REPO), script],
            check=True,
            timeout=30,
            env=env,
        )  # fmt: skip
        frames: list[str] = []
        deadline = time.monotonic() + RUN_TIMEOUT_S
        while not marker.exists() and time.monotonic() < deadline:
            screen = _capture(tmux)
            if "elapsed" in screen and (not frames or frames[-1] != screen):
                frames.append(screen)
            time.sleep(0.4)
        assert marker.exists(), "the demo did not end in time:\n" + _capture(tmux, "-S", "-")
        time.sleep(0.3)
        everything = _capture(tmux, "-S", "-")
    finally:
        subprocess.run([*tmux, "kill-server"], capture_output=True, timeout=30)
    return TerminalDemo(str(home), command, marker.read_text().strip(), frames, everything)


def shared_terminal_demo(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> TerminalDemo:
    """The session's one terminal demo (see the module's docstring)."""
    if worker_id == "master":  # not a parallel run
        return run_terminal_demo(tmp_path_factory.mktemp("terminal-demo"))
    shared = tmp_path_factory.getbasetemp().parent  # this session's, shared by its workers
    made = shared / "terminal-demo.json"
    with (shared / "terminal-demo.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if made.exists():
            return TerminalDemo(**json.loads(made.read_text()))
        # a directory of its own: a run that failed on another worker leaves its files behind
        demo = run_terminal_demo(Path(tempfile.mkdtemp(prefix="terminal-demo-", dir=shared)))
        made.write_text(json.dumps(asdict(demo)))
        return demo
