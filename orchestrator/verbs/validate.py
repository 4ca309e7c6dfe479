"""Check a sweep file and the workload files it names (no hosts, no network) and list every
problem, a workload file's bad lines each with its own file and line."""

from __future__ import annotations

import argparse
from typing import Any

from orchestrator.plan import plan_sweep
from orchestrator.search.budget import screening_warnings
from orchestrator.sweepfile import SweepFileError, check_sweep
from orchestrator.types import EXIT_BAD_INPUT, EXIT_OK, content_hash
from orchestrator.verbs.common import emit_json, print_warnings, report_problems


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the sweep file (YAML)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")


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


def run(args: argparse.Namespace) -> int:
    try:
        checked = check_sweep(args.file)
    except SweepFileError as error:
        if args.json:
            emit_json(_problems_json(args.file, error))
        report_problems(error)
        return EXIT_BAD_INPUT
    sweep, text = checked.sweep, checked.text
    plan = plan_sweep(sweep)
    warnings = [
        *map(str, checked.warnings),
        *map(str, plan.warnings),
        *screening_warnings(sweep),
    ]
    print_warnings(warnings)
    if args.json:
        document = _problems_json(args.file, None)
        document.update(
            sweep=sweep.name,
            trials=len(plan),
            sha256=content_hash(text),
            workloads=[
                {"label": spec.label, "sha256": spec.content_hash}
                for spec in sweep.benchmark.workload_specs()
            ],
            warnings=warnings,
        )
        emit_json(document)
    else:
        print(
            f"{args.file}: ok: sweep {sweep.name!r}, {len(sweep.hosts)} host(s), "
            f"{len(plan)} trial(s), sha256 {content_hash(text)[:12]}"
        )
    return EXIT_OK
