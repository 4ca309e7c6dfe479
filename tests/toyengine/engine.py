"""The toy server (``tests/toyengine/server.py``) as an :class:`orchestrator.engines.base.Engine`.

Everything the orchestrator needs to know of an engine, for one that it has never heard of:
how its knobs resolve in its readiness config (``GET /toy/config``), its log lines
(``TOYSTAT`` decode statistics, ``TOY READY``, ``TOYFAIL`` and argparse's error line), its
probe, its provenance, its metrics flag and counters, how the host's own copy of it is asked
whether it takes an argv, and whether it takes the settings file the orchestrator writes for
``--toy-spec-config`` (both for the preflight). Requests go through OpenAI's chat wire format,
borrowed from the SGLang engine's chat dialect *through the registry*. :attr:`ToyEngine.calls`
counts what the orchestrator asked of it (the dialect's uses as ``chat.request``, ...), so a test
sees which steps went through this engine rather than around it.
"""

from __future__ import annotations

import json
import re
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any

import aiohttp

from orchestrator.engines.base import (
    AcceptanceCounters,
    ConfigCheck,
    ConfigDifference,
    DecodeEvent,
    Dialect,
    FieldValue,
    Generation,
    KnobResolution,
    LinePrefix,
    LogEvent,
    ParseCommand,
    ParserUnavailable,
    ParseVerdict,
    ProbeResult,
    Provenance,
    ProvenanceSources,
    ReadyEvent,
    Reply,
    ServedModel,
    StreamParse,
    WireRequest,
)
from orchestrator.engines.openai_chat import ChatDialect
from orchestrator.engines.shared import (
    failure_event,
    first_failure,
    listed_models,
    parse_script,
    probe_request,
    program_help_argv,
    read_marked_answers,
)
from orchestrator.host.dropin import format_knob_value
from orchestrator.host.launchfile import LaunchFormat
from orchestrator.host.unitcommand import unit_env_prefix
from orchestrator.types import ApiKind, FailureCause, KnobValue, MetricsMode
from tests.toyengine import server

if TYPE_CHECKING:
    from orchestrator.host.dropin import TrialInvocation

NAME = "toy"
MODULE = "tests.toyengine.server"
METRICS_FLAG = "--toy-metrics"
SPEC_FLAG = "--toy-spec-config"
"""The flag whose value is a file: the knobs mapped to its keys are written to a launch file
(:class:`orchestrator.engines.base.FileFlags`), which the server reads its speculative
settings from."""
MODEL_FLAG = "--toy-model-name"
FLAG_PREFIX = "--toy-"
PARSE_MARKER = "TOY_PARSE "
COUNTERS = AcceptanceCounters(
    verify_steps="toy_verify_steps_total",
    tokens="toy_accepted_drafts_total",
    tokens_include_first=False,
    tokens_include_bonus=False,
)
"""The toy's ``/metrics``: its token counter counts accepted drafts only (no first token, no
bonus token per step), unlike SGLang's, so the bench's formula is the engine's to say."""
NO_PREFIX = LinePrefix(timestamp=None, ranks={})

_STAT = re.compile(rf"^{server.STAT_WORD}\s+(?P<rest>.*)$")
_KEY_VALUE = re.compile(r"(?P<key>[a-z_]+)=(?P<value>\S+)")
_FAILURES: tuple[tuple[FailureCause, re.Pattern[str]], ...] = (
    ("bad-flag", re.compile(rf"{server.PROG}: error: .*")),
    ("invalid-config", re.compile(rf"{server.FAIL_WORD} invalid-config: .*")),
    ("port-in-use", re.compile(rf"{server.FAIL_WORD} port-in-use: .*")),
)

# Runs on the host with the unit's interpreter and environment: asks the toy server's own
# parser and resolution about each argv (one JSON list per argument), one marked line each.
PARSE_IMPORT = f"from {MODULE} import build_parser, resolve"
PARSE_SCRIPT = parse_script(
    PARSE_MARKER,
    [PARSE_IMPORT],
    """\
def parse(argv):
    return resolve(build_parser().parse_args(argv))
def speculative(config):
    return {"draft_depth": config.draft_depth, "kernel": config.kernel}
""",
    ["ValueError"],
)


class ToyChatDialect:
    """The OpenAI-compatible chat dialect every such engine shares, with every call counted."""

    api: ApiKind = "chat"

    def __init__(self, calls: Counter[str]) -> None:
        self._chat = ChatDialect()
        self._calls = calls

    def request(self, ask: Generation) -> WireRequest:
        self._calls["chat.request"] += 1
        return self._chat.request(ask)

    def parse_final(self, data: Any) -> Reply:
        self._calls["chat.parse_final"] += 1
        return self._chat.parse_final(data)

    def parse_stream(self, events: Sequence[tuple[float, str]]) -> StreamParse:
        self._calls["chat.parse_stream"] += 1
        return self._chat.parse_stream(events)


