"""Fixtures that several integration test files share."""

from __future__ import annotations

import pytest

from tests.integration.terminal_demo import TerminalDemo, shared_terminal_demo


@pytest.fixture(scope="session")
def terminal_demo(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> TerminalDemo:
    """``make demo`` at a terminal in a fresh home, run once per test session."""
    return shared_terminal_demo(tmp_path_factory, worker_id)
