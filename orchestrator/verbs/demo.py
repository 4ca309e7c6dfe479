"""Run the demo sweep on two simulated GPU hosts and print the HTML report's path.

The demo is the product end to end with only the hosts simulated: the packaged sweep
(``orchestrator/data/demo.yaml``; ``sweeps/demo.yaml`` is its readable copy) runs over SSH
against simulated hosts with a live display, the hosts are restored, the simulator stops, and
the report is written. It exits 0 when every trial ended as the demo intends: the one on a flag
the simulated build does not know fails with ``bad-flag`` (found by the preflight), the DFLASH
config with a window smaller than its block fails with ``invalid-config``, everything else
succeeds.

``--engine vllm`` runs the same on simulated ``vllm serve`` hosts (``demo-vllm.yaml``): SGLang's
``--speculative-algorithm`` fails as ``bad-flag``, a speculative budget that leaves no tokens
to schedule as ``invalid-config``.
"""

from __future__ import annotations

import argparse
import asyncio
import importlib.resources
import os
import sys
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from orchestrator.answers import Answer, answer_sweep
from orchestrator.log import configure_logging, get_logger
from orchestrator.report import render_report
from orchestrator.sim.cli import simulated_hosts
from orchestrator.sim.sshd import BindError
from orchestrator.store import Store
from orchestrator.sweepfile import Sweep, parse_sweep
from orchestrator.verbs.common import EXIT_FAILED, EXIT_OK, emit_json
from orchestrator.verbs.outcome import print_outcome
from orchestrator.verbs.run import run_in_foreground

DEMO_RESOURCES = {"sglang": "demo.yaml", "vllm": "demo-vllm.yaml"}
"""The packaged demo sweep of each engine the simulator serves (``sweeps/`` has copies)."""
# The simulated server at 5x speed: a demo of about a minute and a half, slow enough that the
# benchmark client keeps up on 2 cores (at 10x its points were flagged saturated, and the
# answer rested on them).
DEMO_TIME_SCALE = 0.2
# config knob -> the failure cause the demo expects for configs that carry it.
# The two demos' knobs differ: SGLang's old window flag and vLLM's stray SGLang flag, vLLM's
# sequence budget that leaves no room for the drafts.
EXPECTED_FAILURES = {
    "legacy_window": "bad-flag",
    "sglang_algorithm": "bad-flag",
    "max_seqs": "invalid-config",
}


def demo_source(engine: str = "sglang") -> str:
    return f"orchestrator/data/{DEMO_RESOURCES[engine]}"


def load_demo_sweep(engine: str = "sglang") -> tuple[Sweep, str]:
    """The packaged demo sweep of ``engine`` and its text."""
    resource = DEMO_RESOURCES[engine]
    text = (importlib.resources.files("orchestrator") / "data" / resource).read_text("utf-8")
    return parse_sweep(text, demo_source(engine)), text


def expected_cause(config: dict[str, Any]) -> str | None:
    """How the demo means a trial to end: None = success, else its failure cause."""
    for knob, cause in EXPECTED_FAILURES.items():
        if config.get(knob) is not None:
            return cause
    window, block = config.get("window"), config.get("block_size")
    if isinstance(window, int) and isinstance(block, int) and window < block:
        return "invalid-config"
    return None


def unexpected_outcomes(results: dict[str, Any]) -> list[str]:
    """Trials that did not end as the demo intends (empty: the demo ran as intended)."""
    problems = []
    for trial in results["trials"]:
        want, got = _wanted_and_got(trial)
        if got != want:
            problems.append(f"{trial['key']}: expected {want or 'success'}, got {got or 'success'}")
    return problems


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--state-dir",
        type=Path,
        help="where the demo's key, hosts, store and report go "
        "(default: the directory of the demo sweep's identity_file)",
    )
    parser.add_argument("--json", action="store_true", help="the results as JSON on stdout")
    parser.add_argument(
        "--engine",
        choices=sorted(DEMO_RESOURCES),
        default="sglang",
        help="the engine the simulated hosts run: SGLang (default) or vLLM's `vllm serve`",
    )


