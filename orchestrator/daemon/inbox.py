"""The spool directory: ``inbox/*.yaml`` taken once stable, moved to ``accepted/`` or
``rejected/`` (with ``<name>.error`` listing every problem); see the package docstring."""

from __future__ import annotations

import asyncio
import os
import stat
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from orchestrator.api import Submitted
from orchestrator.log import get_logger
from orchestrator.store import SweepNameConflict
from orchestrator.sweepfile import (
    NoWorkloadFiles,
    Sweep,
    SweepFileError,
    parse_sweep,
    read_sweep_text,
)

INBOX_SUFFIXES = (".yaml", ".yml")

_NO_FILES = NoWorkloadFiles(
    "the daemon reads no file a spooled sweep names: queue a sweep with workload files with "
    "`orchestrator submit`, which sends their content"
)

Submit = Callable[[Sweep, str, str], Awaitable[Submitted]]
"""Queue ``(sweep, text, source_path)``; raises ``SweepNameConflict`` when the name is taken."""


@dataclass(frozen=True, slots=True)
class FileStamp:
    size: int
    mtime_ns: int


class InboxWatcher:
    """Finds inbox files that have stopped changing (see the package docstring for the rule)."""

    def __init__(self, inbox: Path) -> None:
        self.inbox = inbox
        self._previous: dict[str, FileStamp] = {}

    def ready_files(self) -> list[Path]:
        """Files whose stamp equals the one seen at the previous poll, oldest name first."""
        current: dict[str, FileStamp] = {}
        with os.scandir(self.inbox) as entries:
            for entry in entries:
                if entry.name.startswith(".") or not entry.name.endswith(INBOX_SUFFIXES):
                    continue
                info = entry.stat(follow_symlinks=False)
                current[entry.name] = FileStamp(info.st_size, info.st_mtime_ns)
        ready = sorted(n for n, s in current.items() if self._previous.get(n) == s)
        self._previous = {n: s for n, s in current.items() if n not in ready}
        return [self.inbox / name for name in ready]


def unique_destination(directory: Path, name: str) -> Path:
    """``directory/name``, or ``stem.N.suffix`` with the first N not taken."""
    candidate = directory / name
    stem, suffix = os.path.splitext(name)
    number = 0
    while candidate.exists() or candidate.with_name(candidate.name + ".error").exists():
        number += 1
        candidate = directory / f"{stem}.{number}{suffix}"
    return candidate


def write_private(path: Path, text: str) -> None:
    temporary = path.with_name(f".{path.name}.tmp")
    descriptor = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(descriptor, "w", encoding="utf-8") as handle:
        handle.write(text)
        handle.flush()
        os.fsync(handle.fileno())
    os.replace(temporary, path)


def is_regular_file(path: Path) -> bool:
    """Not a symlink (it could point anywhere the daemon may read), not a directory."""
    return stat.S_ISREG(os.lstat(path).st_mode)


class Inbox:
    """Polls ``inbox`` every ``poll_s`` and hands each stable, valid file to ``submit``."""

    def __init__(
        self, inbox: Path, accepted: Path, rejected: Path, *, submit: Submit, poll_s: float
    ) -> None:
        self.inbox, self.accepted, self.rejected = inbox, accepted, rejected
        self.poll_s = poll_s
        self._submit = submit
        self._log = get_logger(component="daemon")

    async def loop(self) -> None:
        watcher = InboxWatcher(self.inbox)
        while True:
            try:
                for path in watcher.ready_files():
                    await self.take(path)
            except OSError as exc:
                self._log.error("inbox.unreadable", error=str(exc))
            await asyncio.sleep(self.poll_s)

    async def take(self, path: Path) -> None:
        log = self._log.bind(file=path.name)
        if not is_regular_file(path):
            self._reject(path, [f"{path.name}:1: not a regular file"])
            return
        destination = unique_destination(self.accepted, path.name)
        try:
            text = read_sweep_text(path)
            sweep = parse_sweep(text, path.name, workloads=_NO_FILES)
            outcome = await self._submit(sweep, text, str(destination))
        except SweepFileError as exc:
            self._reject(path, [str(p) for p in exc.problems])
            return
        except SweepNameConflict as exc:
            self._reject(path, [f"{path.name}:1: name: {exc} (`orchestrator submit --replace`)"])
            return
        os.replace(path, destination)
        log.info(
            "inbox.accepted",
            sweep=outcome.record.name,
            sweep_id=outcome.record.id,
            created=outcome.created,
            moved_to=str(destination),
        )

    def _reject(self, path: Path, problems: Sequence[str]) -> None:
        destination = unique_destination(self.rejected, path.name)
        write_private(
            destination.with_name(destination.name + ".error"), "\n".join(problems) + "\n"
        )
        os.replace(path, destination)
        self._log.warning(
            "inbox.rejected", file=path.name, moved_to=str(destination), problems=len(problems)
        )
