"""The engine seam: what the control path needs of an inference server, as types and protocols.

Everything that differs from one serving engine to the next sits behind :class:`Engine`: how a
request is written and its answer read (:class:`Dialect`), what its log lines mean, why a start
failed, whether the running server took the asked config, its readiness config and probe, how
its own parser is asked about an argv, the metrics it reads acceptance from, the values it
forces, and the model name a command line serves. Each engine is a package under
``orchestrator/engines/`` (SGLang's: ``engines/sglang``), found by name through
:func:`orchestrator.engines.get`; a new engine fills the same protocol without the lifecycle,
the host loop or the bench changing.

This module holds only engine-neutral data and the protocols, so both the engines and their
callers (lifecycle, preflight, bench) import it; it imports nothing from either side.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TYPE_CHECKING, Any, Literal, Protocol, runtime_checkable

from orchestrator.host.gpu import GpuIdentity
from orchestrator.host.launchfile import LaunchFile
from orchestrator.types import ApiKind, FailureCause, KnobValue, MetricsMode

if TYPE_CHECKING:  # only named in signatures: the sweep-file verbs need not import it
    import aiohttp

    from orchestrator.host.dropin import TrialInvocation
    from orchestrator.host.launchfile import LaunchFormat

# --------------------------------------------------------------------------------------------
# Requests and answers (the dialect's data)
# --------------------------------------------------------------------------------------------


class ErrorKind(StrEnum):
    """Why a request failed; one class per cause an operator would act on differently."""

    TIMEOUT = "timeout"  # no complete answer within request_timeout
    HTTP_STATUS = "http-status"  # non-200 answer
    CONNECTION = "connection"  # refused, reset, or the stream ended before its end marker
    ABORTED = "aborted"  # the server finished the request with finish reason ``abort``
    SERVER_ERROR = "server-error"  # an ``error`` object inside the stream
    PROTOCOL = "protocol"  # unparseable stream, or no token counts where they must be


class TokenSource(StrEnum):
    """Where a record's per-chunk token counts came from (exact, or estimated). The values are
    stored in request records, so they never change."""

    CUMULATIVE_PER_CHUNK = "meta_info"
    """Every chunk carries the completion tokens so far: exact. The value names the first
    source of it, SGLang's /generate ``meta_info.completion_tokens``."""
    USAGE_PER_CHUNK = "usage-per-chunk"  # chat with continuous usage stats: exact
    TEXT_WEIGHTED = "text-weighted"  # chat: usage total spread over chunks by text length
    NONE = "none"  # no counts (failed request)


@dataclass(frozen=True)
class Chunk:
    """One streamed event: when its last byte arrived and how many tokens it carried."""

    arrival: float
    tokens: int


@dataclass(frozen=True, slots=True)
class ChatMessage:
    """One turn of a conversation as the chat API takes it (``role``: system, user, assistant)."""

    role: str
    content: str


@dataclass(frozen=True, slots=True)
class Prompt:
    """What one benchmark request says: a plain text or a conversation (exactly one of them).

    ``max_tokens`` is the request's own output length from its workload (None: the point's);
    ``origin`` the 1-based line of the workload sample it came from (None for synthetic);
    ``reused`` marks a sample prompt its factory already issued once for this context, sent
    again behind a fresh nonce so the radix cache still cannot serve it.
    """

    text: str | None = None
    messages: tuple[ChatMessage, ...] = ()
    max_tokens: int | None = None
    origin: int | None = None
    reused: bool = False

    def __post_init__(self) -> None:
        if (self.text is None) == (not self.messages):
            raise ValueError("a Prompt has exactly one of text and messages")

    def chat_messages(self) -> tuple[ChatMessage, ...]:
        """The conversation the chat API sends: the messages, or the text as one user turn."""
        if self.text is not None:
            return (ChatMessage("user", self.text),)
        return self.messages

    def plain_text(self) -> str:
        """The prompt as one text, for an API that applies no chat template (``/generate``).

        A text, or a conversation of a single user turn, is sent as it is. A longer
        conversation is written the way completion-style prompts write one: each turn as
        ``Role: content`` (the role capitalised), turns separated by a blank line, and an open
        ``Assistant:`` turn at the end, so the model answers the last user turn.
        """
        if self.text is not None:
            return self.text
        if len(self.messages) == 1 and self.messages[0].role == "user":
            return self.messages[0].content
        turns = [f"{m.role.capitalize()}: {m.content}" for m in self.messages]
        return "\n\n".join([*turns, "Assistant:"])


