"""``orchestrator bench``: the matrix against any running server, no SSH, no journal.

Useful on its own (how fast is this server right now?) and for checking the client against a
server whose truth is known (the simulator). ``--json`` writes one JSON document to stdout and
nothing else; logs go to stderr.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Any, get_args

from orchestrator.bench.client import BenchClient
from orchestrator.bench.http1 import base_url_from_user
from orchestrator.bench.matrix import FLAG_ERRORS, PointResult, QualityThresholds, run_point
from orchestrator.bench.problems import (
    Problem,
    ProblemFileError,
    builtin_problems,
    load_problem_file,
    select,
)
from orchestrator.bench.prompts import CalibrationError, PromptFactory
from orchestrator.log import get_logger
from orchestrator.types import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, ApiKind

if TYPE_CHECKING:
    from orchestrator.bench.coding import CodingResult


JOURNAL_NOTE = "bench mode reads no journal: accept_len comes from meta_info or /metrics only"


def _positive_int(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be >= 1, got {value}")
    return value


def _non_negative_int(text: str) -> int:
    value = int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be >= 0, got {value}")
    return value


def configure_parser(parser: argparse.ArgumentParser) -> argparse.ArgumentParser:
    """Add the bench options to ``parser`` (the ``bench`` subcommand or a standalone one)."""
    parser.add_argument(
        "--url",
        required=True,
        help="server base URL, e.g. http://host:30000 (host:port means http://host:port)",
    )
    parser.add_argument("--model", required=True, help="served model name (chat API 'model')")
    parser.add_argument(
        "--api",
        choices=get_args(ApiKind),
        default="chat",
        help="chat: /v1/chat/completions; generate: SGLang /generate (gives per-request "
        "accept length in meta_info)",
    )
    parser.add_argument(
        "--contexts",
        type=_positive_int,
        nargs="+",
        default=[60, 1024],
        help="prompt lengths in server tokens (space-separated)",
    )
    parser.add_argument(
        "--concurrency",
        type=_positive_int,
        nargs="+",
        default=[1, 8],
        help="requests in flight (space-separated)",
    )
    parser.add_argument(
        "--rounds",
        type=_positive_int,
        default=5,
        help="measured requests per point = rounds x concurrency",
    )
    parser.add_argument(
        "--warmup",
        type=_non_negative_int,
        default=None,
        help="warm-up requests per point, excluded from metrics (default: the concurrency)",
    )
    parser.add_argument("--max-tokens", type=_positive_int, default=256)
    parser.add_argument("--temperature", type=float, default=0.0)
    parser.add_argument(
        "--no-ignore-eos",
        dest="ignore_eos",
        action="store_false",
        help="let the model stop early (default: ignore_eos, every request yields max-tokens)",
    )
    parser.add_argument("--request-timeout", type=float, default=600.0, help="seconds")
    parser.add_argument(
        "--no-metrics",
        dest="scrape_metrics",
        action="store_false",
        help="do not scrape /metrics around each point",
    )
    parser.add_argument(
        "--continuous-usage",
        action="store_true",
        help="chat: ask for usage on every chunk (exact per-chunk tokens where supported)",
    )
    parser.add_argument(
        "--calibration-cache",
        type=Path,
        default=None,
        help="JSON file caching prompt-length calibrations across runs",
    )
    parser.add_argument(
        "--coding",
        action="store_true",
        help="also run the coding-correctness anchor (built-in problems, sandboxed tests)",
    )
    parser.add_argument("--coding-max-tokens", type=_positive_int, default=4096)
    parser.add_argument(
        "--problems",
        type=Path,
        default=None,
        help="--coding: JSONL problem file ({id, prompt, entry_point, tests}; default built-in)",
    )
    parser.add_argument(
        "--problem-ids", nargs="+", default=None, help="--coding: only these problems, in order"
    )
    parser.add_argument(
        "--no-matrix", dest="matrix", action="store_false", help="skip the throughput matrix"
    )
    parser.add_argument("--raw", action="store_true", help="--json: include every request")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")
    return parser


def _point_summary(point: PointResult, *, include_requests: bool) -> dict[str, Any]:
    out = point.to_dict(include_requests=include_requests)
    out["accept_len_journal_reason"] = JOURNAL_NOTE
    return out


def _print_table(points: list[PointResult]) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="bench")
    for header in (
        "ctx",
        "C",
        "held",
        "tok/s",
        "TTFT p50",
        "TTFT p99",
        "ITL p50",
        "ITL p99",
        "TPOT p50",
        "E2E p50",
        "err",
        "accept_len",
        "flags",
    ):
        table.add_column(header, justify="right")

    def ms(value: float | None) -> str:
        return "-" if value is None else f"{value * 1000:.1f} ms"

    def num(value: float | None, digits: int = 1) -> str:
        return "-" if value is None else f"{value:.{digits}f}"

    for p in points:
        m = p.metrics
        table.add_row(
            str(p.spec.context),
            str(p.spec.concurrency),
            num(m.concurrency_held, 2),
            num(m.output_tok_s),
            ms(m.ttft.p50),
            ms(m.ttft.p99),
            ms(m.itl.p50),
            ms(m.itl.p99),
            ms(m.tpot.p50),
            ms(m.e2e.p50),
            str(m.errors),
            num(p.accept_len.best, 3),
            " ".join(p.flags + p.accept_len.flags),
        )
    # Off a terminal (piped, captured) rich would squeeze the table into 80 columns.
    Console(width=None if sys.stdout.isatty() else 200).print(table)


def _load_problems(path: Path | None, ids: list[str] | None) -> list[Problem]:
    problems = builtin_problems() if path is None else load_problem_file(path)
    return select(problems, ids) if ids else problems


def _coding_document(results: list[CodingResult]) -> dict[str, Any]:
    from orchestrator.bench.coding import summarize

    summary = summarize(results)
    return {
        "passed": summary.passed,
        "scored": summary.scored,
        "total": summary.total,
        "pass_rate": summary.pass_rate,
        "outcomes": summary.counts,
        "results": [
            {
                "problem_id": r.problem_id,
                "outcome": r.outcome.value,
                "detail": r.detail,
                "finish_reason": r.finish_reason,
                "completion_tokens": r.completion_tokens,
                "elapsed_s": r.elapsed_s,
            }
            for r in results
        ],
    }


async def run_async(
    args: argparse.Namespace, problems: list[Problem] | None = None
) -> tuple[int, dict[str, Any], list[PointResult]]:
    """Run the matrix (and coding when asked): the exit code, the JSON document, the points."""
    log = get_logger(component="bench.cli", url=args.url)
    concurrency_max = max(args.concurrency)
    document: dict[str, Any] = {
        "url": args.url,
        "model": args.model,
        "api": args.api,
        "settings": {
            "contexts": list(args.contexts),
            "concurrency": list(args.concurrency),
            "rounds": args.rounds,
            "warmup": args.warmup,
            "max_tokens": args.max_tokens,
            "temperature": args.temperature,
            "ignore_eos": args.ignore_eos,
            "request_timeout_s": args.request_timeout,
            "scrape_metrics": args.scrape_metrics,
            "matrix": args.matrix,
            "coding": args.coding,
        },
        "accept_len_note": JOURNAL_NOTE,
        "points": [],
        "coding": None,
        "error": None,
    }
    points: list[PointResult] = []
    async with BenchClient(
        args.url,
        api=args.api,
        model=args.model,
        concurrency=concurrency_max,
        request_timeout=args.request_timeout,
        continuous_usage_stats=args.continuous_usage,
    ) as client:
        prompts = PromptFactory(client, cache_path=args.calibration_cache)
        try:
            for context in args.contexts if args.matrix else []:
                for concurrency in args.concurrency:
                    points.append(
                        await run_point(
                            client,
                            prompts,
                            context=context,
                            concurrency=concurrency,
                            rounds=args.rounds,
                            warmup_requests=concurrency if args.warmup is None else args.warmup,
                            max_tokens=args.max_tokens,
                            temperature=args.temperature,
                            ignore_eos=args.ignore_eos,
                            scrape_metrics=args.scrape_metrics,
                            thresholds=QualityThresholds(),
                        )
                    )
        except CalibrationError as exc:
            log.error("bench.calibration_failed", error=str(exc))
            document["error"] = f"calibration failed: {exc}"
        document["points"] = [_point_summary(p, include_requests=args.raw) for p in points]
        if args.coding and document["error"] is None:
            # Imported here, after the entry point configured logging: the module binds its
            # logger at import time.
            from orchestrator.bench.coding import run_coding

            results = await run_coding(
                client,
                problems,
                max_tokens=args.coding_max_tokens,
                temperature=0.0,
                timeout_s=args.request_timeout,
            )
            document["coding"] = _coding_document(results)
    failed = document["error"] is not None or any(FLAG_ERRORS in p.flags for p in points)
    return (EXIT_FAILED if failed else EXIT_OK), document, points


def run(args: argparse.Namespace) -> int:
    """Entry point of ``orchestrator bench``: exit 0 ok, 1 failed, 2 bad input."""
    if args.temperature < 0 or args.request_timeout <= 0:
        print("bench: --temperature must be >= 0 and --request-timeout > 0", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        args.url = base_url_from_user(args.url)
    except ValueError as exc:
        print(f"bench: --url: {exc}", file=sys.stderr)
        return EXIT_BAD_INPUT
    problems: list[Problem] | None = None
    if args.coding and (args.problems is not None or args.problem_ids):
        try:
            problems = _load_problems(args.problems, args.problem_ids)
        except (OSError, ProblemFileError) as exc:
            print(f"bench: problems: {exc}", file=sys.stderr)
            return EXIT_BAD_INPUT
    code, document, points = asyncio.run(run_async(args, problems))
    if args.json:
        json.dump(document, sys.stdout, indent=1, default=str)
        sys.stdout.write("\n")
        return code
    if points:
        _print_table(points)
    if document["error"] is not None:
        print(f"bench: {document['error']}", file=sys.stderr)
    return code


def main(argv: list[str] | None = None) -> int:
    from orchestrator.log import configure_logging

    parser = configure_parser(argparse.ArgumentParser(prog="orchestrator bench"))
    args = parser.parse_args(argv)
    configure_logging()
    return run(args)


if __name__ == "__main__":
    raise SystemExit(main())
