"""The report as data: CSV (one row per point, for pandas) and JSON (the full structure).

CSV: one row per measured point (throughput cell or coding problem) with every metric, the
quality flags (a ``flags`` list and one boolean ``flag_<name>`` column each) and the trial's
knob values as ``knob_<name>`` columns; a trial that produced no point (failed at startup,
skipped) still gets one row, ``kind`` = ``none``, so failures are never silently absent.
Nested metrics are flattened with dots (``errors_by_kind.timeout``); empty means unknown.
Long texts (model output, extracted code) stay out of the CSV and are in the JSON.
"""

from __future__ import annotations

import csv
import dataclasses
import io
import json
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.bench.coding import Outcome
from orchestrator.report.compare import compare
from orchestrator.report.model import (
    FLAGS,
    HostTypeGroup,
    PointView,
    SweepReport,
    TrialView,
)

JSON_FORMAT = "orchestrator-report/1"
_CSV_SKIPPED_METRICS = frozenset({"code", "output"})

BASE_COLUMNS = (
    "sweep",
    "sweep_id",
    "host_type",
    "host",
    "trial_key",
    "config",
    "is_baseline",
    "trial_state",
    "trial_cause",
    "attempt",
    "kind",
    "context",
    "concurrency",
    "problem",
    "flags",
    *(f"flag_{name}" for name in FLAGS),
    "speedup_vs_baseline",
    "is_best_in_cell",
)


def _flatten(prefix: str, value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, Mapping):
        for key, inner in value.items():
            _flatten(f"{prefix}.{key}" if prefix else str(key), inner, out)
    elif isinstance(value, list | tuple):
        out[prefix] = json.dumps(list(value))
    else:
        out[prefix] = value


def _base_row(report: SweepReport, group: HostTypeGroup, trial: TrialView) -> dict[str, Any]:
    row: dict[str, Any] = {
        "sweep": report.name,
        "sweep_id": report.id,
        "host_type": group.host_type,
        "host": trial.host,
        "trial_key": trial.key,
        "config": trial.label,
        "is_baseline": trial.is_baseline,
        "trial_state": trial.state,
        "trial_cause": trial.cause,
        "attempt": trial.latest.number if trial.latest else None,
    }
    for name, value in trial.config.items():
        row[f"knob_{name}"] = value
    return row


def _flag_columns(flags: Sequence[str]) -> dict[str, Any]:
    row: dict[str, Any] = {"flags": ";".join(flags)}
    for name in FLAGS:
        row[f"flag_{name}"] = name in flags
    return row


def _throughput_row(
    report: SweepReport, group: HostTypeGroup, trial: TrialView, point: PointView
) -> dict[str, Any]:
    row = _base_row(report, group, trial)
    best = group.best_at(point.cell)
    row.update(
        kind="throughput",
        context=point.context,
        concurrency=point.concurrency,
        rate=point.cell.rate,
        workload=point.cell.workload,
        speedup_vs_baseline=group.speedup_at(trial, point.cell),
        is_best_in_cell=best is not None and best[0] is trial,
        **_flag_columns(point.flags),
    )
    metrics: dict[str, Any] = {}
    _flatten("", point.metrics.to_json(), metrics)
    _flatten("", point.accept.to_json(), metrics)
    metrics["accept_len_flags"] = ";".join(point.accept.flags)
    row.update(metrics)
    return row


def csv_rows(reports: Sequence[SweepReport]) -> tuple[list[str], list[dict[str, Any]]]:
    """The CSV's columns (stable order: base, metrics as first seen, knobs) and rows."""
    rows: list[dict[str, Any]] = []
    for report in reports:
        for group in report.groups:
            for trial in group.trials:
                for point in trial.throughput:
                    rows.append(_throughput_row(report, group, trial, point))
                for coding in trial.coding:
                    row = _base_row(report, group, trial)
                    flags = ("truncated",) if coding.outcome is Outcome.TRUNCATED else ()
                    row.update(kind="coding", problem=coding.problem, **_flag_columns(flags))
                    row.update(
                        outcome=coding.outcome.value,
                        detail=coding.detail,
                        finish_reason=coding.finish_reason,
                        completion_tokens=coding.completion_tokens,
                        elapsed_s=coding.elapsed_s,
                        lossless_identical=(
                            None
                            if trial.lossless is None
                            else coding.problem not in trial.lossless.differing
                        ),
                    )
                    rows.append(row)
                if not trial.throughput and not trial.coding:
                    row = _base_row(report, group, trial)
                    row.update(kind="none", **_flag_columns(()))
                    rows.append(row)
    seen: dict[str, None] = dict.fromkeys(BASE_COLUMNS)
    knobs: dict[str, None] = {}
    for row in rows:
        for key in row:
            if key.startswith("knob_"):
                knobs[key] = None
            elif key not in seen and key not in _CSV_SKIPPED_METRICS:
                seen[key] = None
    return list(seen) + sorted(knobs), rows


