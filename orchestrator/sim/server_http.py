"""The simulated server's HTTP API, shaped like SGLang's responses.

Readiness phases: LOADING (weights loading; the HTTP port is not bound yet, as in SGLang, so
nothing answers), WARMING (the scheduler runs and HTTP is up: ``/v1/models``, ``/model_info``,
``/server_info`` and generation answer, ``/health`` is 503; the server's own warm-up request
goes through), READY (everything). Two debug endpoints expose ground truth for tests and benchmarks:
``GET /sim/requests`` and ``GET /sim/truth``.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import enum
import json
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field
from typing import Any

from orchestrator.sim.content import profile_tokens
from orchestrator.sim.http_server import EventStream, HttpRequest, HttpResponse, Router, reason
from orchestrator.sim.perfmodel import expected_accept_len
from orchestrator.sim.server_args import ServerArgs, shape_dict
from orchestrator.sim.server_engine import Chunk, Request, Scheduler
from orchestrator.sim.server_log import SglangLog
from orchestrator.sim.settings import ServerSimSettings
from orchestrator.sim.stamped import sent_of
from orchestrator.sim.thinking import (
    ParserKind,
    ReasoningSplitter,
    parser_kind,
    plan_completion,
)
from orchestrator.sim.tokenizer import template_tokens, tokenize

EOS_TOKEN_ID = 163586
"""``matched_stop`` when a request ends on its own (the EOS token id of the simulated model)."""
HEALTH_GENERATE_TIMEOUT_S = 20.0


WARMUP_HEADER = "X-Sim-Server-Warmup"
"""Marks the simulated server's own warm-up request to itself."""


class Phase(enum.Enum):
    LOADING = "loading"
    WARMING = "warming"
    READY = "ready"


@dataclass
class ServerState:
    """What the handlers share: resolved args, settings, phase, the scheduler once it runs."""

    args: ServerArgs
    settings: ServerSimSettings
    argv: tuple[str, ...]
    launch_command: str
    log: SglangLog
    startup_time: float = field(default_factory=time.time)
    phase: Phase = Phase.LOADING
    scheduler: Scheduler | None = None
    requests_seen: int = 0
    nonce: int = 0
    background: set[asyncio.Task[None]] = field(default_factory=set)
    """Long-running tasks (the scheduler loop), held so they are not garbage-collected."""


_json = HttpResponse.json


def _error(message: str, status: int) -> HttpResponse:
    return _json({"object": "error", "message": message, "type": "BadRequestError",
                  "param": None, "code": status}, status)


def _json_body(request: HttpRequest) -> Any:
    """The request's JSON body, or the 400 answer the server gives a body that is not JSON."""
    try:
        return request.json()
    except json.JSONDecodeError:
        return _error("invalid JSON body", 400)


