"""Every command README.md and docs/*.md show works as shown.

The commands are read from the documents themselves: each line of a fenced code block that
starts with ``orchestrator``, ``make`` or an installed ``.../bin/orchestrator`` (a leading ``$ ``
and a trailing ``# comment`` dropped), and the README's inline ``orchestrator ...`` spans. Each
one is either run here, as a real subprocess through a shell in a fresh home directory after a
demo, or named in :data:`NOT_RUN` with the reason. The demo is ``make demo`` as the README shows
it, at a terminal: the session's one terminal demo (tests/integration/terminal_demo.py), whose
screen tests/integration/test_demo_tty.py checks; here the commands that follow it run in its
home. A command the documents gain that is neither
makes this test fail, so a new example gets tried or explained.

Placeholders stand for what an operator has: ``sweep.yaml`` and ``night.yaml`` are a small
sweep over the hosts ``orchestrator sim up`` starts (the sweep that ``sim up`` writes, cut to a
few points), ``NAME`` is its name, ``/opt/orchestrator/.venv/bin/`` is this interpreter's bin.
Uses the demo's fixed loopback addresses: run it under ``flock /tmp/orch-fixed.lock``.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml

from tests.integration.terminal_demo import BIN, TerminalDemo, demo_command, fresh_home_env
from tests.integration.test_verb_stderr import assert_only_its_own_words

REPO = Path(__file__).resolve().parents[2]
DOCUMENTS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md"))]

_DAEMON = "talks to a running daemon (tests/integration/test_daemon*.py run these verbs)"
NOT_RUN: dict[str, str] = {
    "make test": "the test suite itself",
    "orchestrator daemon": "a service that runs until stopped (tests/integration/test_daemon.py)",
    "orchestrator submit|status|cancel|results|restore ...": "a synopsis of verbs, not a command",
    "orchestrator --log-file PATH ...": "a synopsis of the option, not a command",
    "orchestrator report SWEEP [SWEEP...] [--db PATH | --socket PATH] [--format md|html|csv|json] "
    "[-o PATH] [--requests]": "a synopsis",
    "orchestrator sim up --hosts N [--json] [--faults FILE] [--time-scale X] [--state-dir DIR]": (
        "a synopsis"
    ),
    "make bench": "the orchestrator's own benchmarks: minutes of load, not part of the suite",
    "make bench-peers": "installs third-party load generators to compare against",
    "make real-engine-test": "the real-engine tier: builds llama.cpp (minutes); .ci/run runs it",
    "orchestrator run": "the verb named in a sentence, not a command",
    "orchestrator validate sweep.yaml [transcript]": "a transcript of an invalid file's output",
    "orchestrator submit night.yaml": _DAEMON,
    "orchestrator submit night.yaml --replace": _DAEMON,
    "orchestrator status": _DAEMON,
    "orchestrator status night": _DAEMON,
    "orchestrator status --json": _DAEMON,
    "orchestrator results night": _DAEMON,
    "orchestrator results night --json": _DAEMON,
    "orchestrator results 12 --json --db /var/lib/orchestrator/orchestrator.db": (
        "reads the store of a daemon installed as a service in /var/lib/orchestrator"
    ),
    "orchestrator report night --db /var/lib/orchestrator/orchestrator.db --format html "
    "-o night.html": "reads the store of a daemon installed as a service in /var/lib/orchestrator",
    "orchestrator adopt NAME --type T": "a synopsis",
    "orchestrator adopt night --type b300": _DAEMON,
    "orchestrator adopt night --type b300 --db /var/lib/orchestrator/orchestrator.db": (
        "changes the hosts of a daemon installed as a service (tests/faults/test_adopt.py "
        "adopts and restores on a simulated host, test_runner_real.py on real systemd)"
    ),
    "orchestrator restore b300-01": _DAEMON,
    "orchestrator bench --url http://host:30000 --model M": (
        "a full default benchmark matrix (minutes); tests/integration/test_bench_sim.py runs "
        "bench against the simulated server"
    ),
}
"""Commands the documents show that this test does not run, and why."""


@dataclass(frozen=True)
class Shown:
    document: str
    line: int
    command: str


def _command(text: str) -> str | None:
    line = text.strip()
    line = line.removeprefix("$ ")
    if not re.match(r"(orchestrator |make |\S*/bin/orchestrator )", line):
        return None
    return re.sub(r"\s+#\s.*$", "", line).strip()


def shown_commands() -> list[Shown]:
    """The commands, in document order."""
    found: list[Shown] = []
    for document in DOCUMENTS:
        text = document.read_text(encoding="utf-8")
        name = str(document.relative_to(REPO))
        in_block = transcript = False
        for number, line in enumerate(text.splitlines(), start=1):
            if line.lstrip().startswith("```"):
                in_block, transcript = not in_block, False
                continue
            if not in_block:
                continue
            # a shell session ("$ command", then its output) shows what a command printed
            transcript = transcript or line.startswith("$ ")
            command = _command(line)
            if command is not None:
                found.append(Shown(name, number, command + (" [transcript]" * transcript)))
        if document.name == "README.md":
            prose = re.sub(r"```.*?```", lambda m: "\n" * m.group().count("\n"), text, flags=re.S)
            for match in re.finditer(r"`(orchestrator [^`]+)`", prose):
                line = prose.count("\n", 0, match.start()) + 1
                found.append(Shown(name, line, " ".join(match.group(1).split())))
    return found


def test_every_command_the_documents_show_is_run_or_marked_with_a_reason() -> None:
    runnable = set(RUNS)
    unclassified = [
        f"{s.document}:{s.line}: {s.command}"
        for s in shown_commands()
        if s.command not in NOT_RUN and s.command not in runnable
    ]
    assert not unclassified, "shown in the docs, neither run nor marked: " + "; ".join(
        unclassified
    )


# --- running them ---------------------------------------------------------------------------

RUNS: dict[str, str] = {
    "make demo": "demo",
    "orchestrator report demo --db ~/.local/state/orchestrator/demo/demo.db --format md": "md",
    "orchestrator sim up --hosts 2": "sim",
    "/opt/orchestrator/.venv/bin/orchestrator --help": "ok",
    "orchestrator validate sweep.yaml": "ok",
    "orchestrator plan sweep.yaml --json": "json",
    "orchestrator check sweep.yaml": "ok",
    "orchestrator run sweep.yaml": "ok",
    "orchestrator report NAME --format html -o report.html": "html",
    "orchestrator validate night.yaml": "ok",
    "orchestrator plan night.yaml": "ok",
    "orchestrator check night.yaml": "ok",
    "orchestrator export NAME --format benchmark-report --output reports": "export",
}
"""Commands this test runs, in this order (the sim up ones while ``sim up`` runs), and what
their output must show."""


class _Shell:
    """Runs a command line as shown, through bash, in the test's home and work directory."""

    def __init__(self, home: Path, work: Path) -> None:
        self.home, self.work = home, work
        self.env = fresh_home_env(home)

    def concrete(self, command: str, name: str) -> str:
        return (
            command.replace("/opt/orchestrator/.venv/bin/", f"{BIN}/")
            .replace(" NAME ", f" {name} ")
        )

    def run(self, command: str, *, cwd: Path | None = None, timeout: float = 300) -> Any:
        return subprocess.run(
            ["bash", "-c", command],
            cwd=cwd or self.work,
            env=self.env,
            capture_output=True,
            text=True,
            timeout=timeout,
            stdin=subprocess.DEVNULL,
        )


