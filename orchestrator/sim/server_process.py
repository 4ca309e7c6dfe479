"""What the simulated servers' processes share with the real ones, SGLang's and vLLM's alike: both
serve HTTP through uvicorn, which binds the port only once the engine is up (a taken port fails
then, with uvicorn's ``[Errno 98]`` line) and logs its startup lines; and both processes end at
once, without waiting on what they leave behind."""

from __future__ import annotations

import errno
import os
import socket
import sys
from collections.abc import Callable
from typing import NoReturn

from orchestrator.sim import stamped
from orchestrator.sim.http_server import LISTEN_BACKLOG


def listen(
    host: str, port: int, write: Callable[[str], None], *, taken: bool
) -> socket.socket | None:
    """The server's listening socket on ``host:port``, or None after writing (``write``: the
    server's unprefixed stderr) uvicorn's error when the port is in use; ``taken``: the
    port-in-use fault, which says so without trying."""
    try:
        if taken:
            raise OSError(errno.EADDRINUSE, "address already in use")
        sock = stamped.listener(socket.AF_INET)
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
        sock.listen(LISTEN_BACKLOG)
        sock.setblocking(False)
        return sock
    except OSError as exc:
        if exc.errno != errno.EADDRINUSE:
            raise
        write(
            f"ERROR:    [Errno 98] error while attempting to bind on address ('{host}', {port}): "
            "address already in use"
        )
        return None


def log_uvicorn_startup(write: Callable[[str], None]) -> None:
    """uvicorn's lines as it starts serving."""
    write(f"INFO:     Started server process [{os.getpid()}]")
    write("INFO:     Waiting for application startup.")
    write("INFO:     Application startup complete.")


def exit_after(main: Callable[[], int]) -> NoReturn:
    """Run ``main`` and exit with its status without waiting on anything left behind (the
    process dies as the real server's does)."""
    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)
