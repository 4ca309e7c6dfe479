"""The ``orchestrator`` command: parses arguments and hands off to the modules that do the work.

Each verb is one entry in :data:`VERBS`: either an object in this file or the dotted name of a
module elsewhere (e.g. ``"orchestrator.sim.cli"``) that exposes ``configure_parser(parser)``
and ``run(args) -> int``; its docstring's first line is the verb's help. Exit codes: 0 ok,
1 a sweep or trial failed, 2 bad input. ``--json`` writes exactly one JSON document to stdout;
logs and progress go to stderr.
"""

from __future__ import annotations

import argparse
import importlib
import importlib.resources
import json
import sys
from collections.abc import Sequence
from typing import Any, Protocol, TextIO

from rich.console import Console
from rich.table import Table

from orchestrator import __version__
from orchestrator.log import configure_logging
from orchestrator.plan import (
    Plan,
    estimate_plan,
    format_duration,
    plan_json,
    plan_notes,
    plan_sweep,
    render_trial_dropin,
    repeat_warnings,
)
from orchestrator.sweepfile import Sweep, SweepFileError, check_sweep, sweep_json_schema
from orchestrator.types import EXIT_BAD_INPUT, EXIT_OK, content_hash


class Verb(Protocol):
    """What a verb provides: its arguments and what it does."""

    __doc__: str | None

    def configure_parser(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


def _emit_json(document: Any, out: TextIO | None = None) -> None:
    stream = out or sys.stdout
    stream.write(json.dumps(document, indent=2, sort_keys=False) + "\n")
    stream.flush()


def _report_problems(error: SweepFileError) -> None:
    for problem in error.problems:
        print(problem, file=sys.stderr)


def _problems_json(path: str, error: SweepFileError | None) -> dict[str, Any]:
    problems = error.problems if error else []
    return {
        "file": path,
        "valid": error is None,
        "problems": [
            {"file": p.file, "line": p.line, "field": p.field_path, "message": p.message}
            for p in problems
        ],
    }


def _config_text(trial_config: dict[str, Any]) -> str:
    if not trial_config:
        return "baseline (every knob removed)"
    return " ".join(f"{name}={json.dumps(value)}" for name, value in trial_config.items())


def _plan_lines(sweep: Sweep, plan: Plan) -> tuple[list[list[str]], list[str]]:
    """The trial table's rows, and the lines after it: which host runs what, how long."""
    rows = [
        [str(trial.ordinal), trial.host, _config_text(trial.config), trial.key]
        for trial in plan.trials
    ]
    estimate = estimate_plan(plan, sweep)
    after = [f"who runs what ({sweep.distribute}):"]
    for host in sweep.hosts:
        mine = plan.for_host(host.name)
        seconds = format_duration(estimate.per_host_s[host.name])
        after.append(
            f"  {host.name} (type {host.host_type}): {len(mine)} trial(s), about {seconds}"
        )
        after.extend(
            f"    {_config_text(trial.config)}" + (f" (repeat {trial.repeat})" * (trial.repeat > 1))
            for trial in mine
        )
    after.append(
        f"estimate: about {format_duration(estimate.total_s)} for the sweep "
        f"(hosts in parallel; {format_duration(estimate.trial_s)} per trial: "
        f"restart {format_duration(estimate.restart_s)}, benchmark "
        f"{format_duration(estimate.bench_s)}, coding {format_duration(estimate.coding_s)})"
    )
    after.extend(f"  assumes {line}" for line in estimate.assumptions)
    after.extend(plan_notes(sweep, plan))
    return rows, after


_COLUMNS = ("#", "host", "config", "key")


def _print_plan(sweep: Sweep, plan: Plan, *, show_dropins: bool, out: TextIO | None = None) -> None:
    """The plan for a person: a rich table on a terminal; plain lines, never wrapped, when
    piped (a drop-in folded at 80 columns is not the drop-in)."""
    stream = out or sys.stdout
    title = f"sweep {sweep.name}: {len(plan)} trials on {len(sweep.hosts)} hosts"
    rows, after = _plan_lines(sweep, plan)
    if stream.isatty():
        console = Console(file=stream)
        table = Table(title=title)
        for column in _COLUMNS:
            table.add_column(column, overflow="fold")
        for row in rows:
            table.add_row(*row)
        console.print(table)
        for line in after:
            console.print(line, markup=False, highlight=False)
        if show_dropins:
            for trial in plan.trials:
                console.rule(trial.key)
                console.print(render_trial_dropin(sweep, trial), markup=False, highlight=False)
        return
    widths = [max(len(row[i]) for row in [list(_COLUMNS), *rows]) for i in range(3)]
    lines = [title]
    for row in [list(_COLUMNS), *rows]:
        cells = [cell.ljust(width) for cell, width in zip(row, widths, strict=False)]
        lines.append("  ".join([*cells, row[3]]))
    lines.extend(after)
    if show_dropins:
        for trial in plan.trials:
            lines.append(f"--- {trial.key}")
            lines.append(render_trial_dropin(sweep, trial).rstrip("\n"))
    stream.write("\n".join(lines) + "\n")


def _print_warnings(warnings: Sequence[str]) -> None:
    for warning in warnings:
        print(f"warning: {warning}", file=sys.stderr)


class ValidateVerb:
    """Check a sweep file (the file alone: no hosts, no network) and list every problem."""

    def configure_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("file", help="the sweep file (YAML)")
        parser.add_argument("--json", action="store_true", help="one JSON document on stdout")

    def run(self, args: argparse.Namespace) -> int:
        try:
            checked = check_sweep(args.file)
        except SweepFileError as error:
            if args.json:
                _emit_json(_problems_json(args.file, error))
            _report_problems(error)
            return EXIT_BAD_INPUT
        sweep, text = checked.sweep, checked.text
        plan = plan_sweep(sweep)
        warnings = [*map(str, checked.warnings), *map(str, plan.warnings)]
        _print_warnings(warnings)
        if args.json:
            document = _problems_json(args.file, None)
            document.update(
                sweep=sweep.name, trials=len(plan), sha256=content_hash(text), warnings=warnings
            )
            _emit_json(document)
        else:
            print(
                f"{args.file}: ok: sweep {sweep.name!r}, {len(sweep.hosts)} host(s), "
                f"{len(plan)} trial(s), sha256 {content_hash(text)[:12]}"
            )
        return EXIT_OK


class SchemaVerb:
    """Print the sweep file's JSON Schema (for editors' YAML language servers)."""

    def configure_parser(self, parser: argparse.ArgumentParser) -> None:
        del parser

    def run(self, args: argparse.Namespace) -> int:
        del args
        _emit_json(sweep_json_schema())
        return EXIT_OK


class PlanVerb:
    """Show the trials a sweep file would run, each with its key and drop-in."""

    def configure_parser(self, parser: argparse.ArgumentParser) -> None:
        parser.add_argument("file", help="the sweep file (YAML)")
        parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
        parser.add_argument(
            "--show-dropins", action="store_true", help="print each trial's drop-in too"
        )

    def run(self, args: argparse.Namespace) -> int:
        try:
            checked = check_sweep(args.file)
        except SweepFileError as error:
            _report_problems(error)
            return EXIT_BAD_INPUT
        sweep = checked.sweep
        plan = plan_sweep(sweep)
        file_warnings = [str(warning) for warning in checked.warnings]
        _print_warnings([*file_warnings, *map(str, plan.warnings), *repeat_warnings(sweep)])
        if args.json:
            _emit_json(plan_json(plan, sweep, file_warnings=file_warnings))
        else:
            _print_plan(sweep, plan, show_dropins=args.show_dropins)
        return EXIT_OK


VERBS: dict[str, Verb | str] = {
    "validate": ValidateVerb(),
    "schema": SchemaVerb(),
    "plan": PlanVerb(),
    "demo": "orchestrator.verbs.demo",
    "check": "orchestrator.verbs.check",
    "sim": "orchestrator.sim.cli",
    "run": "orchestrator.verbs.run",
    "daemon": "orchestrator.verbs.daemon",
    "submit": "orchestrator.verbs.submit",
    "status": "orchestrator.verbs.status",
    "cancel": "orchestrator.verbs.cancel",
    "results": "orchestrator.verbs.results",
    "restore": "orchestrator.verbs.restore",
    "adopt": "orchestrator.verbs.adopt",
    "report": "orchestrator.verbs.report",
    "bench": "orchestrator.bench.cli",
}
"""verb -> implementation, or the dotted name of a module with configure_parser and run."""


def _resolve(target: Verb | str) -> Verb:
    if isinstance(target, str):
        module: Any = importlib.import_module(target)
        return module  # type: ignore[no-any-return]
    return target


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orchestrator",
        description="Unattended speculative-decoding config sweeps on SGLang GPU hosts.",
    )
    parser.add_argument("--version", action="version", version=f"orchestrator {__version__}")
    parser.add_argument(
        "--log-level",
        default="info",
        choices=["debug", "info", "warning", "error"],
        help="logging threshold (logs go to stderr)",
    )
    parser.add_argument(
        "--log-file",
        metavar="PATH",
        help="also append every event at --log-level to PATH as JSON lines "
        "(a terminal shows only warnings and failures)",
    )
    verbs = parser.add_subparsers(dest="verb", metavar="VERB")
    verbs.required = True
    for name, target in VERBS.items():
        verb = _resolve(target)
        summary = (verb.__doc__ or "").strip().splitlines()[0] if verb.__doc__ else ""
        sub = verbs.add_parser(name, help=summary, description=summary)
        verb.configure_parser(sub)
        sub.set_defaults(handler=verb)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0) if isinstance(exit_.code, int) else EXIT_BAD_INPUT
    configure_logging(args.log_level, log_file=args.log_file)
    handler: Verb = args.handler
    try:
        return handler.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
