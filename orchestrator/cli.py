"""The ``orchestrator`` command: parses arguments and hands off to the modules that do the work.

Each verb is one entry in :data:`VERBS`: the dotted name of a module (e.g.
``"orchestrator.sim.cli"``) that exposes ``configure_parser(parser)`` and ``run(args) -> int``;
its docstring's first paragraph is the verb's help. Only the chosen verb's module is imported:
the verbs' summaries are read from their modules' source without running it, so that a short
command such as ``orchestrator status`` does not pay for loading the runner, the simulator and
the report. Exit codes: 0 ok, 1 a sweep or trial failed, 2 bad input. ``--json`` writes exactly
one JSON document to stdout; logs and progress go to stderr.
"""

from __future__ import annotations

import argparse
import ast
import importlib
import importlib.util
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any, Protocol

from orchestrator import __version__
from orchestrator.types import EXIT_BAD_INPUT


class Verb(Protocol):
    """What a verb provides: its arguments and what it does."""

    __doc__: str | None

    def configure_parser(self, parser: argparse.ArgumentParser) -> None: ...

    def run(self, args: argparse.Namespace) -> int: ...


VERBS: dict[str, str] = {
    "validate": "orchestrator.verbs.validate",
    "schema": "orchestrator.verbs.schema",
    "plan": "orchestrator.verbs.plan",
    "demo": "orchestrator.verbs.demo",
    "check": "orchestrator.verbs.check",
    "sim": "orchestrator.sim.cli",
    "run": "orchestrator.verbs.run",
    "daemon": "orchestrator.verbs.daemon",
    "submit": "orchestrator.verbs.submit",
    "status": "orchestrator.verbs.status",
    "cancel": "orchestrator.verbs.cancel",
    "resume": "orchestrator.verbs.resume",
    "results": "orchestrator.verbs.results",
    "restore": "orchestrator.verbs.restore",
    "adopt": "orchestrator.verbs.adopt",
    "report": "orchestrator.verbs.report",
    "export": "orchestrator.verbs.export",
    "bench": "orchestrator.bench.cli",
}
"""verb -> the dotted name of a module with configure_parser and run."""


def _summary(module_name: str) -> str:
    """The first paragraph of a module's docstring as one line, read from its source without
    importing it (a summary wrapped over two lines is one sentence, not its first line)."""
    spec = importlib.util.find_spec(module_name)
    if spec is None or spec.origin is None:
        raise ModuleNotFoundError(f"no module named {module_name!r}", name=module_name)
    docstring = ast.get_docstring(ast.parse(Path(spec.origin).read_bytes())) or ""
    paragraph = docstring.strip().split("\n\n", 1)[0]
    return " ".join(paragraph.split())


class _LazyVerbs(argparse._SubParsersAction):  # type: ignore[type-arg]
    """Subcommands whose arguments are added only when the subcommand is chosen: the chosen
    verb's module is the only one imported."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.pending: dict[str, Callable[[], None]] = {}

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: str | Sequence[Any] | None,
        option_string: str | None = None,
    ) -> None:
        if isinstance(values, Sequence) and values and isinstance(values[0], str):
            configure = self.pending.pop(values[0], None)
            if configure is not None:
                configure()
        super().__call__(parser, namespace, values, option_string)


def _configurer(sub: argparse.ArgumentParser, module_name: str) -> Callable[[], None]:
    def configure() -> None:
        verb: Verb = importlib.import_module(module_name)
        verb.configure_parser(sub)
        sub.set_defaults(handler=verb)

    return configure


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="orchestrator",
        description=(
            "Unattended speculative-decoding config sweeps on inference hosts "
            "(SGLang, vLLM, llama.cpp)."
        ),
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
    verbs = parser.add_subparsers(dest="verb", metavar="VERB", action=_LazyVerbs)
    verbs.required = True
    assert isinstance(verbs, _LazyVerbs)
    for name, module_name in VERBS.items():
        summary = _summary(module_name)
        sub = verbs.add_parser(name, help=summary, description=summary)
        verbs.pending[name] = _configurer(sub, module_name)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    try:
        args = parser.parse_args(argv)
    except SystemExit as exit_:
        return int(exit_.code or 0) if isinstance(exit_.code, int) else EXIT_BAD_INPUT
    from orchestrator.log import configure_logging  # after parsing: `--help` needs no logging

    configure_logging(args.log_level, log_file=args.log_file)
    handler: Verb = args.handler
    try:
        return handler.run(args)
    except KeyboardInterrupt:
        print("interrupted", file=sys.stderr)
        return 130


if __name__ == "__main__":
    sys.exit(main())
