"""The coding-correctness anchor: ask the model for code, extract its FINAL answer, test it.

The seeds' harness scored a working thinking model 0/5 because it took the first code block of
the whole output, a draft from the reasoning. Here the answer is what follows the end of the
reasoning (`</think>`, `◁/think▷`, or a separate `reasoning_content`), and the code is the
last fenced block of that answer which defines the entry point. An output cut off before the
answer is TRUNCATED, never scored as a wrong answer.
"""

from __future__ import annotations

import ast
import asyncio
import json
import re
import textwrap
import time
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from types import TracebackType
from typing import TYPE_CHECKING, Protocol, runtime_checkable

from orchestrator.bench.problems import CodingProblem, builtin_problems
from orchestrator.bench.sandbox import SandboxConfig, SandboxResult, run_candidate
from orchestrator.engines.base import Dialect, Generation, Reply
from orchestrator.log import get_logger
from orchestrator.points import CodingPoint, PointProvenance
from orchestrator.types import ApiKind
from orchestrator.types import Outcome as Outcome  # defined with the shared types; named here too

if TYPE_CHECKING:
    import aiohttp

    from orchestrator.bench.client import Phase, RawExchange

# The HTTP side (aiohttp, the benchmark's client) is imported where a request is made: the
# report, the answers and the daemon's API read this module's results and outcomes, and a
# CLI verb that only reads the store should not pay half a second to import a client.

_log = get_logger(component="coding")




# --------------------------------------------------------------------------------------------
# Final-answer extraction (pure)

_END_OF_REASONING = re.compile(r"<\s*/\s*think\s*>|◁\s*/\s*think\s*▷", re.IGNORECASE)
_START_OF_REASONING = re.compile(r"<\s*think\s*>|◁\s*think\s*▷", re.IGNORECASE)
_FENCE_AT_START = re.compile(r"^[ \t]*(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[^`\n]*?)[ \t]*$")
_FENCE_AFTER_TEXT = re.compile(r"(?P<fence>`{3,}|~{3,})[ \t]*(?P<info>[A-Za-z][\w+.-]*)[ \t]*$")
_PYTHON_LANGS = frozenset({"", "python", "py", "python3", "py3", "python2"})
_CODE_START = re.compile(r"^(?:def |async def |class |import |from \S+ import |@)")
_FALLBACK_MAX_LINES = 400


@dataclass(frozen=True)
class SplitOutput:
    """A model output split at the end of its reasoning. `answer` is None when the
    reasoning never ended (the answer never came)."""

    reasoning: str
    answer: str | None


@dataclass(frozen=True)
class CodeBlock:
    """One fenced block of an answer."""

    code: str
    lang: str
    terminated: bool


class AnswerKind(StrEnum):
    CODE = "code"
    NO_CODE = "no_code"
    TRUNCATED = "truncated"


@dataclass(frozen=True)
class ClassifiedAnswer:
    """What a model's output amounts to before any code runs."""

    kind: AnswerKind
    code: str | None
    answer: str | None
    reason: str


def split_reasoning(content: str | None, reasoning_content: str | None = None) -> SplitOutput:
    """Split at the LAST end-of-reasoning marker in `content`; with a separate
    `reasoning_content` (server-side parser) all of `content` is the answer. Output with
    no opening tag but an end marker (R1, or a template that pre-fills `<think>`) splits
    the same way."""
    content = content or ""
    ends = list(_END_OF_REASONING.finditer(content))
    if ends:
        last = ends[-1]
        reasoning = _without_opening_tag(content[: last.start()])
        return SplitOutput((reasoning_content or "") + reasoning, content[last.end() :])
    if reasoning_content:
        # Parser on: a cut-off generation leaves everything in reasoning_content.
        return SplitOutput(reasoning_content, content if content.strip() else None)
    if _START_OF_REASONING.search(content):
        return SplitOutput(_without_opening_tag(content), None)
    return SplitOutput("", content)


