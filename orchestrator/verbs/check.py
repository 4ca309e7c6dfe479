"""Preflight every host of a sweep file and say who holds each; nothing on a host changes."""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from dataclasses import dataclass

from rich.console import Console
from rich.table import Table

from orchestrator.host.connect import open_host
from orchestrator.host.errors import HostError
from orchestrator.host.lease import LeasePlace, LeaseView
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


@dataclass(frozen=True, slots=True)
class CheckedHost:
    """A host's preflight and who holds its lease now (a live holder makes it busy)."""

    check: HostCheck
    lease: LeaseView | None
    """None when the lease directory could not be read (the preflight says why)."""
    busy: str | None
    """In words, who holds the host when someone's live lease does; None when it is free."""


async def _check(sweep: Sweep, host: HostSpec) -> CheckedHost:
    handle = open_host(host, connect_timeout=sweep.timeouts.connect)
    try:
        check = await check_sweep_host(handle, sweep, host)
        try:
            view: LeaseView | None = await LeasePlace(
                handle.transport, timeout=sweep.timeouts.connect
            ).read()
        except HostError:
            view = None
        now = time.time()
        held = view is not None and view.state(now) in ("held", "taking")
        busy = view.describe(host.name, now) if held and view is not None else None
        return CheckedHost(check, view, busy)
    finally:
        await handle.close()


async def checked_hosts(sweep: Sweep) -> list[CheckedHost]:
    return list(await asyncio.gather(*(_check(sweep, host) for host in sweep.hosts)))


async def check_sweep_hosts(sweep: Sweep) -> list[HostCheck]:
    return [checked.check for checked in await checked_hosts(sweep)]


def run(args: argparse.Namespace) -> int:
    try:
        sweep, _text = load_sweep_or_raise(args.file)
    except BadInput as error:
        print(error, file=sys.stderr)
        return EXIT_BAD_INPUT
    checked = asyncio.run(checked_hosts(sweep))
    checks = [c.check for c in checked]
    ok = all(c.check.clean and c.busy is None for c in checked)
    now = time.time()
    if args.json:
        hosts = [
            {
                **c.check.to_json(),
                "lease": None if c.lease is None else c.lease.to_json(now),
                "busy": c.busy,
            }
            for c in checked
        ]
        emit_json({"sweep": sweep.name, "ok": ok, "hosts": hosts})
    else:
        for c in checked:
            if c.busy is not None:
                print(f"busy: {c.busy}", file=sys.stderr)
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
