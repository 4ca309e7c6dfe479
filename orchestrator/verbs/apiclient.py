"""Talking to the daemon's API over its unix socket, for the client verbs.

Which socket: ``--socket PATH``; else ``$ORCHESTRATOR_SOCKET``; else the system daemon's
``/var/lib/orchestrator/orchestrator.sock`` when it exists; else
``$XDG_RUNTIME_DIR/orchestrator.sock`` when ``$XDG_RUNTIME_DIR`` is set (a per-user daemon
started with ``--socket "$XDG_RUNTIME_DIR/orchestrator.sock"``); else the system path, so the
error names where the daemon was expected.
"""

from __future__ import annotations

import asyncio
import json
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp

from orchestrator.types import valid_ref
from orchestrator.verbs.common import EXIT_BAD_INPUT, EXIT_FAILED, EXIT_OK, BadInput

SYSTEM_SOCKET = Path("/var/lib/orchestrator/orchestrator.sock")
SOCKET_ENV = "ORCHESTRATOR_SOCKET"
DEFAULT_TIMEOUT_S = 60.0


class DaemonUnreachable(Exception):
    """No daemon answered on the socket (not running, wrong path, no permission)."""

    def __init__(self, socket_path: Path, reason: str) -> None:
        super().__init__(
            f"no daemon answers on {socket_path}: {reason} (is `orchestrator daemon` running? "
            f"pass --socket PATH or set ${SOCKET_ENV})"
        )
        self.socket_path = socket_path
        self.reason = reason


@dataclass(frozen=True, slots=True)
class ApiResponse:
    status: int
    document: Any

    @property
    def ok(self) -> bool:
        return 200 <= self.status < 300

    @property
    def error(self) -> str:
        if isinstance(self.document, dict) and "error" in self.document:
            return str(self.document["error"])
        return f"HTTP {self.status}"

    def exit_code(self) -> int:
        """2 for what the caller got wrong (4xx), 1 for what went wrong in the daemon."""
        if self.ok:
            return EXIT_OK
        return EXIT_BAD_INPUT if 400 <= self.status < 500 else EXIT_FAILED


def default_socket(environ: dict[str, str] | None = None) -> Path:
    env = dict(os.environ) if environ is None else environ
    if env.get(SOCKET_ENV):
        return Path(env[SOCKET_ENV]).expanduser()
    if SYSTEM_SOCKET.exists():
        return SYSTEM_SOCKET
    runtime = env.get("XDG_RUNTIME_DIR", "")
    if os.path.isabs(runtime):
        return Path(runtime) / "orchestrator.sock"
    return SYSTEM_SOCKET


def socket_path(value: str | None) -> Path:
    return Path(value).expanduser() if value else default_socket()


def sweep_url(ref: str, tail: str = "") -> str:
    """``/sweeps/<ref><tail>``; a ref that is no name or id is the user's mistake (exit 2)."""
    if not valid_ref(ref):
        raise BadInput(f"{ref!r} is not a sweep name or id")
    return f"/sweeps/{ref}{tail}"


def add_socket_argument(parser: Any) -> None:
    parser.add_argument(
        "--socket",
        metavar="PATH",
        help=f"the daemon's socket (default: ${SOCKET_ENV}, else {SYSTEM_SOCKET}, "
        "else $XDG_RUNTIME_DIR/orchestrator.sock)",
    )


async def _request(
    path: Path,
    method: str,
    url_path: str,
    *,
    body: bytes | None,
    params: dict[str, str] | None,
    headers: dict[str, str] | None,
    timeout_s: float,
) -> ApiResponse:
    connector = aiohttp.UnixConnector(path=str(path))
    try:
        async with (
            aiohttp.ClientSession(
                connector=connector, timeout=aiohttp.ClientTimeout(total=timeout_s)
            ) as session,
            session.request(
                method, f"http://orchestrator{url_path}", data=body, params=params, headers=headers
            ) as response,
        ):
            text = await response.text()
    except (aiohttp.ClientConnectionError, FileNotFoundError, PermissionError) as exc:
        raise DaemonUnreachable(path, str(exc) or type(exc).__name__) from exc
    except TimeoutError as exc:
        raise DaemonUnreachable(path, f"no answer within {timeout_s:g}s") from exc
    try:
        document = json.loads(text) if text else None
    except json.JSONDecodeError:
        document = {"error": text[:500]}
    return ApiResponse(response.status, document)


def call(
    socket: Path,
    method: str,
    url_path: str,
    *,
    body: bytes | None = None,
    params: dict[str, str] | None = None,
    headers: dict[str, str] | None = None,
    timeout_s: float = DEFAULT_TIMEOUT_S,
) -> ApiResponse:
    """One request to the daemon; raises :class:`DaemonUnreachable` when nobody answers."""
    return asyncio.run(
        _request(
            socket,
            method,
            url_path,
            body=body,
            params=params,
            headers=headers,
            timeout_s=timeout_s,
        )
    )