def _without_opening_tag(reasoning: str) -> str:
    return _START_OF_REASONING.sub("", reasoning, count=1)


def find_code_blocks(text: str) -> list[CodeBlock]:
    """Fenced blocks (``` or ~~~, any info string), tolerant of CRLF, indented fences,
    a closing fence glued to the last code line and an unterminated final fence."""
    lines = text.replace("\r\n", "\n").replace("\r", "\n").split("\n")
    blocks: list[CodeBlock] = []
    index = 0
    while index < len(lines):
        opener = _FENCE_AT_START.match(lines[index]) or _FENCE_AFTER_TEXT.search(lines[index])
        if opener is None:
            index += 1
            continue
        fence = opener["fence"]
        lang = (opener["info"].split() or [""])[0].lower()
        body: list[str] = []
        terminated = False
        index += 1
        while index < len(lines):
            line = lines[index]
            stripped = line.strip()
            if _is_closing_fence(stripped, fence):
                terminated = True
                break
            if stripped.endswith(fence[0] * 3) and not stripped.startswith(fence[0] * 3):
                body.append(line.rstrip()[: -len(fence)].rstrip(fence[0]))
                terminated = True
                break
            body.append(line)
            index += 1
        index += 1
        blocks.append(CodeBlock(textwrap.dedent("\n".join(body)).strip("\n"), lang, terminated))
    return blocks


def _is_closing_fence(stripped: str, fence: str) -> bool:
    return len(stripped) >= len(fence) and set(stripped) == {fence[0]}


def defines(code: str, name: str) -> bool:
    """Whether `code` defines `name` at module level (def, class or assignment); for code
    that does not parse, whether a `def name(` line is there."""
    try:
        tree = ast.parse(code)
    except (SyntaxError, ValueError):
        return re.search(rf"^\s*(?:async\s+)?def\s+{re.escape(name)}\s*\(", code, re.M) is not None
    return name in _module_level_names(tree.body)


def _module_level_names(body: Sequence[ast.stmt]) -> set[str]:
    names: set[str] = set()
    for node in body:
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
        elif isinstance(node, ast.Assign):
            names.update(t.id for t in node.targets if isinstance(t, ast.Name))
        elif isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name):
            names.add(node.target.id)
        elif isinstance(node, ast.If | ast.Try):
            names |= _module_level_names(node.body)
            names |= _module_level_names(node.orelse)
    return names


def _choose_block(blocks: Sequence[CodeBlock], entry_point: str | None) -> str | None:
    python_blocks = [b for b in blocks if b.lang in _PYTHON_LANGS and b.code.strip()]
    if entry_point:
        defining = [b for b in python_blocks if defines(b.code, entry_point)]
        if defining:
            return defining[-1].code
        other_langs = [
            b
            for b in blocks
            if b.lang not in _PYTHON_LANGS and _parses(b.code) and defines(b.code, entry_point)
        ]
        if other_langs:
            return other_langs[-1].code
    if python_blocks:
        return python_blocks[-1].code
    return None


def _parses(code: str) -> bool:
    try:
        ast.parse(code)
    except (SyntaxError, ValueError):
        return False
    return True


def _unfenced_code(answer: str, entry_point: str | None) -> str | None:
    """Code in an answer without fences: the whole answer if it is Python, else the first
    run of lines starting at a def/class/import that parses (and defines `entry_point`)."""
    text = answer.replace("\r\n", "\n").strip()
    if not text:
        return None
    if _parses(text) and _has_definition(text, entry_point):
        return text
    lines = text.split("\n")[:_FALLBACK_MAX_LINES]
    for start, line in enumerate(lines):
        if not _CODE_START.match(line):
            continue
        for end in range(len(lines), start, -1):
            candidate = "\n".join(lines[start:end]).strip()
            if _parses(candidate) and _has_definition(candidate, entry_point):
                return candidate
    return None


