"""Where each record the store hands back is kept: its table, its columns, each column's codec.

One mapping per record type, derived from the record's dataclass fields: a field is the column
of the same name unless renamed, stored as it is unless its codec says otherwise (JSON text, a
0/1 flag, a trial's plan, a backup's base64 files). The operations (:mod:`.ops`) write their
SQL against these tables and never map a row by hand. A row is read by column name only
(``row[name]``), which any DB-API driver's mapping rows give, so a second backend reuses the
mapping as it is and differs only where its driver stores a type natively.
"""

from __future__ import annotations

import base64
import dataclasses
import json
import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from orchestrator.store.records import (
    Attempt,
    DropinSlot,
    EventRecord,
    HostRecord,
    PointRecord,
    StoredRequest,
    SweepClaim,
    SweepRecord,
    TrialPlan,
    TrialRecord,
    UnitBackup,
)

if TYPE_CHECKING:
    from _typeshed import DataclassInstance

R = TypeVar("R", bound="DataclassInstance")

# --- JSON -----------------------------------------------------------------------------------


def _finite(value: Any) -> Any:
    """JSON has no NaN or infinity: a value that could not be computed is stored as null."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, Mapping):
        return {str(k): _finite(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_finite(v) for v in value]
    return value


def to_json(value: Any) -> str:
    return json.dumps(_finite(value), allow_nan=False, separators=(",", ":"))


def to_json_or_null(value: Any) -> str | None:
    return None if value is None else to_json(value)


def from_json(text: str | None) -> Any:
    return None if text is None else json.loads(text)


# --- codecs ---------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Codec:
    """How a field is stored: ``load`` turns the stored value into the field's, ``dump`` back."""

    load: Callable[[Any], Any]
    dump: Callable[[Any], Any]


def _same(value: Any) -> Any:
    return value


def _load_plan(text: str | None) -> TrialPlan | None:
    return None if text is None else TrialPlan.from_json(from_json(text))


def _dump_plan(plan: TrialPlan | None) -> str | None:
    return None if plan is None else to_json(plan.to_json())


def _load_files(text: str) -> dict[str, bytes | None]:
    return {
        path: None if content is None else base64.b64decode(content)
        for path, content in from_json(text).items()
    }


def _dump_files(files: Mapping[str, bytes | None]) -> str:
    """A backup's file bytes as stored: base64 text, null for a file that was absent."""
    return to_json(
        {
            path: None if content is None else base64.b64encode(content).decode("ascii")
            for path, content in files.items()
        }
    )


def _load_dropin(text: str | None) -> DropinSlot | None:
    if text is None:
        return None
    data = from_json(text)
    modes = data.get("launch_modes") or {}
    return DropinSlot(
        str(data["path"]),
        bool(data["dir_existed"]),
        int(data["mode"]),
        launch_managed=bool(data.get("launch_managed")),
        launch_modes={str(path): int(str(mode), 8) for path, mode in modes.items()},
    )


def _dump_dropin(slot: DropinSlot | None) -> str | None:
    return None if slot is None else to_json(slot.to_json())


PLAIN = Codec(_same, _same)
JSON = Codec(from_json, to_json_or_null)
FLAG = Codec(bool, int)
"""An INTEGER 0/1 column (SQLite has no boolean)."""
PLAN = Codec(_load_plan, _dump_plan)
FILES = Codec(_load_files, _dump_files)
DROPIN = Codec(_load_dropin, _dump_dropin)

# --- tables ---------------------------------------------------------------------------------


class Row(Protocol):
    """A result row read by column name (``sqlite3.Row``; a dict row of another driver)."""

    def __getitem__(self, key: str, /) -> Any: ...


@dataclass(frozen=True, slots=True)
class Column:
    """One column of a table: its name, the record's field it holds, how that is stored."""

    name: str
    field: str
    codec: Codec


