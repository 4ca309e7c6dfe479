"""The daemon's HTTP API (aiohttp): submit, list, status, cancel, results, report, restore,
and the read-only views: the dashboard and the Prometheus metrics.

It listens on a unix socket whose file mode (0600) is its access control, and optionally on a
loopback TCP port where every request must carry ``Authorization: Bearer <token>``, but for
the dashboard's own files (HTML, CSS, JavaScript: no data; the page sends the token with each
request it makes). This module only maps HTTP onto the daemon's operations
(:class:`DaemonOps`) and their errors onto status codes; it never shows a client a stack trace.

Endpoints (all answer JSON but a report, in its format's media type)::

    GET  /health                      {"ok": true, "version"}
    POST /sweeps[?replace=1]          body: the sweep YAML, or (application/json) {"sweep": YAML,
                                      "filename", "workloads": {PATH: CONTENT}} for a sweep
                                      with workload files -> 201 queued | 200 already known
                                      | 400 {"problems"} | 409 name taken | 413 too big
    GET  /sweeps[?all=1]              {"sweeps": [{"name", "id", "state", "priority", ...}]}
    GET  /sweeps/{ref}                one sweep with each host's current trial and step
    POST /sweeps/{ref}/cancel         stop at the next safe step and restore its hosts
    POST /sweeps/{ref}/resume         queue an interrupted sweep again: it continues
    GET  /sweeps/{ref}/results        the store's results document
    GET  /sweeps/{ref}/report         ?format=md|html|csv|json (md), &with=REF,REF (compared
                                      with it), &requests=1 (JSON: every request): the
                                      report as `orchestrator report` renders it
    POST /restore                     {"host": NAME} | {"all": true}
    POST /sweeps/{ref}/adopt          {"type": HOST_TYPE, "allow_tie": false,
                                       "allow_unexplored": false}
    GET  /metrics                     the Prometheus text format (OpenMetrics when asked)
    GET  /dashboard/                  the dashboard page (``/dashboard/static/``: its files)
    GET  /dashboard/state             {"queued", "running", "ended", ...}: what the page shows

``ref`` is a sweep name (its latest run) or an id.
"""

from __future__ import annotations

import hmac
import json
import re
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass
from typing import TYPE_CHECKING, Any, Protocol

from aiohttp import web
from pydantic import ValidationError

from orchestrator import __version__
from orchestrator.answers import AnsweredResults, Contender
from orchestrator.dashboard import STATIC_DIR
from orchestrator.engines.schedule import NativeSchedule
from orchestrator.log import get_logger
from orchestrator.report import FORMATS, MEDIA_TYPES, ReportFormat

if TYPE_CHECKING:
    from orchestrator.daemon.metrics import Exposition
    from orchestrator.dashboard.board import Board
    from orchestrator.host.systemd import ForeignChange
from orchestrator.store import (
    JsonObject,
    Store,
    SweepNameConflict,
    SweepNotFound,
    SweepRecord,
    count_states,
)
from orchestrator.store.results import trial_label
from orchestrator.submission import SubmitBody
from orchestrator.sweepfile import MAX_FILE_BYTES, MAX_WORKLOAD_BYTES, SweepFileError
from orchestrator.sweepview import SweepView, sweep_brief
from orchestrator.types import valid_ref

MAX_BODY_BYTES = 1024 * 1024
"""Largest request body; a sweep file is limited to the same size."""

MAX_SUBMIT_JSON_BYTES = 2 * (MAX_FILE_BYTES + MAX_WORKLOAD_BYTES)
"""Largest JSON submission: a sweep file and its workload files (together about one
sample's limit; JSON escaping may double ordinary text). Each file's own limit is checked
again when the sweep is parsed."""


async def _read_capped(request: web.Request, limit: int) -> bytes | None:
    """The whole body, or None once it passes ``limit`` bytes (the app-wide limit is for
    the other endpoints)."""
    chunks: list[bytes] = []
    size = 0
    async for chunk in request.content.iter_chunked(1 << 16):
        size += len(chunk)
        if size > limit:
            return None
        chunks.append(chunk)
    return b"".join(chunks)


