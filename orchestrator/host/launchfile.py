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
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Any, Literal

import yaml

from orchestrator.types import KnobValue

LaunchFormat = Literal["json", "yaml"]
"""How a launch file is written: the format the engine's flag reads."""
LAUNCH_FILE_MODE = 0o644
"""Readable by the unit's user whoever that is, as the drop-in is."""


@dataclass(frozen=True, slots=True)
class LaunchFile:
    """One file on the host a trial's server is launched with: written atomically before the
    drop-in, backed up and restored with it, fenced by the lease like every write."""

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
        raise ValueError(f"{flag!r} cannot name a launch file")
    return str(path.with_name(f"{path.stem}.{words}.{fmt}"))


def is_launch_file(name: str, dropin_name: str) -> bool:
    """Whether ``name`` (a file in the drop-in's directory) is one of the launch files of the
    drop-in called ``dropin_name``: exactly the names :func:`launch_file_path` makes (stem,
    flag words, format), so an operator's ``90-orchestrator.conf.bak`` or a temporary file of
    an atomic write is not one."""
    stem = re.escape(PurePosixPath(dropin_name).stem)
    return re.fullmatch(rf"{stem}\.[A-Za-z0-9][A-Za-z0-9-]*\.(json|yaml)", name) is not None


def _nested(entries: Mapping[str, KnobValue]) -> dict[str, Any]:
    """Dotted keys as nested objects (``speculative_config.max_draft_len``), in key order."""
    tree: dict[str, Any] = {}
    for key in sorted(entries):
        *parents, leaf = key.split(".")
        node = tree
        for part in parents:
            child = node.setdefault(part, {})
            if not isinstance(child, dict):
                raise ValueError(f"launch-file key {key!r} is below a value")
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
    "LaunchFile",
    "LaunchFormat",
    "is_launch_file",
    "launch_file_path",
    "render_launch_content",
]
