"""Logging, configured once at the entry point.

Events are nouns with fields (``unit.stopped``, ``memory.released``); context such as
``sweep``, ``host`` and ``trial`` is bound, never formatted into messages. Output goes to
stderr: JSON lines when stderr is not a TTY (journald-friendly), a console renderer on a TTY.
A redaction processor keeps secrets out of every line. The libraries' stdlib logging
(asyncssh, aiohttp) goes through the same processors, so the daemon's log is one format.
"""

from __future__ import annotations

import logging
import re
import sys
from collections.abc import MutableMapping
from typing import Any

import structlog
from aiohttp.http_exceptions import HttpProcessingError

# Whole words at the end of a key: ``api_token`` is a secret, ``completion_tokens`` is not.
_SECRET_KEYS = re.compile(
    r"(^|_)(token|password|passphrase|secret|private_key|authorization|api_key)$", re.I
)
_PEM_BLOCK = re.compile(
    r"-----BEGIN [A-Z ]*PRIVATE KEY-----.*?-----END [A-Z ]*PRIVATE KEY-----", re.S
)
_BEARER = re.compile(r"(Bearer\s+)[A-Za-z0-9._~+/=-]+", re.I)

REDACTED = "[redacted]"


def redact_text(text: str) -> str:
    """Remove private key blocks and bearer tokens from free text."""
    text = _PEM_BLOCK.sub(REDACTED, text)
    return _BEARER.sub(r"\1" + REDACTED, text)


def redact_secrets(
    _logger: Any, _method: str, event_dict: MutableMapping[str, Any]
) -> MutableMapping[str, Any]:
    """structlog processor: blank values whose key names a secret, scrub secrets from text."""
    for key, value in list(event_dict.items()):
        if _SECRET_KEYS.search(key) and value is not None:
            event_dict[key] = REDACTED
        elif isinstance(value, str):
            event_dict[key] = redact_text(value)
    return event_dict


class _MalformedRequestFilter(logging.Filter):
    """aiohttp's server logs "Error handling request" with a traceback for every malformed
    request (a 70 kB header line, a TLS hello on the plain port). The client already got its
    400; for the operator that is one line, not a traceback per stray scanner."""

    def filter(self, record: logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        if isinstance(error, HttpProcessingError):
            record.msg = "http.malformed_request"
            record.args = ()
            record.levelno, record.levelname = logging.WARNING, "WARNING"
            record.exc_info = None
            record.exc_text = None
            record.error = f"{type(error).__name__}: {error.message}"[:300]
        return True


_MALFORMED_REQUEST_FILTER = _MalformedRequestFilter()


class _StdlibHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """The one handler configure_logging puts on the root logger (replaced, not added, when
    it runs again)."""


class _CurrentStderr:
    """Writes to whatever ``sys.stderr`` is at the time of the write (not at configure time),
    so a replaced stderr (a test harness, a daemonised process) never gets a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str = "info", *, json: bool | None = None) -> None:
    """Send structlog events to stderr; JSON unless stderr is a TTY (or ``json`` says)."""
    as_json = not sys.stderr.isatty() if json is None else json
    renderer: Any = (
        structlog.processors.JSONRenderer()
        if as_json
        else structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
    )
    shared: list[Any] = [
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
        redact_secrets,
    ]
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            *shared,
            structlog.processors.format_exc_info,
            renderer,
        ],
        wrapper_class=structlog.make_filtering_bound_logger(
            logging.getLevelNamesMapping()[level.upper()]
        ),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    _route_stdlib_logging(shared, renderer)
    # asyncssh logs every channel open/close at INFO through the stdlib: at 64 hosts that was
    # 12% of the daemon's busy time (benchmarks/scale.py). Its warnings still come through.
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    server_log = logging.getLogger("aiohttp.server")
    if _MALFORMED_REQUEST_FILTER not in server_log.filters:
        server_log.addFilter(_MALFORMED_REQUEST_FILTER)


def _route_stdlib_logging(shared: list[Any], renderer: Any) -> None:
    """Render the libraries' stdlib records (warnings and up) like our own events."""
    handler = _StdlibHandler(_CurrentStderr())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(
            foreign_pre_chain=[structlog.stdlib.ExtraAdder(), *shared],
            processors=[
                structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                structlog.processors.format_exc_info,
                renderer,
            ],
        )
    )
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StdlibHandler)]:
        root.removeHandler(old)
    root.addHandler(handler)
    if root.level == logging.NOTSET or root.level > logging.WARNING:
        root.setLevel(logging.WARNING)


def get_logger(**context: Any) -> Any:
    """A structlog logger with ``context`` bound.

    Lazy: a module-level logger made at import time still follows the configuration that
    :func:`configure_logging` sets later (binding eagerly would freeze structlog's default,
    which prints to stdout and would corrupt ``--json`` output).
    """
    return structlog.get_logger(**context)
