"""A host's journal, and the ``journalctl`` that reads it, in journald's own formats.

Entries hold raw bytes per field, as journald stores them, so the JSON output can reproduce the
encodings the orchestrator must survive (FACTS: journald): every value a string, a non-printable
or non-UTF-8 value an array of byte values, a field over 4096 bytes ``null`` unless ``--all``,
lines over 48 KiB split with ``_LINE_BREAK=line-max``. Cursors look and parse like real ones
(``s=...;i=...;b=...;m=...;t=...;x=...``) and seek by sequence number, then by time.
Matches combine like sd-journal: the same field ORed, different fields ANDed, ``+`` ORs groups,
and ``-u UNIT`` is ANDed with all of that.
"""

from __future__ import annotations

import asyncio
import getopt
import hashlib
import json
import os
import random
import re
import time
import uuid
from collections import deque
from collections.abc import Awaitable, Callable, Iterable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime

LINE_MAX = 48 * 1024
"""journald's stdout stream line limit (LineMax=48K)."""
JSON_THRESHOLD = 4096
"""``name=value`` at least this long prints as null in JSON output unless --all."""
DEFAULT_RATE_LIMIT_INTERVAL_US = 30_000_000
DEFAULT_RATE_LIMIT_BURST = 10_000
MAX_ENTRIES = 500_000
"""Oldest entries are rotated away past this many (journald vacuums by size; this is ours)."""

Fields = tuple[tuple[str, bytes], ...]
_FIELD_NAME = re.compile(r"^[A-Z_][A-Z0-9_]*$")


@dataclass(frozen=True, slots=True)
class JournalEntry:
    """One stored entry: header data plus its fields in the order they were written."""

    seqnum: int
    realtime_us: int
    monotonic_us: int
    boot_id: str
    seqnum_id: str
    fields: Fields

    @property
    def xor_hash(self) -> int:
        digest = hashlib.blake2b(repr(self.fields).encode(), digest_size=8).digest()
        return int.from_bytes(digest, "big")

    @property
    def cursor(self) -> str:
        return (
            f"s={self.seqnum_id};i={self.seqnum:x};b={self.boot_id};m={self.monotonic_us:x};"
            f"t={self.realtime_us:x};x={self.xor_hash:x}"
        )

    def values(self, name: str) -> list[bytes]:
        return [value for key, value in self.fields if key == name]


@dataclass(frozen=True, slots=True)
class Cursor:
    """A parsed cursor; any part may be missing, as in sd_journal_seek_cursor."""

    seqnum_id: str | None = None
    seqnum: int | None = None
    boot_id: str | None = None
    monotonic_us: int | None = None
    realtime_us: int | None = None


class MalformedCursor(ValueError):
    """sd_journal_seek_cursor's -EINVAL."""


def _parse_id128(text: str) -> str:
    cleaned = text.replace("-", "") if len(text) == 36 else text
    if not re.fullmatch(r"[0-9a-fA-F]{32}", cleaned):
        raise MalformedCursor(text)
    return cleaned.lower()


def _parse_hex(text: str) -> int:
    match = re.match(r"\s*(0[xX])?([0-9a-fA-F]+)", text)
    if match is None:
        raise MalformedCursor(text)
    return int(match.group(2), 16)


def parse_cursor(text: str) -> Cursor:
    """Parse like sd_journal_seek_cursor: ``k=v`` words split on ``;``; unknown keys ignored;
    enough parts to seek by (seqnum pair, or boot + monotonic, or realtime) required."""
    if not text:
        raise MalformedCursor(text)
    parts: dict[str, object] = {}
    for word in text.split(";"):
        if not word:
            continue
        if len(word) < 2 or word[1] != "=":
            raise MalformedCursor(text)
        key, value = word[0], word[2:]
        if key == "s":
            parts["seqnum_id"] = _parse_id128(value)
        elif key == "i":
            parts["seqnum"] = _parse_hex(value)
        elif key == "b":
            parts["boot_id"] = _parse_id128(value)
        elif key == "m":
            parts["monotonic_us"] = _parse_hex(value)
        elif key == "t":
            parts["realtime_us"] = _parse_hex(value)
        elif key == "x":
            _parse_hex(value)
    cursor = Cursor(**parts)  # type: ignore[arg-type]
    by_seqnum = cursor.seqnum_id is not None and cursor.seqnum is not None
    by_monotonic = cursor.boot_id is not None and cursor.monotonic_us is not None
    if not (by_seqnum or by_monotonic or cursor.realtime_us is not None):
        raise MalformedCursor(text)
    return cursor


