"""Show the trials a sweep file would run, each with its key and drop-in."""

from __future__ import annotations

import argparse
import datetime as dt
import json
import sys
from typing import Any, TextIO

from rich.console import Console
from rich.table import Table

from orchestrator.plan import (
    Plan,
    deadline_check,
    estimate_plan,
    format_duration,
    plan_json,
    plan_notes,
    plan_sweep,
    render_launch_files,
    render_trial_dropin,
    repeat_warnings,
    trial_launch_files,
)
from orchestrator.search.budget import screening_warnings
from orchestrator.sweepfile import Sweep, SweepFileError, check_sweep
from orchestrator.types import EXIT_BAD_INPUT, EXIT_OK
from orchestrator.verbs.common import emit_json, print_warnings, report_problems


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
        f"estimate: about {format_duration(estimate.total_s)} for the sweep, from the "
        "assumptions below, not from measurements "
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
                launch = render_launch_files(trial_launch_files(sweep, trial))
                if launch:
                    console.print(launch, markup=False, highlight=False, end="")
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
            launch = render_launch_files(trial_launch_files(sweep, trial))
            if launch:
                lines.append(launch.rstrip("\n"))
    stream.write("\n".join(lines) + "\n")


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the sweep file (YAML)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    parser.add_argument(
        "--show-dropins", action="store_true", help="print each trial's drop-in too"
    )


def run(args: argparse.Namespace) -> int:
    try:
        checked = check_sweep(args.file)
    except SweepFileError as error:
        report_problems(error)
        return EXIT_BAD_INPUT
    sweep = checked.sweep
    plan = plan_sweep(sweep)
    now = dt.datetime.now()
    deadline = deadline_check(sweep, estimate_plan(plan, sweep), now)
    overrun = deadline.warning() if deadline is not None else None
    file_warnings = [str(warning) for warning in checked.warnings]
    screening = screening_warnings(sweep)
    print_warnings(
        [
            *file_warnings,
            *map(str, plan.warnings),
            *repeat_warnings(sweep),
            *screening,
            *([overrun] if overrun else []),
        ]
    )
    if args.json:
        # The JSON's warnings list the file's first: the screening ones go with them.
        emit_json(plan_json(plan, sweep, file_warnings=[*file_warnings, *screening], now=now))
    else:
        _print_plan(sweep, plan, show_dropins=args.show_dropins)
    return EXIT_OK
