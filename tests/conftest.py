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

import resource
from pathlib import Path
from typing import Any

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


def _cpu_s() -> float:
    """CPU seconds of this process and of the children it has reaped (a test's subprocesses:
    the CLI, daemons, simulated servers once they exit)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(
        resource.RUSAGE_CHILDREN
    )
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(wrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None) -> object:
    """Each test's CPU time (setup, call and teardown) rides on its reports to the controller:
    on 2 cores the suite's time is its CPU, and a test that waits costs less than one that
    starts processes."""
    before = _cpu_s()
    item.user_properties.append(("cpu_start_s", before))
    return (yield)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> pytest.TestReport:
    report: pytest.TestReport = yield
    if report.when == "teardown":
        started = dict(item.user_properties).get("cpu_start_s")
        if isinstance(started, float):
            report.user_properties.append(("cpu_s", _cpu_s() - started))
    return report


_CPU: dict[str, float] = {}


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    for name, value in report.user_properties:
        if name == "cpu_s" and isinstance(value, float):
            _CPU[report.nodeid] = value


def pytest_terminal_summary(terminalreporter: Any) -> None:
    """The ten tests that took the most CPU, after pytest's own ten slowest (``--durations``)."""
    if not _CPU:
        return
    terminalreporter.write_sep("=", f"most CPU: {sum(_CPU.values()):.0f} s in all")
    for nodeid, seconds in sorted(_CPU.items(), key=lambda kv: -kv[1])[:10]:
        terminalreporter.write_line(f"{seconds:8.2f}s cpu  {nodeid}")