async def _demo(
    sweep: Sweep, text: str, state_dir: Path
) -> tuple[dict[str, Any], tuple[Answer, ...], Path]:
    hosts = [(h.name, h.address, h.port) for h in sweep.hosts]
    db = state_dir / "demo.db"
    for stale in (db, Path(f"{db}-wal"), Path(f"{db}-shm")):
        stale.unlink(missing_ok=True)  # every demo starts from an empty store
    async with simulated_hosts(
        state_dir,
        hosts,
        defaults={"ddtree": True, "time_scale": DEMO_TIME_SCALE},
        engine=sweep.engine,
    ):
        outcome = await run_in_foreground(
            sweep, text, db=str(db), source=demo_source(sweep.engine), replace=True
        )
    report = state_dir / "demo-report.html"
    async with await Store.open(db) as store:
        html = await render_report(store, [outcome.sweep_id], "html")
    temp = report.with_suffix(".html.tmp")
    temp.write_text(html, encoding="utf-8")
    os.replace(temp, report)
    return outcome.results, answer_sweep(outcome.sweep_results, sweep), report.resolve()


def run(args: argparse.Namespace) -> int:
    log = get_logger(verb="demo")
    sweep, text = load_demo_sweep(getattr(args, "engine", "sglang"))
    identity = sweep.hosts[0].identity_file or "~/.local/state/orchestrator/demo/id_ed25519"
    state_dir = (args.state_dir or Path(identity).expanduser().parent).resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    log_file = _keep_every_event(args, state_dir)
    if args.state_dir is not None:
        sweep = _with_state_dir(sweep, state_dir)
    try:
        results, answers, report = asyncio.run(_demo(sweep, text, state_dir))
    except BindError as exc:  # the hosts' addresses are taken: a plain line, no traceback
        print(f"demo: {exc}", file=sys.stderr)
        return EXIT_FAILED
    problems = unexpected_outcomes(results)
    for problem in problems:
        log.error("demo.unexpected", problem=problem)
    if args.json:
        emit_json(
            {
                "report": str(report),
                "as_intended": not problems,
                "results": results,
                "answers": [answer.to_json() for answer in answers],
            }
        )
    else:
        print(str(report))
    print_outcome(results, answers=answers, note=_as_intended)
    print(
        "demo: every trial ended as intended (the failures above are the demo's own)"
        if not problems
        else "demo: " + "; ".join(problems),
        file=sys.stderr,
    )
    for line in report_commands(report, state_dir / "demo.db", log_file, sweep.name):
        print(line, file=sys.stderr)
    return EXIT_OK if not problems else EXIT_FAILED


def report_commands(
    report: Path, db: Path, log_file: Path | None, sweep: str = "demo"
) -> list[str]:
    """Where a person goes next: the commands that open this demo's report and log."""
    lines = [
        f"open the report: xdg-open {_shown(report)}",
        f"as Markdown:     orchestrator report {sweep} --db {_shown(db)} --format md",
    ]
    if log_file is not None:
        lines.append(f"every event:     {_shown(log_file)} (JSON lines)")
    return lines


def _shown(path: Path) -> str:
    """``~/...`` for a path under the home directory: shorter, and the shell expands it."""
    try:
        return f"~/{path.relative_to(Path.home())}"
    except ValueError:
        return str(path)


def _keep_every_event(args: argparse.Namespace, state_dir: Path) -> Path | None:
    """Without ``--log-file`` the demo keeps its whole log in ``demo.log`` (a terminal shows
    only warnings); a fresh file per demo, like the store."""
    if getattr(args, "log_file", None):
        return Path(args.log_file).expanduser().resolve()
    log_file = state_dir / "demo.log"
    log_file.unlink(missing_ok=True)
    configure_logging(getattr(args, "log_level", "info"), log_file=log_file)
    return log_file


def _wanted_and_got(trial: Mapping[str, Any]) -> tuple[str | None, str | None]:
    """How the demo means a trial attempt to end and how it did (None: success)."""
    want = expected_cause(trial.get("config") or {})
    got = None if trial.get("state") == "done" else (trial.get("cause") or trial.get("state"))
    return want, got


def _as_intended(trial: Mapping[str, Any]) -> str | None:
    want, got = _wanted_and_got(trial)
    if want is None and got is None:
        return None
    return "as intended" if got == want else f"NOT as intended: {want or 'success'}"


def _with_state_dir(sweep: Sweep, state_dir: Path) -> Sweep:
    """The demo sweep with its hosts' key and known_hosts under ``state_dir``."""
    hosts = [
        host.model_copy(
            update={
                "identity_file": str(state_dir / "id_ed25519"),
                "known_hosts": str(state_dir / "known_hosts"),
            }
        )
        for host in sweep.hosts
    ]
    return sweep.model_copy(update={"hosts": hosts})
