"""The field types of a sweep file: each one a type, its check, its message and its JSON Schema.

Each check raises ValueError with a message an operator understands; the loader turns it into
a problem at the field's line. Values that reach a command line or a unit file are checked here
so that a later layer never has to guess whether a value is safe to write.
"""

from __future__ import annotations

import difflib
import ipaddress
import math
import re
from collections.abc import Hashable
from typing import Annotated, TypeVar
from urllib.parse import urlsplit

from pydantic import AfterValidator, BeforeValidator, Field, WithJsonSchema

from orchestrator.bench.workloads import BUILTIN_WORKLOADS
from orchestrator.host.dropin import ExecLineError, is_valid_service_name, parse_exec_line
from orchestrator.sweepfile.problems import control_character
from orchestrator.types import ANSWER_ONLY_METRICS, KnobValue, point_metric_names

_T = TypeVar("_T", bound=Hashable)


class _Pattern:
    """A str pattern with a message an operator understands (and its JSON Schema)."""

    def __init__(self, pattern: str, what: str, max_length: int) -> None:
        self.regex = re.compile(pattern)
        self.what = what
        self.max_length = max_length
        self.validator = AfterValidator(self.check)
        self.schema = WithJsonSchema(
            {"type": "string", "pattern": f"^{pattern}$", "maxLength": max_length}
        )

    def check(self, value: str) -> str:
        if len(value) > self.max_length:
            raise ValueError(f"longer than {self.max_length} characters")
        if not self.regex.fullmatch(value):
            raise ValueError(f"{value!r} is not {self.what}")
        return value


def unique(values: list[_T]) -> list[_T]:
    """``values`` unchanged, or a ValueError naming the first repeated one."""
    seen: set[_T] = set()
    for value in values:
        if value in seen:
            raise ValueError(f"duplicate value {value!r}")
        seen.add(value)
    return values


def unique_or_none(values: list[_T] | None) -> list[_T] | None:
    return values if values is None else unique(values)


