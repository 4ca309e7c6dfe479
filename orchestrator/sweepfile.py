"""Sweep files: YAML in, a typed :class:`Sweep` out, or every problem with file, line and field.

A sweep file is untrusted input that decides what runs as root on GPU hosts overnight, so it
is read in three passes that each report problems instead of stopping at the first:

1. YAML is *composed* (PyYAML nodes carry line marks), never constructed by PyYAML: no tag can
   run code, aliases are refused (no alias bombs), and size, node count and nesting are capped.
   Scalars are typed with YAML 1.2 core rules (``22:00`` stays a string, ``no`` stays a string).
2. pydantic (strict) checks keys, types and ranges; unknown keys get a did-you-mean.
3. Cross-field rules: knobs used are declared, host names unique, flags do not collide, values
   hold no control characters, there is something to run.

``validate`` needs the file alone: nothing here touches the network or any file but the sweep.
"""

from __future__ import annotations

import difflib
import ipaddress
import json
import math
import re
import types
import typing
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationError,
    WithJsonSchema,
    model_validator,
)

from orchestrator.host.dropin import is_valid_service_name
from orchestrator.types import KnobValue

MAX_FILE_BYTES = 1024 * 1024
MAX_NODES = 20_000
MAX_DEPTH = 32

FieldPath = tuple[str | int, ...]

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (f"{_TAG}{t}" for t in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ = f"{_TAG}map", f"{_TAG}seq"
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


# --------------------------------------------------------------------------- problems


@dataclass(frozen=True, slots=True)
class Problem:
    """One thing wrong with a sweep file, located by line (1-based) and field path."""

    file: str
    line: int
    field_path: str
    message: str

    def __str__(self) -> str:
        field = f" {self.field_path}:" if self.field_path else ""
        return f"{self.file}:{self.line}:{field} {self.message}"


class SweepFileError(Exception):
    """A sweep file was rejected; ``problems`` lists every problem found, in line order."""

    def __init__(self, problems: list[Problem]) -> None:
        super().__init__("\n".join(str(problem) for problem in problems))
        self.problems = problems


def format_path(path: FieldPath) -> str:
    """``('hosts', 0, 'port')`` -> ``hosts[0].port``; odd keys are JSON-quoted."""
    out = ""
    for part in path:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENTIFIER.match(part) or re.fullmatch(r"[A-Za-z0-9_.-]+", part):
            out += f".{part}" if out else part
        else:
            out += f"[{json.dumps(part)}]"
    return out




# --------------------------------------------------------------------------- YAML reading


class _LimitExceeded(Exception):
    def __init__(self, mark: yaml.Mark, message: str) -> None:
        super().__init__(message)
        self.mark = mark
        self.message = message


class _ComposingLoader(yaml.SafeLoader):
    """A composer only (we never call the constructor), with YAML 1.2 core scalar rules,
    aliases replaced by a marked placeholder, and caps on node count and depth (PyYAML's
    composer recurses, so depth is also what keeps a ``[[[[...`` file from a RecursionError)."""

    yaml_implicit_resolvers = {}  # noqa: RUF012 (PyYAML copies it per subclass)

    def __init__(self, stream: str) -> None:
        super().__init__(stream)
        self.node_count = 0
        self.depth = 0
        self.aliases: dict[int, str] = {}

    def compose_node(self, parent: yaml.Node | None, index: Any) -> yaml.Node:
        if self.check_event(yaml.AliasEvent):
            event = self.get_event()  # type: ignore[no-untyped-call]
            placeholder = yaml.ScalarNode(_NULL, "", event.start_mark, event.end_mark)
            self.aliases[id(placeholder)] = str(event.anchor)
            return placeholder
        self.node_count += 1
        if self.node_count > MAX_NODES:
            mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
            raise _LimitExceeded(mark, f"more than {MAX_NODES} YAML nodes")
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise _LimitExceeded(mark, f"nested deeper than {MAX_DEPTH} levels")
            node = super().compose_node(parent, index)
            assert node is not None
            return node
        finally:
            self.depth -= 1


for _tag, _pattern, _first in (
    (_NULL, r"^(?:~|null|Null|NULL|)$", ["~", "n", "N", ""]),
    (_BOOL, r"^(?:true|True|TRUE|false|False|FALSE)$", list("tTfF")),
    (_INT, r"^(?:[-+]?[0-9]+|0o[0-7]+|0x[0-9a-fA-F]+)$", list("-+0123456789")),
    (
        _FLOAT,
        r"^(?:[-+]?(?:\.[0-9]+|[0-9]+(?:\.[0-9]*)?)(?:[eE][-+]?[0-9]+)?"
        r"|[-+]?\.(?:inf|Inf|INF)|\.(?:nan|NaN|NAN))$",
        list("-+0123456789."),
    ),
):
    _ComposingLoader.add_implicit_resolver(_tag, re.compile(_pattern), _first)


def _scalar(node: yaml.ScalarNode) -> KnobValue:
    """A scalar node's value under the YAML 1.2 core schema; raises ValueError otherwise."""
    value = str(node.value)
    if node.tag == _STR:
        return value
    if node.tag == _NULL:
        if value not in ("", "~", "null", "Null", "NULL"):
            raise ValueError(f"{value!r} is not null")
        return None
    if node.tag == _BOOL:
        if value.lower() not in ("true", "false"):
            raise ValueError(f"{value!r} is not a boolean")
        return value.lower() == "true"
    if node.tag == _INT:
        lowered = value.lower()
        if lowered.startswith(("0x", "0o")):
            return int(value[2:], 16 if lowered.startswith("0x") else 8)
        return int(value, 10)
    if node.tag == _FLOAT:
        lowered = value.lower().lstrip("+")
        if lowered in (".inf", "-.inf", ".nan"):
            return float(lowered.replace(".", ""))
        return float(value)
    raise ValueError(f"unsupported tag {node.tag!r}")


@dataclass
class _RawDocument:
    """The document as plain data, with the line of every field path in it."""

    data: Any
    lines: dict[FieldPath, int]
    problems: list[tuple[FieldPath, int, str]]
    alias_paths: list[FieldPath]


def _to_data(node: yaml.Node, path: FieldPath, doc: _RawDocument, aliases: dict[int, str]) -> Any:
    if id(node) in aliases:
        doc.alias_paths.append(path)
        doc.problems.append(
            (path, node.start_mark.line + 1, f"alias *{aliases[id(node)]}: {_ALIAS_HELP}")
        )
        return None
    if isinstance(node, yaml.ScalarNode):
        try:
            return _scalar(node)
        except ValueError as exc:
            doc.problems.append((path, node.start_mark.line + 1, str(exc)))
            return None
    if isinstance(node, yaml.SequenceNode):
        if node.tag != _SEQ:
            doc.problems.append((path, node.start_mark.line + 1, f"unsupported tag {node.tag!r}"))
            return None
        items = []
        for index, item in enumerate(node.value):
            doc.lines[(*path, index)] = item.start_mark.line + 1
            items.append(_to_data(item, (*path, index), doc, aliases))
        return items
    if isinstance(node, yaml.MappingNode):
        if node.tag != _MAP:
            doc.problems.append((path, node.start_mark.line + 1, f"unsupported tag {node.tag!r}"))
            return None
        mapping: dict[str, Any] = {}
        for key_node, value_node in node.value:
            line = key_node.start_mark.line + 1
            if not isinstance(key_node, yaml.ScalarNode) or id(key_node) in aliases:
                doc.problems.append((path, line, "a key must be a plain scalar"))
                continue
            if key_node.tag not in (_STR, _INT, _FLOAT, _BOOL, _NULL):
                doc.problems.append((path, line, f"unsupported tag {key_node.tag!r} on a key"))
                continue
            key = str(key_node.value)
            key_path = (*path, key)
            if key in mapping:
                first = doc.lines.get(key_path, line)
                doc.problems.append((key_path, line, f"duplicate key (first at line {first})"))
                continue
            doc.lines[key_path] = line
            mapping[key] = _to_data(value_node, key_path, doc, aliases)
        return mapping
    raise TypeError(f"unexpected YAML node {type(node).__name__}")  # pragma: no cover


def _read_yaml(text: str) -> _RawDocument:
    """Compose ``text`` (one document) into plain data; syntax errors raise yaml.YAMLError."""
    loader = _ComposingLoader(text)
    try:
        root = loader.get_single_node()
    finally:
        loader.dispose()
    doc = _RawDocument(data=None, lines={(): 1}, problems=[], alias_paths=[])
    if root is None:
        return doc
    doc.lines[()] = root.start_mark.line + 1
    doc.data = _to_data(root, (), doc, loader.aliases)
    return doc


_ALIAS_HELP = "anchors and aliases are not supported; write the value out"


# --------------------------------------------------------------------------- field types


class _Rule:
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


def _unique(values: list[Any]) -> list[Any]:
    seen: list[Any] = []
    for value in values:
        if value in seen:
            raise ValueError(f"duplicate value {value!r}")
        seen.append(value)
    return values


_SWEEP_NAME = _Rule(r"[a-z0-9._-]+", "a sweep name ([a-z0-9._-])", 64)
SweepName = Annotated[str, _SWEEP_NAME.validator, _SWEEP_NAME.schema]
_HOST_NAME = _Rule(
    r"[A-Za-z0-9][A-Za-z0-9._-]*", "a host name (letters, digits, '.', '_', '-')", 64
)
HostName = Annotated[str, _HOST_NAME.validator, _HOST_NAME.schema]
_KNOB_NAME = _Rule(r"[A-Za-z_][A-Za-z0-9_]*", "a knob name (an identifier)", 64)
KnobName = Annotated[str, _KNOB_NAME.validator, _KNOB_NAME.schema]
_ENV_NAME = _Rule(r"[A-Za-z_][A-Za-z0-9_]*", "an environment variable name", 255)
EnvName = Annotated[str, _ENV_NAME.validator, _ENV_NAME.schema]
_FLAG = _Rule(
    r"--[A-Za-z0-9][A-Za-z0-9_-]*",
    "one '--word' flag token (e.g. --speculative-ddtree-budget)",
    128,
)
Flag = Annotated[str, _FLAG.validator, _FLAG.schema]
_INFO_KEY = _Rule(r"[A-Za-z_][A-Za-z0-9_]*", "a /server_info key (an identifier)", 128)
InfoKey = Annotated[str, _INFO_KEY.validator, _INFO_KEY.schema]
_USER_NAME = _Rule(r"[a-z_][a-z0-9_-]*\$?", "a POSIX user name", 32)
UserName = Annotated[str, _USER_NAME.validator, _USER_NAME.schema]
_PROBLEM_NAME = _Rule(r"[A-Za-z_][A-Za-z0-9_-]*", "a problem name", 128)
ProblemName = Annotated[str, _PROBLEM_NAME.validator, _PROBLEM_NAME.schema]
_CLOCK_TIME = _Rule(r"(?:[01][0-9]|2[0-3]):[0-5][0-9]", "a time of day 'HH:MM'", 5)
ClockTime = Annotated[str, _CLOCK_TIME.validator, _CLOCK_TIME.schema]
Text = Annotated[str, Field(min_length=1, max_length=4096)]
ArgText = Annotated[str, Field(max_length=4096)]

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


def _env_value(value: object) -> object:
    """Numbers become text (``SGLANG_LOG_MS: 1``); booleans are ambiguous and refused."""
    if isinstance(value, bool):
        raise ValueError("a boolean is ambiguous in the environment; quote it ('1', 'true')")
    if isinstance(value, int | float):
        return str(value)
    return value


EnvValue = Annotated[
    str,
    BeforeValidator(_env_value),
    Field(max_length=4096),
    WithJsonSchema({"type": ["string", "number"]}),
]
KnobValueField = Annotated[
    Any, WithJsonSchema({"type": ["string", "integer", "number", "boolean", "null"]})
]


# --------------------------------------------------------------------------- the schema


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class KnobMapping(_Model):
    """How one sweep knob reaches this build of SGLang: a flag or an environment variable."""

    flag: Flag | None = Field(default=None, description="command-line flag, e.g. --x-y")
    env: EnvName | None = Field(default=None, description="environment variable of the unit")
    server_info_key: InfoKey | None = Field(
        default=None, description="the /server_info key SGLang resolves this knob to"
    )
    overridden_by_server: bool = Field(
        default=False,
        description="SGLang may replace the value (e.g. DFLASH forces topk 1): a /server_info "
        "mismatch is recorded, not a failure",
    )

    @model_validator(mode="after")
    def _exactly_one_target(self) -> KnobMapping:
        if (self.flag is None) == (self.env is None):
            raise ValueError("give exactly one of 'flag' or 'env'")
        return self


class HostSpec(_Model):
    """One GPU host and how to reach it and its SGLang server."""

    name: HostName
    address: Address
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    user: UserName = "root"
    identity_file: Text | None = None
    known_hosts: Text = "~/.ssh/known_hosts"
    insecure_no_host_check: bool = False
    gpus: Annotated[
        list[Annotated[int, Field(ge=0, le=1023)]] | None,
        Field(min_length=1),
        AfterValidator(lambda v: v if v is None else _unique(v)),
    ] = None
    base_url: HttpUrl
    type: HostName | None = None
    sudo: bool = False
    jump: Jump | None = None
    knobs: dict[KnobName, KnobMapping] = Field(default_factory=dict)

    @property
    def host_type(self) -> str:
        """The group reports and ``distribute: across-type`` use: ``type``, else the name."""
        return self.type or self.name

    @property
    def is_local(self) -> bool:
        return self.address == "local"

    def effective_knobs(self, sweep_knobs: Mapping[str, KnobMapping]) -> dict[str, KnobMapping]:
        """The sweep's knob map with this host's spellings laid over it (same key order)."""
        merged = dict(sweep_knobs)
        merged.update(self.knobs)
        return merged


class ServerSpec(_Model):
    """The SGLang systemd unit the sweep reconfigures, and how knobs reach it."""

    unit: ServiceName = "sglang.service"
    model: Text
    knobs: dict[KnobName, KnobMapping] = Field(default_factory=dict)
    extra_flags: list[ArgText] = Field(default_factory=list)
    environment: dict[EnvName, EnvValue] = Field(default_factory=dict)
    exec_start: Annotated[list[ArgText] | None, Field(min_length=1)] = None


class BenchmarkSpec(_Model):
    """The context x concurrency matrix each trial is measured on."""

    api: Literal["chat", "generate"] = "chat"
    contexts: Annotated[
        list[Annotated[int, Field(ge=1, le=2_000_000)]],
        Field(min_length=1),
        AfterValidator(_unique),
    ] = Field(default_factory=lambda: [60, 1024, 4096, 8192])
    concurrency: Annotated[
        list[Annotated[int, Field(ge=1, le=4096)]], Field(min_length=1), AfterValidator(_unique)
    ] = Field(default_factory=lambda: [1, 8, 32, 64])
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 512
    rounds: Annotated[int, Field(ge=1, le=1000)] = 3
    warmup_requests: Annotated[int, Field(ge=0, le=1000)] = 2
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.0
    ignore_eos: bool = True


class CodingSpec(_Model):
    """The correctness anchor: small coding problems whose final code is run and checked."""

    problems: Text = "builtin"
    select: Annotated[
        list[ProblemName] | None,
        Field(min_length=1),
        AfterValidator(lambda v: v if v is None else _unique(v)),
    ] = None
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 4096
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.0
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 10.0


class Timeouts(_Model):
    """Deadlines (seconds) of the restart protocol's steps and of one request."""

    connect: Duration = 30.0
    stop: Duration = 180.0
    memory_release: Duration = 300.0
    ready: Duration = 900.0
    probe: Duration = 300.0
    request: Duration = 600.0


class Policy(_Model):
    """What to do when a trial fails and how to leave the hosts at the end."""

    on_trial_failure: Literal["continue", "abort"] = "continue"
    trial_retries: Annotated[int, Field(ge=0, le=10)] = 1
    restore: Literal["as-found", "stopped", "leave"] = "as-found"


class Schedule(_Model):
    """When the daemon may start the sweep and by when it must stop (control machine time)."""

    not_before: ClockTime | None = None
    finish_by: ClockTime | None = None


class Notify(_Model):
    """Where to announce the end of a sweep."""

    webhook: HttpUrl


class Sweep(_Model):
    """A whole sweep file."""

    model_config = ConfigDict(
        title="orchestrator sweep file",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    name: SweepName
    description: Annotated[str, Field(max_length=65536)] = ""
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    hosts: Annotated[list[HostSpec], Field(min_length=1)]
    server: ServerSpec
    baseline: bool = False
    distribute: Literal["each-host", "across-type"] = "each-host"
    configs: list[dict[str, KnobValueField]] = Field(default_factory=list)
    grid: Annotated[
        dict[str, Annotated[list[KnobValueField], Field(min_length=1)]] | None,
        Field(min_length=1),
    ] = None
    benchmark: BenchmarkSpec = Field(default_factory=BenchmarkSpec)
    coding: CodingSpec | None = None
    timeouts: Timeouts = Field(default_factory=Timeouts)
    policy: Policy = Field(default_factory=Policy)
    schedule: Schedule | None = None
    notify: Notify | None = None

    @property
    def knob_names(self) -> list[str]:
        return list(self.server.knobs)

    def host(self, name: str) -> HostSpec:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)


def sweep_json_schema() -> dict[str, Any]:
    """The JSON Schema of a sweep file, for editors' YAML language servers."""
    return Sweep.model_json_schema(mode="validation")


# --------------------------------------------------------------------------- pydantic errors


def _unwrap(annotation: Any) -> Any:
    """Strip Annotated and ``X | None`` down to X."""
    while True:
        origin = typing.get_origin(annotation)
        if origin is Annotated:
            annotation = typing.get_args(annotation)[0]
        elif origin in (typing.Union, types.UnionType):
            members = [a for a in typing.get_args(annotation) if a is not type(None)]
            if len(members) != 1:
                return annotation
            annotation = members[0]
        else:
            return annotation


def _model_at(path: FieldPath) -> type[BaseModel] | None:
    """The schema model that owns the mapping at ``path`` (for did-you-mean suggestions)."""
    annotation: Any = Sweep
    for part in path:
        annotation = _unwrap(annotation)
        if isinstance(annotation, type) and issubclass(annotation, BaseModel):
            field = annotation.model_fields.get(str(part))
            if field is None:
                return None
            annotation = field.annotation
        elif typing.get_origin(annotation) is list:
            annotation = typing.get_args(annotation)[0]
        elif typing.get_origin(annotation) is dict:
            annotation = typing.get_args(annotation)[1]
        else:
            return None
    annotation = _unwrap(annotation)
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return annotation
    return None


def unknown_key_message(key: str, allowed: list[str], *, hint: str = "") -> str:
    """``unknown key (did you mean 'budget'?)``, or the list of what is allowed."""
    close = difflib.get_close_matches(key, allowed, n=1, cutoff=0.6)
    if close:
        return f"unknown key (did you mean {close[0]!r}?)"
    if not allowed:
        return f"unknown key{hint} (none are declared)"
    return f"unknown key{hint} (expected one of: {', '.join(allowed)})"


def _describe_input(value: Any) -> str:
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        return "a list"
    text = repr(value)
    return text if len(text) <= 60 else text[:57] + "..."


def _pydantic_problems(exc: ValidationError) -> list[tuple[FieldPath, str]]:
    found: list[tuple[FieldPath, str]] = []
    for error in exc.errors(include_url=False):
        loc: FieldPath = tuple(error["loc"])
        kind = error["type"]
        if loc and loc[-1] == "[key]":
            found.append((loc[:-1], "invalid key: " + error["msg"].removeprefix("Value error, ")))
            continue
        if kind == "extra_forbidden":
            model = _model_at(loc[:-1])
            allowed = list(model.model_fields) if model else []
            found.append((loc, unknown_key_message(str(loc[-1]), allowed)))
        elif kind == "missing":
            found.append((loc, "required key missing"))
        elif kind in ("value_error", "assertion_error"):
            found.append((loc, error["msg"].removeprefix("Value error, ")))
        else:
            message = error["msg"]
            if "input" in error and not isinstance(error["input"], dict | list):
                message += f" (got {_describe_input(error['input'])})"
            found.append((loc, message[0].lower() + message[1:]))
    return found


# --------------------------------------------------------------------------- cross-field checks


def _control_character(value: str, *, allow_newline: bool) -> str | None:
    for char in value:
        code = ord(char)
        if char == "\0":
            return "NUL"
        if char in "\n\r\x85\u2028\u2029" and not allow_newline:
            return "a newline"
        if (code < 0x20 and char not in "\t\n\r") or code == 0x7F:
            return f"control character {char!r}"
    return None


def _walk_strings(data: Any, path: FieldPath = ()) -> Iterator[tuple[FieldPath, str, bool]]:
    """Every string in the document: (path, text, is_key)."""
    if isinstance(data, str):
        yield path, data, False
    elif isinstance(data, list):
        for index, item in enumerate(data):
            yield from _walk_strings(item, (*path, index))
    elif isinstance(data, dict):
        for key, value in data.items():
            yield (*path, key), key, True
            yield from _walk_strings(value, (*path, key))


def _as_dict(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def _as_list(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def _is_number_text(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return True


def _check_knob_value(value: Any, is_flag: bool) -> str | None:
    if isinstance(value, float) and not math.isfinite(value):
        return "must be a finite number"
    if value is not None and not isinstance(value, str | int | float | bool):
        return f"must be a string, number, boolean or null (got {_describe_input(value)})"
    if is_flag and isinstance(value, str) and value.startswith("-") and not _is_number_text(value):
        return f"{value!r} starts with '-' and would be read as a flag"
    return None


def _cross_field_problems(data: dict[str, Any]) -> list[tuple[FieldPath, str]]:
    found: list[tuple[FieldPath, str]] = []
    server = _as_dict(data.get("server"))
    knobs = _as_dict(server.get("knobs"))
    knob_names = list(knobs)
    hosts = [_as_dict(h) for h in _as_list(data.get("hosts"))]

    def is_flag_knob(name: str) -> bool:
        targets = [knobs.get(name)] + [_as_dict(h.get("knobs")).get(name) for h in hosts]
        return any(isinstance(t, dict) and t.get("flag") is not None for t in targets)

    def check_knob_key(path: FieldPath, key: str) -> bool:
        if key in knobs:
            return True
        found.append((path, unknown_key_message(key, knob_names, hint=": not in server.knobs")))
        return False

    for index, config in enumerate(_as_list(data.get("configs"))):
        for key, value in _as_dict(config).items():
            path: FieldPath = ("configs", index, key)
            if check_knob_key(path, key) and (msg := _check_knob_value(value, is_flag_knob(key))):
                found.append((path, msg))
    grid = data.get("grid")
    for key, values in _as_dict(grid).items():
        if check_knob_key(("grid", key), key):
            for index, value in enumerate(_as_list(values)):
                if msg := _check_knob_value(value, is_flag_knob(key)):
                    found.append((("grid", key, index), msg))

    if (
        not _as_list(data.get("configs"))
        and not _as_dict(grid)
        and data.get("baseline") is not True
    ):
        found.append(((), "nothing to run: give configs, a grid, or baseline: true"))

    seen_names: dict[str, int] = {}
    seen_targets: dict[tuple[str, int], str] = {}
    for index, host in enumerate(hosts):
        name = host.get("name")
        if isinstance(name, str):
            if name in seen_names:
                found.append(
                    (
                        ("hosts", index, "name"),
                        f"duplicate host name {name!r} (hosts[{seen_names[name]}])",
                    )
                )
            seen_names.setdefault(name, index)
        address, port = host.get("address"), host.get("port", 22)
        if isinstance(address, str) and isinstance(port, int):
            target = (address, port if address != "local" else 0)
            if target in seen_targets:
                found.append(
                    (("hosts", index, "address"), f"same machine as host {seen_targets[target]!r}")
                )
            seen_targets.setdefault(target, str(name))
        if address == "local" and host.get("jump") is not None:
            found.append((("hosts", index, "jump"), "a local host has no jump host"))
        host_knobs = _as_dict(host.get("knobs"))
        for key in host_knobs:
            check_knob_key(("hosts", index, "knobs", key), key)
        effective = {**knobs, **{k: v for k, v in host_knobs.items() if k in knobs}}
        found.extend(_collision_problems(effective, server, host_knobs, ("hosts", index)))
    if not hosts:
        found.extend(_collision_problems(knobs, server, {}, ()))
    return found


def _collision_problems(
    effective: dict[str, Any],
    server: dict[str, Any],
    host_knobs: dict[str, Any],
    host_path: FieldPath,
) -> list[tuple[FieldPath, str]]:
    """Two knobs on one flag or variable, or a knob also set by extra_flags/environment."""
    found: list[tuple[FieldPath, str]] = []
    claimed: dict[tuple[str, str], str] = {}
    for name, mapping in effective.items():
        mapping = _as_dict(mapping)
        path: FieldPath = (
            (*host_path, "knobs", name) if name in host_knobs else ("server", "knobs", name)
        )
        for kind in ("flag", "env"):
            target = mapping.get(kind)
            if not isinstance(target, str):
                continue
            if (kind, target) in claimed:
                found.append((path, f"{kind} {target} is already knob {claimed[(kind, target)]!r}"))
            claimed.setdefault((kind, target), name)
    for index, token in enumerate(_as_list(server.get("extra_flags"))):
        if isinstance(token, str):
            flag = token.split("=", 1)[0]
            if ("flag", flag) in claimed:
                found.append(
                    (
                        ("server", "extra_flags", index),
                        f"{flag} is knob {claimed[('flag', flag)]!r}; set it through the knob",
                    )
                )
    for key in _as_dict(server.get("environment")):
        if ("env", key) in claimed:
            found.append(
                (
                    ("server", "environment", key),
                    f"{key} is knob {claimed[('env', key)]!r}; set it through the knob",
                )
            )
    return found


def _control_character_problems(data: Any) -> list[tuple[FieldPath, str]]:
    found: list[tuple[FieldPath, str]] = []
    for path, text, is_key in _walk_strings(data):
        free_text = path == ("description",) and not is_key
        what = _control_character(text, allow_newline=free_text)
        if what:
            found.append((path, f"{'key' if is_key else 'value'} contains {what}"))
    return found


# --------------------------------------------------------------------------- entry points


def _line_of(lines: dict[FieldPath, int], path: FieldPath) -> int:
    while path not in lines and path:
        path = path[:-1]
    return lines.get(path, 1)


def _problems_or_sweep(text: str, filename: str) -> tuple[Sweep | None, list[Problem]]:
    def problem(line: int, path: FieldPath, message: str) -> Problem:
        return Problem(filename, line, format_path(path), message)

    size = len(text.encode("utf-8"))
    if size > MAX_FILE_BYTES:
        return None, [problem(1, (), f"file is {size} bytes; the limit is {MAX_FILE_BYTES}")]
    try:
        doc = _read_yaml(text)
    except _LimitExceeded as exc:
        return None, [problem(exc.mark.line + 1, (), f"file too complex: {exc.message}")]
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else 1
        detail = " ".join(str(part) for part in (exc.context, exc.problem) if part)
        return None, [problem(line, (), f"YAML syntax error: {detail}")]
    except yaml.YAMLError as exc:
        return None, [problem(1, (), f"YAML error: {exc}")]

    if doc.data is None and not doc.problems:
        return None, [problem(1, (), "the file is empty")]
    if not isinstance(doc.data, dict):
        return None, [
            *(problem(line, path, msg) for path, line, msg in doc.problems),
            problem(doc.lines[()], (), "a sweep file is a mapping (name:, hosts:, server:, ...)"),
        ]

    located: list[tuple[FieldPath, str]] = []
    sweep: Sweep | None = None
    try:
        sweep = Sweep.model_validate(doc.data)
    except ValidationError as exc:
        located.extend(_pydantic_problems(exc))
    located.extend(_cross_field_problems(doc.data))
    bad_text = _control_character_problems(doc.data)
    suppressed = {path for path, _ in bad_text} | set(doc.alias_paths)
    suppressed |= {path for path, _, _ in doc.problems}
    located = [
        (path, message)
        for path, message in located
        if message.startswith("unknown key")
        or not any(path[: len(bad)] == bad for bad in suppressed if bad)
    ]
    located.extend(bad_text)

    problems = [problem(line, path, msg) for path, line, msg in doc.problems]
    problems.extend(problem(_line_of(doc.lines, path), path, msg) for path, msg in located)
    unique = sorted(set(problems), key=lambda p: (p.line, p.field_path, p.message))
    return (sweep if not unique else None), unique


def parse_sweep(text: str, filename: str = "sweep.yaml") -> Sweep:
    """The sweep in ``text``; raises :class:`SweepFileError` naming every problem."""
    sweep, problems = _problems_or_sweep(text, filename)
    if problems or sweep is None:
        raise SweepFileError(problems)
    return sweep


def read_sweep_text(path: str | Path) -> str:
    """The file's text, refusing what is too big or not UTF-8 (problems located as usual)."""
    name = str(path)
    try:
        with open(path, "rb") as handle:
            raw = handle.read(MAX_FILE_BYTES + 1)
    except OSError as exc:
        raise SweepFileError([Problem(name, 1, "", f"cannot read: {exc.strerror}")]) from None
    if len(raw) > MAX_FILE_BYTES:
        raise SweepFileError(
            [Problem(name, 1, "", f"file is over {MAX_FILE_BYTES} bytes, the limit")]
        )
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as exc:
        line = raw[: exc.start].count(b"\n") + 1
        raise SweepFileError([Problem(name, line, "", "not UTF-8 text")]) from None


def load_sweep(path: str | Path) -> Sweep:
    """Read and validate a sweep file; raises :class:`SweepFileError` naming every problem."""
    return parse_sweep(read_sweep_text(path), str(path))


def load_sweep_with_text(path: str | Path) -> tuple[Sweep, str]:
    """The sweep and the exact text it came from (the store keeps the submitted YAML)."""
    text = read_sweep_text(path)
    return parse_sweep(text, str(path)), text