def _small_sweep(written_by_sim_up: Path, name: str) -> str:
    """The sweep ``sim up`` wrote, cut to a baseline and one config on its first host, at one
    short point per trial (the commands are what is tried here, not the measurements)."""
    sweep = yaml.safe_load(written_by_sim_up.read_text())
    sweep["name"] = name
    sweep["hosts"] = sweep["hosts"][:1]
    sweep["configs"] = sweep["configs"][:1]
    sweep["benchmark"].update(
        contexts=[60], concurrency=[1], rounds=1, warmup_requests=0, max_tokens=16
    )
    sweep.pop("coding", None)
    return yaml.safe_dump(sweep, sort_keys=False)


def _check(what: str, command: str, done: Any, work: Path) -> None:
    shown = f"`{command}` exited {done.returncode}:\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
    assert done.returncode == 0, shown
    assert_only_its_own_words(done.stderr, f"`{command}`")
    if what == "md":
        # The report opens with the demo's answer; its failed configs are shown failed.
        assert "## Answer" in done.stdout and "FAILED" in done.stdout, shown
    elif what == "json":
        assert '"trials"' in done.stdout, shown
    elif what == "html":
        assert "<svg" in (work / "report.html").read_text(), shown
    elif what == "export":
        # one llm-d Benchmark Report per point of the sweep `run sweep.yaml` measured
        assert sorted(p.suffix for p in (work / "reports").iterdir()) == [".json", ".json"], shown


def test_the_documents_commands_run_as_shown(
    tmp_path: Path, terminal_demo: TerminalDemo
) -> None:
    work = tmp_path / "work"
    work.mkdir()
    shell = _Shell(Path(terminal_demo.home), work)
    shown = {s.command for s in shown_commands()}
    missing = [command for command in RUNS if command not in shown]
    assert not missing, f"no longer shown in the docs (update RUNS): {missing}"

    # The README's quick start (`make demo`, at a terminal), then its report of the demo.
    assert terminal_demo.command == demo_command()
    assert terminal_demo.exit_status == "0", terminal_demo.everything[-3000:]
    for command, what in RUNS.items():
        if what == "md":
            _check(what, command, shell.run(command), work)

    # The hosts of `sim up` stand in for the operator's; the sweep files are theirs.
    up = subprocess.Popen(
        ["bash", "-c", "exec orchestrator sim up --hosts 2"],
        cwd=work,
        env=shell.env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        sweep_file = _wait_for_sweep_file(up)
        name = "docs-night"
        for file in ("sweep.yaml", "night.yaml"):
            (work / file).write_text(_small_sweep(sweep_file, name))
        for command, what in RUNS.items():
            if what in ("demo", "md", "sim"):
                continue
            concrete = shell.concrete(command, name)
            _check(what, concrete, shell.run(concrete), work)
    finally:
        up.send_signal(signal.SIGINT)
        try:
            up.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(up.pid, signal.SIGKILL)
            up.wait(timeout=30)
    assert up.returncode == 0, up.stderr.read()[-2000:] if up.stderr else ""


def _wait_for_sweep_file(up: subprocess.Popen[str]) -> Path:
    assert up.stdout is not None
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        line = up.stdout.readline()
        if not line:
            if up.poll() is not None:
                errors = up.stderr.read() if up.stderr else ""
                pytest.fail(f"sim up exited {up.returncode}: {errors}")
            continue
        if line.startswith("Sweep file: "):
            return Path(line.removeprefix("Sweep file: ").strip())
    pytest.fail("sim up did not print its sweep file")
