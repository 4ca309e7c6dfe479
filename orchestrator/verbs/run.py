"""Run one sweep in the foreground (live display on stderr, results in the store)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import AsyncIterator

from orchestrator.answers import answered
from orchestrator.hostloop import INTERRUPT, StopSignal
from orchestrator.progress.live import LiveProgress
from orchestrator.progress.tracker import SweepShape
from orchestrator.runner import SweepOutcome, run_sweep, submit_sweep
from orchestrator.search.source import trial_source_for
from orchestrator.store import Store, StoreError, SweepNameConflict
from orchestrator.sweepfile import Sweep
from orchestrator.team import Team, daemon_identity
from orchestrator.types import content_hash
from orchestrator.verbs.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    BadInput,
    add_db_argument,
    db_path,
    emit_json,
    load_sweep_or_raise,
    shown_db,
)
from orchestrator.verbs.outcome import print_outcome


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
    """The sweep with a live display; a first Ctrl-C / SIGTERM stops at the next safe step,
    restores the hosts and leaves the sweep ``interrupted``; a second aborts the current step
    at once (the restore still runs). Running the same file again continues it."""
    stop = StopSignal()
    loop = asyncio.get_running_loop()

    def on_signal() -> None:
        if not stop.stopping:
            print(
                "stopping at the next safe step, then restoring the hosts"
                " (Ctrl-C again to abort the current step)",
                file=sys.stderr,
            )
            stop.stop(INTERRUPT)
        elif not stop.aborted.is_set():
            print("aborting the current step; restoring the hosts", file=sys.stderr)
            stop.abort(INTERRUPT)
        else:
            print("restoring the hosts; they are listed when done", file=sys.stderr)

    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, on_signal)
    async with await Store.open(db_path(db)) as store:
        first = await continuing(store, sweep, text, replace=replace)
        if first:
            print(first, file=sys.stderr)
        async with claimed(store, sweep, text, source=source, replace=replace, stop=stop):
            return await _run_live(sweep, text, store, source=source, replace=replace, stop=stop)


async def _run_live(
    sweep: Sweep, text: str, store: Store, *, source: str | None, replace: bool, stop: StopSignal
) -> SweepOutcome:
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


class RunElsewhere(Exception):
    """The sweep is in a store several daemons share, and another of them runs it now."""


@contextlib.asynccontextmanager
async def claimed(
    store: Store,
    sweep: Sweep,
    text: str,
    *,
    source: str | None,
    replace: bool,
    stop: StopSignal,
) -> AsyncIterator[None]:
    """Over a store several daemons share, the sweep claimed for this run as a daemon claims
    it (so no daemon starts it meanwhile), its claim renewed while it runs and released after;
    :class:`RunElsewhere` when a daemon runs it already. Killed, the run leaves its claim to
    expire, and a daemon continues the sweep."""
    if not store.shared:
        yield
        return
    record = (await submit_sweep(store, sweep, text, source_path=source, replace=replace)).sweep
    team = Team(store, daemon_identity(kind="run"))
    if not await team.claim(record.id, wait=True, interrupted=True):
        holder = (await team.elsewhere()).get(record.id)
        if holder is not None:
            raise RunElsewhere(
                f"sweep {record.name} (id {record.id}) is run by {holder.daemon} now:"
                " follow it with `orchestrator status` on a daemon"
            )
        yield  # it ended: the runner says how
        return

    def lost(_: int, reason: str, why: str) -> None:
        print(f"stopping: {why}", file=sys.stderr)
        stop.stop(reason)

    keeping = asyncio.create_task(team.keep(lambda: [record.id], lost), name="claim")
    try:
        yield
    finally:
        keeping.cancel()
        await asyncio.gather(keeping, return_exceptions=True)
        await team.release(record.id)


async def continuing(store: Store, sweep: Sweep, text: str, *, replace: bool) -> str | None:
    """The first line when this file's sweep is already in the store: continued (interrupted,
    or left running by a run that died), or ended (said plainly; ``--replace`` after a cancel
    or a failure starts it again)."""
    record = await store.find_sweep(sweep.name)
    if (
        record is None
        or record.replaced_at is not None
        or record.content_hash != content_hash(text)
    ):
        return None
    trials = (await store.results(record.id)).trials
    done = sum(1 for t in trials if t.state == "done")
    if record.state == "interrupted":
        return (
            f"continuing sweep {record.name} (id {record.id}), interrupted earlier: {done} trial"
            f" attempts done are kept, nothing is measured twice"
        )
    if record.state == "running":
        return (
            f"continuing sweep {record.name} (id {record.id}), whose last run stopped without"
            f" finishing (killed or crashed): {done} trial attempts done are kept"
        )
    if record.state in ("cancelled", "failed") and replace:
        return f"starting sweep {record.name} again: its last run was {record.state}"
    if record.state in ("cancelled", "failed", "done"):
        again = " (--replace starts it again)" if record.state != "done" else ""
        return f"sweep {record.name} (id {record.id}) already ended {record.state}{again}"
    return None


def run(args: argparse.Namespace) -> int:
    try:
        sweep, text = load_sweep_or_raise(args.file)
        outcome = asyncio.run(
            run_in_foreground(sweep, text, db=args.db, source=args.file, replace=args.replace)
        )
    except KeyboardInterrupt:  # before the sweep's own handlers were installed: nothing ran
        print("interrupted before the sweep started; nothing changed", file=sys.stderr)
        return EXIT_FAILED
    except BadInput as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    except SweepNameConflict as error:
        print(f"{args.file}: {error} (submit with --replace to run it anyway)", file=sys.stderr)
        return EXIT_BAD_INPUT
    except RunElsewhere as error:
        print(error, file=sys.stderr)
        return EXIT_FAILED
    except StoreError as error:  # the store could not be opened, or failed under the run
        print(f"orchestrator run: {error}", file=sys.stderr)
        return EXIT_FAILED
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
        summary = outcome.results.get("summary") or {}
        why = summary.get("error")
        if why:
            print(f"  {why}", file=sys.stderr)
        store = f" --db {shown_db(args.db)}" if args.db else ""
        for host in summary.get("unrestored_hosts") or []:
            print(
                f"  NOT restored: {host} (its backup is kept: orchestrator restore {host}{store})",
                file=sys.stderr,
            )
        if outcome.state == "interrupted":
            print(
                f"  interrupted: run `orchestrator run {args.file}{store}` again to continue",
                file=sys.stderr,
            )
        print(
            f"report: orchestrator report {outcome.name}{store} --format html "
            f"-o {outcome.name}.html",
            file=sys.stderr,
        )
    return EXIT_OK if outcome.all_succeeded else EXIT_FAILED