def _fields(text: str) -> dict[str, FieldValue]:
    fields: dict[str, FieldValue] = {}
    for match in _KEY_VALUE.finditer(text):
        value = match.group("value")
        try:
            fields[match.group("key")] = int(value)
        except ValueError:
            try:
                fields[match.group("key")] = float(value)
            except ValueError:
                fields[match.group("key")] = value
    return fields


def _number(fields: Mapping[str, FieldValue], key: str) -> float | None:
    value = fields.get(key)
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _same(expected: KnobValue, actual: Any) -> bool:
    """A knob's value against the config's: numbers by value, the rest as text."""
    if all(isinstance(v, int | float) and not isinstance(v, bool) for v in (expected, actual)):
        return float(expected) == float(actual)  # type: ignore[arg-type]
    return format_knob_value(expected) == format_knob_value(actual)


def config_key(flag: str) -> str:
    """``--toy-draft-depth`` -> ``draft_depth``: where ``/toy/config`` reports a flag."""
    return flag.removeprefix(FLAG_PREFIX).lstrip("-").replace("-", "_")


class ToyEngine:
    """The toy server behind the seam; ``calls`` counts the seam's methods as they are used."""

    name = NAME
    default_unit = "toy.service"
    apis: frozenset[ApiKind] = frozenset({"chat"})
    metrics_flag = METRICS_FLAG
    acceptance_counters = COUNTERS
    file_flags: Mapping[str, LaunchFormat] = {SPEC_FLAG: "json"}

    def __init__(self) -> None:
        self.calls: Counter[str] = Counter()
        self._dialect = ToyChatDialect(self.calls)

    # --- requests -------------------------------------------------------------------------

    def dialect(self, api: ApiKind) -> Dialect:
        if api != "chat":
            raise ValueError(f"the toy engine serves the chat API only, not {api!r}")
        return self._dialect

    # --- log lines ------------------------------------------------------------------------

    def parse_log_line(self, message: str) -> LogEvent | None:
        body = message.strip()
        if body.startswith(server.READY_LINE):
            self.calls["log.ready"] += 1
            return ReadyEvent(prefix=NO_PREFIX)
        stat = _STAT.match(body)
        if stat is not None:
            self.calls["log.toystat"] += 1
            return self._decode(_fields(stat.group("rest")))
        return failure_event(_FAILURES, NO_PREFIX, body)

    @staticmethod
    def _decode(fields: Mapping[str, FieldValue]) -> DecodeEvent:
        drafted, accepted = _number(fields, "drafted"), _number(fields, "accepted")
        running = _number(fields, "running")
        return DecodeEvent(
            prefix=NO_PREFIX,
            fields=dict(fields),
            running_req=None if running is None else int(running),
            queue_req=None,
            gen_throughput=None,
            accept_len=_number(fields, "mean_accept"),
            accept_rate=accepted / drafted if drafted and accepted is not None else None,
            token_usage=None,
            num_tokens=None,
            graph=None,
            graph_kind=None,
            forward_iter=None,
        )

    def classify_failure(self, text: str) -> tuple[FailureCause, str] | None:
        return first_failure(_FAILURES, text)

    def decode_log_interval(self, server_info: Mapping[str, Any]) -> int:
        value = server_info.get("stat_interval")
        return value if isinstance(value, int) and value > 0 else 1

    def decode_log_period_s(self, environment: Mapping[str, str]) -> float | None:
        return None

    # --- readiness: the config endpoint, the knobs in it, a real generation ---------------

    async def server_config(
        self, session: aiohttp.ClientSession, base_url: str, timeout: float
    ) -> dict[str, Any] | None:
        self.calls["server_config"] += 1
        try:
            async with session.get(
                base_url.rstrip("/") + server.CONFIG_PATH,
                timeout=aiohttp.ClientTimeout(total=timeout),
            ) as response:
                if response.status != 200:
                    return None
                body = await response.json(content_type=None)
        except aiohttp.ClientConnectorError:
            raise
        except (aiohttp.ClientError, TimeoutError, ValueError):
            return None
        return body if isinstance(body, dict) else None

    def resolve_flag_knob(
        self, knob: str, flag: str, value: KnobValue, *, server_info_key: str | None = None
    ) -> KnobResolution:
        key = server_info_key or config_key(flag)
        return KnobResolution(knob=knob, flag=flag, value=value, server_info_keys=(key,))

    def check_server_config(
        self, server_info: Mapping[str, Any], flags: Sequence[KnobResolution]
    ) -> ConfigCheck:
        self.calls["check_server_config"] += 1
        mismatches: list[ConfigDifference] = []
        for knob in flags:
            if knob.value is None:
                continue
            key = knob.server_info_keys[0]
            where = f"{server.CONFIG_PATH}[{key}]"
            if key not in server_info:
                reason = f"key missing from {server.CONFIG_PATH}"
                mismatches.append(ConfigDifference(knob.knob, where, knob.value, None, reason))
            elif not _same(knob.value, server_info[key]):
                mismatches.append(ConfigDifference(knob.knob, where, knob.value, server_info[key]))
        return ConfigCheck(mismatches=tuple(mismatches), overridden=())

    def served_model(self, argv: Sequence[str]) -> ServedModel | None:
        found: str | None = None
        for index, word in enumerate(argv):
            name, sep, value = word.partition("=")
            if name != MODEL_FLAG:
                continue
            if sep:
                found = value
            elif index + 1 < len(argv):
                found = argv[index + 1]
        return None if found is None else ServedModel(name=found, flag=MODEL_FLAG)

    async def served_models(
        self, session: aiohttp.ClientSession, base_url: str, timeout: float
    ) -> tuple[str, ...] | None:
        return await listed_models(session, base_url, timeout)

    async def probe_generation(
        self,
        session: aiohttp.ClientSession,
        base_url: str,
        api: ApiKind,
        model: str | None,
        timeout: float,
    ) -> ProbeResult:
        """One real, non-streamed chat generation from the running process."""
        self.calls["probe_generation"] += 1
        dialect = self.dialect(api)
        request = dialect.request(
            Generation("Count to three.", 4, temperature=0, stream=False, model=model)
        )

        def generated(body: Any) -> int:
            return dialect.parse_final(body).completion_tokens or 0

        return await probe_request(session, base_url, request, generated, timeout)

    # --- provenance and metrics ------------------------------------------------------------

    def build_provenance(self, sources: ProvenanceSources) -> Provenance:
        self.calls["build_provenance"] += 1
        server_info = sources.server_info
        argv = server_info.get("argv")
        return sources.provenance(
            self.name,
            engine_version=str(server_info["version"]) if server_info.get("version") else None,
            model_path=str(server_info.get("model_name")),
            server_args={k: v for k, v in server_info.items() if k not in ("argv", "engine")},
            launch_command=" ".join(argv) if isinstance(argv, list) else None,
            worker_init={},
        )

    def metrics_flags(self, metrics: MetricsMode) -> tuple[str, ...]:
        return (METRICS_FLAG,) if metrics == "auto" else ()

    # --- how the server reads a command line ----------------------------------------------

    def normal_word(self, word: str, flag: str | None) -> str:
        """argparse's ``type=int``/``float`` read ``2`` and ``2.0`` alike; choices as typed."""
        try:
            number = float(word)
        except ValueError:
            return word
        return str(int(number)) if number.is_integer() else str(number)

    def forced_flags(self, values: Mapping[str, str | None]) -> frozenset[str]:
        """The toy server replaces no flag's value: it refuses what it cannot run."""
        return frozenset()

    # --- the host's own parser, for the preflight -----------------------------------------

    def check_launch_file(self, flag: str, content: bytes) -> str | None:
        """The server's own check of ``--toy-spec-config``'s settings (``LaunchFileRules``)."""
        self.calls["check_launch_file"] += 1
        if flag != SPEC_FLAG:
            return f"{flag} takes no file"
        try:
            spec = json.loads(content)
        except ValueError as exc:
            return f"not JSON: {exc}"
        return server.spec_problem(spec)

    def parse_command(
        self, exec_start: Sequence[str], invocation: TrialInvocation, working_directory: str | None
    ) -> ParseCommand | None:
        """``env [-C DIR] [-u NAME]... NAME=VALUE... PYTHON`` and the server's flags, for a
        unit that runs ``PYTHON -m tests.toyengine.server``; None for anything else."""
        argv = invocation.argv
        if list(exec_start[1:3]) != ["-m", MODULE] or list(argv[1:3]) != ["-m", MODULE]:
            return None
        words = unit_env_prefix(
            invocation.environment, invocation.unset_environment, working_directory
        )
        return ParseCommand(prefix=(*words, argv[0]), argv=tuple(argv[3:]))

    def batch_command(self, prefix: Sequence[str], argvs: Sequence[Sequence[str]]) -> list[str]:
        return [*prefix, "-c", PARSE_SCRIPT, *(json.dumps(list(argv)) for argv in argvs)]

    def help_argv(self, exec_start: Sequence[str]) -> list[str]:
        """``PYTHON -m MODULE --help`` for a module run, else the program's ``--help``."""
        self.calls["help_argv"] += 1
        return program_help_argv(exec_start)

    def read_answers(
        self, stdout: str, stderr: str, count: int
    ) -> list[ParseVerdict] | ParserUnavailable:
        self.calls["read_answers"] += 1
        return read_marked_answers(
            stdout, stderr, count, marker=PARSE_MARKER, import_line=PARSE_IMPORT, parser=NAME
        )
