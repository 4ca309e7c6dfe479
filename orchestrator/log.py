"""Logging, configured once at the entry point.

Events are nouns with fields (``unit.stopped``, ``memory.released``); context such as
``sweep``, ``host`` and ``trial`` is bound, never formatted into messages. Where a log goes
decides its form: to a file or journald (stderr not a TTY, or ``--log-file``) every event as one
JSON line; to a person at a terminal only warnings and failures, readable, because the live
display already says what runs (a log line per event buried it: about 280 lines per demo).
A redaction processor keeps secrets out of every line. The libraries' stdlib logging
(asyncssh, aiohttp) goes through the same processors, so the daemon's log is one format.
"""

from __future__ import annotations

import logging
import os
import re
import sys
from collections.abc import MutableMapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TextIO

import structlog

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
        # The server that logs this has imported aiohttp; every other process (each CLI verb
        # imports this module) need not pay a third of a second to import it for this check.
        http_exceptions = sys.modules.get("aiohttp.http_exceptions")
        if http_exceptions is not None and isinstance(error, http_exceptions.HttpProcessingError):
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


@dataclass(frozen=True)
class _Sink:
    """One destination of the log: its stream, the least level it takes, its format."""

    stream: TextIO | _CurrentStderr
    level: int
    renderer: Any


class _FanOut:
    """The last structlog processor: renders the event once per sink that takes its level,
    each in that sink's format, and writes it there. Raises DropEvent: nothing else prints."""

    def __init__(self, sinks: Sequence[_Sink]) -> None:
        self.sinks = tuple(sinks)

    def __call__(self, logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        level = _LEVELS.get(str(event_dict.get("level", method)).upper(), logging.INFO)
        for sink in self.sinks:
            if level >= sink.level:
                # Renderers pop keys: each sink gets its own copy.
                sink.stream.write(str(sink.renderer(logger, method, dict(event_dict))) + "\n")
                sink.stream.flush()
        raise structlog.DropEvent


def _for_a_person(renderer: Any) -> Any:
    """A console renderer that names a config by its knob values: an event that carries
    ``config`` (its label) loses the trial key beside it, which is for files and machines."""

    def render(logger: Any, method: str, event_dict: MutableMapping[str, Any]) -> Any:
        if "config" in event_dict:
            event_dict.pop("trial", None)
        return renderer(logger, method, event_dict)

    return render


_LEVELS = logging.getLevelNamesMapping()
_open_log_files: list[TextIO] = []


def configure_logging(
    level: str = "info",
    *,
    json: bool | None = None,
    log_file: str | os.PathLike[str] | None = None,
    quiet_terminal: bool | None = None,
) -> None:
    """Send the log to stderr and, with ``log_file``, to that file (appended, JSON lines).

    stderr carries JSON unless it is a TTY (or ``json`` says). On a TTY it is a terminal for a
    person: ``quiet_terminal`` (default: stderr is a TTY) keeps only warnings and up there;
    every event at ``level`` still reaches ``log_file``.
    """
    threshold = _LEVELS[level.upper()]
    on_tty = sys.stderr.isatty()
    as_json = not on_tty if json is None else json
    quiet = (on_tty and not as_json) if quiet_terminal is None else quiet_terminal
    terminal_renderer: Any = (
        _json_renderer() if as_json else _for_a_person(structlog.dev.ConsoleRenderer(colors=on_tty))
    )
    sinks = [
        _Sink(
            _CurrentStderr(),
            max(threshold, logging.WARNING) if quiet else threshold,
            terminal_renderer,
        )
    ]
    replaced = list(_open_log_files)
    _open_log_files.clear()
    if log_file is not None:
        path = Path(log_file).expanduser()
        path.parent.mkdir(parents=True, exist_ok=True)
        stream = path.open("a", encoding="utf-8")
        _open_log_files.append(stream)
        sinks.append(_Sink(stream, threshold, _json_renderer()))
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
            _FanOut(sinks),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(min(s.level for s in sinks)),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),  # type: ignore[arg-type]
        cache_logger_on_first_use=False,
    )
    _route_stdlib_logging(shared, sinks)
    for old in replaced:  # closed only once nothing writes to them any more
        old.close()
    # asyncssh logs every channel open/close at INFO through the stdlib: at 64 hosts that was
    # 12% of the daemon's busy time (benchmarks/scale.py). Its warnings still come through.
    logging.getLogger("asyncssh").setLevel(logging.WARNING)
    server_log = logging.getLogger("aiohttp.server")
    if _MALFORMED_REQUEST_FILTER not in server_log.filters:
        server_log.addFilter(_MALFORMED_REQUEST_FILTER)


def _json_renderer() -> Any:
    return structlog.processors.JSONRenderer()


def _route_stdlib_logging(shared: list[Any], sinks: Sequence[_Sink]) -> None:
    """Render the libraries' stdlib records (warnings and up) like our own events, to every
    sink that takes them."""
    root = logging.getLogger()
    for old in [h for h in root.handlers if isinstance(h, _StdlibHandler)]:
        root.removeHandler(old)
    for sink in sinks:
        handler = _StdlibHandler(sink.stream)
        handler.setLevel(sink.level)
        handler.setFormatter(
            structlog.stdlib.ProcessorFormatter(
                foreign_pre_chain=[
                    structlog.contextvars.merge_contextvars,  # a library's record: sweep, host
                    structlog.stdlib.ExtraAdder(),
                    *shared,
                ],
                processors=[
                    structlog.stdlib.ProcessorFormatter.remove_processors_meta,
                    structlog.processors.format_exc_info,
                    sink.renderer,
                ],
            )
        )
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
