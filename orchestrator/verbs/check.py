"""Preflight every host of a sweep file; nothing on a host changes."""

from __future__ import annotations

import argparse
import asyncio
import sys

from rich.console import Console
from rich.table import Table

from orchestrator.host.connect import open_host
from orchestrator.preflight import HostCheck, check_sweep_host
from orchestrator.sweepfile import HostSpec, Sweep
from orchestrator.verbs.common import (
    EXIT_BAD_INPUT,
    EXIT_FAILED,
    EXIT_OK,
    BadInput,
    emit_json,
    load_sweep_or_raise,
)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("file", help="the sweep file (YAML)")
    parser.add_argument("--json", action="store_true", help="one JSON document on stdout")


async def _check(sweep: Sweep, host: HostSpec) -> HostCheck:
    handle = open_host(host, connect_timeout=sweep.timeouts.connect)
    try:
        return await check_sweep_host(handle, sweep, host)
    finally:
        await handle.close()


async def check_sweep_hosts(sweep: Sweep) -> list[HostCheck]:
    return list(await asyncio.gather(*(_check(sweep, host) for host in sweep.hosts)))


def run(args: argparse.Namespace) -> int:
    try:
        sweep, _text = load_sweep_or_raise(args.file)
    except BadInput as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    checks = asyncio.run(check_sweep_hosts(sweep))
    ok = all(c.clean for c in checks)
    if args.json:
        emit_json({"sweep": sweep.name, "ok": ok, "hosts": [c.to_json() for c in checks]})
    else:
        table = Table(title=f"preflight of {sweep.name}")
        for column in ("host", "check", "ok", "detail"):
            table.add_column(column, overflow="fold")
        for host_check in checks:
            for item in host_check.checks:
                table.add_row(host_check.host, item.name, "yes" if item.ok else "NO", item.detail)
            for warning in host_check.warnings:
                table.add_row(host_check.host, "warning", "yes", warning)
            if host_check.reason:
                table.add_row(host_check.host, "verdict", "NO", f"set aside: {host_check.reason}")
        Console(stderr=True).print(table)
    return EXIT_OK if ok else EXIT_FAILED