def _has_definition(code: str, entry_point: str | None) -> bool:
    if entry_point:
        return defines(code, entry_point)
    tree = ast.parse(code)
    return any(
        isinstance(n, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) for n in tree.body
    )


def extract_final_code(
    content: str, reasoning_content: str | None = None, entry_point: str | None = None
) -> str | None:
    """The code of the model's FINAL answer, or None when the answer never came or holds none.

    Never returns a block from the reasoning. Of the answer's fenced blocks it takes the
    last that defines `entry_point` (answers often end with a usage block), else the last.
    """
    answer = split_reasoning(content, reasoning_content).answer
    if answer is None:
        return None
    chosen = _choose_block(find_code_blocks(answer), entry_point)
    if chosen is not None:
        return chosen
    return _unfenced_code(answer, entry_point)


def classify_answer(
    content: str,
    reasoning_content: str | None = None,
    entry_point: str | None = None,
    *,
    finish_reason: str | None = None,
) -> ClassifiedAnswer:
    """CODE, NO_CODE or TRUNCATED (finish_reason `length`, or the reasoning never ended)."""
    split = split_reasoning(content, reasoning_content)
    if finish_reason == "length":
        return ClassifiedAnswer(AnswerKind.TRUNCATED, None, split.answer, "finish_reason=length")
    if split.answer is None:
        return ClassifiedAnswer(AnswerKind.TRUNCATED, None, None, "reasoning never ended")
    code = extract_final_code(content, reasoning_content, entry_point)
    if code is None:
        return ClassifiedAnswer(AnswerKind.NO_CODE, None, split.answer, "no code in the answer")
    return ClassifiedAnswer(AnswerKind.CODE, code, split.answer, "")


# --------------------------------------------------------------------------------------------
# Requests


@dataclass(frozen=True)
class Completion:
    """One finished generation and how long it took."""

    content: str
    reasoning_content: str | None
    finish_reason: str | None
    completion_tokens: int | None
    elapsed_s: float

    @classmethod
    def of(cls, reply: Reply, elapsed_s: float) -> Completion:
        return cls(
            content=reply.content or "",
            reasoning_content=reply.reasoning_content,
            finish_reason=reply.finish_reason,
            completion_tokens=reply.completion_tokens,
            elapsed_s=elapsed_s,
        )


class CompletionError(RuntimeError):
    """The server did not give a usable answer; carries the status and body excerpt."""

    def __init__(self, message: str, *, status: int | None = None, body: str = "") -> None:
        self.status = status
        self.body = body
        super().__init__(f"{message} (status={status}): {body[:300]}")


class CompleteFn(Protocol):
    """Sends one prompt and returns the finished completion."""

    def __call__(
        self, prompt: str, max_tokens: int, temperature: float
    ) -> Awaitable[Completion]: ...


class HttpCompleter:
    """Default `CompleteFn`: non-streaming requests to a server over one aiohttp session, in
    its engine's `dialect` for `api` (`chat`: the OpenAI-compatible chat API; `generate`: the
    engine's native one, no chat template applied): the server's engine's, always named."""

    def __init__(
        self,
        base_url: str,
        *,
        model: str,
        api: ApiKind = "chat",
        timeout_s: float = 600.0,
        dialect: Dialect,
    ) -> None:
        self.base_url = base_url.rstrip("/")
        self.model = model
        self.api = api
        self.dialect: Dialect = dialect
        self.timeout_s = timeout_s
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> HttpCompleter:
        import aiohttp

        self._session = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=self.timeout_s))
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.close()

    async def close(self) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def __call__(self, prompt: str, max_tokens: int, temperature: float) -> Completion:
        if self._session is None:
            raise RuntimeError("HttpCompleter used outside `async with`")
        request = self.dialect.request(
            Generation(prompt, max_tokens, temperature, stream=False, model=self.model)
        )
        started = time.monotonic()
        async with self._session.post(self.base_url + request.path, json=request.body) as response:
            body = await response.text()
            if response.status != 200:
                raise CompletionError("request failed", status=response.status, body=body)
        elapsed = time.monotonic() - started
        try:
            answer = self.dialect.parse_final(json.loads(body))
        except ValueError as exc:
            raise CompletionError(
                f"unexpected response shape: {exc!r}", status=200, body=body
            ) from exc
        if answer.content is None:
            raise CompletionError(
                "unexpected response shape: no answer text", status=200, body=body
            )
        return Completion.of(answer, elapsed)


