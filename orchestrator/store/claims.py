"""Which daemon runs which sweep of a shared store (table ``sweep_claims``): the queue's
arbiter when several daemons point at one PostgreSQL store.

A daemon claims a sweep before it runs it; the claim is one row per sweep, written under a lock
on the sweep's own row (``FOR UPDATE SKIP LOCKED`` where rows are locked: a daemon that finds
another claiming the same sweep this moment passes it over instead of waiting), so of two
daemons exactly one gets it. Its heartbeat renews every claim it holds at once; a claim that
is neither renewed nor released expires, and another daemon may then take it, as a take-over
(the generation rises). The daemon's own clock is never trusted alone: ``now`` is passed in,
and a claim's expiry is judged by the claimer's clock, as a host lease's is.

These are plain functions on one connection, as :mod:`.ops`' are.
"""

from __future__ import annotations

from orchestrator.store.connection import Connection
from orchestrator.store.ops import write_transaction
from orchestrator.store.records import ClaimOutcome, DaemonIdentity, SweepClaim
from orchestrator.store.rows import CLAIMS

CLAIMABLE_STATES = ("queued", "running")
"""A sweep a daemon may start (queued) or continue (running, its last daemon gone)."""


def _claim_of(conn: Connection, sweep_id: int) -> SweepClaim | None:
    sql = f"SELECT {CLAIMS.select()} FROM sweep_claims WHERE sweep_id = ?"
    row = conn.execute(sql, (sweep_id,)).fetchone()
    return None if row is None else CLAIMS.load(row)


def claim_sweep(
    conn: Connection,
    sweep_id: int,
    daemon: DaemonIdentity,
    now: float,
    expiry_s: float,
    *,
    wait: bool,
    interrupted: bool = False,
) -> ClaimOutcome:
    """Claim the sweep for ``daemon`` if it may run and no other daemon's live claim holds it.

    A claim already ``daemon``'s is renewed. ``wait``: wait for another transaction that holds
    the sweep's row (a cancel must know the answer), else pass the sweep over this time.
    ``interrupted``: an interrupted sweep may be claimed too (a foreground run continues it;
    a daemon waits for ``resume``).
    """
    lock = conn.for_update if wait else conn.skip_locked
    states = (*CLAIMABLE_STATES, "interrupted") if interrupted else CLAIMABLE_STATES
    with write_transaction(conn):
        sweep = conn.execute(
            "SELECT state, replaced_at FROM sweeps WHERE id = ?" + lock, (sweep_id,)
        ).fetchone()
        if sweep is None or sweep["state"] not in states or sweep["replaced_at"]:
            return ClaimOutcome()
        old = _claim_of(conn, sweep_id)
        if old is not None and old.daemon_id != daemon.id and old.live(now):
            return ClaimOutcome(holder=old)
        if old is not None and old.daemon_id == daemon.id and old.released_at is None:
            generation, claimed_at, took_over = old.generation, old.claimed_at, old.took_over_from
        else:
            generation = 1 if old is None else old.generation + 1
            claimed_at = now
            # An unreleased claim that expired: its daemon died, or lost the store.
            took_over = old.daemon if old is not None and old.released_at is None else None
        conn.execute(
            "INSERT INTO sweep_claims (sweep_id, daemon_id, daemon, generation, claimed_at, "
            "renewed_at, expires_at, released_at, stop_requested, took_over_from) "
            "VALUES (?, ?, ?, ?, ?, ?, ?, NULL, NULL, ?) ON CONFLICT (sweep_id) DO UPDATE SET "
            "daemon_id = excluded.daemon_id, daemon = excluded.daemon, "
            "generation = excluded.generation, claimed_at = excluded.claimed_at, "
            "renewed_at = excluded.renewed_at, expires_at = excluded.expires_at, "
            "released_at = NULL, stop_requested = NULL, took_over_from = excluded.took_over_from",
            (
                sweep_id,
                daemon.id,
                daemon.name,
                generation,
                claimed_at,
                now,
                now + expiry_s,
                took_over,
            ),
        )
        return ClaimOutcome(claim=_claim_of(conn, sweep_id))


def renew_claims(
    conn: Connection, daemon_id: str, now: float, expiry_s: float
) -> list[SweepClaim]:
    """The heartbeat: every claim ``daemon_id`` still holds pushed on to ``now + expiry_s``;
    returns them (a sweep missing from the list was taken over: its daemon must stop it)."""
    with write_transaction(conn):
        conn.execute(
            "UPDATE sweep_claims SET renewed_at = ?, expires_at = ? "
            "WHERE daemon_id = ? AND released_at IS NULL",
            (now, now + expiry_s, daemon_id),
        )
        rows = conn.execute(
            f"SELECT {CLAIMS.select()} FROM sweep_claims "
            "WHERE daemon_id = ? AND released_at IS NULL ORDER BY sweep_id",
            (daemon_id,),
        ).fetchall()
    return [CLAIMS.load(row) for row in rows]


def release_claim(conn: Connection, sweep_id: int, daemon_id: str, now: float) -> bool:
    """Give the sweep back (it ended, or its daemon suspended it): free for any daemon at once."""
    with write_transaction(conn):
        cursor = conn.execute(
            "UPDATE sweep_claims SET released_at = ? "
            "WHERE sweep_id = ? AND daemon_id = ? AND released_at IS NULL",
            (now, sweep_id, daemon_id),
        )
        return cursor.rowcount > 0


def request_stop(conn: Connection, sweep_id: int, reason: str, now: float) -> SweepClaim | None:
    """Ask the daemon whose live claim holds the sweep to stop it (``cancel``), at its next
    heartbeat; returns that claim, or None when no live claim holds the sweep."""
    with write_transaction(conn):
        conn.execute(
            "UPDATE sweep_claims SET stop_requested = COALESCE(stop_requested, ?) "
            "WHERE sweep_id = ? AND released_at IS NULL AND expires_at > ?",
            (reason, sweep_id, now),
        )
        claim = _claim_of(conn, sweep_id)
    return claim if claim is not None and claim.live(now) else None


def sweep_claims(conn: Connection) -> list[SweepClaim]:
    """Every sweep's claim, live or not (the caller judges them by its own clock)."""
    rows = conn.execute(f"SELECT {CLAIMS.select()} FROM sweep_claims ORDER BY sweep_id")
    return [CLAIMS.load(row) for row in rows.fetchall()]
