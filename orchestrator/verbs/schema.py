"""Print the sweep file's JSON Schema (for editors' YAML language servers)."""

from __future__ import annotations

import argparse

from orchestrator.sweepfile import sweep_json_schema
from orchestrator.types import EXIT_OK
from orchestrator.verbs.common import emit_json


def configure_parser(parser: argparse.ArgumentParser) -> None:
    del parser


def run(args: argparse.Namespace) -> int:
    del args
    emit_json(sweep_json_schema())
    return EXIT_OK