def as_prompt(prompt: str | Prompt) -> Prompt:
    """A caller's prompt as a :class:`Prompt` (a plain string is a text prompt)."""
    return prompt if isinstance(prompt, Prompt) else Prompt(text=prompt)


@dataclass(frozen=True, slots=True)
class Generation:
    """What one request asks for, whichever API carries it (one options object, so the
    dialects and their callers share one parameter list)."""

    prompt: str | Prompt
    """A plain string is one user turn (chat) or the text (/generate)."""
    max_tokens: int
    temperature: float
    stream: bool
    model: str | None = None
    """Sent where the API takes a model name; None leaves it out."""
    ignore_eos: bool | None = None
    """None leaves the field out (the server's default)."""
    continuous_usage_stats: bool = False
    """Streamed chat: usage on every chunk, where the server supports it."""


@dataclass(frozen=True, slots=True)
class WireRequest:
    """One request as the engine's HTTP API takes it: the path below the base URL and the body."""

    path: str
    body: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Reply:
    """What a finished generation said. ``content`` is None when the response carried no text
    at all (a shape the dialect does not know), as opposed to an empty reply."""

    content: str | None
    reasoning_content: str | None
    finish_reason: str | None
    completion_tokens: int | None


class ResponseShapeError(ValueError):
    """A final (non-streamed) response is not the JSON object the dialect expects."""


@dataclass
class StreamParse:
    """Everything one streamed response says, read after the stream ended (off the timed
    path): token counts per chunk with their arrival stamps, the finish, the ids, the text.

    ``error`` is set by the first problem found; the fields read before it stay filled.
    """

    token_source: TokenSource
    chunks: list[Chunk] = field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    cached_tokens: int | None = None
    finish_reason: str | None = None
    response_id: str | None = None
    spec_verify_ct: int | None = None
    spec_accept_length: float | None = None
    spec_correct_drafts: int | None = None
    spec_proposed_drafts: int | None = None
    error: ErrorKind | None = None
    error_detail: str | None = None
    content_parts: list[str] = field(default_factory=list)
    reasoning_parts: list[str] = field(default_factory=list)

    def fail(self, kind: ErrorKind, detail: str) -> StreamParse:
        if self.error is None:
            self.error, self.error_detail = kind, detail
        return self

    def reply(self) -> Reply:
        """The streamed text as one reply (reasoning None when the server sent none)."""
        reasoning = "".join(self.reasoning_parts)
        return Reply(
            content="".join(self.content_parts),
            reasoning_content=reasoning or None,
            finish_reason=self.finish_reason,
            completion_tokens=self.completion_tokens,
        )


def spread_by_weight(total: int, weights: Sequence[int]) -> list[int]:
    """Integers summing to ``total`` proportional to ``weights`` (largest remainder).

    Every positive weight gets at least one token when ``total`` allows it: a chunk that
    carried text carried at least one token. (For dialects whose stream gives only a total.)
    """
    n_positive = sum(1 for w in weights if w > 0)
    if total <= 0 or n_positive == 0:
        return [0] * len(weights)
    base = [1 if w > 0 else 0 for w in weights] if total >= n_positive else [0] * len(weights)
    remaining = total - sum(base)
    weight_sum = sum(w for w in weights if w > 0)
    shares = [remaining * w / weight_sum if w > 0 else 0.0 for w in weights]
    result = [b + int(s) for b, s in zip(base, shares, strict=True)]
    leftover = total - sum(result)
    order = sorted(range(len(weights)), key=lambda i: shares[i] - int(shares[i]), reverse=True)
    for i in order[:leftover]:
        result[i] += 1
    return result


@runtime_checkable
class Dialect(Protocol):
    """One HTTP API of an engine (chat or generate): the single place its requests are written
    and its answers read, streamed or not. The bench client, the coding anchor and the
    readiness probe all go through it, so the wire format has one definition."""

    @property
    def api(self) -> ApiKind: ...

    def request(self, ask: Generation) -> WireRequest:
        """The request for one generation."""
        ...

    def parse_final(self, data: Any) -> Reply:
        """A non-streamed response body (decoded JSON); ResponseShapeError if not an object."""
        ...

    def parse_stream(self, events: Sequence[tuple[float, str]]) -> StreamParse:
        """A streamed response's ``data:`` payloads with their arrival stamps."""
        ...


# --------------------------------------------------------------------------------------------
# Log lines
# --------------------------------------------------------------------------------------------