@runtime_checkable
class StreamingClient(Protocol):
    """What `BenchClientCompleter` needs of `orchestrator.bench.client.BenchClient`."""

    @property
    def api(self) -> ApiKind: ...

    @property
    def dialect(self) -> Dialect: ...

    async def stream(
        self,
        prompt: str,
        *,
        max_tokens: int,
        temperature: float = 0.0,
        ignore_eos: bool = True,
        label: str = "",
        phase: Phase = "measured",
    ) -> RawExchange: ...


class BenchClientCompleter:
    """`CompleteFn` over the benchmark's streaming client, so coding requests share its
    session and timeouts. The text is rebuilt from the raw SSE events (the client keeps
    only timings and token counts); `ignore_eos` is off so the model ends its answer."""

    def __init__(self, client: StreamingClient) -> None:
        self.client = client

    async def __call__(self, prompt: str, max_tokens: int, temperature: float) -> Completion:
        raw = await self.client.stream(
            prompt,
            max_tokens=max_tokens,
            temperature=temperature,
            ignore_eos=False,
            label="coding",
            phase="probe",
        )
        from orchestrator.bench.client import read_exchange

        record, answer = read_exchange(raw, self.client.dialect)
        if record.error is not None:
            raise CompletionError(
                f"{record.error.value}: {record.error_detail}", status=record.http_status
            )
        end = raw.end_time if raw.end_time is not None else raw.send_time
        return Completion.of(answer, end - raw.send_time)


# --------------------------------------------------------------------------------------------
# The run


@dataclass(frozen=True)
class CodingSummary:
    passed: int
    scored: int
    total: int
    counts: dict[str, int]

    @property
    def pass_rate(self) -> float | None:
        return self.passed / self.scored if self.scored else None


def summarize(results: Sequence[CodingPoint]) -> CodingSummary:
    """Pass rate over the scored results (truncated and failed requests are not scored)."""
    counts = Counter(r.outcome.value for r in results)
    scored = sum(1 for r in results if r.scored)
    return CodingSummary(counts.get(Outcome.PASS.value, 0), scored, len(results), dict(counts))


async def evaluate_completion(
    problem: CodingProblem,
    completion: Completion,
    *,
    sandbox: SandboxConfig | None = None,
) -> CodingPoint:
    """Classify one completion and, when it holds code, run it with the hidden tests: the
    problem's point, with the evidence (the code run, everything the model generated,
    reasoning first, and how the sandbox contained it)."""
    answer = classify_answer(
        completion.content,
        completion.reasoning_content,
        problem.entry_point,
        finish_reason=completion.finish_reason,
    )
    sandbox_result: SandboxResult | None = None
    if answer.kind is AnswerKind.TRUNCATED:
        outcome, detail = Outcome.TRUNCATED, answer.reason
    elif answer.kind is AnswerKind.NO_CODE or answer.code is None:
        outcome, detail = Outcome.NO_CODE, answer.reason
    else:
        sandbox_result = await run_candidate(answer.code, problem.tests, config=sandbox)
        outcome, detail = Outcome(sandbox_result.outcome.value), sandbox_result.detail
    tokens, elapsed = completion.completion_tokens, completion.elapsed_s
    return CodingPoint(
        problem=problem.id,
        outcome=outcome,
        detail=detail,
        finish_reason=completion.finish_reason,
        completion_tokens=tokens,
        elapsed_s=elapsed,
        tokens_per_s=tokens / elapsed if tokens and elapsed > 0 else None,
        code=answer.code,
        output=(completion.reasoning_content or "") + completion.content,
        containment=None if sandbox_result is None else sandbox_result.containment,
    )


