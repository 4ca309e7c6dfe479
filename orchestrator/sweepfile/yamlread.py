"""The hardened YAML reader: text in, plain data plus the line of every field path out.

YAML is *composed* (PyYAML nodes carry line marks), never constructed by PyYAML: no tag can run
code, aliases are refused (no alias bombs), and size, node count and nesting are capped.
Scalars are typed with YAML 1.2 core rules (``22:00`` stays a string, ``no`` stays a string),
and no string may hold a control character (they end up in unit files and on command lines).
Nothing here knows what a sweep is.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from typing import Any, TypeAlias

import yaml

from orchestrator.sweepfile.problems import FieldPath, control_character

MAX_FILE_BYTES = 1024 * 1024
MAX_NODES = 20_000
MAX_DEPTH = 32

YamlScalar: TypeAlias = str | int | float | bool | None
YamlData: TypeAlias = YamlScalar | list["YamlData"] | dict[str, "YamlData"]
"""A composed document as plain data (keys are always text)."""

FREE_TEXT_PATHS: frozenset[FieldPath] = frozenset({("description",)})
"""The values that may span lines."""

ALIAS_HELP = "anchors and aliases are not supported; write the value out"

_TAG = "tag:yaml.org,2002:"
_STR, _INT, _FLOAT, _BOOL, _NULL = (f"{_TAG}{t}" for t in ("str", "int", "float", "bool", "null"))
_MAP, _SEQ = f"{_TAG}map", f"{_TAG}seq"


class LimitExceeded(Exception):
    """The document is bigger or deeper than a sweep file may be."""

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
            raise LimitExceeded(mark, f"more than {MAX_NODES} YAML nodes")
        self.depth += 1
        try:
            if self.depth > MAX_DEPTH:
                mark = self.peek_event().start_mark  # type: ignore[no-untyped-call]
                raise LimitExceeded(mark, f"nested deeper than {MAX_DEPTH} levels")
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


def _scalar(node: yaml.ScalarNode) -> YamlScalar:
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
class RawDocument:
    """The document as plain data, the line of every field path in it, and what the reader
    itself refused (each refused path is not judged again by the later passes)."""

    data: YamlData = None
    lines: dict[FieldPath, int] = field(default_factory=lambda: {(): 1})
    problems: list[tuple[FieldPath, int, str]] = field(default_factory=list)

    def line_of(self, path: FieldPath) -> int:
        """The line of ``path``, or of the nearest enclosing value that has one."""
        while path not in self.lines and path:
            path = path[:-1]
        return self.lines.get(path, 1)

    @property
    def refused_paths(self) -> set[FieldPath]:
        return {path for path, _, _ in self.problems}


class _Composer:
    def __init__(self, doc: RawDocument, aliases: dict[int, str]) -> None:
        self.doc = doc
        self.aliases = aliases

    def refuse(self, path: FieldPath, node: yaml.Node, message: str) -> None:
        self.doc.problems.append((path, node.start_mark.line + 1, message))

    def check_text(self, path: FieldPath, node: yaml.Node, text: str, *, is_key: bool) -> None:
        free = path in FREE_TEXT_PATHS and not is_key
        what = control_character(text, allow_newline=free)
        if what:
            self.refuse(path, node, f"{'key' if is_key else 'value'} contains {what}")

    def data(self, node: yaml.Node, path: FieldPath) -> YamlData:
        if id(node) in self.aliases:
            self.refuse(path, node, f"alias *{self.aliases[id(node)]}: {ALIAS_HELP}")
            return None
        if isinstance(node, yaml.ScalarNode):
            try:
                value = _scalar(node)
            except ValueError as exc:
                self.refuse(path, node, str(exc))
                return None
            if isinstance(value, str):
                self.check_text(path, node, value, is_key=False)
            return value
        if isinstance(node, yaml.SequenceNode):
            if node.tag != _SEQ:
                self.refuse(path, node, f"unsupported tag {node.tag!r}")
                return None
            items: list[YamlData] = []
            for index, item in enumerate(node.value):
                self.doc.lines[(*path, index)] = item.start_mark.line + 1
                items.append(self.data(item, (*path, index)))
            return items
        if isinstance(node, yaml.MappingNode):
            if node.tag != _MAP:
                self.refuse(path, node, f"unsupported tag {node.tag!r}")
                return None
            return self.mapping(node, path)
        raise TypeError(f"unexpected YAML node {type(node).__name__}")  # pragma: no cover

    def mapping(self, node: yaml.MappingNode, path: FieldPath) -> dict[str, YamlData]:
        mapping: dict[str, YamlData] = {}
        for key_node, value_node in node.value:
            if not isinstance(key_node, yaml.ScalarNode) or id(key_node) in self.aliases:
                self.refuse(path, key_node, "a key must be a plain scalar")
                continue
            if key_node.tag not in (_STR, _INT, _FLOAT, _BOOL, _NULL):
                self.refuse(path, key_node, f"unsupported tag {key_node.tag!r} on a key")
                continue
            key = str(key_node.value)
            key_path = (*path, key)
            line = key_node.start_mark.line + 1
            if key in mapping:
                first = self.doc.lines.get(key_path, line)
                self.refuse(key_path, key_node, f"duplicate key (first at line {first})")
                continue
            self.doc.lines[key_path] = line
            self.check_text(key_path, key_node, key, is_key=True)
            mapping[key] = self.data(value_node, key_path)
        return mapping


def read_yaml(text: str) -> RawDocument:
    """Compose ``text`` (one document) into plain data. Syntax errors raise yaml.YAMLError,
    a document over a limit raises :class:`LimitExceeded`; everything else is a problem."""
    loader = _ComposingLoader(text)
    try:
        root = loader.get_single_node()
    finally:
        loader.dispose()
    doc = RawDocument()
    if root is None:
        return doc
    doc.lines[()] = root.start_mark.line + 1
    doc.data = _Composer(doc, loader.aliases).data(root, ())
    return doc
