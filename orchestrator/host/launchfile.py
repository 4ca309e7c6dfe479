"""Files a trial's server is launched with, beside the drop-in that names them.

Some engines take part of their config as a file whose path is a flag's value: TensorRT-LLM's
``trtllm-serve --extra_llm_api_options PATH`` (YAML), SGLang's ``--speculative-adaptive-config
PATH`` (JSON). An engine says which of its flags take such a file and in which format
(:class:`~orchestrator.engines.base.FileFlags`); the knobs mapped to that flag's keys (``flag`` with
``json_key``, as for a JSON-valued flag) build the file's content, and the argv names the file.

A launch file lives in the drop-in's own directory, named after the drop-in
(``/etc/systemd/system/<unit>.d/90-orchestrator.<flag>.json``): systemd reads only ``*.conf``
there, the orchestrator already owns that name and backs up, fences and restores that
directory, and adopt's lasting drop-in (``80-orchestrator-adopted.conf``) gets files of its own
name that a sweep's restore leaves alone. Everything here is pure; the host side is in
:mod:`orchestrator.host.systemd`.

A file we write carries a mark beside it (``<its name>.written-by-orchestrator``, holding the
SHA-256 of the bytes we wrote), so a run that reads the unit as found tells a file a crashed run
of ours left there from the operator's own at that path. The engine reads the file itself, so
the file has no room for a marker of its own: JSON has no comments, and a key of ours would be
one more setting. The writes are ordered so that a crash anywhere leaves every file of ours
with a mark naming its bytes and no operator's file with one (:func:`is_ours`): a file of ours
is removed before a new mark is written for its path, the mark is written before the file, and
the mark is removed after the file (or before putting back operator's bytes it would name).
"""

from __future__ import annotations

import hashlib
import json
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

import yaml

from orchestrator.types import KnobValue

LaunchFormat = Literal["json", "yaml"]
"""How a launch file is written: the format the engine's flag reads."""
LAUNCH_FILE_MODE = 0o644
"""Readable by the unit's user whoever that is, as the drop-in is."""
MARK_SUFFIX = ".written-by-orchestrator"
"""What a launch file's mark adds to its name: no launch file, drop-in or temporary write of
ours ends so, and systemd reads only ``*.conf``."""


class LaunchFileError(ValueError):
    """A launch file that cannot be written from a config (a key below a value, a flag that
    cannot name a file): the config is refused as ``invalid-config``, before any restart."""


@dataclass(frozen=True, slots=True)
class LaunchFile:
    """One file on the host a trial's server is launched with: written atomically before the
    drop-in, backed up and restored with it, fenced by the lease like every write. Also the
    operator's file found at such a path, with the mode a restore puts back."""

    path: str
    content: bytes
    mode: int = LAUNCH_FILE_MODE

    def to_json(self) -> dict[str, Any]:
        return {
            "path": self.path,
            "mode": f"{self.mode:04o}",
            "content": self.content.decode("utf-8", errors="replace"),
        }


def launch_file_path(dropin: str | PurePosixPath, flag: str, fmt: LaunchFormat) -> str:
    """Where the file of ``flag`` goes for the drop-in at ``dropin``: beside it, its name the
    drop-in's stem, the flag's words and the format (``90-orchestrator.toy-spec-config.json``)."""
    path = PurePosixPath(dropin)
    words = flag.lstrip("-").replace("_", "-")
    if not words or "/" in words or words.startswith("."):
        raise LaunchFileError(f"{flag!r} cannot name a launch file")
    return str(path.with_name(f"{path.stem}.{words}.{fmt}"))


def is_launch_file(name: str, dropin_name: str) -> bool:
    """Whether ``name`` (a file in the drop-in's directory) is one of the launch files of the
    drop-in called ``dropin_name``: exactly the names :func:`launch_file_path` makes (stem,
    flag words, format), so an operator's ``90-orchestrator.conf.bak`` or a temporary file of
    an atomic write is not one."""
    stem = re.escape(PurePosixPath(dropin_name).stem)
    return re.fullmatch(rf"{stem}\.[A-Za-z0-9][A-Za-z0-9-]*\.(json|yaml)", name) is not None


def mark_path(path: str) -> str:
    """Where the mark of the launch file at ``path`` goes: beside it."""
    return path + MARK_SUFFIX


def is_mark(name: str, dropin_name: str) -> bool:
    """Whether ``name`` (a file in the drop-in's directory) is the mark of one of the launch
    files of the drop-in called ``dropin_name``."""
    return name.endswith(MARK_SUFFIX) and is_launch_file(name[: -len(MARK_SUFFIX)], dropin_name)


def render_mark(content: bytes) -> bytes:
    """The mark of a launch file of ours holding ``content``: its digest, as ``sha256sum``
    writes it (so ``sha256sum -c`` checks a file against its mark by hand)."""
    return f"{hashlib.sha256(content).hexdigest()}  -\n".encode()


def is_ours(content: bytes, mark: bytes | None) -> bool:
    """Whether a launch file holding ``content`` is one we wrote: its mark names its bytes."""
    return mark is not None and mark == render_mark(content)


def operators_files(
    found: Sequence[LaunchFile], marks: Mapping[str, bytes]
) -> tuple[LaunchFile, ...]:
    """The launch files of ``found`` that are the operator's: every one without a mark (path
    -> bytes, by the file's path) that names its bytes. A leftover of a crashed run of ours is
    not among them, so a restore removes it instead of putting it back."""
    return tuple(f for f in found if not is_ours(f.content, marks.get(f.path)))


def content_problem(content: bytes, fmt: LaunchFormat) -> str | None:
    """Why ``content`` is no file of format ``fmt`` an engine could read (it does not parse,
    or is not a mapping of settings), or None."""
    try:
        text = content.decode("utf-8")
        tree = yaml.safe_load(text) if fmt == "yaml" else json.loads(text)
    except (UnicodeDecodeError, ValueError, yaml.YAMLError) as exc:
        return f"not {fmt.upper()}: {exc}"
    if not isinstance(tree, dict):
        return f"not a {fmt.upper()} mapping of settings: {type(tree).__name__}"
    return None


def _nested(entries: Mapping[str, KnobValue]) -> dict[str, Any]:
    """Dotted keys as nested objects (``speculative_config.max_draft_len``), in key order."""
    tree: dict[str, Any] = {}
    for key in sorted(entries):
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise LaunchFileError(f"launch-file key {key!r} is below a value")
            node = child
        node[leaf] = entries[key]
    return tree


def render_launch_content(entries: Mapping[str, KnobValue], fmt: LaunchFormat) -> bytes:
    """A launch file's bytes: the knobs' keys (dotted ones nested), sorted, so the same
    config always writes the same bytes."""
    tree = _nested(entries)
    if fmt == "yaml":
        return yaml.safe_dump(tree, sort_keys=True, default_flow_style=False).encode()
    return (json.dumps(tree, sort_keys=True, indent=2) + "\n").encode()


__all__ = [
    "LAUNCH_FILE_MODE",
    "MARK_SUFFIX",
    "LaunchFile",
    "LaunchFormat",
    "content_problem",
    "is_launch_file",
    "is_mark",
    "is_ours",
    "launch_file_path",
    "mark_path",
    "operators_files",
    "render_launch_content",
    "render_mark",
]