_SWEEP_NAME = _Pattern(r"[a-z0-9._-]+", "a sweep name ([a-z0-9._-])", 64)
SweepName = Annotated[str, _SWEEP_NAME.validator, _SWEEP_NAME.schema]
_HOST_NAME = _Pattern(
    r"[A-Za-z0-9][A-Za-z0-9._-]*", "a host name (letters, digits, '.', '_', '-')", 64
)
HostName = Annotated[str, _HOST_NAME.validator, _HOST_NAME.schema]
_KNOB_NAME = _Pattern(r"[A-Za-z_][A-Za-z0-9_]*", "a knob name (an identifier)", 64)
KnobName = Annotated[str, _KNOB_NAME.validator, _KNOB_NAME.schema]
_ENV_NAME = _Pattern(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name", 255)
EnvName = Annotated[str, _ENV_NAME.validator, _ENV_NAME.schema]
_FLAG = _Pattern(
    r"--[A-Za-z0-9][A-Za-z0-9_-]*",
    "one '--word' flag token (e.g. --speculative-ddtree-budget)",
    128,
)
Flag = Annotated[str, _FLAG.validator, _FLAG.schema]
_INFO_KEY = _Pattern(r"[A-Za-z_][A-Za-z0-9_]*", "a /server_info key (an identifier)", 128)
InfoKey = Annotated[str, _INFO_KEY.validator, _INFO_KEY.schema]
_USER_NAME = _Pattern(r"[a-z_][a-z0-9_-]*\$?", "a POSIX user name", 32)
UserName = Annotated[str, _USER_NAME.validator, _USER_NAME.schema]
_PROBLEM_NAME = _Pattern(r"[A-Za-z_][A-Za-z0-9_-]*", "a problem name", 128)
ProblemName = Annotated[str, _PROBLEM_NAME.validator, _PROBLEM_NAME.schema]
_CLOCK_TIME = _Pattern(r"(?:[01][0-9]|2[0-3]):[0-5][0-9]", "a time of day 'HH:MM'", 5)
ClockTime = Annotated[str, _CLOCK_TIME.validator, _CLOCK_TIME.schema]
Text = Annotated[str, Field(min_length=1, max_length=4096)]


def _check_metric(value: str) -> str:
    known = point_metric_names() | set(ANSWER_ONLY_METRICS)
    if value not in known:
        close = difflib.get_close_matches(value, sorted(known), n=1)
        hint = f" (did you mean {close[0]!r}?)" if close else ""
        raise ValueError(f"{value!r} is not a stored point metric{hint}")
    return value


MetricName = Annotated[
    str,
    AfterValidator(_check_metric),
    WithJsonSchema({"type": "string", "pattern": "^[a-z0-9_]+$", "maxLength": 64}),
]
"""A metric an objective or constraint names: a stored point metric, ``accept_len`` or
``coding_pass_rate``."""


def _check_builtin(value: str) -> str:
    if value not in BUILTIN_WORKLOADS:
        close = difflib.get_close_matches(value, BUILTIN_WORKLOADS, n=1)
        hint = f"did you mean {close[0]!r}?" if close else "one of " + ", ".join(BUILTIN_WORKLOADS)
        raise ValueError(f"{value!r} is not a built-in workload ({hint})")
    return value


BuiltinName = Annotated[
    str,
    AfterValidator(_check_builtin),
    WithJsonSchema({"enum": list(BUILTIN_WORKLOADS)}),
]
"""A workload set that ships with the package (:data:`BUILTIN_WORKLOADS`)."""


def _check_constraint_name(value: str) -> str:
    return value if value == "lossless" else _check_metric(value)


ConstraintName = Annotated[
    str,
    AfterValidator(_check_constraint_name),
    WithJsonSchema({"type": "string", "pattern": "^[a-z0-9_]+$", "maxLength": 64}),
]
"""``lossless`` or a :data:`MetricName`."""

_BOUND = re.compile(r"\s*(>=|<=|>|<|==)\s*(\S+)\s*")


def parse_bound(value: object) -> tuple[str, float | str] | bool:
    """A constraint's value: ``true``/``false``, or ``">= baseline"`` / ``"<= 2.0"`` as
    (op, number or "baseline"); anything else is one clear error."""
    if isinstance(value, bool):
        return value
    if not isinstance(value, str):
        raise ValueError(f"{value!r} is not a bound such as '<= 2.0' or '>= baseline'")
    match = _BOUND.fullmatch(value)
    if match is None:
        raise ValueError(f"{value!r} is not a bound such as '<= 2.0' or '>= baseline'")
    op, operand = match.groups()
    if operand == "baseline":
        return op, "baseline"
    try:
        number = float(operand)
    except ValueError:
        raise ValueError(f"{operand!r} is neither a number nor 'baseline'") from None
    if not math.isfinite(number):
        raise ValueError(f"{operand!r} is not a finite number")
    return op, number


_HOSTNAME = re.compile(
    r"(?=.{1,253}$)[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?"
    r"(?:\.[A-Za-z0-9](?:[A-Za-z0-9-]{0,61}[A-Za-z0-9])?)*"
)


def _is_network_host(value: str) -> bool:
    try:
        ipaddress.ip_address(value)
    except ValueError:
        return _HOSTNAME.fullmatch(value) is not None
    return True


def _check_address(value: str) -> str:
    if value == "local" or _is_network_host(value):
        return value
    raise ValueError(f"{value!r} is not 'local', an IP address or a host name")


def _check_jump(value: str) -> str:
    match = re.fullmatch(
        r"(?:[a-z_][a-z0-9_-]*@)?(?:\[(?P<v6>[0-9A-Fa-f:.]+)\]|(?P<host>[^:@\[\]]+))"
        r"(?::(?P<port>[0-9]{1,5}))?",
        value,
    )
    host = match and (match["v6"] or match["host"])
    if not match or not host or not _is_network_host(host):
        raise ValueError(f"{value!r} is not '[user@]host[:port]'")
    if match["port"] and not 1 <= int(match["port"]) <= 65535:
        raise ValueError(f"port {match['port']} is out of range 1..65535")
    return value


def _check_http_url(value: str) -> str:
    parts = urlsplit(value)
    try:
        parts.port  # noqa: B018 (urllib checks the port's range only when it is read)
    except ValueError as exc:
        raise ValueError(f"{value!r}: {exc}") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError(f"{value!r} is not an http:// or https:// URL")
    if parts.query or parts.fragment:
        raise ValueError(f"{value!r}: no query or fragment allowed")
    return value


def _check_unit(value: str) -> str:
    if not is_valid_service_name(value):
        raise ValueError(
            f"{value!r} is not a systemd service name (e.g. sglang.service; "
            "letters, digits, ':_.-\\@', ending in .service)"
        )
    return value


Address = Annotated[
    str,
    AfterValidator(_check_address),
    WithJsonSchema({"type": "string", "description": "'local', an IP address or a host name"}),
]
Jump = Annotated[
    str, AfterValidator(_check_jump), WithJsonSchema({"type": "string", "maxLength": 300})
]
HttpUrl = Annotated[
    str,
    Field(max_length=2048),
    AfterValidator(_check_http_url),
    WithJsonSchema({"type": "string", "format": "uri", "pattern": "^https?://"}),
]
ServiceName = Annotated[
    str,
    AfterValidator(_check_unit),
    WithJsonSchema(
        {"type": "string", "pattern": r"^[A-Za-z0-9:_.\\-]+(@[A-Za-z0-9:_.\\-]+)?\.service$"}
    ),
]

_DURATION = re.compile(
    r"(?:(?P<h>[0-9]+)h)?\s*(?:(?P<m>[0-9]+)m)?\s*(?:(?P<s>[0-9]+(?:\.[0-9]+)?)s)?"
)
_DURATION_MAX = 7 * 24 * 3600.0


def parse_duration(value: object) -> float:
    """Seconds from a number or a text like ``"90s"``, ``"15m"``, ``"1h30m"`` or ``"300"``."""
    seconds: float
    if isinstance(value, bool):
        raise ValueError("must be seconds (a number) or a duration like '15m', '90s', '1h30m'")
    if isinstance(value, int | float):
        seconds = float(value)
    elif isinstance(value, str):
        text = value.strip()
        match = _DURATION.fullmatch(text)
        if re.fullmatch(r"[0-9]+(?:\.[0-9]+)?", text):
            seconds = float(text)
        elif text and match and any(match.group(g) for g in ("h", "m", "s")):
            seconds = (
                int(match["h"] or 0) * 3600 + int(match["m"] or 0) * 60 + float(match["s"] or 0)
            )
        else:
            raise ValueError(f"{value!r} is not a duration like '15m', '90s', '1h30m'")
    else:
        raise ValueError("must be seconds (a number) or a duration like '15m', '90s', '1h30m'")
    if math.isnan(seconds) or not 0 < seconds <= _DURATION_MAX:
        raise ValueError(f"must be more than 0 and at most {int(_DURATION_MAX)} seconds (7 days)")
    return seconds


Duration = Annotated[
    float,
    BeforeValidator(parse_duration),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "number", "exclusiveMinimum": 0},
                {"type": "string", "pattern": r"^(\d+h)?\s*(\d+m)?\s*(\d+(\.\d+)?s)?$|^\d+$"},
            ],
            "description": "seconds, or a duration like '90s', '15m', '1h30m'",
        }
    ),
]


