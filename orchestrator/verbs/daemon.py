"""Run the daemon: queue intake (inbox/ and API), scheduling, crash resume, sd_notify.

Settings come from ``--config PATH`` (YAML, every key optional)::

    state_dir: /var/lib/orchestrator   # the store, inbox/, accepted/, rejected/, the socket
    store: postgresql://orch@db.example/orchestrator   # a store several daemons share
                                       # (default: the state directory's SQLite file)
    name: ctl-2                        # this daemon, as status names it (default: hostname)
    claim_expiry_s: 60                 # a shared store: a dead daemon's sweeps wait this long
    socket: /run/orchestrator.sock     # default: <state_dir>/orchestrator.sock
    tcp: 127.0.0.1:8470                # optional loopback TCP listener, needs token_file
    token_file: /etc/orchestrator/token   # mode 0600, the bearer token
    max_parallel: 8                    # sweeps running at once (on disjoint hosts)
    webhook: https://hooks.example/x   # default webhook for sweeps without notify.webhook
    shutdown_grace_s: 30               # SIGTERM: wait this long for a safe point

Flags override the file; without either the state directory is ``$STATE_DIRECTORY`` (set by
systemd's ``StateDirectory=``), else ``/var/lib/orchestrator``. A ``store`` URL's password is
better kept in libpq's ``~/.pgpass`` than in the file (it is never logged or shown either way).
"""

from __future__ import annotations

import argparse
import asyncio
import ipaddress
import os
import sys
from pathlib import Path
from typing import Annotated

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from orchestrator.daemon import (
    DEFAULT_MAX_PARALLEL,
    DEFAULT_SHUTDOWN_GRACE_S,
    DEFAULT_STATE_DIR,
    Daemon,
    DaemonError,
)
from orchestrator.store import is_postgres_url
from orchestrator.team import DEFAULT_CLAIM_EXPIRY_S
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK

MAX_CONFIG_BYTES = 64 * 1024


class DaemonConfig(BaseModel):
    """The daemon's config file."""

    # hide_input_in_errors: a store URL may hold a password, and an error never repeats it.
    model_config = ConfigDict(extra="forbid", frozen=True, hide_input_in_errors=True)

    state_dir: Path | None = None
    store: str | None = Field(default=None, description="postgresql://... (a shared store)")
    name: str | None = Field(default=None, max_length=200)
    claim_expiry_s: Annotated[float, Field(gt=0, le=3600)] = DEFAULT_CLAIM_EXPIRY_S
    socket: Path | None = None
    tcp: str | None = Field(default=None, description="HOST:PORT on loopback")
    token_file: Path | None = None
    max_parallel: Annotated[int, Field(ge=1, le=256)] = DEFAULT_MAX_PARALLEL
    webhook: str | None = None
    shutdown_grace_s: Annotated[float, Field(gt=0, le=3600)] = DEFAULT_SHUTDOWN_GRACE_S

    @field_validator("tcp")
    @classmethod
    def _loopback(cls, value: str | None) -> str | None:
        if value is not None:
            parse_listen(value)
        return value

    @field_validator("store")
    @classmethod
    def _shared(cls, value: str | None) -> str | None:
        # The message never repeats the value: it may hold a password.
        if value is not None and not is_postgres_url(value):
            raise ValueError("store is a postgresql:// URL (the state directory holds a file)")
        return value


def parse_listen(value: str) -> tuple[str, int]:
    """``127.0.0.1:8470`` or ``[::1]:8470`` -> (host, port), loopback only."""
    host, sep, port = value.rpartition(":")
    host = host.strip("[]")
    if not sep or not port.isdigit() or not 0 < int(port) < 65536:
        raise ValueError(f"{value!r} is not HOST:PORT")
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise ValueError(f"{host!r} is not a loopback address (127.0.0.0/8 or ::1)")
    return host, int(port)


def load_config(path: str | None) -> DaemonConfig:
    """The config file's settings (an absent ``--config`` means every default)."""
    if path is None:
        return DaemonConfig()
    with open(path, "rb") as handle:
        raw = handle.read(MAX_CONFIG_BYTES + 1)
    if len(raw) > MAX_CONFIG_BYTES:
        raise ValueError(f"{path}: over {MAX_CONFIG_BYTES} bytes")
    data = yaml.safe_load(raw.decode("utf-8")) or {}
    if not isinstance(data, dict):
        raise ValueError(f"{path}: expected a mapping of settings")
    return DaemonConfig.model_validate(data)


def configure_parser(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--config", metavar="PATH", help="YAML settings (see the docs)")
    parser.add_argument(
        "--state-dir",
        metavar="DIR",
        help=f"store, inbox and socket (default: $STATE_DIRECTORY, else {DEFAULT_STATE_DIR})",
    )
    parser.add_argument(
        "--socket",
        metavar="PATH",
        help="the API's unix socket (default: STATE_DIR/orchestrator.sock)",
    )
    parser.add_argument(
        "--db",
        metavar="URL",
        help="a postgresql:// store that several daemons share (default: STATE_DIR's file)",
    )


def build_daemon(args: argparse.Namespace) -> Daemon:
    """The daemon the flags and config file describe (flags win)."""
    config = load_config(args.config)
    state_dir = (
        args.state_dir
        or config.state_dir
        or os.environ.get("STATE_DIRECTORY", "").split(":")[0]
        or DEFAULT_STATE_DIR
    )
    return Daemon(
        state_dir,
        socket_path=args.socket or config.socket,
        tcp=parse_listen(config.tcp) if config.tcp else None,
        token_file=config.token_file,
        max_parallel=config.max_parallel,
        webhook=config.webhook,
        shutdown_grace_s=config.shutdown_grace_s,
        store=args.db or config.store,
        name=config.name,
        claim_expiry_s=config.claim_expiry_s,
    )


def run(args: argparse.Namespace) -> int:
    if args.db is not None and not is_postgres_url(args.db):
        print("orchestrator daemon: --db is a postgresql:// URL", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        daemon = build_daemon(args)
    except (OSError, ValueError, ValidationError, yaml.YAMLError, DaemonError) as error:
        print(f"orchestrator daemon: {error}", file=sys.stderr)
        return EXIT_BAD_INPUT
    try:
        asyncio.run(daemon.run())
    except DaemonError as error:
        print(f"orchestrator daemon: {error}", file=sys.stderr)
        return EXIT_FAILED
    return EXIT_OK
