"""Calibration probes from below. `bench --engine llamacpp --contexts 512` against a 1,024-token
slot failed calibrating: its second probe doubled the first's words blindly (512 words, 1,312
tokens on a tokenizer that makes each filler word several tokens) and the server refused the
prompt. No probe may go far past the target, whatever a word costs."""

from __future__ import annotations

import asyncio
import math

import pytest

from orchestrator.bench.client import RequestRecord
from orchestrator.bench.prompts import PromptFactory
from orchestrator.engines.base import ErrorKind, Prompt, TokenSource
from orchestrator.types import ApiKind


class _Slot:
    """A server whose tokenizer makes each word ``per_word`` tokens on top of a template of
    ``template`` tokens, and that refuses a prompt longer than its ``slot``."""

    base_url = "http://slot"
    model = "m"
    api: ApiKind = "chat"

    def __init__(self, per_word: float, template: int = 30, slot: int = 1024) -> None:
        self.per_word, self.template, self.slot = per_word, template, slot
        self.sent: list[int] = []

    async def send(self, prompt: str | Prompt, *, max_tokens: int, **_: object) -> RequestRecord:
        text = prompt.text if isinstance(prompt, Prompt) else prompt
        tokens = self.template + math.ceil(self.per_word * len(str(text).split()))
        self.sent.append(tokens)
        refused = tokens + max_tokens > self.slot
        return RequestRecord(
            label="probe",
            phase="calibration",
            api="chat",
            max_tokens=max_tokens,
            ignore_eos=False,
            send_time=0.0,
            end_time=0.0,
            chunks=[],
            token_source=TokenSource.USAGE_PER_CHUNK,
            prompt_tokens=None if refused else tokens,
            http_status=400 if refused else 200,
            error=ErrorKind.HTTP_STATUS if refused else None,
            error_detail="the request exceeds the available context size" if refused else None,
        )


@pytest.mark.parametrize("per_word", [1.0, 2.5, 4.3])
def test_a_context_of_half_the_slot_calibrates_whatever_a_word_costs(per_word: float) -> None:
    server = _Slot(per_word)
    calibration = asyncio.run(PromptFactory(server, nonce_source=lambda: 7).calibrate(512))
    assert abs(calibration.measured_tokens - 512) <= math.ceil(per_word)
    assert max(server.sent) <= 512 + 2 * math.ceil(per_word)
    assert calibration.requests <= 5


def test_a_template_longer_than_the_target_is_the_closest_it_gets() -> None:
    server = _Slot(1.0, template=80)
    calibration = asyncio.run(PromptFactory(server, nonce_source=lambda: 7).calibrate(60))
    assert calibration.filler_words == 0 and calibration.requests == 1
