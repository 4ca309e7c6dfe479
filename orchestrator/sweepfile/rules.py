"""Cross-field rules: what no single field can check (a knob used but not declared, two hosts
on one machine, a flag given twice), run on the parts of the file that parsed.

A file with a type error in one host should still hear about an undeclared knob in a config,
so the rules do not wait for the whole :class:`Sweep` to parse: :func:`parts_of` validates each
piece the rules read with the schema's own field types (a host's name, a knob's mapping, a
config's values) and leaves out what did not parse (that problem is already reported).
Every rule is a typed function of :class:`SweepParts`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from functools import cache
from typing import Annotated, Any

from pydantic import BaseModel, ConfigDict, TypeAdapter, ValidationError

from orchestrator import engines
from orchestrator.engines.base import KnobRules
from orchestrator.host.dropin import (
    ExtraFlagConflict,
    MergedFlags,
    merge_extra_flags,
    strip_flags,
)
from orchestrator.sweepfile.fields import ArgText, KnobValueField, looks_like_a_flag
from orchestrator.sweepfile.problems import FieldPath, Located, unknown_key_message
from orchestrator.sweepfile.schema import HostSpec, KnobMapping, ServerSpec
from orchestrator.sweepfile.yamlread import YamlData
from orchestrator.types import KnobValue


class UnknownKey(Located):
    """A key the schema or the knob list does not know: reported even inside a value the
    reader refused, and nothing else is reported below it."""

    __slots__ = ()


class _Missing:
    """A value that is absent or did not parse."""


_MISSING = _Missing()


@cache
def _adapter(model: type[BaseModel], name: str) -> TypeAdapter[Any]:
    info = model.model_fields[name]
    annotation: Any = info.annotation
    if info.metadata:
        annotation = Annotated[(annotation, *info.metadata)]
    if isinstance(annotation, type) and issubclass(annotation, BaseModel):
        return TypeAdapter(annotation)
    return TypeAdapter(annotation, config=ConfigDict(strict=True))


def _field(model: type[BaseModel], name: str, raw: Mapping[str, YamlData]) -> object:
    """``raw[name]`` as the schema types field ``name`` of ``model`` (its default when absent),
    or :data:`_MISSING` when it does not parse."""
    info = model.model_fields[name]
    if name not in raw:
        return _MISSING if info.is_required() else info.get_default(call_default_factory=True)
    try:
        value: object = _adapter(model, name).validate_python(raw[name])
    except ValidationError:
        return _MISSING
    return value


def _text_field(model: type[BaseModel], name: str, raw: Mapping[str, YamlData]) -> str | None:
    value = _field(model, name, raw)
    return value if isinstance(value, str) else None


def _int_field(model: type[BaseModel], name: str, raw: Mapping[str, YamlData]) -> int | None:
    value = _field(model, name, raw)
    return value if isinstance(value, int) else None


def _words_field(
    model: type[BaseModel], name: str, raw: Mapping[str, YamlData]
) -> tuple[str, ...] | None:
    value = _field(model, name, raw)
    if isinstance(value, list) and all(isinstance(word, str) for word in value):
        return tuple(value)
    return None


def _knob_value(value: YamlData) -> KnobValue | _Missing:
    try:
        return _KNOB_VALUE.validate_python(value)
    except ValidationError:
        return _MISSING


def _arg_text(value: YamlData) -> str | None:
    try:
        return _ARG_TEXT.validate_python(value)
    except ValidationError:
        return None


_KNOB_MAPPING = TypeAdapter(KnobMapping)
_KNOB_VALUE: TypeAdapter[KnobValue] = TypeAdapter(KnobValueField, config=ConfigDict(strict=True))
_ARG_TEXT: TypeAdapter[str] = TypeAdapter(ArgText, config=ConfigDict(strict=True))


def _mapping(value: YamlData) -> dict[str, YamlData]:
    return value if isinstance(value, dict) else {}


def _items(value: YamlData) -> list[YamlData]:
    return value if isinstance(value, list) else []


@dataclass(frozen=True, slots=True)
class KnobDecl:
    """A knob as declared under ``server.knobs`` or a host's ``knobs``; ``mapping`` is None
    when its mapping did not parse (the knob is declared all the same)."""

    name: str
    path: FieldPath
    mapping: KnobMapping | None


@dataclass(frozen=True, slots=True)
class HostPart:
    index: int
    name: str | None
    address: str | None
    port: int | None
    jump: str | None
    knobs: tuple[KnobDecl, ...]

    @property
    def path(self) -> FieldPath:
        return ("hosts", self.index)


@dataclass(frozen=True, slots=True)
class KnobUse:
    """One knob set in a config or a grid: where, and its value when the value parsed."""

    path: FieldPath
    knob: str
    value: KnobValue | _Missing


@dataclass(frozen=True, slots=True)
class SweepParts:
    """The pieces of a sweep file the rules read, each typed by the schema."""

    knobs: tuple[KnobDecl, ...]
    hosts: tuple[HostPart, ...]
    uses: tuple[KnobUse, ...]
    """Every knob a config or the grid sets (the grid's keys themselves, then each value)."""
    grid_keys: tuple[KnobUse, ...]
    has_configs: bool
    has_grid: bool
    baseline: bool
    extra_flags: tuple[str | None, ...]
    environment_keys: tuple[str, ...]
    exec_start: tuple[str, ...] | None
    knob_names: list[str] = field(default_factory=list)
    engine: str = engines.DEFAULT_ENGINE
    """The sweep's ``engine:`` as written (an unknown one is the schema's problem)."""

    def is_flag_knob(self, name: str) -> bool:
        declared = [*self.knobs, *(k for host in self.hosts for k in host.knobs)]
        return any(k.name == name and k.mapping and k.mapping.flag for k in declared)


def _knob_decls(raw: YamlData, path: FieldPath) -> tuple[KnobDecl, ...]:
    decls = []
    for name, value in _mapping(raw).items():
        try:
            mapping: KnobMapping | None = _KNOB_MAPPING.validate_python(value)
        except ValidationError:
            mapping = None
        decls.append(KnobDecl(name, (*path, name), mapping))
    return tuple(decls)


def _engine_name(value: YamlData) -> str:
    return value if isinstance(value, str) else engines.DEFAULT_ENGINE


def parts_of(data: Mapping[str, YamlData]) -> SweepParts:
    """The typed pieces of a document that is a mapping (whatever else is wrong with it)."""
    server = _mapping(data.get("server"))
    hosts = []
    for index, raw_host in enumerate(_items(data.get("hosts"))):
        host = _mapping(raw_host)
        hosts.append(
            HostPart(
                index=index,
                name=_text_field(HostSpec, "name", host),
                address=_text_field(HostSpec, "address", host),
                port=_int_field(HostSpec, "port", host),
                jump=_text_field(HostSpec, "jump", host),
                knobs=_knob_decls(host.get("knobs"), ("hosts", index, "knobs")),
            )
        )
    uses: list[KnobUse] = []
    for index, config in enumerate(_items(data.get("configs"))):
        for knob, value in _mapping(config).items():
            uses.append(KnobUse(("configs", index, knob), knob, _knob_value(value)))
    grid_keys: list[KnobUse] = []
    for knob, values in _mapping(data.get("grid")).items():
        grid_keys.append(KnobUse(("grid", knob), knob, _MISSING))
        for index, value in enumerate(_items(values)):
            uses.append(KnobUse(("grid", knob, index), knob, _knob_value(value)))
    knobs = _knob_decls(server.get("knobs"), ("server", "knobs"))
    return SweepParts(
        knobs=knobs,
        hosts=tuple(hosts),
        uses=tuple(uses),
        grid_keys=tuple(grid_keys),
        has_configs=bool(_items(data.get("configs"))),
        has_grid=bool(_mapping(data.get("grid"))),
        baseline=data.get("baseline") is True,
        extra_flags=tuple(_arg_text(token) for token in _items(server.get("extra_flags"))),
        environment_keys=tuple(_mapping(server.get("environment"))),
        exec_start=_words_field(ServerSpec, "exec_start", server),
        knob_names=[decl.name for decl in knobs],
        engine=_engine_name(data.get("engine")),
    )


# --------------------------------------------------------------------------- the rules


def undeclared_knobs(parts: SweepParts) -> Iterator[Located]:
    """Every knob a config, the grid or a host names is declared under ``server.knobs``."""
    hint = ": not in server.knobs"
    for use in (*(u for u in parts.uses if len(u.path) == 3 and u.path[0] == "configs"),
                *parts.grid_keys):  # fmt: skip
        if use.knob not in parts.knob_names:
            yield UnknownKey(use.path, unknown_key_message(use.knob, parts.knob_names, hint=hint))
    for host in parts.hosts:
        for decl in host.knobs:
            if decl.name not in parts.knob_names:
                yield UnknownKey(
                    decl.path, unknown_key_message(decl.name, parts.knob_names, hint=hint)
                )


def flag_like_values(parts: SweepParts) -> Iterator[Located]:
    """A flag knob's value must not start with '-' (argparse would read it as a flag)."""
    for use in parts.uses:
        if isinstance(use.value, _Missing) or use.knob not in parts.knob_names:
            continue
        if parts.is_flag_knob(use.knob) and looks_like_a_flag(use.value):
            yield Located(use.path, f"{use.value!r} starts with '-' and would be read as a flag")


def something_to_run(parts: SweepParts) -> Iterator[Located]:
    if not parts.has_configs and not parts.has_grid and not parts.baseline:
        yield Located((), "nothing to run: give configs, a grid, or baseline: true")


def distinct_hosts(parts: SweepParts) -> Iterator[Located]:
    """Host names are unique, no two hosts are one machine, a local host has no jump host."""
    names: dict[str, int] = {}
    targets: dict[tuple[str, int], str] = {}
    for host in parts.hosts:
        if host.name is not None:
            if host.name in names:
                yield Located(
                    (*host.path, "name"),
                    f"duplicate host name {host.name!r} (hosts[{names[host.name]}])",
                )
            names.setdefault(host.name, host.index)
        if host.address is not None and host.port is not None:
            target = (host.address, host.port if host.address != "local" else 0)
            if target in targets:
                yield Located((*host.path, "address"), f"same machine as host {targets[target]!r}")
            targets.setdefault(target, str(host.name))
        if host.address == "local" and host.jump is not None:
            yield Located((*host.path, "jump"), "a local host has no jump host")


def _collisions(parts: SweepParts, effective: Mapping[str, KnobDecl]) -> Iterator[Located]:
    claimed: dict[tuple[str, str], str] = {}
    json_flags: dict[str, str] = {}
    """A JSON-valued flag -> the first knob that is one of its keys: a plain knob may not
    take the same flag (the knobs of one JSON flag share it, each its own key)."""
    for name, decl in effective.items():
        mapping = decl.mapping
        if mapping is None:
            continue
        if mapping.flag is not None and mapping.json_key is not None:
            targets = [("json", f"{mapping.flag} {mapping.json_key}")]
            if ("flag", mapping.flag) in claimed:
                owner = claimed[("flag", mapping.flag)]
                yield Located(decl.path, f"flag {mapping.flag} is already knob {owner!r}")
            json_flags.setdefault(mapping.flag, name)
        else:
            targets = [("flag", mapping.flag), ("env", mapping.env)]  # type: ignore[list-item]
            if mapping.flag is not None and mapping.flag in json_flags:
                owner = json_flags[mapping.flag]
                yield Located(decl.path, f"flag {mapping.flag} is already JSON knob {owner!r}")
        for kind, target in targets:
            if target is None:
                continue
            if (kind, target) in claimed:
                owner = claimed[(kind, target)]
                words = "key" if kind == "json" else kind
                yield Located(decl.path, f"{words} {target} is already knob {owner!r}")
            claimed.setdefault((kind, target), name)
    for flag, owner in json_flags.items():
        claimed.setdefault(("flag", flag), owner)
    for index, token in enumerate(parts.extra_flags):
        if token is not None:
            flag = token.split("=", 1)[0]
            if ("flag", flag) in claimed:
                yield Located(
                    ("server", "extra_flags", index),
                    f"{flag} is knob {claimed[('flag', flag)]!r}; set it through the knob",
                )
    for key in parts.environment_keys:
        if ("env", key) in claimed:
            yield Located(
                ("server", "environment", key),
                f"{key} is knob {claimed[('env', key)]!r}; set it through the knob",
            )


def no_collisions(parts: SweepParts) -> Iterator[Located]:
    """On each host, two knobs never share a flag or a variable, and extra_flags/environment
    never set what a knob sets."""
    declared = {decl.name: decl for decl in parts.knobs}
    if not parts.hosts:
        yield from _collisions(parts, declared)
    seen: set[Located] = set()
    for host in parts.hosts:
        effective = dict(declared)
        effective.update((d.name, d) for d in host.knobs if d.name in declared)
        for found in _collisions(parts, effective):
            if found not in seen:
                seen.add(found)
                yield found


def _merged(parts: SweepParts) -> MergedFlags | None:
    """``extra_flags`` joined to ``exec_start`` as a trial joins them (knob flags removed from
    the base first); None without a representative ``exec_start``."""
    if parts.exec_start is None or any(token is None for token in parts.extra_flags):
        return None
    knob_flags = {
        decl.mapping.flag
        for decl in (*parts.knobs, *(d for host in parts.hosts for d in host.knobs))
        if decl.mapping and decl.mapping.flag
    }
    base = strip_flags(parts.exec_start, knob_flags)
    return merge_extra_flags(base, [token for token in parts.extra_flags if token is not None])


def _conflict_message(conflict: ExtraFlagConflict) -> str:
    def shown(value: str | None) -> str:
        return "bare" if value is None else repr(value)

    return (
        f"{conflict.flag} is {shown(conflict.extra_value)} here but "
        f"{shown(conflict.base_value)} on the command line already (server.exec_start or an "
        "earlier extra flag); give it once"
    )


def extra_flags_against_exec_start(parts: SweepParts) -> Iterator[Located]:
    """With a representative ``exec_start``, an extra flag it already has with another value
    is an error (which one the server uses would be up to its parser)."""
    merged = _merged(parts)
    for conflict in merged.conflicts if merged else ():
        yield Located(("server", "extra_flags", conflict.index), _conflict_message(conflict))


def extra_flag_repeats(parts: SweepParts) -> Iterator[Located]:
    """Warnings: extra flags already on the command line with the same value (left out)."""
    merged = _merged(parts)
    for arg in merged.repeated if merged else ():
        yield Located(
            ("server", "extra_flags", arg.index),
            f"{' '.join(arg.tokens)} is already on the command line (server.exec_start or an "
            "earlier extra flag): it is not repeated",
        )


def _knob_rules(parts: SweepParts) -> KnobRules | None:
    if parts.engine not in engines.names():
        return None
    engine = engines.get(parts.engine)
    return engine if isinstance(engine, KnobRules) else None


def engine_knob_rules(parts: SweepParts) -> Iterator[Located]:
    """What the sweep's engine itself would refuse (its :class:`KnobRules`): a key its
    JSON-valued flag does not have, a value its validation rejects (vLLM: a
    ``--speculative-config`` key that is no ``SpeculativeConfig`` field, an unknown method)."""
    rules = _knob_rules(parts)
    if rules is None:
        return
    declared = [*parts.knobs, *(k for host in parts.hosts for k in host.knobs)]
    for decl in declared:
        mapping = decl.mapping
        if mapping is not None and mapping.flag is not None:
            problem = rules.knob_problem(mapping.flag, mapping.json_key)
            if problem is not None:
                yield Located((*decl.path, "json_key" if mapping.json_key else "flag"), problem)
    for use in parts.uses:
        if isinstance(use.value, _Missing):
            continue
        for decl in declared:
            mapping = decl.mapping
            if decl.name != use.knob or mapping is None or mapping.flag is None:
                continue
            problem = rules.value_problem(mapping.flag, mapping.json_key, use.value)
            if problem is not None:
                yield Located(use.path, problem)
                break


Rule = Callable[[SweepParts], Iterator[Located]]

RULES: tuple[Rule, ...] = (
    undeclared_knobs,
    flag_like_values,
    something_to_run,
    distinct_hosts,
    no_collisions,
    extra_flags_against_exec_start,
    engine_knob_rules,
)
"""Each rule's findings are problems: the file is refused."""

WARNINGS: tuple[Rule, ...] = (extra_flag_repeats,)
"""Each finding is a warning: the file is accepted, and ``validate``/``plan`` say it."""


def check(data: Mapping[str, YamlData]) -> tuple[list[Located], list[Located]]:
    """(problems, warnings) of the rules on ``data``."""
    parts = parts_of(data)
    problems = [found for rule in RULES for found in rule(parts)]
    warnings = [found for rule in WARNINGS for found in rule(parts)]
    return problems, warnings
