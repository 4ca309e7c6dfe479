"""A sweep's workloads, typed, and where a file workload's content comes from.

A file workload (``benchmark.workload: {file: traffic.jsonl}``) is read once, where the sweep
file is: by ``validate``, ``run`` and ``submit`` on the operator's machine, relative to the
sweep file. ``submit`` sends the content with the sweep and the daemon keeps it in its store,
so the daemon and the runner parse a stored sweep with :class:`StoredWorkloads` and never read
the client's disk. Either way the content is checked line by line
(:func:`orchestrator.bench.workloads.parse_sample`) before the sweep is accepted.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal, Protocol

from orchestrator.types import SYNTHETIC_WORKLOAD

WorkloadKind = Literal["synthetic", "file", "builtin"]

MAX_WORKLOAD_BYTES = 32 * 1024 * 1024
"""Largest traffic sample a sweep may carry (it is stored with the sweep and sent over the
daemon's API): tens of thousands of chat requests."""


def workload_label(kind: WorkloadKind, name: str) -> str:
    """How a point names its workload: ``synthetic``, ``file:PATH``, ``builtin:NAME``."""
    return SYNTHETIC_WORKLOAD if kind == "synthetic" else f"{kind}:{name}"


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """One workload as a run needs it: its label, kind and name (the path as written in the
    sweep, the built-in set's name, or ``synthetic``), and a file workload's content and sha256
    (None for the others)."""

    label: str
    kind: WorkloadKind
    name: str
    content: str | None
    content_hash: str | None


class WorkloadContentMissing(Exception):
    """A run asked for a file workload's content of a sweep parsed from its text alone: our
    bug (a runnable sweep is parsed with its workload source)."""

    def __init__(self, path: str) -> None:
        super().__init__(f"workload file {path}: its content was not loaded with the sweep")
        self.path = path


class WorkloadUnreadable(Exception):
    """A workload file that cannot be had; ``reason`` is one line for the operator."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


class WorkloadSource(Protocol):
    """Where the loader gets a file workload's text, by the path as the sweep writes it."""

    def display_name(self, path: str) -> str:
        """The name problems in the file are reported under."""
        ...

    def read(self, path: str) -> str:
        """The file's text; raises :class:`WorkloadUnreadable`."""
        ...


@dataclass(frozen=True, slots=True)
class DiskWorkloads:
    """Files read from disk, relative to the sweep file's directory (``base``)."""

    base: Path

    def display_name(self, path: str) -> str:
        return str(self.base / path) if str(self.base) not in ("", ".") else path

    def read(self, path: str) -> str:
        target = self.base / Path(path).expanduser()
        try:
            with open(target, "rb") as handle:
                raw = handle.read(MAX_WORKLOAD_BYTES + 1)
        except OSError as exc:
            raise WorkloadUnreadable(f"cannot read {target}: {exc.strerror}") from None
        if len(raw) > MAX_WORKLOAD_BYTES:
            raise WorkloadUnreadable(f"{target} is over {MAX_WORKLOAD_BYTES} bytes, the limit")
        try:
            return raw.decode("utf-8")
        except UnicodeDecodeError as exc:
            line = raw[: exc.start].count(b"\n") + 1
            raise WorkloadUnreadable(f"{target}:{line}: not UTF-8 text") from None


@dataclass(frozen=True, slots=True)
class StoredWorkloads:
    """Content that travelled with the sweep (``submit``'s body, the daemon's store)."""

    content: Mapping[str, str]
    where: str = "sent with the sweep"

    def display_name(self, path: str) -> str:
        return path

    def read(self, path: str) -> str:
        if path not in self.content:
            raise WorkloadUnreadable(f"workload file {path} was not {self.where}")
        text = self.content[path]
        if len(text.encode("utf-8")) > MAX_WORKLOAD_BYTES:
            raise WorkloadUnreadable(f"{path} is over {MAX_WORKLOAD_BYTES} bytes, the limit")
        return text


@dataclass(frozen=True, slots=True)
class NoWorkloadFiles:
    """A source that has no files: an inbox sweep (the daemon reads nothing a sweep file
    names on its disk; such a sweep goes through ``orchestrator submit``)."""

    reason: str

    def display_name(self, path: str) -> str:
        return path

    def read(self, path: str) -> str:
        raise WorkloadUnreadable(self.reason)