class SimServerApp:
    """Route handlers over one :class:`ServerState`."""

    def __init__(self, state: ServerState) -> None:
        self.state = state

    def router(self) -> Router:
        r = Router()
        r.add("GET", "/health", self.health)
        r.add("GET", "/health_generate", self.health_generate)
        r.add("GET", "/v1/models", self.models)
        r.add("GET", "/model_info", self.model_info)
        r.add("GET", "/get_model_info", self.model_info)
        r.add("GET", "/server_info", self.server_info)
        r.add("GET", "/get_server_info", self.server_info)
        r.add("POST", "/generate", self.generate)
        r.add("POST", "/v1/chat/completions", self.chat)
        r.add("POST", "/flush_cache", self.flush_cache)
        r.add("GET", "/flush_cache", self.flush_cache)
        r.add("GET", "/metrics", self.metrics)
        r.add("GET", "/sim/requests", self.sim_requests)
        r.add("GET", "/sim/truth", self.sim_truth)
        return r

    def access_log(self, request: HttpRequest, status: int) -> None:
        """uvicorn's access line, once the response is complete."""
        where = f"{request.peer[0]}:{request.peer[1]}" if request.peer else "-"
        self.state.log.write_raw(
            f'INFO:     {where} - "{request.method} {request.target} HTTP/1.1" '
            f"{status} {reason(status)}"
        )

    # --- readiness and info -----------------------------------------------------------------

    async def health(self, _request: HttpRequest) -> HttpResponse:
        if self.state.phase is not Phase.READY:
            return HttpResponse(503)
        return HttpResponse(200)

    async def health_generate(self, _request: HttpRequest) -> HttpResponse:
        sched = self.state.scheduler
        if self.state.phase is not Phase.READY or sched is None:
            return HttpResponse(503)
        plan = plan_completion("health", max_new_tokens=1, ignore_eos=True, seed=0, wrong_rate=0)
        req = sched.submit(tokenize("health"), plan, internal=True)
        try:
            async with asyncio.timeout(HEALTH_GENERATE_TIMEOUT_S):
                await req.queue.get()
        except TimeoutError:
            sched.abort(req)
            return HttpResponse(503)
        return HttpResponse(200)

    async def models(self, _request: HttpRequest) -> HttpResponse:
        args = self.state.args
        return _json({"object": "list", "data": [{
            "id": args.served_model_name, "object": "model",
            "created": int(self.state.startup_time), "owned_by": "sglang",
            "root": args.served_model_name, "parent": None,
            "max_model_len": args.get("context_length") or 262144,
        }]})

    async def model_info(self, _request: HttpRequest) -> HttpResponse:
        args = self.state.args
        return _json({
            "model_path": args.model_path,
            "tokenizer_path": args.get("tokenizer_path") or args.model_path,
            "is_generation": True,
            "preferred_sampling_params": None,
            "weight_version": "default",
            "has_image_understanding": False,
            "has_audio_understanding": False,
            "model_type": "sim",
            "architectures": ["SimForCausalLM"],
        })

    async def server_info(self, _request: HttpRequest) -> HttpResponse:
        st = self.state
        info: dict[str, Any] = dict(st.args.values)
        internal: dict[str, Any] = {
            "last_gen_throughput": 0.0,
            "memory_usage": {"weight": st.settings.weights_mib_per_gpu / 1024.0},
        }
        sched = st.scheduler
        if sched is not None:
            internal["last_gen_throughput"] = sched.counters.last_gen_throughput
            avg = sched.avg_spec_accept_length()
            if avg is not None:
                internal["avg_spec_accept_length"] = avg
        info.update({
            "launch_command": st.launch_command,
            "startup_time": st.startup_time,
            "version": st.settings.sglang_version,
            "max_total_num_tokens": st.settings.max_total_tokens,
            "internal_states": [internal],
        })
        return _json(info)

    async def flush_cache(self, _request: HttpRequest) -> HttpResponse:
        sched = self.state.scheduler
        if sched is not None and (sched.running or sched.waiting):
            return HttpResponse.text(
                "Cache not flushed. Please check backend logs for more details. "
                "(When there are running or waiting requests, the operation will not be "
                "performed.)\n",
                400,
            )
        if sched is not None:
            sched.flush_cache()
        self.state.log.rank("Cache flushed successfully!")
        return HttpResponse.text(
            "Cache flushed.\nPlease check backend logs for more details. (When there are "
            "running or waiting requests, the operation will not be performed.)\n"
        )

    async def metrics(self, _request: HttpRequest) -> HttpResponse:
        st = self.state
        if not st.args.get("enable_metrics"):
            return HttpResponse.text("Not Found", 404)
        return HttpResponse.text(render_metrics(st))

    async def sim_requests(self, request: HttpRequest) -> HttpResponse:
        sched = self.state.scheduler
        if sched is None:
            return _json([])
        raw = request.query.get("ids")
        ids = [i for i in raw.split(",") if i] if raw else None
        return _json([r.as_dict() for r in sched.lookup(ids)])

    async def sim_truth(self, _request: HttpRequest) -> HttpResponse:
        st = self.state
        sched = st.scheduler
        c = sched.counters if sched is not None else None
        verify = c.spec_verify_calls if c else 0
        accepted = c.spec_accepted_tokens if c else 0
        return _json({
            "phase": st.phase.value,
            "accepted_tokens": accepted,
            "verify_steps": verify,
            "accept_len": accepted / verify if verify else None,
            "prompt_tokens": c.prompt_tokens if c else 0,
            "generation_tokens": c.generation_tokens if c else 0,
            "completed_requests": c.completed_requests if c else 0,
            "time_scale": st.settings.time_scale,
            "speed_factor": sched.speed_factor if sched is not None else None,
            "spec": shape_dict(st.args.shape),
            "expected_accept_len_at_1k": expected_accept_len(
                st.args.shape, 1024, st.settings.perf
            ),
            "perf": dataclasses.asdict(st.settings.perf),
        })

    # --- generation -------------------------------------------------------------------------

    def _admit(self, prompt: list[str], text: str, params: dict[str, Any], *,
               content: Sequence[str], seed_text: str | None = None,
               internal: bool = False, arrival: float | None = None) -> Request | HttpResponse:
        """Plan and queue one generation. ``prompt``: the templated tokens (what is counted
        and prefilled); ``text``: where a coding task is looked for; ``content``: the tokens
        of the request's own text, which its content class is read from; ``seed_text``:
        what seeds a natural answer (default ``text``)."""
        st = self.state
        sched = st.scheduler
        if sched is None or (st.phase is Phase.LOADING):
            return _error("The server is not ready yet.", 503)
        try:
            max_new = int(params.get("max_new_tokens", 128))
            temperature = float(params.get("temperature", 1.0))
        except (TypeError, ValueError):
            return _error("invalid sampling params", 400)
        if max_new < 1:
            return _error("max_new_tokens must be positive", 400)
        nonce = 0
        if temperature > 0:
            st.nonce += 1
            nonce = st.nonce
        kind = profile_tokens(content).content
        plan = plan_completion(
            text, max_new_tokens=max_new, ignore_eos=bool(params.get("ignore_eos", False)),
            seed=st.settings.seed, wrong_rate=st.settings.coding_wrong_rate, nonce=nonce,
            content=kind, seed_text=seed_text,
        )
        hang = False
        if not internal:
            # A client's request admitted while the server warms up is served like any other
            # (it is a real generation): it counts for the request-numbered faults too.
            st.requests_seen += 1
            every = st.settings.faults.hang_request_every.active(st.argv)
            hang = bool(every) and st.requests_seen % int(every or 1) == 0
        return sched.submit(
            prompt, plan, content=kind, internal=internal, hang=hang, arrival=arrival
        )

    async def generate(self, request: HttpRequest) -> HttpResponse | EventStream:
        body = _json_body(request)
        if isinstance(body, HttpResponse):
            return body
        text = body.get("text")
        if not isinstance(text, str):
            return _error("the simulated server takes 'text' as a single string", 400)
        params = body.get("sampling_params") or {}
        # The server's own warm-up request (sent to itself) is not a client's request.
        own = (request.headers.get(WARMUP_HEADER.lower()) == "1"
               and self.state.phase is Phase.WARMING)
        tokens = tokenize(text)
        admitted = self._admit(
            tokens, text, params, content=tokens, internal=own, arrival=request.arrival
        )
        if isinstance(admitted, HttpResponse):
            return admitted
        req = admitted
        if body.get("stream"):
            return await self._generate_stream(request, req)
        chunks = await self._drain(req)
        return _json({"text": "".join(t for c in chunks for t in c.tokens),
                      "meta_info": self._meta(req, final=True)})

    def _meta(self, req: Request, *, final: bool) -> dict[str, Any]:
        meta: dict[str, Any] = {
            "id": req.rid,
            "finish_reason": _finish_reason(req) if final else None,
            "prompt_tokens": len(req.prompt),
            "weight_version": "default",
            "completion_tokens": req.emitted,
            "cached_tokens": req.cached_tokens,
            "e2e_latency": time.monotonic() - req.truth.arrival_monotonic,
        }
        if final and self.state.args.speculative:
            meta.update(spec_decoding_meta(
                verify_ct=req.verify_steps,
                correct_drafts=req.correct_drafts,
                completion_tokens=req.emitted,
                num_draft_tokens=int(self.state.args.get("speculative_num_draft_tokens") or 1),
            ))
        return meta

    async def _drain(self, req: Request) -> list[Chunk]:
        chunks: list[Chunk] = []
        with self._aborted_if_left(req):
            while True:
                chunk = await req.queue.get()
                chunks.append(chunk)
                if chunk.finish is not None:
                    break
        req.truth.stamp(req.emitted)
        return chunks

    @contextlib.contextmanager
    def _aborted_if_left(self, req: Request) -> Iterator[None]:
        """Abort ``req`` in the scheduler when its client leaves: the handler cancelled (the
        cancellation goes on) or, mid-stream, the connection reset (the stream just ends)."""
        try:
            yield
        except asyncio.CancelledError:
            self._abort(req)
            raise
        except ConnectionResetError:
            self._abort(req)

    def _abort(self, req: Request) -> None:
        if self.state.scheduler is not None:
            self.state.scheduler.abort(req)

    async def _generate_stream(self, request: HttpRequest, req: Request) -> EventStream:
        resp = request.stream()
        sock = request.socket
        text = ""
        with self._aborted_if_left(req):
            while True:
                chunk = await req.queue.get()
                text += "".join(chunk.tokens)
                final = chunk.finish is not None
                data = {"text": text, "meta_info": self._meta(req, final=final)}
                before = time.monotonic()
                await resp.write(f"data: {json.dumps(data)}\n\n".encode())
                req.truth.stamp(len(chunk.tokens), sent_of(sock, before))
                if final:
                    break
            await resp.write(b"data: [DONE]\n\n")
        return resp

    async def chat(self, request: HttpRequest) -> HttpResponse | EventStream:
        body = _json_body(request)
        if isinstance(body, HttpResponse):
            return body
        messages = body.get("messages")
        if not isinstance(messages, list) or not messages:
            return _error("messages must be a non-empty list", 400)
        pairs: list[tuple[str, str]] = []
        for m in messages:
            content = m.get("content") if isinstance(m, dict) else None
            if isinstance(content, list):
                content = "".join(p.get("text", "") for p in content if isinstance(p, dict))
            if not isinstance(content, str):
                return _error("each message needs a text content", 400)
            pairs.append((str(m.get("role", "user")), content))
        max_tokens = body.get("max_completion_tokens") or body.get("max_tokens") or 4096
        params = {"max_new_tokens": max_tokens, "temperature": body.get("temperature", 1.0),
                  "ignore_eos": body.get("ignore_eos", False)}
        last_user = next((c for r, c in reversed(pairs) if r == "user"), pairs[-1][1])
        texts = [(role, tokenize(content)) for role, content in pairs]
        admitted = self._admit(
            template_tokens(texts), last_user, params,
            content=[token for _, tokens in texts for token in tokens],
            seed_text="\0".join(content for _, content in pairs),
            arrival=request.arrival,
        )
        if isinstance(admitted, HttpResponse):
            return admitted
        req = admitted
        model = str(body.get("model") or self.state.args.served_model_name)
        splitter = ReasoningSplitter(parser_kind(self.state.args.get("reasoning_parser")))
        if body.get("stream"):
            include_usage = bool((body.get("stream_options") or {}).get("include_usage"))
            return await self._chat_stream(request, req, model, splitter, include_usage)
        chunks = await self._drain(req)
        reasoning, content = splitter.feed([t for c in chunks for t in c.tokens])
        use_parser = splitter.kind is not ParserKind.NONE
        message = {
            "role": "assistant",
            "content": content or None,
            "reasoning_content": (reasoning or None) if use_parser else None,
            "tool_calls": None,
        }
        return _json({
            "id": req.rid, "object": "chat.completion", "created": int(time.time()),
            "model": model,
            "choices": [{"index": 0, "message": message, "logprobs": None,
                         "finish_reason": req.plan.finish,
                         "matched_stop": EOS_TOKEN_ID if req.plan.finish == "stop" else None}],
            "usage": self._usage(req), "metadata": None,
        })

    def _usage(self, req: Request) -> dict[str, Any]:
        return {"prompt_tokens": len(req.prompt), "total_tokens": len(req.prompt) + req.emitted,
                "completion_tokens": req.emitted, "prompt_tokens_details": None,
                "reasoning_tokens": 0}

    async def _chat_stream(
        self, request: HttpRequest, req: Request, model: str, splitter: ReasoningSplitter,
        include_usage: bool,
    ) -> EventStream:
        resp = request.stream()
        created = int(time.time())

        def event(delta: dict[str, Any] | None, finish: str | None = None,
                  matched: int | None = None, usage: dict[str, Any] | None = None) -> bytes:
            choices: list[dict[str, Any]] = []
            if delta is not None:
                full = {"role": None, "content": None, "reasoning_content": None,
                        "tool_calls": None, **delta}
                choices.append({"index": 0, "delta": full, "logprobs": None,
                                "finish_reason": finish, "matched_stop": matched})
            data = {"id": req.rid, "object": "chat.completion.chunk", "created": created,
                    "model": model, "choices": choices, "usage": usage}
            return f"data: {json.dumps(data)}\n\n".encode()

        first = True
        with self._aborted_if_left(req):
            while True:
                chunk = await req.queue.get()
                out = b""
                if first:
                    out += event({"role": "assistant", "content": ""})
                    first = False
                reasoning, content = splitter.feed(chunk.tokens)
                if reasoning:
                    out += event({"reasoning_content": reasoning})
                if content:
                    out += event({"content": content})
                if out:
                    await resp.write(out)
                req.truth.stamp(len(chunk.tokens))
                if chunk.finish is not None:
                    break
            finish = req.plan.finish
            await resp.write(event({}, finish, EOS_TOKEN_ID if finish == "stop" else None))
            if include_usage:
                await resp.write(event(None, usage=self._usage(req)))
            await resp.write(b"data: [DONE]\n\n")
        return resp


