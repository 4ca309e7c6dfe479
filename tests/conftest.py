"""Suite-wide hooks: what keeps a parallel run (pytest-xdist, ``make test``) honest.

Each worker moves into a private network namespace before it collects a test
(tests/parallel.py), so the fixed loopback addresses and ports the tests bind are per worker:
no test needs to know that it runs beside others, and a new test may take any address. Running
``-n N`` where that is impossible (not root) stops at once with the reason instead of letting
two workers fight over 127.0.0.41:2241; ``make test`` then runs the suite in one process.

Process ids, the file system and cgroups stay shared between workers: a test names what it
started by its own pid, its own directory (``tmp_path``) or a unique name, never by a fixed one.

The run starts with the test files whose longest test took longest when the timings in
tests/timings.json were recorded, and ends with the quick ones, so that at the end idle workers
take many short tests instead of waiting for one long test that started last (``make test``
hands tests out one at a time: ``--dist load --maxschedchunk 1``). A file keeps its tests
together and in their own order, so its module-scoped fixtures are set up once per worker. A
file with no recorded timings goes among its folder's files of typical length, or after every
recorded one while most of its folder is not recorded, and then by folder
(:data:`LONGEST_FIRST`). ``--record-timings`` writes what this run measured into that file.
"""

from __future__ import annotations

import json
import resource
import statistics
from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest

from tests import parallel

LONGEST_FIRST = ("soak", "realhost", "faults", "security", "integration", "hostile", "unit")
"""The folders under tests/, from the longest tests to the shortest (a new folder goes between
integration and hostile until it says otherwise)."""
_TESTS = Path(__file__).resolve().parent


TIMINGS = _TESTS / "timings.json"
"""nodeid -> {"s": wall seconds (setup, call, teardown), "cpu": CPU seconds} of a recorded run."""


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--record-timings",
        action="store_true",
        help=f"write each test's wall and CPU seconds into {TIMINGS.relative_to(_TESTS.parent)}",
    )


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


def _folder(item: pytest.Item) -> str:
    return _folder_of(item.path)


def _folder_of(path: Path) -> str:
    path = path.resolve()
    folder = path.relative_to(_TESTS).parts[0] if path.is_relative_to(_TESTS) else ""
    return folder if folder in LONGEST_FIRST else "hostile"


def _recorded() -> dict[str, dict[str, float]]:
    try:
        loaded = json.loads(TIMINGS.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return {}
    return loaded if isinstance(loaded, dict) else {}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Files by their longest recorded test, longest first; tests stay in their file's order."""
    recorded = _recorded()
    longest: dict[Path, float] = {}
    for item in items:
        seconds = recorded.get(item.nodeid, {}).get("s")
        if isinstance(seconds, (int, float)):
            longest[item.path] = max(longest.get(item.path, 0.0), float(seconds))
    typical: dict[str, list[float]] = defaultdict(list)
    files: dict[str, set[Path]] = defaultdict(set)
    for item in items:
        files[_folder(item)].add(item.path)
    for path, seconds in longest.items():
        typical[_folder_of(path)].append(seconds)

    def key(item: pytest.Item) -> tuple[float, int]:
        folder = _folder(item)
        known = longest.get(item.path)
        # a file not yet recorded: as long as its folder's typical file, once most are known
        known_most = 2 * len(typical[folder]) >= len(files[folder])
        guess = statistics.median(typical[folder]) if known_most else 0.0
        return (-(guess if known is None else known), LONGEST_FIRST.index(folder))

    items.sort(key=key)  # stable: each file keeps its own order


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
_WALL: dict[str, float] = defaultdict(float)


def pytest_runtest_logreport(report: pytest.TestReport) -> None:
    _WALL[report.nodeid] += report.duration
    for name, value in report.user_properties:
        if name == "cpu_s" and isinstance(value, float):
            _CPU[report.nodeid] = value


def _record_timings() -> None:
    timings = _recorded()
    for nodeid, cpu in _CPU.items():
        timings[nodeid] = {"s": round(_WALL[nodeid], 2), "cpu": round(cpu, 2)}
    kept = {nodeid: timings[nodeid] for nodeid in sorted(timings) if _exists(nodeid)}
    lines = ",\n".join(f"{json.dumps(k)}: {json.dumps(v)}" for k, v in kept.items())
    TIMINGS.write_text("{\n" + lines + "\n}\n", encoding="utf-8")  # one test a line


def _exists(nodeid: str) -> bool:
    return (_TESTS.parent / nodeid.split("::", 1)[0]).exists()


def pytest_terminal_summary(terminalreporter: Any, config: pytest.Config) -> None:
    """The ten tests that took the most CPU, after pytest's own ten slowest (``--durations``)."""
    if not _CPU:
        return
    if config.getoption("record_timings"):
        _record_timings()
    terminalreporter.write_sep("=", f"most CPU: {sum(_CPU.values()):.0f} s in all")
    for nodeid, seconds in sorted(_CPU.items(), key=lambda kv: -kv[1])[:10]:
        terminalreporter.write_line(f"{seconds:8.2f}s cpu  {nodeid}")