_FILENAME = re.compile(r"[^\x00-\x1f\x7f]{1,512}")

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


class Conflict(Exception):
    """The request is well formed but the daemon's state refuses it (HTTP 409)."""


@dataclass(frozen=True, slots=True)
class Submitted:
    """A sweep file taken into the queue; ``created`` is False when the same file was already
    there, ``replaced`` the id of the sweep of that name it replaced."""

    record: SweepRecord
    created: bool
    replaced: int | None = None

    def to_json(self) -> JsonObject:
        return {
            **sweep_brief(self.record),
            "priority": self.record.priority,
            "created": self.created,
            "replaced": self.replaced,
        }


@dataclass(frozen=True, slots=True)
class CancelOutcome:
    """A cancel as asked: ``cancelling`` while the running sweep stops at its next safe step;
    otherwise the sweep (queued, or interrupted earlier) is already ``cancelled``."""

    record: SweepRecord
    cancelling: bool

    def to_json(self) -> JsonObject:
        return {**sweep_brief(self.record), "cancelling": self.cancelling}


@dataclass(frozen=True, slots=True)
class RestoreOutcome:
    """One host's restore as ``POST /restore`` reports it."""

    host: str
    sweep: str
    sweep_id: int
    ok: bool
    error: str | None = None
    foreign_changes: tuple[ForeignChange, ...] = ()
    """Files someone else changed, each with the sweep whose drop-in it is (or None)."""

    def to_json(self) -> JsonObject:
        entry: JsonObject = {
            "host": self.host,
            "sweep": self.sweep,
            "sweep_id": self.sweep_id,
            "ok": self.ok,
        }
        if self.ok:
            entry["foreign_changes"] = [change.to_json() for change in self.foreign_changes]
        else:
            entry["error"] = self.error
        return entry


@dataclass(frozen=True, slots=True)
class AdoptOutcome:
    """One host's adopt (``POST /sweeps/{ref}/adopt``): the config now lasting there, or why
    not (the host then as found)."""

    host: str
    ok: bool
    dropin: str | None = None
    invocation_id: str | None = None
    error: str | None = None

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class Adoption:
    """What ``adopt`` did for one host type."""

    sweep: str
    sweep_id: int
    host_type: str
    contender: Contender
    """The best fixed config the answer names."""
    hosts: tuple[AdoptOutcome, ...]
    schedule: NativeSchedule | None = None
    """The measured, recommended schedule installed instead of ``contender``, if any."""

    @property
    def ok(self) -> bool:
        return bool(self.hosts) and all(h.ok for h in self.hosts)

    def to_json(self) -> JsonObject:
        schedule = self.schedule
        return {
            "sweep": self.sweep,
            "sweep_id": self.sweep_id,
            "host_type": self.host_type,
            "config": self.contender.config if schedule is None else dict(schedule.config),
            "label": self.contender.label if schedule is None else "schedule",
            "schedule": None if schedule is None else schedule.to_json(),
            "hosts": [h.to_json() for h in self.hosts],
            "ok": self.ok,
        }


@dataclass(frozen=True, slots=True)
class HostStatus:
    """A sweep's host: set aside (why), or what it is doing now (the runner's progress)."""

    name: str
    set_aside: str | None
    current: JsonObject | None
    """The runner's latest progress fields for the host (trial, step, done, total, ...), with
    ``config``: the current trial's config by its knob values."""

    def to_json(self) -> JsonObject:
        return asdict(self)


@dataclass(frozen=True, slots=True)
class SweepStatus:
    """One sweep in detail: its view, its trials counted by latest state, its hosts."""

    view: SweepView
    trials: Mapping[str, int]
    hosts: tuple[HostStatus, ...]

    def to_json(self) -> JsonObject:
        return {
            **self.view.to_json(),
            "trials": dict(self.trials),
            "hosts": [h.to_json() for h in self.hosts],
        }