FieldValue = float | int | bool | str


@dataclass(frozen=True, slots=True)
class LinePrefix:
    """The engine's ``[timestamp ranks]`` prefix, when the message still carries it."""

    timestamp: str | None
    ranks: Mapping[str, int]


@dataclass(frozen=True, slots=True)
class DecodeEvent:
    """A ``Decode batch`` interval line. ``accept_len`` is None when speculative decoding is off.

    A reading the engine's line does not carry is None (vLLM's and llama.cpp's lines say only
    some of SGLang's), so each parser names just what its line says."""

    prefix: LinePrefix
    fields: Mapping[str, FieldValue]
    running_req: int | None = None
    queue_req: int | None = None
    gen_throughput: float | None = None
    accept_len: float | None = None
    accept_rate: float | None = None
    token_usage: float | None = None
    num_tokens: int | None = None
    graph: bool | None = None
    graph_kind: str | None = None
    forward_iter: int | None = None
    kind: Literal["decode"] = "decode"


@dataclass(frozen=True, slots=True)
class PrefillEvent:
    prefix: LinePrefix
    fields: Mapping[str, FieldValue]
    new_seq: int | None
    new_token: int | None
    cached_token: int | None
    running_req: int | None
    queue_req: int | None
    input_throughput: float | None
    forward_iter: int | None
    kind: Literal["prefill"] = "prefill"


@dataclass(frozen=True, slots=True)
class ReadyEvent:
    """The ready line: logged only after the engine's own warmup generation succeeded."""

    prefix: LinePrefix
    kind: Literal["ready"] = "ready"


@dataclass(frozen=True, slots=True)
class InitEvent:
    """A speculative worker's init line: what the server resolved (``fields``), kept in the
    provenance under ``kind`` (SGLang's ``dflash_init`` and ``ddtree_init``, with typed
    fields of their own in :mod:`orchestrator.engines.sglang.engine`)."""

    prefix: LinePrefix
    fields: Mapping[str, FieldValue]
    kind: str


@dataclass(frozen=True, slots=True)
class FailureEvent:
    """A startup failure marker; ``matched`` is the text that gave the cause away."""

    prefix: LinePrefix
    cause: FailureCause
    matched: str
    message: str
    kind: Literal["failure"] = "failure"


LogEvent = DecodeEvent | PrefillEvent | ReadyEvent | InitEvent | FailureEvent
"""What an engine's log line says, when it says something the orchestrator reads."""


# --------------------------------------------------------------------------------------------
# The running server's config, the probe, provenance
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class KnobResolution:
    """One flag knob's value and where the running server reports it."""

    knob: str
    flag: str
    value: KnobValue
    server_info_keys: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class EnvKnob:
    """One environment knob; ``value`` None means the variable must be absent."""

    knob: str
    name: str
    value: KnobValue


@dataclass(frozen=True, slots=True)
class ConfigDifference:
    """A knob whose running value is not the asked one; ``where`` is its source."""

    knob: str
    where: str
    expected: Any
    actual: Any
    reason: str = ""


@dataclass(frozen=True, slots=True)
class ConfigCheck:
    """Mismatches fail a trial; ``overridden`` (the server forced the value) are only warnings."""

    mismatches: tuple[ConfigDifference, ...]
    overridden: tuple[ConfigDifference, ...]

    @property
    def ok(self) -> bool:
        return not self.mismatches

    def also(self, *mismatches: ConfigDifference | None) -> ConfigCheck:
        """This check with further mismatches (None: nothing to add)."""
        extra = tuple(m for m in mismatches if m is not None)
        if not extra:
            return self
        return ConfigCheck(mismatches=(*self.mismatches, *extra), overridden=self.overridden)


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """One readiness probe: ``ok`` only when HTTP 200 and tokens were generated.

    ``model_mismatch`` is set when the server lists the models it serves and the name the
    benchmark sends is not among them: no later probe can cure that, so the caller fails the
    trial (``config-mismatch``) at once instead of letting every request fail.
    """

    ok: bool
    tokens: int
    status: int | None
    elapsed_s: float
    error: str | None = None
    excerpt: str = ""
    model_mismatch: ConfigDifference | None = None


