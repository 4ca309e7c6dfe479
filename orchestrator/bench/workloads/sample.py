"""An operator's traffic sample: JSONL, one request a line, parsed into typed requests.

Two shapes are read, the ones benchmark tools take (SGLang's ``bench_serving``, AIPerf,
GuideLLM):

- OpenAI chat: ``{"messages": [{"role": ..., "content": ...}, ...], "output_tokens": N}``.
  Roles ``system``, ``user``, ``assistant`` (``developer``, OpenAI's newer name for the system
  role, reads as ``system``); a content is a string or a list of ``{"type": "text", "text":
  ...}`` parts, joined. ``output_tokens`` (optional) is the length the real answer had.
- ShareGPT: ``{"conversations": [{"from": "human", "value": ...}, ...]}``. ``human`` and
  ``user`` are the user; ``gpt``, ``chatgpt``, ``bard``, ``bing``, ``model`` and ``assistant``
  the model; ``system`` the system prompt (the speakers ShareGPT dumps carry). A turn
  written with ``role``/``content`` instead, as some conversions do, reads the same.

A request is what is sent, so it must end in a user turn. A conversation that ends in the
model's turn(s) (every ShareGPT line does) is cut after its last user turn, and the model's
answer to that turn is kept as ``reply``: its length is what the answer really was, so it is
the request's output length when the line gives no ``output_tokens`` (as ``bench_serving``
does for ShareGPT). The reply is kept as text: its length in the server's tokens is worked
out by the prompt source from what it learnt of the server's tokenizer while calibrating
(``WorkloadPrompts``), not here, where no tokenizer is known. ``output_tokens`` given on the
line always wins.

Every bad line is reported, all of them at once, as ``FILE:LINE: message``, and any bad line
makes the sample an error (the sweep is rejected at ``validate``, nothing queued). Blank
lines are allowed. A sample with no request at all is an error too.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from orchestrator.engines.base import ChatMessage
from orchestrator.types import content_hash

_OPENAI_ROLES = {"system": "system", "developer": "system", "user": "user",
                 "assistant": "assistant"}
_SHAREGPT_ROLES = {
    "human": "user",
    "user": "user",
    "gpt": "assistant",
    "chatgpt": "assistant",
    "bard": "assistant",
    "bing": "assistant",
    "model": "assistant",
    "assistant": "assistant",
    "system": "system",
}


@dataclass(frozen=True, slots=True)
class SampleRequest:
    """One request of a sample: the conversation sent (ending in a user turn), its real
    output length when known, its 1-based line, and the cut model reply (see module doc)."""

    messages: tuple[ChatMessage, ...]
    output_tokens: int | None
    line: int
    reply: str | None = None


@dataclass(frozen=True, slots=True)
class WorkloadSample:
    """A parsed sample: its label (``file:PATH``, ``builtin:NAME``), requests in line order,
    and the sha256 of the content it was parsed from."""

    label: str
    requests: tuple[SampleRequest, ...]
    content_hash: str


class WorkloadFileError(ValueError):
    """A sample that cannot be used; ``problems`` lists every bad line as ``FILE:LINE: ...``."""

    def __init__(self, problems: list[str]) -> None:
        super().__init__("\n".join(problems))
        self.problems = problems


class _BadLine(ValueError):
    """One line's problem (message only; the caller adds FILE:LINE)."""


def parse_sample(text: str, *, filename: str, label: str) -> WorkloadSample:
    """The requests of a JSONL sample; WorkloadFileError listing every bad line, or saying
    that the sample holds no request."""
    requests: list[SampleRequest] = []
    problems: list[str] = []
    for number, raw in enumerate(text.splitlines(), start=1):
        if not raw.strip():
            continue
        try:
            requests.append(_parse_line(raw, number))
        except _BadLine as exc:
            problems.append(f"{filename}:{number}: {exc}")
    if problems:
        raise WorkloadFileError(problems)
    if not requests:
        raise WorkloadFileError([f"{filename}: the sample holds no request (no non-blank line)"])
    return WorkloadSample(label=label, requests=tuple(requests), content_hash=content_hash(text))


def _parse_line(raw: str, number: int) -> SampleRequest:
    try:
        obj = json.loads(raw)
    except json.JSONDecodeError as exc:
        raise _BadLine(f"not JSON: {exc.msg} (column {exc.colno})") from None
    if not isinstance(obj, dict):
        raise _BadLine(f"expected a JSON object, got {type(obj).__name__}")
    if "messages" in obj and "conversations" in obj:
        raise _BadLine("has both 'messages' and 'conversations'; give one")
    if "messages" in obj:
        turns = _turns(obj["messages"], "messages", "role", "content", _OPENAI_ROLES)
    elif "conversations" in obj:
        turns = _turns(obj["conversations"], "conversations", "from", "value", _SHAREGPT_ROLES)
    else:
        raise _BadLine("expected 'messages' (OpenAI chat) or 'conversations' (ShareGPT)")
    output_tokens = _output_tokens(obj.get("output_tokens"))
    messages, reply = _cut_at_last_user(turns)
    return SampleRequest(messages=messages, output_tokens=output_tokens, line=number, reply=reply)


def _turns(
    value: Any, field: str, role_key: str, text_key: str, roles: dict[str, str]
) -> list[ChatMessage]:
    if not isinstance(value, list) or not value:
        raise _BadLine(f"'{field}' must be a non-empty list")
    turns: list[ChatMessage] = []
    for index, item in enumerate(value):
        where = f"{field}[{index}]"
        if not isinstance(item, dict):
            raise _BadLine(f"{where} must be an object")
        # Some ShareGPT conversions write OpenAI's keys inside "conversations".
        converted = role_key not in item and "role" in item
        who, what = ("role", "content") if converted else (role_key, text_key)
        speaker = item.get(who)
        if not isinstance(speaker, str) or speaker.lower() not in roles:
            known = ", ".join(sorted(roles))
            raise _BadLine(f"{where}.{who} {speaker!r} is not one of {known}")
        turns.append(ChatMessage(roles[speaker.lower()], _text(item.get(what), where, what)))
    return turns


def _text(value: Any, where: str, key: str) -> str:
    if isinstance(value, list):
        parts = [p.get("text") for p in value if isinstance(p, dict) and p.get("type") == "text"]
        if len(parts) != len(value) or not all(isinstance(p, str) for p in parts):
            raise _BadLine(f"{where}.{key}: only text parts are supported")
        value = "".join(str(p) for p in parts)
    if not isinstance(value, str):
        raise _BadLine(f"{where}.{key} must be a string")
    if not value.strip():
        raise _BadLine(f"{where}.{key} is empty")
    return value


def _output_tokens(value: Any) -> int | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise _BadLine(f"output_tokens must be a positive integer, got {value!r}")
    return value


def _cut_at_last_user(turns: list[ChatMessage]) -> tuple[tuple[ChatMessage, ...], str | None]:
    """The conversation up to its last user turn, and the model's answer to it (if any)."""
    last_user = max((i for i, t in enumerate(turns) if t.role == "user"), default=None)
    if last_user is None:
        raise _BadLine("no user turn: nothing to send")
    after = turns[last_user + 1:]
    if any(t.role == "system" for t in after):
        raise _BadLine("a system turn after the last user turn")
    reply = "\n\n".join(t.content for t in after) if after else None
    return tuple(turns[: last_user + 1]), reply
