"""Prompts of an exact token length, as the SERVER counts them.

A context length is only meaningful in the server's tokens, after its chat template. So the
length is found by calibration: a few ``max_tokens=1`` requests per context, reading
``prompt_tokens`` back, searching the number of filler words until the count is exact (or
recording the closest it got). The prompt starts with a per-request nonce so that the radix
cache cannot serve any of it beyond the template's fixed prefix.

Nonce and filler are built from short common English words, each one token (with its
leading space) in the usual BPE vocabularies, so every nonce has the same length and the
count grows by one per filler word; calibration verifies instead of assuming this.
"""

from __future__ import annotations

import functools
import json
import os
import random
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Protocol

from orchestrator.bench.client import Phase, RequestRecord
from orchestrator.engines.base import Prompt
from orchestrator.log import get_logger
from orchestrator.types import ApiKind


def _log() -> Any:
    """The module logger, bound at call time (after the entry point configured logging)."""
    return get_logger(component="bench.prompts")


_WORD_TEXT = (
    "the of and to in is it you that he was for on are as with his they at be this "
    "have from or one had by but not what all were we when your can said there use an "
    "each which she do how their if will up other about out many then them these so "
    "some her would make like him into"
)
WORDS: tuple[str, ...] = tuple(_WORD_TEXT.split())
NONCE_WORDS = 5
MAX_TOKENS_PER_WORD = 8
"""The most tokens a filler word is assumed to cost (a byte-level tokenizer's four or five,
with room): calibration's second probe stays under its target at this rate."""
_FILLER_SEED = 20261030


class CalibrationError(Exception):
    """Calibration could not measure the server's prompt length; carries the failing record."""

    def __init__(self, message: str, record: RequestRecord | None = None) -> None:
        super().__init__(message)
        self.record = record


class PromptSender(Protocol):
    """What calibration needs from a client: send one request, get its record."""

    base_url: str
    model: str
    api: ApiKind

    async def send(
        self,
        prompt: str | Prompt,
        *,
        max_tokens: int,
        temperature: float = ...,
        ignore_eos: bool = ...,
        label: str = ...,
        phase: Phase = ...,
    ) -> RequestRecord: ...


@dataclass(frozen=True)
class Calibration:
    """How prompts of ``target_tokens`` are made on one server/model/API, and how exact.

    ``measured_tokens`` is the server's count for the chosen length (for a workload, that of
    its prompt farthest from the target); ``tolerance`` is ``|measured - target|`` (0 when
    exact); ``requests`` how many probes it took. ``workload`` is the point's workload label
    and ``method`` how the length was reached: ``filler`` (synthetic), ``padded-turns``
    (sample prompts padded with other lines' turns), ``trimmed`` (sample prompts cut to the
    length), ``whole`` (a sample prompt that has the length as it is), joined with ``+`` when
    a workload's prompts needed several, or ``closest: <reason>``
    when no prompt of exactly that length could be made. ``filler_words`` is 0 for a workload.
    """

    base_url: str
    model: str
    api: str
    target_tokens: int
    filler_words: int
    measured_tokens: int
    requests: int
    workload: str = "synthetic"
    method: str = "filler"

    @property
    def tolerance(self) -> int:
        return abs(self.measured_tokens - self.target_tokens)

    @property
    def key(self) -> str:
        return calibration_key(
            self.base_url, self.model, self.api, self.target_tokens, self.workload
        )


def calibration_key(
    base_url: str, model: str, api: str, tokens: int, workload: str = "synthetic"
) -> str:
    """The cache key of a calibration; a synthetic one keeps the key it always had, so old
    cache files still match."""
    key = f"{base_url.rstrip('/')}|{model}|{api}|{tokens}"
    return key if workload == "synthetic" else f"{key}|{workload}"


class PromptSource(Protocol):
    """What a point needs from its prompts: a calibration per context, then prompts of that
    exact length, each unique at its start (``PromptFactory``, ``WorkloadPrompts``)."""

    async def calibrate(self, target_tokens: int) -> Calibration: ...

    def prompt(self, calibration: Calibration) -> Prompt: ...


@functools.lru_cache(maxsize=64)
def filler_text(words: int) -> str:
    """The first ``words`` words of a fixed pseudo-random word sequence (prefix-stable)."""
    rng = random.Random(_FILLER_SEED)
    return " ".join(rng.choice(WORDS) for _ in range(words))


def nonce_text(value: int) -> str:
    """``NONCE_WORDS`` words spelling ``value`` in base len(WORDS): same length for all."""
    base = len(WORDS)
    digits = []
    for _ in range(NONCE_WORDS):
        value, digit = divmod(value, base)
        digits.append(WORDS[digit])
    return " ".join(digits)


def build_prompt(nonce: int, filler_words: int) -> str:
    """A prompt unique at its start (the nonce) followed by ``filler_words`` filler words."""
    filler = filler_text(filler_words)
    head = nonce_text(nonce)
    return f"{head} {filler}" if filler else head


