"""What several engines read alike: the answers of a parse script run on the host (one marked
JSON line per argv), a command-line number or boolean as argparse's ``type=`` reads it, the
first failure text a line holds, and the readiness probe of a server that speaks OpenAI's chat
API (its ``/v1/models`` and a real generation). Each engine keeps its own markers, flags and
texts."""

from __future__ import annotations

import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from orchestrator.engines.base import (
    ConfigDifference,
    Dialect,
    EnvKnob,
    FailureEvent,
    FieldValue,
    Generation,
    InitEvent,
    LinePrefix,
    ParserUnavailable,
    ParseVerdict,
    ProbeResult,
    WireRequest,
)
from orchestrator.host.dropin import format_knob_value
from orchestrator.types import ApiKind, FailureCause

if TYPE_CHECKING:
    import aiohttp

PROBE_PROMPT = "Count from one to five."
PROBE_MAX_TOKENS = 8



def program_help_argv(exec_start: Sequence[str]) -> list[str]:
    """A server's program asked for its flags: ``PYTHON -m MODULE --help`` stays a module run;
    anything else is its first word with ``--help`` (an engine whose program takes a
    subcommand says so itself)."""
    if len(exec_start) >= 3 and exec_start[1] == "-m":
        return [*exec_start[:3], "--help"]
    return [exec_start[0], "--help"]


def parse_script(
    marker: str, imports: Sequence[str], definitions: str, resolution_errors: Sequence[str]
) -> str:
    """The script a host's own Python runs (``PYTHON -c SCRIPT ARGV_JSON...``) to ask the
    engine's parser about each argv, one JSON list per argument, in one process: importing an
    engine costs tens of seconds, so a whole sweep's space is one import, not one per config.

    It runs on the host's Python (any 3.8+), so it is plain and self-contained. It runs
    ``imports`` once; where they fail it prints one ``import_error`` answer and exits 0 (the
    caller falls back to ``--help``). ``definitions`` defines ``parse(argv)`` (the engine's
    parser and resolution) and ``speculative(args)`` (the parsed speculative fields, or a
    refusal). Each argv starts from the environment the process was given (resolution may set
    variables) and gets one line, ``marker`` then JSON with its ``index``: ``ok`` with the
    speculative fields; argparse's error line (argparse prints usage and ``PROG: error: ...``
    to stderr and exits 2); one of ``resolution_errors``, a refusal by the resolution; any
    other exception (no GPU visible, a model path unreadable from here) is no verdict on the
    argv (``ok`` null). :func:`read_marked_answers` reads the lines."""
    import_block = "".join(f"    {line}\n" for line in imports)
    return f"""\
import contextlib, io, json, os, sys
def emit(**fields):
    print({marker!r} + json.dumps(fields, default=str), flush=True)
try:
{import_block}except BaseException as exc:
    emit(import_error=type(exc).__name__ + ": " + str(exc))
    sys.exit(0)
{definitions}def main():
    environ = dict(os.environ)
    for index, text in enumerate(sys.argv[1:]):
        os.environ.clear()
        os.environ.update(environ)
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                found = speculative(parse(json.loads(text)))
        except SystemExit:
            lines = [x for x in err.getvalue().splitlines() if ": error: " in x]
            emit(index=index, ok=False, kind="argparse",
                 error=lines[-1] if lines else err.getvalue()[-400:])
        except ({", ".join(resolution_errors)}) as exc:
            emit(index=index, ok=False, kind="resolution",
                 error=type(exc).__name__ + ": " + str(exc))
        except Exception as exc:
            emit(index=index, ok=None, kind="unchecked", error=type(exc).__name__ + ": " + str(exc))
        else:
            emit(index=index, ok=True, speculative=found)
main()
"""


def read_marked_answers(
    stdout: str, stderr: str, count: int, *, marker: str, import_line: str, parser: str
) -> list[ParseVerdict] | ParserUnavailable:
    """A parse script's answers to ``count`` argvs, in order, from its lines that start with
    ``marker``; an argv it never answered (it died or timed out on the way) is ``unchecked``.
    Without any answer, what the command said instead is the reason; an ``import_error``
    answer says ``import_line`` failed."""
    lines = [line for line in stdout.splitlines() if line.startswith(marker)]
    if not lines:
        tail = (stderr.strip() or stdout.strip())[-200:]
        return ParserUnavailable(f"the parse script gave no answer{': ' + tail if tail else ''}")
    answers: dict[int, Mapping[str, Any]] = {}
    for line in lines:
        try:
            answer = json.loads(line[len(marker) :])
        except ValueError as exc:
            return ParserUnavailable(f"the parse script's answer is not JSON: {exc}")
        if not isinstance(answer, dict):
            return ParserUnavailable("the parse script's answer is not an object")
        if "import_error" in answer:
            return ParserUnavailable(f"{import_line} failed: {answer['import_error']}")
        index = answer.get("index")
        if isinstance(index, int) and 0 <= index < count:
            answers[index] = answer
    tail = stderr.strip()[-200:]
    missing = ParseVerdict(
        ok=None,
        kind="unchecked",
        error=f"no answer from the parse script{': ' + tail if tail else ''}",
        parser=parser,
    )
    return [_verdict(answers[i], parser) if i in answers else missing for i in range(count)]