async def sweep_status(
    store: Store, view: SweepView, live: Mapping[str, Mapping[str, Any]]
) -> SweepStatus:
    """Counts from each trial's latest attempt, read without any point; each host's live
    progress names its trial's config by knob values."""
    sweep_id = view.record.id
    states = await store.trial_states(sweep_id)
    labels = {t.key: trial_label(t.config, t.plan) for t in await store.trials(sweep_id)}
    hosts = []
    for host in await store.hosts(sweep_id):
        progress = live.get(host.name)
        current: JsonObject | None = None
        if progress:
            current = dict(progress)
            trial = current.get("trial")
            current["config"] = labels.get(trial) if isinstance(trial, str) else None
        hosts.append(HostStatus(host.name, host.set_aside_reason, current))
    return SweepStatus(view, count_states(states.values()), tuple(hosts))


class DaemonOps(Protocol):
    """What the API asks of the daemon. Errors: ``SweepFileError`` (400), ``SweepNotFound``
    (404), ``SweepNameConflict`` and :class:`Conflict` (409), ``ValueError`` (400). Typed
    answers become JSON here, and only here."""

    async def submit(
        self, text: str, *, filename: str, replace: bool, workloads: Mapping[str, str]
    ) -> Submitted: ...

    async def list_sweeps(self, *, include_replaced: bool) -> Sequence[SweepView]: ...

    async def sweep_status(self, ref: str) -> SweepStatus: ...

    async def cancel(self, ref: str) -> CancelOutcome: ...

    async def resume(self, ref: str) -> SweepRecord: ...

    async def results(self, ref: str) -> AnsweredResults: ...

    async def report(
        self, refs: Sequence[str], fmt: ReportFormat, *, include_requests: bool
    ) -> str: ...

    async def restore_hosts(
        self, host: str | None, *, force: bool = False
    ) -> Sequence[RestoreOutcome]: ...

    async def adopt(
        self, ref: str, host_type: str, *, allow_tie: bool, allow_unexplored: bool = False
    ) -> Adoption: ...

    async def dashboard(self) -> Board: ...

    async def metrics(self, accept: str) -> Exposition:
        """The metrics in the format ``accept`` (the scraper's ``Accept`` header) asks for."""
        ...


def _error(status: int, message: str, **extra: Any) -> web.Response:
    return web.json_response({"error": message, **extra}, status=status)


def _problems(error: SweepFileError) -> list[dict[str, Any]]:
    return [
        {"file": p.file, "line": p.line, "field": p.field_path, "message": p.message}
        for p in error.problems
    ]


def _ref(request: web.Request) -> str:
    ref = request.match_info["ref"]
    if not valid_ref(ref):
        raise web.HTTPBadRequest(
            text=json.dumps({"error": "a sweep is named by its name or id"}),
            content_type="application/json",
        )
    return ref


def _flag(request: web.Request, name: str) -> bool:
    return request.query.get(name, "").lower() in ("1", "true", "yes")


def _error_middleware() -> Any:
    log = get_logger(component="api")

    @web.middleware
    async def errors(request: web.Request, handler: Handler) -> web.StreamResponse:
        try:
            return await handler(request)
        except web.HTTPRequestEntityTooLarge:
            return _error(413, f"request body over {MAX_BODY_BYTES} bytes")
        except web.HTTPException as exc:
            if exc.content_type == "application/json" or exc.status < 400:
                raise
            return _error(exc.status, exc.reason)
        except SweepFileError as exc:
            return _error(400, "invalid sweep file", problems=_problems(exc))
        except SweepNotFound as exc:
            return _error(404, str(exc))
        except SweepNameConflict as exc:
            return _error(
                409, str(exc), existing={"id": exc.existing.id, "state": exc.existing.state}
            )
        except Conflict as exc:
            return _error(409, str(exc))
        except ValueError as exc:
            return _error(400, str(exc))
        except Exception as exc:
            log.exception("api.internal_error", path=request.path, error=type(exc).__name__)
            return _error(500, "internal error (see the daemon's log)")

    return errors


PUBLIC_PATHS = ("/dashboard", "/dashboard/")
PUBLIC_PREFIX = "/dashboard/static/"
"""What a browser loads before it can send the token: the page and its files, which hold no
data (the page asks for everything it shows with the token)."""


