"""The workload files a sweep carries, kept beside its YAML (table ``sweep_workloads``).

A sweep with ``benchmark.workload: {file: traffic.jsonl}`` is only reproducible with that
file's content, and the daemon must never read the submitter's disk for it, so the store keeps
the content and its sha256 with the sweep record, written in the same transaction. The same
name, YAML and workload content is the same sweep; other workload content under the same YAML
is other content (replace it to run it).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from orchestrator.types import content_hash

if TYPE_CHECKING:
    from orchestrator.store.connection import Connection


@dataclass(frozen=True, slots=True)
class StoredWorkload:
    """One workload file of a sweep: its path as the sweep writes it, content and sha256."""

    path: str
    content: str
    content_hash: str


def workload_hashes(workloads: Mapping[str, str]) -> dict[str, str]:
    """Path -> sha256 of each workload file's content."""
    return {path: content_hash(text) for path, text in workloads.items()}


def insert_workloads(conn: Connection, sweep_id: int, workloads: Mapping[str, str]) -> None:
    """Inside the caller's write transaction: the new sweep's workload files."""
    if not workloads:
        return
    conn.executemany(
        "INSERT INTO sweep_workloads (sweep_id, path, content, content_hash) VALUES (?, ?, ?, ?)",
        [(sweep_id, path, text, content_hash(text)) for path, text in workloads.items()],
    )


def stored_hashes(conn: Connection, sweep_id: int) -> dict[str, str]:
    rows = conn.execute(
        "SELECT path, content_hash FROM sweep_workloads WHERE sweep_id = ?", (sweep_id,)
    ).fetchall()
    return {row["path"]: row["content_hash"] for row in rows}


def sweep_workloads(conn: Connection, sweep_id: int) -> list[StoredWorkload]:
    """The sweep's workload files, by path."""
    rows = conn.execute(
        "SELECT path, content, content_hash FROM sweep_workloads WHERE sweep_id = ? ORDER BY path",
        (sweep_id,),
    ).fetchall()
    return [StoredWorkload(row["path"], row["content"], row["content_hash"]) for row in rows]