def is_printable(value: bytes) -> bool:
    """systemd's utf8_is_printable: valid UTF-8 without C0 (except tab, newline) or C1 controls."""
    try:
        text = value.decode("utf-8")
    except UnicodeDecodeError:
        return False
    return _UNPRINTABLE.search(text) is None


_UNPRINTABLE = re.compile("[\x00-\x08\x0b-\x1f\x7f-\x9f]")
"""C0 controls but tab and newline, DEL and C1 controls: one regex search per value instead of
a Python test per character (journalctl -o json prints every field of every entry)."""


def _json_value(name: str, value: bytes, show_all: bool) -> object:
    if not show_all and len(name) + 1 + len(value) >= JSON_THRESHOLD:
        return None
    if is_printable(value):
        return value.decode("utf-8")
    return list(value)


def render_json(entry: JournalEntry, *, show_all: bool, output_fields: set[str] | None) -> str:
    """One ``-o json`` line: header fields first, then the entry's fields; repeats as arrays."""
    document: dict[str, object] = {
        "__CURSOR": entry.cursor,
        "__REALTIME_TIMESTAMP": str(entry.realtime_us),
        "__MONOTONIC_TIMESTAMP": str(entry.monotonic_us),
        "_BOOT_ID": entry.boot_id,
    }
    grouped: dict[str, list[object]] = {}
    for name, value in entry.fields:
        if output_fields is not None and name not in output_fields:
            continue
        grouped.setdefault(name, []).append(_json_value(name, value, show_all))
    for name, values in grouped.items():
        document[name] = values[0] if len(values) == 1 else values
    return json.dumps(document, ensure_ascii=False, separators=(",", ":"))


def cap_effective(pid: int) -> str | None:
    """A process's effective capability set from ``/proc/PID/status`` (hex, no leading zeros)."""
    try:
        with open(f"/proc/{pid}/status", encoding="ascii", errors="replace") as handle:
            for line in handle:
                if line.startswith("CapEff:"):
                    return format(int(line.split()[1], 16), "x")
    except (OSError, ValueError):
        return None
    return None


def _printable_message(value: bytes, show_all: bool) -> str:
    if is_printable(value) or show_all:
        return value.decode("utf-8", errors="replace")
    return f"[{len(value)}B blob data]"


def render_short(entry: JournalEntry, *, show_all: bool, iso: bool = False) -> str:
    """``-o short``: ``Mon DD HH:MM:SS host ident[pid]: message`` in local time."""
    stamp = datetime.fromtimestamp(entry.realtime_us / 1e6).astimezone()
    when = stamp.strftime("%Y-%m-%dT%H:%M:%S%z") if iso else stamp.strftime("%b %d %H:%M:%S")
    host = (entry.values("_HOSTNAME") or [b"localhost"])[0].decode(errors="replace")
    ident_values = entry.values("SYSLOG_IDENTIFIER") or entry.values("_COMM") or [b"unknown"]
    ident = ident_values[0].decode(errors="replace")
    pid = (entry.values("_PID") or [b""])[0].decode(errors="replace")
    message = _printable_message((entry.values("MESSAGE") or [b""])[0], show_all)
    tag = f"{ident}[{pid}]" if pid else ident
    return f"{when} {host} {tag}: {message}"


def render_cat(entry: JournalEntry) -> bytes:
    """``-o cat``: the message bytes as stored (journalctl writes them raw, no blob marker)."""
    return (entry.values("MESSAGE") or [b""])[0]


@dataclass(slots=True)
class _RateWindow:
    begin_us: int = 0
    count: int = 0
    suppressed: int = 0


@dataclass(frozen=True, slots=True)
class RateLimit:
    """journald's per-service limit; ``interval_us`` 0 disables it (LogRateLimitIntervalSec=0)."""

    interval_us: int = DEFAULT_RATE_LIMIT_INTERVAL_US
    burst: int = DEFAULT_RATE_LIMIT_BURST


@dataclass(frozen=True, slots=True)
class StreamSource:
    """Who writes a stdout stream: the service's main process at the time the stream opened."""

    unit: str
    invocation_id: str
    pid: int
    comm: str
    exe: str
    cmdline: str
    identifier: str
    rate_limit: RateLimit = field(default_factory=RateLimit)