def _number_as_text(value: object, where: str) -> object:
    """Numbers become text (``SGLANG_LOG_MS: 1``, ``[--tp-size, 8]``); a boolean is ambiguous
    (``1``? ``true``?) and refused. Integers keep their digits; floats are written as Python
    writes them (quote a value to keep another spelling)."""
    if isinstance(value, bool):
        raise ValueError(f"a boolean is ambiguous {where}; quote it ('1', 'true')")
    if isinstance(value, int | float):
        if isinstance(value, float) and not math.isfinite(value):
            raise ValueError(f"{value!r} is not a finite number")
        return str(value)
    return value


def _env_value(value: object) -> object:
    return _number_as_text(value, "in the environment")


def _arg_value(value: object) -> object:
    return _number_as_text(value, "on a command line")


EnvValue = Annotated[
    str,
    BeforeValidator(_env_value),
    Field(max_length=4096),
    WithJsonSchema({"type": ["string", "number"]}),
]
ArgText = Annotated[
    str,
    BeforeValidator(_arg_value),
    Field(max_length=4096),
    WithJsonSchema({"type": ["string", "number"], "maxLength": 4096}),
]
"""One argv word: text, or a number written as text (``--tp-size, 8``)."""


def _exec_start_words(value: object) -> object:
    """The list form as given, or the one-line form (as ``systemctl cat`` shows ExecStart=)
    split by systemd's rules: quotes, backslash escapes, ``%%`` -> ``%``, ``$$`` -> ``$``.
    What systemd would expand at run time (``%n``, ``$VAR``) or several commands (``;``)
    cannot be read as literal words and is refused."""
    if not isinstance(value, str):
        return value
    text = value.strip().removeprefix("ExecStart=")
    try:
        words = parse_exec_line(text)
    except ExecLineError as exc:
        raise ValueError(f"{exc.reason} (the one-line form is read as systemd reads it)") from None
    for word in words:
        what = control_character(word, allow_newline=False)
        if what:
            raise ValueError(f"a word contains {what} once its escapes are decoded: {word!r}")
    return words


ExecStart = Annotated[
    list[ArgText],
    BeforeValidator(_exec_start_words),
    Field(min_length=1),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "array", "items": {"type": ["string", "number"]}, "minItems": 1},
                {"type": "string", "minLength": 1, "description": "one ExecStart= line"},
            ]
        }
    ),
]


def _knob_value(value: object) -> object:
    if isinstance(value, float) and not math.isfinite(value):
        raise ValueError("must be a finite number")
    if value is not None and not isinstance(value, str | int | float | bool):
        kind = "a mapping" if isinstance(value, dict) else "a list"
        raise ValueError(f"must be a string, number, boolean or null (got {kind})")
    return value


KnobValueField = Annotated[
    KnobValue,
    BeforeValidator(_knob_value),
    WithJsonSchema({"type": ["string", "integer", "number", "boolean", "null"]}),
]
"""One knob's value in a config or a grid: a scalar; None leaves the knob out."""


def is_number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def looks_like_a_flag(value: KnobValue) -> bool:
    """A value SGLang's argparse would read as an option rather than as the flag's value."""
    return isinstance(value, str) and value.startswith("-") and not is_number_text(value)