def _verdict(answer: Mapping[str, Any], parser: str) -> ParseVerdict:
    ok = answer.get("ok")
    kind = answer.get("kind")
    error = answer.get("error")
    speculative = answer.get("speculative")
    return ParseVerdict(
        ok=ok if isinstance(ok, bool) else None,
        kind=kind if kind in ("argparse", "resolution", "unchecked") else None,
        error=str(error) if error is not None else None,
        speculative=speculative if isinstance(speculative, dict) else {},
        parser=parser,
    )


def normal_scalar_word(text: str) -> str:
    """A value as argparse's ``type=int``/``float`` and a boolean flag read it: numbers by
    value (``8`` and ``8.0`` alike), booleans in one spelling, anything else as written."""
    if text in ("True", "true", "False", "false"):
        return text.lower()
    try:
        number = float(text)
    except ValueError:
        return text
    return str(int(number)) if number.is_integer() else repr(number)


def last_flag_value(argv: Sequence[str], flags: Sequence[str]) -> tuple[str, str] | None:
    """The last ``--flag value`` / ``--flag=value`` of any of ``flags`` in ``argv`` (the one
    argparse, and llama.cpp's own parser, keep), as (the flag as written, its value)."""
    found: tuple[str, str] | None = None
    for index, word in enumerate(argv):
        name, sep, value = word.partition("=")
        if name not in flags:
            continue
        if sep:
            found = (name, value)
        elif index + 1 < len(argv):
            found = (name, argv[index + 1])
    return found


def first_failure(
    patterns: Sequence[tuple[FailureCause, re.Pattern[str]]], text: str
) -> tuple[FailureCause, str] | None:
    """The cause of the first of ``patterns`` (most specific first) that ``text`` holds, with
    the matched text."""
    for cause, pattern in patterns:
        found = pattern.search(text)
        if found is not None:
            return cause, found.group(0).strip()
    return None




def failure_event(
    patterns: Sequence[tuple[FailureCause, re.Pattern[str]]], prefix: LinePrefix, body: str
) -> FailureEvent | None:
    """A log line's failure event: the cause :func:`first_failure` finds in its ``body``, or
    None when the line is no failure (the last reading an engine's log parser tries)."""
    found = first_failure(patterns, body)
    if found is None:
        return None
    cause, matched = found
    return FailureEvent(prefix=prefix, cause=cause, matched=matched, message=body)


async def listed_models(
    session: aiohttp.ClientSession, base_url: str, timeout: float
) -> tuple[str, ...] | None:
    """The ids an OpenAI-compatible server's ``/v1/models`` lists (it answers before warm-up),
    or None when it does not answer or lists none: then nothing is known."""
    # aiohttp is imported at first use: the engines are also the sweep file's dialect (plan,
    # validate, report), and those verbs never talk HTTP.
    import aiohttp

    try:
        async with session.get(
            base_url.rstrip("/") + "/v1/models", timeout=aiohttp.ClientTimeout(total=timeout)
        ) as response:
            body = await response.json(content_type=None) if response.status == 200 else None
    except (aiohttp.ClientError, TimeoutError, ValueError):
        return None
    data = body.get("data") if isinstance(body, dict) else None
    if not isinstance(data, list):
        return None
    names = tuple(
        item["id"] for item in data if isinstance(item, dict) and isinstance(item.get("id"), str)
    )
    return names or None