def render_csv(reports: Sequence[SweepReport]) -> str:
    columns, rows = csv_rows(reports)
    buffer = io.StringIO()
    writer = csv.DictWriter(buffer, fieldnames=columns, extrasaction="ignore", lineterminator="\n")
    writer.writeheader()
    for row in rows:
        writer.writerow({k: ("" if v is None else v) for k, v in row.items()})
    return buffer.getvalue()


# --- JSON ----------------------------------------------------------------------------------


def _point_json(point: PointView, include_requests: bool) -> dict[str, Any]:
    data: dict[str, Any] = {
        "context": point.context,
        "concurrency": point.concurrency,
        "metrics": point.metrics.to_json(),
        "accept": point.accept.to_json(),
        "flags": list(point.flags),
        "started_at": point.started_at,
        "finished_at": point.finished_at,
    }
    if include_requests:
        data["ttft_samples_s"] = list(point.ttft_samples_s)
        data["requests"] = list(point.requests)
    return data


def _trial_json(group: HostTypeGroup, trial: TrialView, include_requests: bool) -> dict[str, Any]:
    summary = trial.coding_summary()
    return {
        "key": trial.key,
        "host": trial.host,
        "host_type": trial.host_type,
        "config": trial.config,
        "label": trial.label,
        "short_label": trial.short_label,
        "is_baseline": trial.is_baseline,
        "ordinal": trial.ordinal,
        "state": trial.state,
        "cause": trial.cause,
        "attempts": [dataclasses.asdict(a) for a in trial.attempts],
        "lifecycle": dataclasses.asdict(trial.lifecycle) if trial.lifecycle else None,
        "provenance": trial.provenance,
        "overridden": trial.overridden,
        "lossless": dataclasses.asdict(trial.lossless) if trial.lossless else None,
        "coding_summary": {
            **dataclasses.asdict(summary),
            "failures": [[problem, outcome.value] for problem, outcome in trial.coding_failures()],
        },
        "points": [_point_json(p, include_requests) for p in trial.throughput],
        "coding": [{"problem": c.problem, **c.metrics_json()} for c in trial.coding],
        "speedups": [
            {
                "context": ctx,
                "concurrency": conc,
                "speedup": group.speedup(trial, ctx, conc),
            }
            for ctx, conc in group.cells
        ],
    }


def _group_json(group: HostTypeGroup, include_requests: bool) -> dict[str, Any]:
    best = []
    for ctx, conc in group.cells:
        found = group.best(ctx, conc)
        best.append(
            {
                "context": ctx,
                "concurrency": conc,
                "trial": found[0].key if found else None,
                "label": found[0].label if found else None,
                "output_tok_s": found[1].output_tok_s if found else None,
                "speedup": group.speedup(found[0], ctx, conc) if found else None,
            }
        )
    return {
        "host_type": group.host_type,
        "hosts": [dataclasses.asdict(h) for h in group.hosts],
        "contexts": list(group.contexts),
        "concurrencies": list(group.concurrencies),
        "best": best,
        "trials": [_trial_json(group, t, include_requests) for t in group.trials],
    }


def report_json(report: SweepReport, *, include_requests: bool = False) -> dict[str, Any]:
    document = {
        "sweep": report.name,
        "id": report.id,
        "state": report.state,
        "submitted_at": report.submitted_at,
        "started_at": report.started_at,
        "finished_at": report.finished_at,
        "summary": report.summary,
        "model": report.model,
        "coding_temperature": report.coding_temperature,
        "flags": {name: dataclasses.asdict(info) for name, info in FLAGS.items()},
        "groups": [_group_json(g, include_requests) for g in report.groups],
        "warnings": [dataclasses.asdict(w) for w in report.warnings],
        "events": list(report.sweep_events),
    }
    if report.answers:
        # Only when there are any: a sweep without answers keeps its JSON as it was.
        document["answers"] = [a.to_json() for a in report.answers]
    return document


def render_json(reports: Sequence[SweepReport], *, include_requests: bool = False) -> str:
    comparisons = [
        {
            "title": c.title,
            "sides": [{"sweep": s.sweep, "host_type": s.group.host_type} for s in c.sides],
            "cells": [
                {
                    "context": cell.context,
                    "concurrency": cell.concurrency,
                    "best": [dataclasses.asdict(b) if b else None for b in cell.best],
                    "ratios": list(cell.ratios),
                }
                for cell in c.cells
            ],
            "configs": [
                {
                    "label": cfg.label,
                    "cells": [
                        {"context": ctx, "concurrency": conc, "output_tok_s": list(values)}
                        for ctx, conc, values in cfg.cells
                    ],
                }
                for cfg in c.configs
            ],
        }
        for c in compare(reports)
    ]
    document = {
        "format": JSON_FORMAT,
        "sweeps": [report_json(r, include_requests=include_requests) for r in reports],
        "comparisons": comparisons,
    }
    return json.dumps(document, indent=2, allow_nan=False) + "\n"