@dataclass(frozen=True, slots=True)
class Provenance:
    """What exactly ran a trial: stored with it so a result can be traced and repeated."""

    engine: str
    """The engine's name (the sweep's ``engine:``)."""
    engine_version: str | None
    """The version the running server reports (SGLang's ``/server_info`` ``version``)."""
    model_path: str | None
    server_args: Mapping[str, Any]
    launch_command: str | None
    gpus: tuple[GpuIdentity, ...]
    exec_start: tuple[str, ...]
    environment: Mapping[str, str] = field(default_factory=dict)
    worker_init: Mapping[str, Mapping[str, FieldValue]] = field(default_factory=dict)
    """The speculative workers' init lines by kind (``dflash_init``, ``ddtree_init``): the
    block size, tree budget, ... the server logged it resolved."""
    added_flags: tuple[str, ...] = ()
    """Flags the orchestrator added to the unit's command line (``server.metrics: auto``)."""
    launch_files: tuple[LaunchFile, ...] = ()
    """The files the command line names that the trial wrote (their paths and bytes): part
    of what ran, as the argv is."""

    def to_json(self) -> dict[str, Any]:
        return {
            "engine": self.engine,
            "engine_version": self.engine_version,
            # The key reports and stores read before engines had names: SGLang's version.
            "sglang_version": self.engine_version if self.engine == "sglang" else None,
            "model_path": self.model_path,
            "server_args": dict(self.server_args),
            "launch_command": self.launch_command,
            "gpus": [{"name": g.name, "driver_version": g.driver_version} for g in self.gpus],
            "exec_start": list(self.exec_start),
            "environment": dict(self.environment),
            "worker_init": {kind: dict(fields) for kind, fields in self.worker_init.items()},
            "added_flags": list(self.added_flags),
            "launch_files": [f.to_json() for f in self.launch_files],
        }


@dataclass(frozen=True, slots=True)
class ProvenanceSources:
    """What a trial saw of its server, from which its engine says what ran
    (:meth:`Engine.build_provenance`): the server's own account (``/server_info``, ``/props``,
    ``/version``), the host's GPUs, the command line and environment the trial asked for, and
    the invocation's startup lines. One object, so that a new source is one field here and not
    a parameter of every engine."""

    server_info: Mapping[str, Any]
    gpus: Sequence[GpuIdentity] = ()
    exec_start: Sequence[str] = ()
    environment: Mapping[str, str] = field(default_factory=dict)
    init_events: Sequence[InitEvent] = ()

    def provenance(
        self,
        engine: str,
        *,
        engine_version: str | None,
        model_path: str | None,
        server_args: Mapping[str, Any],
        launch_command: str | None,
        worker_init: Mapping[str, Mapping[str, FieldValue]],
    ) -> Provenance:
        """The engine's account (``engine_version`` .. ``worker_init``) with the host's side
        (the GPUs, the command line and environment asked) as the trial saw it."""
        return Provenance(
            engine=engine,
            engine_version=engine_version,
            model_path=model_path,
            server_args=server_args,
            launch_command=launch_command,
            gpus=tuple(self.gpus),
            exec_start=tuple(self.exec_start),
            environment=dict(self.environment),
            worker_init=worker_init,
        )


@dataclass(frozen=True, slots=True)
class ServedModel:
    """The model name a command line serves, and the flag that says so."""

    name: str
    flag: str


# --------------------------------------------------------------------------------------------
# Metrics: the counters that give accept length exactly
# --------------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class AcceptanceCounters:
    """The ``/metrics`` counters whose deltas over a point give its accept length (decode
    tokens per verify step), by the engine's own names, and what its token counter counts:
    the bench reads every engine's counters with one formula and names none itself."""

    verify_steps: str
    """Counts verify steps, one per request per step."""
    tokens: str
    """Counts the tokens the server generated."""
    tokens_include_first: bool = True
    """``tokens`` also counts each request's first token, which its prefill produced, not a
    verify step (the bench subtracts one per request the point sent)."""
    tokens_include_bonus: bool = True
    """``tokens`` counts each verify step's bonus token; False where it counts only the
    accepted drafts (the bench adds one per step)."""

    def decode_tokens(self, tokens: float, steps: float, requests: int) -> float:
        """The tokens the verify steps produced, from the counters' deltas over a point."""
        first = requests if self.tokens_include_first else 0
        bonus = 0.0 if self.tokens_include_bonus else steps
        return max(tokens - first + bonus, 0.0)


# --------------------------------------------------------------------------------------------
# Asking the host's own engine whether it takes an argv (preflight)
# --------------------------------------------------------------------------------------------

ParseKind = Literal["argparse", "resolution", "unchecked"]


