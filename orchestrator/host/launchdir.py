"""The launch files beside our drop-in, on the host: read as found, written for a trial, put
back, each step through the session's transport (so the lease fences every write and removal).

The rules (names, marks, bytes) are pure, in :mod:`orchestrator.host.launchfile`; this module
orders the writes so that a run killed at any point leaves the directory readable: every file
of ours with a mark that names its bytes, no operator's file with one. A later run then reads
the operator's files as found and clears ours, whether or not our drop-in is still there.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import PurePosixPath

from orchestrator.host.launchfile import (
    LAUNCH_FILE_MODE,
    MARK_SUFFIX,
    LaunchFile,
    is_launch_file,
    is_mark,
    is_ours,
    mark_path,
    operators_files,
    render_mark,
)
from orchestrator.host.transport import Transport, is_temp_beside


@dataclass(frozen=True, slots=True)
class LaunchListing:
    """The drop-in's directory as one ``ls`` found it: the launch files of the drop-in, their
    marks, and the temporary files a killed atomic write left beside either."""

    files: tuple[str, ...] = ()
    marks: tuple[str, ...] = ()
    temps: tuple[str, ...] = ()


async def list_launch_dir(transport: Transport, dropin: str, *, timeout: float) -> LaunchListing:
    """The launch files, marks and leftover temporary files beside the drop-in at ``dropin``
    (none where its directory does not exist)."""
    path = PurePosixPath(dropin)
    listing = await transport.run(
        ["ls", "-1A", "--", str(path.parent)], timeout=timeout, privileged=True
    )
    if not listing.ok:
        return LaunchListing()
    names = listing.stdout_text().splitlines()
    files = sorted(n for n in names if is_launch_file(n, path.name))
    marks = sorted(n for n in names if is_mark(n, path.name))
    temps = sorted(n for n in names if any(is_temp_beside(n, t) for t in (*files, *marks)))
    return LaunchListing(
        *(tuple(str(path.parent / n) for n in group) for group in (files, marks, temps))
    )


async def _read(transport: Transport, path: str, *, timeout: float) -> bytes | None:
    try:
        return await transport.read_file(path, timeout=timeout)
    except FileNotFoundError:  # removed since the listing
        return None


async def _modes(transport: Transport, paths: Sequence[str], *, timeout: float) -> dict[str, int]:
    """Each file's permission bits, where ``stat`` answers (one command for all of them)."""
    if not paths:
        return {}
    shown = await transport.run(["stat", "-c", "%a %n", "--", *paths], timeout=timeout)
    modes: dict[str, int] = {}
    for line in shown.stdout_text().splitlines():
        bits, _, name = line.partition(" ")
        if name in paths and bits.isdigit():
            modes[name] = int(bits, 8)
    return modes


async def read_launch_bytes(
    transport: Transport, dropin: str, *, timeout: float
) -> dict[str, bytes]:
    """The drop-in's launch files as they are now (path -> bytes), ours and the operator's."""
    listing = await list_launch_dir(transport, dropin, timeout=timeout)
    return await _bytes_of(transport, listing.files, timeout=timeout)


async def _bytes_of(
    transport: Transport, paths: Sequence[str], *, timeout: float
) -> dict[str, bytes]:
    found: dict[str, bytes] = {}
    for path in paths:
        data = await _read(transport, path, timeout=timeout)
        if data is not None:
            found[path] = data
    return found


async def read_found_launch_files(
    transport: Transport, dropin: str, *, timeout: float
) -> tuple[LaunchFile, ...]:
    """The operator's launch files beside the drop-in, with their bytes and modes: what a
    restore puts back. A file a crashed run of ours left (its mark names its bytes) is not
    among them, with or without our drop-in beside it, so the restore clears it."""
    listing = await list_launch_dir(transport, dropin, timeout=timeout)
    data = await _bytes_of(transport, listing.files, timeout=timeout)
    marks = await _bytes_of(transport, listing.marks, timeout=timeout)
    by_file = {path: marks[mark_path(path)] for path in data if mark_path(path) in marks}
    modes = await _modes(transport, sorted(data), timeout=timeout)
    found = [LaunchFile(p, d, modes.get(p, LAUNCH_FILE_MODE)) for p, d in sorted(data.items())]
    return operators_files(found, by_file)