def _request_failed(
    problem: CodingProblem, error: BaseException, elapsed_s: float, provenance: PointProvenance
) -> CodingPoint:
    return CodingPoint(
        problem=problem.id,
        outcome=Outcome.REQUEST_ERROR,
        detail=f"{type(error).__name__}: {error}"[:300],
        elapsed_s=elapsed_s,
        provenance=provenance,
    )


Target = str | CompleteFn | Callable[[str, int, float], Awaitable[Completion]]


async def run_coding(
    client_or_callable: Target | StreamingClient,
    problems: Sequence[CodingProblem] | None = None,
    *,
    api: ApiKind = "chat",
    model: str = "default",
    max_tokens: int = 4096,
    temperature: float = 0.0,
    timeout_s: float = 600.0,
    sandbox: SandboxConfig | None = None,
    concurrency: int = 1,
    dialect: Dialect | None = None,
) -> list[CodingPoint]:
    """Ask each problem, extract the final code, run it in the sandbox: each problem's point
    (its provenance says when it was asked and scored), in problem order.

    `client_or_callable` is a base URL (the default aiohttp client is used, with `api`,
    `model` and the engine's `dialect`), a `BenchClient` (its own api, model and dialect), or
    any async ``complete(prompt, max_tokens, temperature) -> Completion``. `problems` defaults
    to all built-in problems. Requests go one at a time by
    default so that temperature-0 outputs are comparable across configs (lossless check).
    """
    chosen = builtin_problems() if problems is None else problems
    if isinstance(client_or_callable, str):
        if dialect is None:
            raise TypeError("run_coding on a base URL needs the server's engine's dialect")
        async with HttpCompleter(
            client_or_callable, model=model, api=api, timeout_s=timeout_s, dialect=dialect
        ) as completer:
            return await _run_all(
                completer, chosen, max_tokens, temperature, timeout_s, sandbox, concurrency
            )
    complete: Callable[[str, int, float], Awaitable[Completion]]
    if isinstance(client_or_callable, StreamingClient):
        complete = BenchClientCompleter(client_or_callable)
    else:
        complete = client_or_callable
    return await _run_all(
        complete, chosen, max_tokens, temperature, timeout_s, sandbox, concurrency
    )


async def _run_all(
    complete: Callable[[str, int, float], Awaitable[Completion]],
    problems: Sequence[CodingProblem],
    max_tokens: int,
    temperature: float,
    timeout_s: float,
    sandbox: SandboxConfig | None,
    concurrency: int,
) -> list[CodingPoint]:
    from aiohttp import ClientError

    gate = asyncio.Semaphore(max(1, concurrency))

    async def one(problem: CodingProblem) -> CodingPoint:
        async with gate:
            started, started_at = time.monotonic(), time.time()
            try:
                async with asyncio.timeout(timeout_s):
                    completion = await complete(problem.prompt, max_tokens, temperature)
            except (CompletionError, ClientError, TimeoutError) as exc:
                _log.warning("coding.request_failed", problem=problem.id, error=repr(exc))
                failed = PointProvenance(started_at=started_at, finished_at=time.time())
                return _request_failed(problem, exc, time.monotonic() - started, failed)
        result = await evaluate_completion(problem, completion, sandbox=sandbox)
        result = replace(
            result, provenance=PointProvenance(started_at=started_at, finished_at=time.time())
        )
        _log.info(
            "coding.result",
            problem=problem.id,
            outcome=result.outcome.value,
            completion_tokens=result.completion_tokens,
            detail=result.detail,
        )
        return result

    return list(await asyncio.gather(*(one(p) for p in problems)))
