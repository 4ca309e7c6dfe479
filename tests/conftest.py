"""Suite-wide hooks: what keeps a parallel run (pytest-xdist, ``make test``) honest.

Each worker moves into a private network namespace before it collects a test
(tests/parallel.py), so the fixed loopback addresses and ports the tests bind are per worker:
no test needs to know that it runs beside others, and a new test may take any address. Running
``-n N`` where that is impossible (not root) stops at once with the reason instead of letting
two workers fight over 127.0.0.41:2241; ``make test`` then runs the suite in one process.

Process ids, the file system and cgroups stay shared between workers: a test names what it
started by its own pid, its own directory (``tmp_path``) or a unique name, never by a fixed one.

The run starts with the folders whose tests take tens of seconds each and ends with the unit
tests, so that at the end idle workers take many short tests (``--dist worksteal``) instead of
waiting for one long test that started last.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from tests import parallel

LONGEST_FIRST = ("soak", "realhost", "faults", "security", "integration", "hostile", "unit")
"""The folders under tests/, from the longest tests to the shortest (a new folder goes between
integration and hostile until it says otherwise)."""
_TESTS = Path(__file__).resolve().parent


def pytest_configure(config: pytest.Config) -> None:
    if hasattr(config, "workerinput"):  # a worker of a parallel run
        parallel.enter_private_network()
    elif config.pluginmanager.hasplugin("xdist") and config.getoption("numprocesses", None):
        problem = parallel.why_unavailable()
        if problem is not None:
            raise pytest.UsageError(
                f"parallel runs give each worker a private network, and cannot here: {problem}; "
                "run the suite in one process (-n 0)"
            )


def _rank(item: pytest.Item) -> int:
    path = item.path.resolve()
    folder = path.relative_to(_TESTS).parts[0] if path.is_relative_to(_TESTS) else ""
    return LONGEST_FIRST.index(folder if folder in LONGEST_FIRST else "hostile")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    items.sort(key=_rank)  # stable: each folder keeps its own order