def _auth_middleware(token: str) -> Any:
    expected = f"Bearer {token}".encode()

    @web.middleware
    async def auth(request: web.Request, handler: Handler) -> web.StreamResponse:
        if request.method == "GET" and (
            request.path in PUBLIC_PATHS or request.path.startswith(PUBLIC_PREFIX)
        ):
            return await handler(request)
        given = request.headers.get("Authorization", "").encode()
        if not hmac.compare_digest(given, expected):
            get_logger(component="api").warning("api.unauthorized", path=request.path)
            return _error(401, "send the daemon's token as 'Authorization: Bearer <token>'")
        return await handler(request)

    return auth


async def _submission(request: web.Request) -> tuple[str, str, dict[str, str]] | web.Response:
    """A submitted sweep's text, file name and workload files, from a JSON body or a plain
    YAML one; the error response when the body is neither."""
    workloads: dict[str, str] = {}
    if request.content_type == "application/json":
        raw = await _read_capped(request, MAX_SUBMIT_JSON_BYTES)
        if raw is None:
            return _error(413, f"request body over {MAX_SUBMIT_JSON_BYTES} bytes")
        try:
            body = SubmitBody.model_validate_json(raw)
        except ValidationError:
            return _error(
                400, 'the body is JSON: {"sweep": YAML, "filename", "workloads": {PATH: TEXT}}'
            )
        text, filename, workloads = body.sweep, body.filename, body.workloads
    else:
        raw = await request.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError:
            return _error(400, "the body is not UTF-8 text")
        filename = request.headers.get("X-Sweep-Filename", "submitted.yaml")
    if not _FILENAME.fullmatch(filename):
        filename = "submitted.yaml"
    return text, filename, workloads


async def _restore_forced(request: web.Request) -> bool:
    """``"force": true`` in a restore's body: another sweep's drop-in is removed too."""
    try:
        body = await request.json()
    except (json.JSONDecodeError, UnicodeDecodeError):
        return False
    return isinstance(body, dict) and body.get("force") is True


async def _restore_target(request: web.Request) -> str | web.Response | None:
    """The host a restore asks for (None: every host), or the error response."""
    try:
        body = await request.json()
    except json.JSONDecodeError:
        return _error(400, 'the body is JSON: {"host": NAME} or {"all": true}')
    if not isinstance(body, dict):
        return _error(400, 'the body is JSON: {"host": NAME} or {"all": true}')
    host, everything = body.get("host"), body.get("all") is True
    if everything == (host is not None) or (host is not None and not isinstance(host, str)):
        return _error(400, 'give exactly one of {"host": NAME} and {"all": true}')
    if host is not None and not valid_ref(host):
        return _error(400, f"not a host name: {host!r}")
    return host