async def launch_files_differing(
    transport: Transport, dropin: str, wanted: Mapping[str, bytes], *, timeout: float
) -> list[str]:
    """The paths where the drop-in's launch files on the host are not ``wanted`` (path ->
    bytes): one missing, one with other bytes, or one that should not be there."""
    now = await read_launch_bytes(transport, dropin, timeout=timeout)
    return sorted(p for p in {*now, *wanted} if now.get(p) != wanted.get(p))


async def _remove_all(transport: Transport, paths: Sequence[str], *, timeout: float) -> None:
    for path in paths:
        await transport.remove_file(path, timeout=timeout)


async def put_launch_files(
    transport: Transport, dropin: str, wanted: Sequence[LaunchFile], *, timeout: float
) -> list[str]:
    """Make the drop-in's launch files exactly a trial's ``wanted``, each marked ours: every
    other launch file (an earlier trial's, or the operator's, which the backup keeps) removed,
    and a file whose bytes differ removed, marked with its new bytes, then written. A file
    that already holds the wanted bytes is left as it is, the operator's included (it stays
    theirs: a restore need not put it back). Returns the paths changed."""
    listing = await list_launch_dir(transport, dropin, timeout=timeout)
    await _remove_all(transport, listing.temps, timeout=timeout)
    keep = {f.path for f in wanted}
    gone = [path for path in listing.files if path not in keep]
    await _remove_all(transport, gone, timeout=timeout)
    stray = [m for m in listing.marks if m.removesuffix(MARK_SUFFIX) not in keep]
    await _remove_all(transport, stray, timeout=timeout)  # after their files
    changed = list(gone)
    for launch in sorted(wanted, key=lambda f: f.path):
        now = await _read(transport, launch.path, timeout=timeout)
        if now == launch.content:
            continue
        if now is not None:  # ours or not, its old bytes must go before a mark names new ones
            await transport.remove_file(launch.path, timeout=timeout)
        mark = mark_path(launch.path)
        await transport.write_file_atomic(
            mark, render_mark(launch.content), mode=LAUNCH_FILE_MODE, timeout=timeout
        )
        await transport.write_file_atomic(
            launch.path, launch.content, mode=launch.mode, timeout=timeout
        )
        changed.append(launch.path)
    return changed


async def restore_launch_files(
    transport: Transport, dropin: str, found: Sequence[LaunchFile], *, timeout: float
) -> list[str]:
    """Make the drop-in's launch files exactly ``found`` (the operator's, as read before the
    sweep), each with its mode, and remove every mark: a file that is not in ``found`` is
    removed; an operator's file is written back where its bytes differ or where a mark says
    we wrote that path (its mode may have been ours since). A mark that would name the
    operator's bytes goes before they are written, any other after, so a crash between
    never leaves the operator's file looking like ours. Returns the paths changed."""
    listing = await list_launch_dir(transport, dropin, timeout=timeout)
    await _remove_all(transport, listing.temps, timeout=timeout)
    back = {f.path for f in found}
    gone = [path for path in listing.files if path not in back]
    await _remove_all(transport, gone, timeout=timeout)
    changed = list(gone)
    marks = set(listing.marks)
    for launch in sorted(found, key=lambda f: f.path):
        mark = mark_path(launch.path)
        claim = await _read(transport, mark, timeout=timeout) if mark in marks else None
        if is_ours(launch.content, claim):
            await transport.remove_file(mark, timeout=timeout)
            marks.discard(mark)
        now = await _read(transport, launch.path, timeout=timeout)
        if now != launch.content or claim is not None:
            await transport.write_file_atomic(
                launch.path, launch.content, mode=launch.mode, timeout=timeout
            )
            changed.append(launch.path)
    await _remove_all(transport, sorted(marks), timeout=timeout)
    return changed


__all__ = [
    "LaunchListing",
    "launch_files_differing",
    "list_launch_dir",
    "put_launch_files",
    "read_found_launch_files",
    "read_launch_bytes",
    "restore_launch_files",
]
