"""A proven server while it is measured: its journal window and whether it still serves.

The lifecycle proves a server (:func:`orchestrator.lifecycle.reconfigure`); what the
measurement then needs of it lives here, beside it rather than in the runner: where its
journal stands before a point, the point's own lines once the journal has settled (lines lag
a little behind the process that wrote them), its engine's accept-length samples from them,
and a check that the same process still serves after the point (a server that died during a
point fails the attempt, its points kept).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from orchestrator.bench import acceptlen
from orchestrator.host import journal
from orchestrator.lifecycle import HostSession, Server, TrialFailed, last_cursor

JOURNAL_SETTLE_S = 0.2
JOURNAL_SETTLE_MAX_S = 3.0


@dataclass(frozen=True, slots=True)
class JournalWindow:
    """A point's journal lines: this invocation's entries after ``start``, up to ``end``."""

    start: str | None
    end: str | None
    entries: tuple[journal.JournalEntry, ...]

    @property
    def messages(self) -> list[str]:
        return [e.message for e in self.entries if e.message]


@dataclass(frozen=True, slots=True)
class RunningServer:
    """``server`` on ``session``'s host, as the measurement reads it."""

    session: HostSession
    server: Server

    @property
    def invocation_id(self) -> str:
        return self.server.invocation_id

    async def cursor(self) -> str | None:
        """Where the unit's journal stands now: what is logged after it is the next point's."""
        return await last_cursor(
            self.session.transport, self.session.unit, self.session.timeouts.command
        )

    async def window(self, start: str | None) -> JournalWindow:
        """This invocation's entries after ``start``, read once the journal has settled: two
        reads a settle interval apart that agree, or the last read at the bound."""
        session = self.session
        previous = -1
        began = time.monotonic()
        while True:
            entries = await journal.read_entries(
                session.transport, session.unit, start, timeout=session.timeouts.command
            )
            settled = len(entries) == previous
            if settled or time.monotonic() - began >= JOURNAL_SETTLE_MAX_S:
                mine = tuple(e for e in entries if e.invocation_id in (None, self.invocation_id))
                return JournalWindow(start, mine[-1].cursor if mine else start, mine)
            previous = len(entries)
            await asyncio.sleep(JOURNAL_SETTLE_S)

    def decode_samples(self, window: JournalWindow) -> list[acceptlen.DecodeSample]:
        """The window's decode lines as the server's engine reads them, each weighted by the
        decode-log interval the running server reports."""
        engine = self.session.engine
        return acceptlen.decode_samples_from_messages(
            window.messages,
            decode_log_interval=engine.decode_log_interval(self.server.server_info),
            parse=engine.parse_log_line,
        )

    def decode_lines_expected(self, wall_s: float | None) -> bool:
        """Whether a point measured for ``wall_s`` seconds must have a decode line in its
        window: always where lines follow the decoding; where the engine logs on a timer,
        only when the point lasted a whole period (a shorter one may fall between two)."""
        environment = self.server.provenance.environment
        period = self.session.engine.decode_log_period_s(environment)
        return period is None or (wall_s is not None and wall_s >= period)

    async def check_alive(self, since: str | None) -> None:
        """Raise ``crashed`` (with the journal after ``since``) unless the same process still
        runs: the unit's InvocationID and a running state."""
        session = self.session
        state = await session.control.show(session.unit, timeout=session.timeouts.command)
        if state.invocation_id == self.invocation_id and state.running:
            return
        entries = await journal.read_entries(
            session.transport, session.unit, since, timeout=session.timeouts.command
        )
        raise TrialFailed(
            "crashed",
            f"the server died during the benchmark (ActiveState={state.active_state})",
            excerpt=[e.message for e in entries if e.message][-60:],
            exit_status=state.exec_main_status,
            invocation_id=self.invocation_id,
        )


__all__ = ["JOURNAL_SETTLE_MAX_S", "JOURNAL_SETTLE_S", "JournalWindow", "RunningServer"]