@dataclass(frozen=True, slots=True)
class Table(Generic[R]):
    """A record type's table: ``load`` makes the record of a row selected with ``select``."""

    name: str
    record: type[R]
    columns: tuple[Column, ...]
    tidy: Callable[[R], R]
    """Applied to each loaded record (a backup's pre-version-6 keys taken out of its state)."""

    def select(self, alias: str = "") -> str:
        """The column list of a SELECT (each prefixed ``alias.`` when the query joins)."""
        prefix = f"{alias}." if alias else ""
        return ", ".join(prefix + column.name for column in self.columns)

    def load(self, row: Row) -> R:
        fields = {column.field: column.codec.load(row[column.name]) for column in self.columns}
        return self.tidy(self.record(**fields))

    def dump(self, item: object = None, /, **given: Any) -> dict[str, Any]:
        """Column -> stored value, for an INSERT: each field ``item`` has (a ``New*`` record
        has no id and no stamps), then ``given`` by field name (a name that is no field of the
        record is a column stored as it is), each through its column's codec."""
        by_field = {column.field: column for column in self.columns}
        values = {name: getattr(item, name) for name in by_field if hasattr(item, name)}
        stored: dict[str, Any] = {}
        for name, value in {**values, **given}.items():
            column = by_field.get(name, Column(name, name, PLAIN))
            stored[column.name] = column.codec.dump(value)
        return stored


def table(
    name: str,
    record: type[R],
    *,
    codecs: Mapping[str, Codec] | None = None,
    renamed: Mapping[str, str] | None = None,
    tidy: Callable[[R], R] = _same,
) -> Table[R]:
    """The table ``name`` holding ``record``: one column per field, ``renamed`` (field ->
    column) where they differ, stored through ``codecs`` (by field) where not as they are."""
    codecs, renamed = codecs or {}, renamed or {}
    columns = tuple(
        Column(renamed.get(f.name, f.name), f.name, codecs.get(f.name, PLAIN))
        for f in dataclasses.fields(record)
    )
    return Table(name, record, columns, tidy)


_LEGACY_DROPIN = ("__dropin_path", "__dropin_dir_existed", "__dropin_mode")
_LEGACY_ADOPTED = "__adopted"
"""The reserved keys a backup's state held before version 6 gave them their own columns."""


def _without_legacy_keys(backup: UnitBackup) -> UnitBackup:
    """A backup written before version 6 reads back as one written since: its drop-in slot and
    adopt's mark out of the state's reserved keys and into their fields."""
    state = dict(backup.state)
    dropin = backup.dropin
    if dropin is None and "__dropin_path" in state:
        dropin = DropinSlot(
            state["__dropin_path"],
            state.get("__dropin_dir_existed") == "yes",
            int(state.get("__dropin_mode", "0o644"), 8),
        )
    adopted = backup.adopted if backup.adopted is not None else state.get(_LEGACY_ADOPTED)
    for key in (*_LEGACY_DROPIN, _LEGACY_ADOPTED):
        state.pop(key, None)
    return dataclasses.replace(backup, state=state, dropin=dropin, adopted=adopted)


SWEEPS = table("sweeps", SweepRecord, codecs={"summary": JSON})
HOSTS = table("sweep_hosts", HostRecord)
TRIALS = table("trials", TrialRecord, codecs={"config": JSON, "is_baseline": FLAG, "plan": PLAN})
ATTEMPTS = table("attempts", Attempt, codecs={"evidence": JSON})
POINTS = table(
    "points",
    PointRecord,
    codecs={"metrics": JSON, "accept_len": JSON, "quality": JSON},
    renamed={"key": "point_key"},
)
REQUESTS = table("requests", StoredRequest, codecs={"warmup": FLAG, "extra": JSON})
EVENTS = table("events", EventRecord, codecs={"fields": JSON})
UNIT_BACKUPS = table(
    "unit_backups",
    UnitBackup,
    codecs={"files": FILES, "state": JSON, "dropin": DROPIN},
    tidy=_without_legacy_keys,
)
CLAIMS = table("sweep_claims", SweepClaim)