async def probe_request(
    session: aiohttp.ClientSession,
    base_url: str,
    request: WireRequest,
    generated: Callable[[Any], int],
    timeout: float,
    *,
    served_as: str | None = None,
) -> ProbeResult:
    """One readiness probe: ``request`` (a small generation, not streamed) sent to the running
    server, its answer's tokens counted by ``generated`` (from the parsed JSON body; never by
    chunks). A ``served_as`` name is first checked against ``/v1/models``: a server that does
    not serve it is a mismatch no later probe cures. Connection errors are results, not
    exceptions: the caller probes repeatedly while the server loads."""
    import aiohttp  # at first use, as in listed_models

    started = time.monotonic()
    if served_as:
        served = await listed_models(session, base_url, timeout)
        if served is not None and served_as not in served:
            mismatch = ConfigDifference(
                "model", "/v1/models", served_as, list(served),
                "the benchmark's model name (server.model) is not one the server serves",
            )  # fmt: skip
            error = f"model {served_as!r} is not served (served: {', '.join(served)})"
            elapsed = time.monotonic() - started
            return ProbeResult(False, 0, None, elapsed, error, model_mismatch=mismatch)
    try:
        async with session.post(
            base_url.rstrip("/") + request.path,
            json=request.body,
            timeout=aiohttp.ClientTimeout(total=timeout),
        ) as response:
            raw, status = await response.read(), response.status
    except (aiohttp.ClientError, TimeoutError) as exc:
        elapsed = time.monotonic() - started
        return ProbeResult(False, 0, None, elapsed, f"{type(exc).__name__}: {exc}")
    elapsed = time.monotonic() - started
    excerpt = raw[:500].decode("utf-8", errors="replace")
    if status != 200:
        return ProbeResult(False, 0, status, elapsed, f"HTTP {status}", excerpt)
    try:
        tokens = generated(json.loads(raw))
    except ValueError:
        return ProbeResult(False, 0, status, elapsed, "response is not JSON", excerpt)
    failed = None if tokens > 0 else "no tokens generated"
    return ProbeResult(tokens > 0, tokens, status, elapsed, failed, excerpt)


async def probe_chat(
    session: aiohttp.ClientSession,
    base_url: str,
    reader: Dialect,
    model: str | None,
    timeout: float,
) -> ProbeResult:
    """:func:`probe_request` for a server that speaks OpenAI's chat API: a temperature-0
    generation of a few tokens through ``reader`` (the answer's own count says how many),
    after the name sent as ``model`` is checked against ``/v1/models``."""
    request = reader.request(
        Generation(PROBE_PROMPT, PROBE_MAX_TOKENS, temperature=0, stream=False, model=model)
    )

    def generated(body: Any) -> int:
        return reader.parse_final(body).completion_tokens or 0

    return await probe_request(session, base_url, request, generated, timeout, served_as=model)


class ChatOnlyEngine:
    """What an engine driven through OpenAI's chat API alone (vLLM, llama.cpp) does alike: its
    one dialect (``chat``; any other API is refused, naming ``server``), the readiness probe
    through it, and the names ``/v1/models`` lists. A subclass sets ``server`` and ``chat``."""

    apis: frozenset[ApiKind] = frozenset({"chat"})
    server: str
    """The server as the refusal of another API names it."""
    chat: Dialect
    served_models = staticmethod(listed_models)

    def dialect(self, api: ApiKind) -> Dialect:
        if api != "chat":
            raise ValueError(f"{self.server} is driven through the chat API here, not {api!r}")
        return self.chat

    async def probe_generation(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        api: ApiKind,
        model: str | None,
        timeout: float,
    ) -> ProbeResult:
        """:func:`probe_chat` through the engine's chat dialect (its own token count)."""
        return await probe_chat(session, base_url, self.dialect(api), model, timeout)


def lines_weigh_alike(server_info: Mapping[str, Any]) -> int:
    """The decode log interval of an engine whose lines each cover a time interval (vLLM's
    ``SpecDecoding metrics``) or one finished request (llama.cpp's ``draft acceptance``), not
    a count of steps: 1, every line weighs alike."""
    return 1


def env_differences(
    env: Sequence[EnvKnob], process_environ: Mapping[str, str]
) -> list[ConfigDifference]:
    """Env knobs whose value in the main process's environment is not the text the drop-in's
    ``Environment=`` line wrote (a knob valued None must be absent)."""
    differences = []
    for variable in env:
        expected = None if variable.value is None else format_knob_value(variable.value)
        actual = process_environ.get(variable.name)
        if actual != expected:
            differences.append(
                ConfigDifference(variable.knob, f"environ[{variable.name}]", expected, actual)
            )
    return differences


def init_fields(init_events: Sequence[InitEvent]) -> dict[str, dict[str, FieldValue]]:
    """The startup lines' fields by kind, the first of each kind (the provenance's
    ``worker_init``)."""
    fields: dict[str, dict[str, FieldValue]] = {}
    for event in init_events:
        fields.setdefault(event.kind, dict(event.fields))
    return fields


__all__ = [
    "PROBE_MAX_TOKENS",
    "PROBE_PROMPT",
    "ChatOnlyEngine",
    "env_differences",
    "failure_event",
    "first_failure",
    "init_fields",
    "last_flag_value",
    "lines_follow_decoding",
    "lines_weigh_alike",
    "listed_models",
    "normal_scalar_word",
    "parse_script",
    "probe_chat",
    "probe_request",
    "read_marked_answers",
]


def lines_follow_decoding(environment: Mapping[str, str]) -> None:
    """The decode log period of an engine whose lines follow the decoding itself (SGLang
    every ``--decode-log-interval`` iterations, llama.cpp each finished request): none, so a
    point that decoded has a line whatever its length."""
    return None