class _Handlers:
    """The API's request handlers over one daemon's operations: each reads its request,
    calls one operation and answers JSON (the report: its own media type)."""

    def __init__(self, ops: DaemonOps) -> None:
        self.ops = ops

    async def health(self, request: web.Request) -> web.Response:
        del request
        return web.json_response({"ok": True, "version": __version__})

    async def submit(self, request: web.Request) -> web.Response:
        read = await _submission(request)
        if isinstance(read, web.Response):
            return read
        text, filename, workloads = read
        outcome = await self.ops.submit(
            text, filename=filename, replace=_flag(request, "replace"), workloads=workloads
        )
        return web.json_response(outcome.to_json(), status=201 if outcome.created else 200)

    async def list_sweeps(self, request: web.Request) -> web.Response:
        sweeps = await self.ops.list_sweeps(include_replaced=_flag(request, "all"))
        return web.json_response({"sweeps": [view.to_json() for view in sweeps]})

    async def status(self, request: web.Request) -> web.Response:
        return web.json_response((await self.ops.sweep_status(_ref(request))).to_json())

    async def cancel(self, request: web.Request) -> web.Response:
        return web.json_response((await self.ops.cancel(_ref(request))).to_json(), status=202)

    async def resume(self, request: web.Request) -> web.Response:
        record = await self.ops.resume(_ref(request))
        return web.json_response(sweep_brief(record), status=202)

    async def results(self, request: web.Request) -> web.Response:
        return web.json_response((await self.ops.results(_ref(request))).to_json())

    async def report(self, request: web.Request) -> web.Response:
        fmt = request.query.get("format", "md")
        if fmt not in FORMATS:
            return _error(400, f"format is one of {', '.join(FORMATS)}")
        others = [ref for ref in request.query.get("with", "").split(",") if ref]
        if not all(valid_ref(ref) for ref in others):
            return _error(400, "a sweep is named by its name or id")
        text = await self.ops.report(
            [_ref(request), *others], fmt, include_requests=_flag(request, "requests")
        )
        return web.Response(body=text.encode(), headers={"Content-Type": MEDIA_TYPES[fmt]})

    async def restore(self, request: web.Request) -> web.Response:
        target = await _restore_target(request)
        if isinstance(target, web.Response):
            return target
        outcomes = await self.ops.restore_hosts(target, force=await _restore_forced(request))
        return web.json_response({"restored": [outcome.to_json() for outcome in outcomes]})

    async def adopt(self, request: web.Request) -> web.Response:
        try:
            body = await request.json()
        except json.JSONDecodeError:
            body = None
        host_type = body.get("type") if isinstance(body, dict) else None
        if not isinstance(host_type, str) or not valid_ref(host_type):
            return _error(400, 'the body is JSON: {"type": HOST_TYPE, "allow_tie": false}')
        allow_tie = body.get("allow_tie") is True if isinstance(body, dict) else False
        allow_unexplored = body.get("allow_unexplored") is True if isinstance(body, dict) else False
        adoption = await self.ops.adopt(
            _ref(request), host_type, allow_tie=allow_tie, allow_unexplored=allow_unexplored
        )
        return web.json_response(adoption.to_json(), status=200 if adoption.ok else 502)

    async def metrics(self, request: web.Request) -> web.Response:
        exposition = await self.ops.metrics(request.headers.get("Accept", ""))
        return web.Response(
            body=exposition.body, headers={"Content-Type": exposition.content_type}
        )

    async def dashboard_state(self, request: web.Request) -> web.Response:
        del request
        return web.json_response((await self.ops.dashboard()).to_json())

    async def dashboard_page(self, request: web.Request) -> web.StreamResponse:
        if request.path == "/dashboard":  # the page's relative links resolve under the slash
            raise web.HTTPFound("/dashboard/")
        return web.FileResponse(STATIC_DIR / "index.html", headers=_PAGE_HEADERS)


_PAGE_HEADERS = {"Cache-Control": "no-cache", "Referrer-Policy": "no-referrer"}


def build_app(ops: DaemonOps, *, token: str | None = None) -> web.Application:
    """The API over ``ops``; with ``token``, every request must present it (loopback TCP)."""
    middlewares = [_error_middleware()]
    if token is not None:
        middlewares.append(_auth_middleware(token))
    app = web.Application(client_max_size=MAX_BODY_BYTES, middlewares=middlewares)
    handlers = _Handlers(ops)
    app.router.add_get("/health", handlers.health)
    app.router.add_post("/sweeps", handlers.submit)
    app.router.add_get("/sweeps", handlers.list_sweeps)
    app.router.add_get("/sweeps/{ref}", handlers.status)
    app.router.add_post("/sweeps/{ref}/cancel", handlers.cancel)
    app.router.add_post("/sweeps/{ref}/resume", handlers.resume)
    app.router.add_get("/sweeps/{ref}/results", handlers.results)
    app.router.add_get("/sweeps/{ref}/report", handlers.report)
    app.router.add_post("/restore", handlers.restore)
    app.router.add_post("/sweeps/{ref}/adopt", handlers.adopt)
    app.router.add_get("/metrics", handlers.metrics)
    app.router.add_get("/dashboard", handlers.dashboard_page)
    app.router.add_get("/dashboard/", handlers.dashboard_page)
    app.router.add_get("/dashboard/state", handlers.dashboard_state)
    app.router.add_static(PUBLIC_PREFIX, STATIC_DIR)
    return app
