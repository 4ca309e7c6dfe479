"""One step of the store's schema (:mod:`orchestrator.store.schema` lists them)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Migration:
    """Statements that take the schema from ``version - 1`` to ``version``."""

    version: int
    summary: str
    statements: tuple[str, ...]
    postgres: tuple[str, ...] | None = None
    """PostgreSQL's statements for this step, where they are not ``statements`` respelled."""