def spec_decoding_meta(
    *, verify_ct: int, correct_drafts: int, completion_tokens: int, num_draft_tokens: int
) -> dict[str, Any]:
    """A finished request's speculative fields as SGLang's ``fill_spec_decoding_meta`` writes
    them: nothing unless it had a verify step; ``spec_accept_length`` divides all completion
    tokens (the prefill's first one too); proposed drafts are ``verify_ct x (draft tokens -
    1)``; the old names ``spec_accepted_drafts`` / ``spec_proposed_drafts`` are kept as
    aliases."""
    proposed = verify_ct * (num_draft_tokens - 1)
    if verify_ct <= 0 or proposed <= 0:
        return {}
    return {
        "spec_accept_rate": correct_drafts / proposed,
        "spec_accept_length": completion_tokens / verify_ct,
        "spec_num_correct_drafts": correct_drafts,
        "spec_num_proposed_drafts": proposed,
        "spec_verify_ct": verify_ct,
        "spec_accepted_drafts": correct_drafts,
        "spec_proposed_drafts": proposed,
    }


def _finish_reason(req: Request) -> dict[str, Any]:
    if req.plan.finish == "length":
        return {"type": "length", "length": req.emitted}
    return {"type": "stop", "matched": EOS_TOKEN_ID}


def render_metrics(state: ServerState) -> str:
    """Prometheus text exposition of the counters SGLang exports under --enable-metrics."""
    sched = state.scheduler
    name = state.args.served_model_name
    labels = f'{{model_name="{name}"}}'
    c = sched.counters if sched is not None else None
    lines: list[str] = []

    def metric(metric_name: str, kind: str, help_text: str, value: float) -> None:
        lines.append(f"# HELP {metric_name} {help_text}")
        lines.append(f"# TYPE {metric_name} {kind}")
        lines.append(f"{metric_name}{labels} {float(value)}")

    metric("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.",
           c.prompt_tokens if c else 0)
    metric("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.",
           c.generation_tokens if c else 0)
    metric("sglang:num_requests_total", "counter", "Number of requests processed.",
           c.completed_requests if c else 0)
    metric("sglang:num_running_reqs", "gauge", "The number of running requests.",
           len(sched.running) if sched else 0)
    metric("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.",
           len(sched.waiting) if sched else 0)
    metric("sglang:gen_throughput", "gauge", "The generation throughput (token/s).",
           c.last_gen_throughput if c else 0.0)
    if state.args.speculative:
        accept = (c.last_accept_len if c and c.last_accept_len is not None else
                  (c.spec_accepted_tokens / c.spec_verify_calls if c and c.spec_verify_calls
                   else 0.0))
        metric("sglang:spec_accept_length", "gauge", "The average acceptance length of "
               "speculative decoding.", accept)
        metric("sglang:spec_verify_calls_total", "counter", "Number of speculative verify "
               "calls (per request).", c.spec_verify_calls if c else 0)
    return "\n".join(lines) + "\n"
