"""Suite-wide hooks: what keeps a parallel run (pytest-xdist, ``make test``) honest.

Each worker moves into a private network namespace before it collects a test
(tests/parallel.py), so the fixed loopback addresses and ports the tests bind are per worker:
no test needs to know that it runs beside others, and a new test may take any address. Running
``-n N`` where that is impossible (not root) stops at once with the reason instead of letting
two workers fight over 127.0.0.41:2241; ``make test`` then runs the suite in one process.

Process ids, the file system and cgroups stay shared between workers: a test names what it
started by its own pid, its own directory (``tmp_path``) or a unique name, never by a fixed one.
"""

from __future__ import annotations

import pytest

from tests import parallel


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