def next_guess(probes: dict[int, int], target: int, max_words: int) -> int | None:
    """The next filler length to probe, from (words -> measured tokens) so far.

    Secant step through the two probes nearest the target, kept inside the bracket of the
    closest probe below and above; None when every candidate was already probed.
    """
    below = [w for w, t in probes.items() if t < target]
    above = [w for w, t in probes.items() if t > target]
    lo = max(below) if below else None
    hi = min(above) if above else None
    if lo is not None and hi is not None and hi - lo <= 1:
        return None
    nearest = sorted(probes, key=lambda w: abs(probes[w] - target))[:2]
    if len(nearest) == 2 and probes[nearest[0]] != probes[nearest[1]]:
        w0, w1 = nearest
        slope = (probes[w1] - probes[w0]) / (w1 - w0)
        guess = round(w0 + (target - probes[w0]) / slope)
    else:
        w0 = nearest[0]
        guess = w0 + (target - probes[w0])
    low_bound = lo + 1 if lo is not None else 0
    high_bound = hi - 1 if hi is not None else max_words
    guess = min(max(guess, low_bound), high_bound)
    if guess in probes:
        candidates = [w for w in range(low_bound, high_bound + 1) if w not in probes]
        if not candidates:
            return None
        guess = min(candidates, key=lambda w: abs(w - guess))
    return guess


class PromptFactory:
    """Calibrated prompts for one client: exact length per context, unique per request.

    Calibrations are cached in memory and, when ``cache_path`` is given, in a JSON file
    keyed by (base URL, model, API, target tokens).
    """

    def __init__(
        self,
        sender: PromptSender,
        *,
        cache_path: Path | None = None,
        max_probes: int = 10,
        nonce_source: Callable[[], int] | None = None,
    ) -> None:
        self.sender = sender
        self.cache_path = cache_path
        self.max_probes = max_probes
        self._memory: dict[str, Calibration] = {}
        self._nonce_base = (nonce_source or (lambda: int.from_bytes(os.urandom(8), "big")))()
        self._issued = 0
        if cache_path is not None and cache_path.exists():
            self._memory.update(load_calibrations(cache_path))

    def prompt(self, calibration: Calibration) -> Prompt:
        """A fresh prompt of the calibrated length; no two from this factory share a start."""
        self._issued += 1
        return Prompt(text=build_prompt(self._nonce_base + self._issued, calibration.filler_words))

    async def calibrate(self, target_tokens: int) -> Calibration:
        """The calibration for ``target_tokens``, measuring the server if not cached."""
        if target_tokens < 1:
            raise ValueError(f"target_tokens must be >= 1, got {target_tokens}")
        key = calibration_key(
            self.sender.base_url, self.sender.model, self.sender.api, target_tokens
        )
        cached = self._memory.get(key)
        if cached is not None:
            return cached
        calibration = await self._measure(target_tokens)
        self._memory[key] = calibration
        if self.cache_path is not None:
            save_calibrations(self.cache_path, self._memory)
        logger = _log()
        log = logger.info if calibration.tolerance == 0 else logger.warning
        log(
            "prompt.calibrated",
            target=target_tokens,
            filler_words=calibration.filler_words,
            measured=calibration.measured_tokens,
            tolerance=calibration.tolerance,
            requests=calibration.requests,
        )
        return calibration

    async def _probe(self, words: int) -> int:
        record = await self.sender.send(
            self.prompt_for_words(words),
            max_tokens=1,
            label=f"calibrate-{words}",
            phase="calibration",
        )
        if not record.ok or record.prompt_tokens is None:
            raise CalibrationError(
                f"calibration probe ({words} words) failed: {record.error} {record.error_detail}",
                record,
            )
        return int(record.prompt_tokens)

    def prompt_for_words(self, words: int) -> str:
        self._issued += 1
        return build_prompt(self._nonce_base + self._issued, words)

    async def _measure(self, target: int) -> Calibration:
        """Probe from below: the nonce alone (the template's own tokens), a filler short
        enough to stay under ``target`` at up to :data:`MAX_TOKENS_PER_WORD`, then secant
        steps aimed at ``target``. No probe is sent far past the target, so a server whose
        context slot barely holds the point's context does not refuse a probe (a probe of
        twice the words did, on a tokenizer that makes words of several tokens)."""
        max_words = max(4 * target, 16)
        probes: dict[int, int] = {0: await self._probe(0)}
        room = target - probes[0]  # none: the template alone reaches the target
        if room > 0:
            short = max(room // MAX_TOKENS_PER_WORD, 1)
            probes[short] = await self._probe(short)
        while room > 0 and len(probes) < self.max_probes and target not in probes.values():
            guess = next_guess(probes, target, max_words)
            if guess is None:
                break
            probes[guess] = await self._probe(guess)
        best = min(probes, key=lambda w: (abs(probes[w] - target), w))
        method = "filler"
        if probes[best] != target:
            method = f"closest: no filler length within {len(probes)} probes gives {target}"
        return Calibration(
            base_url=self.sender.base_url.rstrip("/"),
            model=self.sender.model,
            api=self.sender.api,
            target_tokens=target,
            filler_words=best,
            measured_tokens=probes[best],
            requests=len(probes),
            method=method,
        )


def load_calibrations(path: Path) -> dict[str, Calibration]:
    """Calibrations from a cache file, by key; empty (with a warning) when unreadable."""
    try:
        rows = json.loads(path.read_text())
        found = [Calibration(**row) for row in rows]
    except (OSError, ValueError, TypeError) as exc:
        _log().warning("prompt.cache_unreadable", path=str(path), error=str(exc))
        return {}
    return {c.key: c for c in found}


def save_calibrations(path: Path, calibrations: dict[str, Calibration]) -> None:
    """Write calibrations atomically (tmp + rename), e.g. to hand them to another server
    that runs the same model and tokenizer."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(path.suffix + ".tmp")
    tmp.write_text(json.dumps([asdict(c) for c in calibrations.values()], indent=1))
    tmp.replace(path)