@dataclass(frozen=True, slots=True)
class ParseVerdict:
    """What the host's engine said of one argv. ``ok`` None: parsed, but resolution failed for
    a reason that is no verdict on the argv (the trial goes ahead)."""

    ok: bool | None
    kind: ParseKind | None = None
    error: str | None = None
    speculative: Mapping[str, Any] = field(default_factory=dict)

    @property
    def cause(self) -> FailureCause | None:
        """The trial's failure cause: argparse's rejection is ``bad-flag`` (unknown flag, bad
        value or choice, ambiguous prefix), resolution's is ``invalid-config``."""
        if self.ok is not False:
            return None
        return "bad-flag" if self.kind == "argparse" else "invalid-config"

    @property
    def unknown_flags(self) -> tuple[str, ...]:
        """The flags of argparse's ``unrecognized arguments: ...`` line."""
        if self.kind != "argparse" or not self.error:
            return ()
        _, sep, rest = self.error.partition("unrecognized arguments:")
        return tuple(word for word in rest.split() if word.startswith("--")) if sep else ()

    parser: str = field(default="", compare=False)
    """The engine whose parser said it (its name, in the evidence; not part of the verdict)."""


@dataclass(frozen=True, slots=True)
class ParserUnavailable:
    """The host's engine parser cannot be asked: why (the import failed, the unit's program
    is not ``PYTHON -m MODULE``, the script gave no answer)."""

    reason: str


@dataclass(frozen=True, slots=True)
class ParseCommand:
    """How one argv is asked: the ``prefix`` (``env ... PYTHON``) that gives the unit's
    interpreter, environment and working directory, and the server's own ``argv``. Argvs
    with one prefix are asked in one process (:func:`batch_command`)."""

    prefix: tuple[str, ...]
    argv: tuple[str, ...]


# --------------------------------------------------------------------------------------------
# The seam
# --------------------------------------------------------------------------------------------


@runtime_checkable
class Engine(Protocol):
    """One serving engine's specifics. The lifecycle, preflight and bench reach an engine
    only through these, so adding one (vLLM) is a new implementation of this protocol."""

    @property
    def name(self) -> str: ...

    @property
    def default_unit(self) -> str:
        """The systemd service the engine's server usually runs as (a sweep's default)."""
        ...

    @property
    def apis(self) -> frozenset[ApiKind]:
        """The request APIs it serves (``chat``, the OpenAI-compatible one; ``generate``,
        SGLang's own): a sweep's ``benchmark.api`` must be one of them."""
        ...

    def dialect(self, api: ApiKind) -> Dialect: ...

    def parse_log_line(self, message: str) -> LogEvent | None: ...

    def classify_failure(self, text: str) -> tuple[FailureCause, str] | None: ...

    def resolve_flag_knob(
        self, knob: str, flag: str, value: KnobValue, *, server_info_key: str | None = None
    ) -> KnobResolution: ...

    def check_server_config(
        self, server_info: Mapping[str, Any], flags: Sequence[KnobResolution]
    ) -> ConfigCheck:
        """Whether the running server reports the trial's flag knobs (``server_info``: its
        running config). Env knobs are not the engine's: the lifecycle checks them in the
        main process's environment, alike for every engine."""
        ...

    def served_model(self, argv: Sequence[str]) -> ServedModel | None:
        """The model name a server started with ``argv`` serves, when the argv says."""
        ...

    async def served_models(
        self, session: aiohttp.ClientSession, base_url: str, timeout: float
    ) -> tuple[str, ...] | None:
        """The names a running server serves, or None when it does not say."""
        ...

    async def probe_generation(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        api: ApiKind,
        model: str | None,
        timeout: float,
    ) -> ProbeResult: ...

    def build_provenance(self, sources: ProvenanceSources) -> Provenance: ...

    def decode_log_interval(self, server_info: Mapping[str, Any]) -> int:
        """How many decode iterations one decode log line stands for, as the running server
        says (the weight of a line's accept length in a point's journal estimate)."""
        ...

    def decode_log_period_s(self, environment: Mapping[str, str]) -> float | None:
        """Seconds between decode log lines where the engine writes them on a timer (given
        the server's environment), so a shorter point may fall between two lines; None
        where a line follows the decoding itself (every N iterations, each finished
        request), so a point that decoded has one."""
        ...

    def metrics_flags(self, metrics: MetricsMode) -> tuple[str, ...]:
        """The flags ``server.metrics`` asks each trial's command line to have."""
        ...

    def normal_word(self, word: str, flag: str | None) -> str:
        """A command-line value (of ``flag``, or an environment value) as the engine reads
        it, so values it reads alike compare equal (``8`` and ``8.0``)."""
        ...

    def forced_flags(self, values: Mapping[str, str | None]) -> frozenset[str]:
        """Flags whose value the engine replaces under the rest of a command line (``values``:
        flag -> value as :meth:`normal_word` reads it): configs that differ only there run
        the same server."""
        ...

    @property
    def metrics_flag(self) -> str:
        """The flag that makes the server serve ``/metrics``."""
        ...

    @property
    def acceptance_counters(self) -> AcceptanceCounters:
        """The ``/metrics`` counters the bench reads a point's accept length from."""
        ...

    async def server_config(
        self, session: aiohttp.ClientSession, base_url: str, timeout: float
    ) -> dict[str, Any] | None:
        """The running server's resolved config (what readiness checks the trial's knobs
        against), or None while it does not answer; raises ``aiohttp.ClientConnectorError``
        while nothing listens on its port."""
        ...

    def parse_command(
        self, exec_start: Sequence[str], invocation: TrialInvocation, working_directory: str | None
    ) -> ParseCommand | None:
        """How the host's own engine is asked about ``invocation``'s argv (its interpreter,
        environment and working directory as the unit gives them); None when it cannot be."""
        ...

    def batch_command(self, prefix: Sequence[str], argvs: Sequence[Sequence[str]]) -> list[str]:
        """One host command that asks about every argv of ``argvs`` in one process."""
        ...

    def help_argv(self, exec_start: Sequence[str]) -> list[str]:
        """The unit's program asked to list its flags (the preflight's fallback where
        :meth:`parse_command` cannot ask its parser): how the server is launched is the
        engine's to know (``PYTHON -m MODULE``, a console script's subcommand)."""
        ...

    def read_answers(
        self, stdout: str, stderr: str, count: int
    ) -> list[ParseVerdict] | ParserUnavailable:
        """The verdicts of :meth:`batch_command`'s output, one per argv in order."""
        ...


