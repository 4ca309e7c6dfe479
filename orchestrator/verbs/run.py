"""Run one sweep in the foreground (live display on stderr, results in the store)."""

from __future__ import annotations

import argparse
import asyncio
import signal
import sys

from orchestrator.answers import answered
from orchestrator.hostloop import StopSignal
from orchestrator.progress import LiveProgress, print_outcome
from orchestrator.runner import SweepOutcome, run_sweep
from orchestrator.search.source import trial_source_for
from orchestrator.store import Store, SweepNameConflict
from orchestrator.sweepfile import Sweep
from orchestrator.sweeptracker import SweepShape
from orchestrator.verbs.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    BadInput,
    add_db_argument,
    db_path,
    emit_json,
    load_sweep_or_raise,
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the sweep file (YAML)")
    add_db_argument(parser)
    parser.add_argument("--json", action="store_true", help="the final summary as JSON on stdout")
    parser.add_argument(
        "--replace",
        action="store_true",
        help="run even if a sweep of this name with other content exists (its results stay)",
    )


async def run_in_foreground(
    sweep: Sweep, text: str, *, db: str | None, source: str | None, replace: bool
) -> SweepOutcome:
    """The sweep with a live display; Ctrl-C / SIGTERM stop at the next safe step and restore
    the hosts, a second one stops at once (the sweep resumes on the next run)."""
    stop = StopSignal()
    loop = asyncio.get_running_loop()
    main = asyncio.current_task()

    def on_signal() -> None:
        if stop.stopping and main is not None:
            main.cancel()
        print("stopping at the next safe step (again to abort now)", file=sys.stderr)
        stop.stop("cancel")

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    async with await Store.open(db_path(db)) as store:
        with LiveProgress(SweepShape.of(sweep), sweep=sweep.name) as progress:
            return await run_sweep(
                sweep,
                text,
                store,
                source_path=source,
                replace=replace,
                progress=progress,
                stop=stop,
                trials=trial_source_for(sweep),
            )


def run(args: argparse.Namespace) -> int:
    try:
        sweep, text = load_sweep_or_raise(args.file)
        outcome = asyncio.run(
            run_in_foreground(sweep, text, db=args.db, source=args.file, replace=args.replace)
        )
    except BadInput as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    except SweepNameConflict as error:
        print(f"{args.file}: {error} (submit with --replace to run it anyway)", file=sys.stderr)
        return EXIT_BAD_INPUT
    answered_results = answered(outcome.sweep_results, sweep)
    if args.json:
        emit_json(answered_results.to_json())
    else:
        failed = [t for t in outcome.results["trials"] if t["state"] == "failed"]
        print_outcome(outcome.results, answers=answered_results.answers)
        print(
            f"sweep {outcome.name} (id {outcome.sweep_id}): {outcome.state}, "
            f"{len(outcome.results['trials'])} trial attempts, {len(failed)} failed",
            file=sys.stderr,
        )
        why = (outcome.results.get("summary") or {}).get("error")
        if why:
            print(f"  {why}", file=sys.stderr)
        store = f" --db {args.db}" if args.db else ""
        print(
            f"report: orchestrator report {outcome.name}{store} --format html "
            f"-o {outcome.name}.html",
            file=sys.stderr,
        )
    return EXIT_OK if outcome.all_succeeded else EXIT_FAILED