class Journal:
    """The host's journal: append (journald's side) and query/follow (journalctl's side)."""

    def __init__(
        self, hostname: str, *, drop_rate: float = 0.0, seed: int = 0, machine_id: str = ""
    ) -> None:
        self.hostname = hostname
        self.boot_id = uuid.uuid4().hex
        self.seqnum_id = uuid.uuid4().hex
        self.machine_id = machine_id or uuid.uuid4().hex
        self.drop_rate = drop_rate
        self._rng = random.Random(seed)
        self._entries: deque[JournalEntry] = deque()
        self._next_seqnum = 1
        self._changed = asyncio.Event()
        self._windows: dict[str, _RateWindow] = {}
        self._caps: dict[int, str] = {}
        self.dropped_by_fault = 0

    @property
    def entries(self) -> Sequence[JournalEntry]:
        return self._entries

    def append(self, fields: Iterable[tuple[str, bytes | str]]) -> JournalEntry:
        encoded = tuple(
            (name, value.encode("utf-8") if isinstance(value, str) else value)
            for name, value in fields
        )
        entry = JournalEntry(
            seqnum=self._next_seqnum,
            realtime_us=time.time_ns() // 1000,
            monotonic_us=time.monotonic_ns() // 1000,
            boot_id=self.boot_id,
            seqnum_id=self.seqnum_id,
            fields=encoded,
        )
        self._next_seqnum += 1
        self._entries.append(entry)
        if len(self._entries) > MAX_ENTRIES:
            self._entries.popleft()
        self._changed.set()
        self._changed = asyncio.Event()
        return entry

    def entries_after(self, seqnum: int) -> list[JournalEntry]:
        """Entries newer than ``seqnum`` (seqnums are contiguous, so this is a slice)."""
        if not self._entries:
            return []
        first = self._entries[0].seqnum
        start = max(seqnum + 1 - first, 0)
        return [self._entries[i] for i in range(start, len(self._entries))]

    async def wait_for_entries(self, after_seqnum: int) -> None:
        """Return once an entry newer than ``after_seqnum`` exists."""
        while not self._entries or self._entries[-1].seqnum <= after_seqnum:
            await self._changed.wait()

    def _capabilities(self, pid: int) -> str:
        """``_CAP_EFFECTIVE`` as journald writes it: the writer's CapEff in hex, no leading
        zeros (read once per pid; a process gone already counts as the host's own)."""
        if pid not in self._caps:
            self._caps[pid] = cap_effective(pid) or cap_effective(os.getpid()) or "0"
        return self._caps[pid]

    def log_manager(
        self, message: str, *, unit: str, invocation_id: str, priority: int = 6, **extra: str
    ) -> JournalEntry:
        """A line from the service manager (PID 1) about ``unit``."""
        fields: list[tuple[str, bytes | str]] = [
            ("_TRANSPORT", "journal"),
            ("PRIORITY", str(priority)),
            ("SYSLOG_FACILITY", "3"),
            ("SYSLOG_IDENTIFIER", "systemd"),
            ("MESSAGE", message),
            ("UNIT", unit),
            ("INVOCATION_ID", invocation_id),
            *extra.items(),
            ("_PID", "1"),
            ("_UID", "0"),
            ("_GID", "0"),
            ("_CAP_EFFECTIVE", self._capabilities(os.getpid())),
            ("_RUNTIME_SCOPE", "system"),
            ("_COMM", "systemd"),
            ("_EXE", "/usr/lib/systemd/systemd"),
            ("_CMDLINE", "/sbin/init"),
            ("_SYSTEMD_CGROUP", "/init.scope"),
            ("_SYSTEMD_UNIT", "init.scope"),
            ("_SYSTEMD_SLICE", "-.slice"),
            ("_MACHINE_ID", self.machine_id),
            ("_HOSTNAME", self.hostname),
        ]
        return self.append(fields)

    def _rate_limited(self, source: StreamSource, now_us: int) -> bool:
        limit = source.rate_limit
        if limit.interval_us <= 0 or limit.burst <= 0:
            return False
        window = self._windows.setdefault(source.unit, _RateWindow(begin_us=now_us))
        if now_us - window.begin_us >= limit.interval_us:
            if window.suppressed:
                self.append(
                    [
                        ("_TRANSPORT", "driver"),
                        ("PRIORITY", "4"),
                        ("SYSLOG_IDENTIFIER", "systemd-journald"),
                        (
                            "MESSAGE",
                            f"Suppressed {window.suppressed} messages from {source.unit}",
                        ),
                        ("MESSAGE_ID", "a596d6fe7bfa4994828e72309e95d61e"),
                        ("_PID", "1"),
                        ("_COMM", "systemd-journal"),
                        ("OBJECT_SYSTEMD_UNIT", source.unit),
                        ("_HOSTNAME", self.hostname),
                    ]
                )
            window.begin_us, window.count, window.suppressed = now_us, 0, 0
        window.count += 1
        if window.count > limit.burst:
            window.suppressed += 1
            return True
        return False

    def log_stream_line(self, source: StreamSource, line: bytes, *, broken: bool = False) -> None:
        """One line of a service's stdout/stderr, as journald's stdout transport stores it;
        ``broken``: the line was cut at LINE_MAX without a newline."""
        priority = 6
        prefix = re.match(rb"^<([0-7])>", line)
        if prefix is not None:
            priority = int(prefix.group(1))
            line = line[prefix.end() :]
        pieces = [line[i : i + LINE_MAX] for i in range(0, max(len(line), 1), LINE_MAX)]
        for index, piece in enumerate(pieces):
            if self.drop_rate > 0 and self._rng.random() < self.drop_rate:
                self.dropped_by_fault += 1
                continue
            if self._rate_limited(source, time.time_ns() // 1000):
                continue
            fields: list[tuple[str, bytes | str]] = [
                ("_TRANSPORT", "stdout"),
                ("PRIORITY", str(priority)),
                ("SYSLOG_FACILITY", "3"),
                ("SYSLOG_IDENTIFIER", source.identifier),
                ("MESSAGE", piece),
            ]
            if index < len(pieces) - 1 or broken:
                fields.append(("_LINE_BREAK", "line-max"))
            fields += [
                ("_PID", str(source.pid)),
                ("_UID", "0"),
                ("_GID", "0"),
                ("_CAP_EFFECTIVE", self._capabilities(source.pid)),
                ("_RUNTIME_SCOPE", "system"),
                ("_COMM", source.comm),
                ("_EXE", source.exe),
                ("_CMDLINE", source.cmdline),
                ("_SYSTEMD_CGROUP", f"/system.slice/{source.unit}"),
                ("_SYSTEMD_UNIT", source.unit),
                ("_SYSTEMD_SLICE", "system.slice"),
                ("_SYSTEMD_INVOCATION_ID", source.invocation_id),
                ("_MACHINE_ID", self.machine_id),
                ("_HOSTNAME", self.hostname),
                ("_STREAM_ID", hashlib.md5(source.invocation_id.encode()).hexdigest()),
            ]
            self.append(fields)


# --- queries ---------------------------------------------------------------------------------

Term = dict[str, set[bytes]]
"""One AND-term: field -> accepted values (the same field ORed)."""


@dataclass(frozen=True, slots=True)
class Query:
    """What journalctl selects: ``groups`` are ANDed, each a list of OR-ed terms."""

    groups: tuple[tuple[Term, ...], ...] = ()
    since_us: int | None = None
    until_us: int | None = None

    def matches(self, entry: JournalEntry) -> bool:
        if self.since_us is not None and entry.realtime_us < self.since_us:
            return False
        if self.until_us is not None and entry.realtime_us > self.until_us:
            return False
        return all(any(_term_matches(term, entry) for term in terms) for terms in self.groups)


def _term_matches(term: Term, entry: JournalEntry) -> bool:
    for name, accepted in term.items():
        if name == "_BOOT_ID":
            if entry.boot_id.encode() not in accepted:
                return False
        elif not any(value in accepted for value in entry.values(name)):
            return False
    return True


def unit_terms(unit: str) -> tuple[Term, ...]:
    """What ``-u UNIT`` adds (journalctl's add_units for a system unit)."""
    name = unit.encode()
    return (
        {"_SYSTEMD_UNIT": {name}},
        {"_PID": {b"1"}, "UNIT": {name}},
        {"_UID": {b"0"}, "OBJECT_SYSTEMD_UNIT": {name}},
    )


class MatchError(ValueError):
    """A positional argument is not a ``FIELD=value`` match."""


def parse_matches(words: Sequence[str]) -> tuple[Term, ...]:
    """``A=1 B=2 + C=3`` -> two OR-ed terms (sd_journal_add_match / add_disjunction)."""
    terms: list[Term] = [{}]
    for word in words:
        if word == "+":
            if terms[-1]:
                terms.append({})
            continue
        name, sep, value = word.partition("=")
        if not sep or not _FIELD_NAME.match(name):
            raise MatchError(word)
        terms[-1].setdefault(name, set()).add(value.encode())
    return tuple(term for term in terms if term)


class TimestampError(ValueError):
    pass


def parse_timestamp(text: str) -> int:
    """``--since`` forms journalctl takes: ``@epoch[.frac]``, ``YYYY-MM-DD[ HH:MM[:SS]] [UTC]``,
    ``now``, ``today``, ``yesterday``. Returns microseconds since the epoch."""
    value = text.strip()
    if value.startswith("@"):
        try:
            return int(float(value[1:]) * 1_000_000)
        except ValueError as exc:
            raise TimestampError(text) from exc
    now = datetime.now().astimezone()
    if value == "now":
        return int(now.timestamp() * 1_000_000)
    if value in ("today", "yesterday"):
        midnight = now.replace(hour=0, minute=0, second=0, microsecond=0)
        offset = 0 if value == "today" else 86_400
        return int((midnight.timestamp() - offset) * 1_000_000)
    utc = value.endswith(" UTC")
    if utc:
        value = value[: -len(" UTC")]
    for layout in ("%Y-%m-%d %H:%M:%S.%f", "%Y-%m-%d %H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d"):
        try:
            parsed = datetime.strptime(value, layout)
        except ValueError:
            continue
        stamp = parsed.replace(tzinfo=UTC) if utc else parsed.astimezone()
        return int(stamp.timestamp() * 1_000_000)
    raise TimestampError(text)


# --- journalctl ------------------------------------------------------------------------------

Writer = Callable[[bytes], Awaitable[None]]

_SHORT_OPTS = "u:n:o:fqaS:U:rk"
_LONG_OPTS = [
    "unit=",
    "lines=",
    "output=",
    "follow",
    "no-pager",
    "quiet",
    "all",
    "since=",
    "until=",
    "after-cursor=",
    "cursor=",
    "output-fields=",
    "no-tail",
    "no-hostname",
    "utc",
    "merge",
    "system",
    "boot",
]


@dataclass(slots=True)
class JournalctlArgs:
    units: list[str] = field(default_factory=list)
    lines: int | None = None
    output: str = "short"
    follow: bool = False
    quiet: bool = False
    show_all: bool = False
    since_us: int | None = None
    until_us: int | None = None
    after_cursor: str | None = None
    cursor: str | None = None
    output_fields: set[str] | None = None
    no_tail: bool = False
    matches: tuple[Term, ...] = ()


class JournalctlUsageError(Exception):
    """Bad arguments: journalctl prints the message and exits 1."""


def parse_journalctl_args(argv: Sequence[str]) -> JournalctlArgs:
    try:
        options, positional = getopt.gnu_getopt(list(argv), _SHORT_OPTS, _LONG_OPTS)
    except getopt.GetoptError as exc:
        if exc.opt and len(exc.opt) > 1:
            raise JournalctlUsageError(f"journalctl: unrecognized option '--{exc.opt}'") from exc
        raise JournalctlUsageError(f"journalctl: invalid option -- '{exc.opt}'") from exc
    args = JournalctlArgs()
    for name, value in options:
        if name in ("-u", "--unit"):
            args.units.append(value if "." in value else f"{value}.service")
        elif name in ("-n", "--lines"):
            if value == "all":
                args.lines = None
                args.no_tail = True
                continue
            try:
                args.lines = int(value.lstrip("+"))
            except ValueError as exc:
                raise JournalctlUsageError(f'Failed to parse lines "{value}"') from exc
        elif name in ("-o", "--output"):
            if value not in ("short", "short-iso", "cat", "json", "json-seq"):
                raise JournalctlUsageError(f"Unknown output format '{value}'.")
            args.output = value
        elif name in ("-f", "--follow"):
            args.follow = True
        elif name in ("-q", "--quiet"):
            args.quiet = True
        elif name in ("-a", "--all"):
            args.show_all = True
        elif name in ("-S", "--since", "-U", "--until"):
            try:
                stamp = parse_timestamp(value)
            except TimestampError as exc:
                raise JournalctlUsageError(f'Failed to parse timestamp: {value}') from exc
            if name in ("-S", "--since"):
                args.since_us = stamp
            else:
                args.until_us = stamp
        elif name == "--after-cursor":
            args.after_cursor = value
        elif name == "--cursor":
            args.cursor = value
        elif name == "--output-fields":
            args.output_fields = {part for part in value.split(",") if part}
        elif name == "--no-tail":
            args.no_tail = True
        elif name in ("-r", "-k"):
            raise JournalctlUsageError(f"journalctl: {name} is not supported by this simulator")
    try:
        args.matches = parse_matches(positional)
    except MatchError as exc:
        message = f"Failed to add match '{exc.args[0]}': Invalid argument"
        raise JournalctlUsageError(message) from exc
    return args


def _render(entry: JournalEntry, args: JournalctlArgs) -> bytes:
    if args.output == "json":
        text = render_json(entry, show_all=args.show_all, output_fields=args.output_fields)
    elif args.output == "json-seq":
        text = "\x1e" + render_json(
            entry, show_all=args.show_all, output_fields=args.output_fields
        )
    elif args.output == "cat":
        return render_cat(entry) + b"\n"
    else:
        text = render_short(entry, show_all=args.show_all, iso=args.output == "short-iso")
    return text.encode("utf-8") + b"\n"


def _seek(entries: Sequence[JournalEntry], cursor: Cursor) -> int:
    """Index of the first entry at or after ``cursor`` (by seqnum when ours, else by time)."""
    for index, entry in enumerate(entries):
        if cursor.seqnum_id == entry.seqnum_id and cursor.seqnum is not None:
            if entry.seqnum >= cursor.seqnum:
                return index
        elif cursor.realtime_us is not None:
            if entry.realtime_us >= cursor.realtime_us:
                return index
        elif (
            cursor.boot_id == entry.boot_id
            and cursor.monotonic_us is not None
            and entry.monotonic_us >= cursor.monotonic_us
        ):
            return index
    return len(entries)


def build_query(args: JournalctlArgs) -> Query:
    groups = [args.matches] if args.matches else []
    if args.units:
        groups.append(tuple(term for unit in args.units for term in unit_terms(unit)))
    return Query(groups=tuple(groups), since_us=args.since_us, until_us=args.until_us)


def select(journal: Journal, args: JournalctlArgs) -> list[JournalEntry]:
    """The entries a non-follow run prints (and where a follow run starts)."""
    query = build_query(args)
    entries = list(journal.entries)
    start = 0
    seek_text = args.after_cursor if args.after_cursor is not None else args.cursor
    if seek_text is not None:
        cursor = parse_cursor(seek_text)
        start = _seek(entries, cursor)
        if args.after_cursor is not None and start < len(entries):
            at = entries[start]
            if at.cursor == seek_text or (
                at.seqnum_id == cursor.seqnum_id and at.seqnum == cursor.seqnum
            ):
                start += 1
    chosen = [entry for entry in entries[start:] if query.matches(entry)]
    lines = args.lines
    if lines is None and args.follow and seek_text is None and not args.no_tail:
        lines = 10
    if lines is not None:
        chosen = chosen[:lines] if seek_text is not None else chosen[-lines:] if lines else []
    return chosen


async def run_journalctl(
    journal: Journal,
    argv: Sequence[str],
    write_out: Writer,
    write_err: Writer,
    stopped: asyncio.Event,
) -> int:
    """``journalctl ARGS``; with ``-f`` it follows until ``stopped`` is set (channel gone)."""
    try:
        args = parse_journalctl_args(argv)
    except JournalctlUsageError as exc:
        await write_err(f"{exc}\n".encode())
        return 1
    try:
        chosen = select(journal, args)
    except MalformedCursor:
        await write_err(b"Failed to seek to cursor: Invalid argument\n")
        return 1
    for entry in chosen:
        await write_out(_render(entry, args))
    if not args.follow:
        if not chosen and not args.quiet and args.output not in ("json", "json-seq"):
            await write_out(b"-- No entries --\n")
        return 0
    last_seqnum = journal.entries[-1].seqnum if journal.entries else 0
    query = build_query(args)
    while not stopped.is_set():
        waiter = asyncio.ensure_future(journal.wait_for_entries(last_seqnum))
        stopper = asyncio.ensure_future(stopped.wait())
        try:
            await asyncio.wait({waiter, stopper}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            waiter.cancel()
            stopper.cancel()
        if stopped.is_set():
            break
        fresh = journal.entries_after(last_seqnum)
        if fresh:
            last_seqnum = fresh[-1].seqnum
        for entry in fresh:
            if query.matches(entry):
                await write_out(_render(entry, args))
    return 0