@runtime_checkable
class FileFlags(Protocol):
    """Optional, beside :class:`Engine`: an engine some of whose flags take a file's path
    (TensorRT-LLM's ``--extra_llm_api_options``, YAML; SGLang's
    ``--speculative-adaptive-config``, JSON). The knobs mapped to such a flag's keys
    (``flag`` with ``json_key``) are written to a launch file beside the trial's drop-in and
    the argv names it (:mod:`orchestrator.host.launchfile`): the lifecycle writes, backs up,
    fences and restores it like the drop-in, whichever engine asked for it."""

    @property
    def file_flags(self) -> Mapping[str, LaunchFormat]:
        """Flag -> the format of the file it takes."""
        ...


def file_flags(engine: Engine) -> Mapping[str, LaunchFormat]:
    """The flags of ``engine`` that take a launch file (none for most engines)."""
    return engine.file_flags if isinstance(engine, FileFlags) else {}


@runtime_checkable
class LaunchFileRules(Protocol):
    """Optional, beside :class:`FileFlags`: an engine that can say, with no host, whether it
    would take a launch file's content (its own validation of the settings the file holds),
    so the preflight refuses a config whose file the server would refuse at its start."""

    def check_launch_file(self, flag: str, content: bytes) -> str | None:
        """Why the engine would refuse ``content`` as the file ``flag`` names, or None."""
        ...


@runtime_checkable
class KnobRules(Protocol):
    """Optional, beside :class:`Engine`: an engine whose command line has JSON-valued flags
    (vLLM's ``--speculative-config``) says which keys and values its own validation refuses,
    so the sweep file is refused with the file and line before any host is touched, and where
    its running config reports each key, so readiness checks it without the sweep file
    naming a ``server_info_key``. An engine without these rules is checked by its parser on
    the host alone (the preflight)."""

    def knob_problem(self, flag: str, json_key: str | None) -> str | None:
        """Why a knob mapped to ``flag`` (and ``json_key``) names what the engine refuses."""
        ...

    def value_problem(self, flag: str, json_key: str | None, value: KnobValue) -> str | None:
        """Why the engine would refuse ``value`` for that knob, or None."""
        ...

    def json_key_report(self, flag: str, json_key: str) -> str | None:
        """The running config's key for ``json_key`` of ``flag`` (the config check's), or
        None when the running server does not report it."""
        ...
