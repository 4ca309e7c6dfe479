"""Every verb says on stderr only what it means to say.

A library's deprecation warning, a traceback or a stray log line on stderr is noise to the
person at the terminal and breaks whatever reads the verb's output (a log that must start with
the verb's first line, a script that treats any stderr as failure). A fresh install that
resolves a newer dependency than the one tested (cryptography 51 made asyncssh print six
``CryptographyDeprecationWarning`` lines on every command) is caught here: the README's
commands install from requirements/lock.txt, and this test runs against that install.

Each verb's ``--help``, then a quick real use of each verb that needs no host, as real
subprocesses; the verbs that drive hosts (check, run, report, the demo) are run the same way,
with the same stderr check, by tests/integration/test_docs_commands.py.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from orchestrator import cli

REPO = Path(__file__).resolve().parents[2]
ORCHESTRATOR = Path(sys.executable).parent / "orchestrator"

NOT_THE_VERBS_OWN = re.compile(
    r"(^\S[^\n]*:\d+: \w*Warning: )|(Traceback \(most recent call last\))|(^\s+warnings\.warn)",
    re.MULTILINE,
)
"""A Python warning as ``warnings`` prints it (``file:line: SomeWarning: ...``), or a
traceback."""


def assert_only_its_own_words(stderr: str, what: str) -> None:
    """No warning a library printed and no traceback in ``stderr``."""
    found = NOT_THE_VERBS_OWN.search(stderr)
    assert found is None, f"{what} printed on stderr what it does not mean to say:\n{stderr}"


def _orchestrator(*args: str, tmp_path: Path) -> subprocess.CompletedProcess[str]:
    env = {
        **{k: v for k, v in os.environ.items() if not k.startswith("PYTHONWARNINGS")},
        "HOME": str(tmp_path),
        "XDG_STATE_HOME": str(tmp_path / "state"),
        "ORCHESTRATOR_SOCKET": str(tmp_path / "no-daemon.sock"),
    }
    return subprocess.run(
        [str(ORCHESTRATOR), *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=REPO,
        env=env,
        stdin=subprocess.DEVNULL,
    )


HELPS = [[verb, "--help"] for verb in cli.VERBS] + [
    ["sim", "up", "--help"],
    ["sim", "truth", "--help"],
]


@pytest.mark.parametrize("args", HELPS, ids=[" ".join(a) for a in HELPS])
def test_every_verbs_help_prints_only_its_help(args: list[str], tmp_path: Path) -> None:
    done = _orchestrator(*args, tmp_path=tmp_path)
    assert done.returncode == 0, done.stderr
    assert done.stdout.startswith("usage: orchestrator "), done.stdout[:300]
    assert done.stderr == "", done.stderr


REPEATS_WARNING = (
    "warning: benchmark.repeats is 1: a config's interval borrows restart-to-restart "
    "variance from repeated configs, or is within-run only\n"
)
SCREENING_WARNING = (
    "warning: host type sim-gpu: search.max_restarts 16 leaves 10 start(s) to explore after "
    "2 baseline start(s), holding 2 back for the race and 2 for the confirmations: at most "
    '10 of the 11 configs are measured, and the answer says "Best found so far" rather than '
    '"Deploy" while the unexplored ones may beat it; max_restarts 17 screens every config '
    "once\n"
)
"""What the demo's sweep file earns a warning for (its restarts cannot screen its whole space;
two of its configs are refused by the preflight, so the demo still measures every other)."""

USES: list[tuple[list[str], int, str]] = [
    (["--version"], 0, ""),
    (["schema"], 0, ""),
    (["validate", "sweeps/demo.yaml"], 0, SCREENING_WARNING),
    (["plan", "sweeps/demo.yaml"], 0, REPEATS_WARNING + SCREENING_WARNING),
    (["sim", "truth", "sweeps/demo.yaml"], 0, ""),
    (["validate", "sweeps/demo-vllm.yaml"], 0, ""),
    (["results", "nope", "--db", "{tmp}/empty.db"], 2, "no sweep named or numbered 'nope'\n"),
]
"""A real use of each verb that needs no host or daemon: the arguments, the exit status, and
the whole of what stderr must say."""


@pytest.mark.parametrize("args,status,stderr", USES, ids=[" ".join(u[0]) for u in USES])
def test_a_quick_real_use_prints_only_what_it_means(
    args: list[str], status: int, stderr: str, tmp_path: Path
) -> None:
    done = _orchestrator(*(a.replace("{tmp}", str(tmp_path)) for a in args), tmp_path=tmp_path)
    assert done.returncode == status, done.stderr
    assert done.stderr == stderr


def test_a_client_verb_without_a_daemon_says_one_plain_line(tmp_path: Path) -> None:
    done = _orchestrator("status", "--json", tmp_path=tmp_path)
    assert done.returncode == 1
    assert done.stdout == ""
    (line,) = done.stderr.splitlines()
    assert line.startswith(f"no daemon answers on {tmp_path / 'no-daemon.sock'}: "), line
    assert "is `orchestrator daemon` running?" in line


def test_importing_the_ssh_layer_prints_nothing() -> None:
    """Every verb that reaches a host imports asyncssh (and through it cryptography): the
    dependency warnings of a drifted install show here first."""
    done = subprocess.run(
        [sys.executable, "-c", "import orchestrator.host.ssh, orchestrator.runner"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={k: v for k, v in os.environ.items() if not k.startswith("PYTHONWARNINGS")},
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == ""
