"""llama.cpp's ``llama-server`` behind the engine seam (``orchestrator.engines.base.Engine``), as
vendored by llama-cpp-python 0.3.36 (``version: 0.5.0-dev (build 1, commit 0c1e570)``).

Speculation is chosen by ``--spec-type`` (``draft-simple`` with ``-md DRAFT.gguf``; the n-gram
methods ``ngram-simple``, ``ngram-map-k``, ``ngram-map-k4v``, ``ngram-mod``, ``ngram-cache``
need no draft; ``-md`` alone loads a draft and drafts nothing) and sized by
``--spec-draft-n-max`` / ``--spec-draft-n-min`` / ``--spec-draft-p-min`` and the
``--spec-ngram-*`` flags; ``--draft-max`` and its kin were removed and are refused. What the
engine knows: its chat dialect (tokens counted from the ``timings`` the server puts on its
chunks, :class:`LlamaChatDialect`), its log lines and failure texts (:mod:`.logs`), its parser
asked on the host (:mod:`.argv`), its readiness config, provenance and config check
(:mod:`.config`), and acceptance from its ``llamacpp:`` counters (``--metrics``).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import orchestrator.engines.llamacpp.argv as argv_parser
import orchestrator.engines.llamacpp.config as config
import orchestrator.engines.llamacpp.logs as logs
from orchestrator.engines.base import (
    AcceptanceCounters,
    Chunk,
    Engine,
    Generation,
    Reply,
    StreamParse,
    TokenSource,
    WireRequest,
)
from orchestrator.engines.openai_chat import ChatDialect, count, json_object, stream_payloads
from orchestrator.engines.shared import ChatOnlyEngine, lines_follow_decoding, lines_weigh_alike
from orchestrator.types import MetricsMode

METRICS_FLAG = "--metrics"
"""Serves Prometheus ``/metrics`` (off by default): what ``server.metrics: auto`` adds."""

ACCEPTANCE_COUNTERS = AcceptanceCounters(
    verify_steps="llamacpp:spec_decode_num_drafts_total",
    tokens="llamacpp:spec_decode_num_accepted_tokens_total",
    tokens_include_first=False,
    tokens_include_bonus=False,
)
"""``1 + accepted / verify steps`` over a point's deltas: the ``mean len`` of the server's own
``draft acceptance`` line (``server-context.cpp``). Both counters grow when a request
finishes (``metrics_on_prediction``), by that request's totals."""


def _timings(obj: Mapping[str, Any]) -> Mapping[str, Any] | None:
    timings = obj.get("timings")
    return timings if isinstance(timings, dict) else None


class LlamaChatDialect(ChatDialect):
    """``/v1/chat/completions`` as ``llama-server`` serves it. A streamed request asks for
    ``timings_per_token``: every result then carries ``timings`` with ``predicted_n``, the
    tokens generated so far, so each chunk's count is exact. Counting chunks would not be:
    a token whose bytes end inside a UTF-8 character sends no chunk (its text waits for the
    next token's), and one verify step sends several. The finished request's ``timings``
    also carry its ``draft_n`` and ``draft_n_accepted``."""

    def request(self, ask: Generation) -> WireRequest:
        wire = super().request(ask)
        if ask.stream:
            wire.body["timings_per_token"] = True
        return wire

    def parse_final(self, data: Any) -> Reply:
        reply = super().parse_final(data)
        timings = _timings(json_object(data))
        predicted = count(timings.get("predicted_n")) if timings else None
        if predicted is None:
            return reply
        return Reply(reply.content, reply.reasoning_content, reply.finish_reason, predicted)

    def parse_stream(self, events: Sequence[tuple[float, str]]) -> StreamParse:
        parsed = super().parse_stream(events)
        try:
            payloads, _ = stream_payloads(events)
        except ValueError:
            return parsed
        chunks: list[Chunk] = []
        seen = 0
        last: Mapping[str, Any] | None = None
        for arrival, obj in payloads:
            timings = _timings(obj)
            predicted = count(timings.get("predicted_n")) if timings else None
            if predicted is None:
                if obj.get("choices"):
                    chunks.append(Chunk(arrival, 0))  # its tokens come with the next timings
                continue
            chunks.append(Chunk(arrival, max(predicted - seen, 0)))
            seen, last = max(seen, predicted), timings
        if last is None:
            return parsed  # no timings: the usage total spread over the text, as any chat
        parsed.chunks = chunks
        parsed.token_source = TokenSource.CUMULATIVE_PER_CHUNK
        parsed.completion_tokens = seen
        parsed.spec_proposed_drafts = count(last.get("draft_n"))
        parsed.spec_correct_drafts = count(last.get("draft_n_accepted"))
        return parsed


def metrics_flags(metrics: MetricsMode) -> tuple[str, ...]:
    """The flags ``server.metrics`` asks each trial's command line to have."""
    return (METRICS_FLAG,) if metrics == "auto" else ()


class LlamaCpp(ChatOnlyEngine):
    """``llama-server`` as an ``orchestrator.engines.base.Engine``: driven through its chat API,
    whose answers count their tokens in ``timings`` (:class:`LlamaChatDialect`)."""

    name = "llamacpp"
    default_unit = "llama-server.service"
    server = "llama-server"
    chat = LlamaChatDialect()
    metrics_flag = METRICS_FLAG
    acceptance_counters = ACCEPTANCE_COUNTERS
    metrics_flags = staticmethod(metrics_flags)
    server_config = staticmethod(config.server_config)
    normal_word = staticmethod(config.normal_word)
    forced_flags = staticmethod(config.forced_flags)
    parse_command = staticmethod(argv_parser.parse_command)
    batch_command = staticmethod(argv_parser.batch_command)
    read_answers = staticmethod(argv_parser.read_answers)
    help_argv = staticmethod(argv_parser.help_argv)
    parse_log_line = staticmethod(logs.parse_log_line)
    classify_failure = staticmethod(logs.classify_failure)
    resolve_flag_knob = staticmethod(config.resolve_flag_knob)
    check_server_config = staticmethod(config.check_server_config)
    served_model = staticmethod(config.served_model)
    build_provenance = staticmethod(config.build_provenance)
    decode_log_interval = staticmethod(lines_weigh_alike)
    decode_log_period_s = staticmethod(lines_follow_decoding)


LLAMACPP: Engine = LlamaCpp()

__all__ = ["ACCEPTANCE_COUNTERS", "LLAMACPP", "METRICS_FLAG", "LlamaChatDialect", "LlamaCpp"]
