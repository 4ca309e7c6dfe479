"""Property, on the REAL manager: any knob value renders into a drop-in from which systemd starts
the server with exactly the argv and environment meant (the process itself reports them), or is
refused with a clear error. Many values per daemon-reload: each example is a batch of configs,
one unit each, all started by one ``systemctl start``.

The simulated host gets the same units and must print the same ``systemctl show -p
ExecStart,Environment`` (systemd's quoting of odd values) as the real manager.
"""

from __future__ import annotations

import asyncio
import itertools
import time
from collections.abc import Iterator, Mapping
from pathlib import Path

import pytest
from hypothesis import HealthCheck, Phase, given, settings
from hypothesis import strategies as st

from orchestrator.types import KnobValue
from tests.hostile.knobvalues import (
    CONFIG,
    DUMPER,
    Rendered,
    expected_env,
    read_dump,
    render,
    write_units,
)
from tests.realhost.realhost import RealHost
from tests.realhost.test_fidelity import RealSide, SimSide, sim

__all__ = ["sim"]  # the simulated host's fixture, shared with test_fidelity.py

BATCHES = itertools.count(1)


@pytest.fixture
def dump_dir(fidelity_host: RealHost) -> Iterator[Path]:
    directory = fidelity_host.root / "dumps"
    directory.mkdir(exist_ok=True)
    (directory / "dump.py").write_text(DUMPER)
    yield directory


@settings(
    max_examples=5,
    deadline=None,
    phases=(Phase.explicit, Phase.generate),  # no shrinking: each example costs real SSH calls
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)
@given(configs=st.lists(CONFIG, min_size=4, max_size=14))
async def test_real_manager_runs_exactly_the_rendered_argv(
    fidelity_host: RealHost, dump_dir: Path, sim: SimSide, configs: list[Mapping[str, KnobValue]]
) -> None:
    batch = next(BATCHES)
    dumper = dump_dir / "dump.py"
    outcomes = [
        render(config, dumper, str(dump_dir / f"b{batch}-{index}.json"))
        for index, config in enumerate(configs)
    ]
    rendered = [o for o in outcomes if isinstance(o, Rendered)]
    if not rendered:
        return
    real = RealSide(fidelity_host)
    stem = f"argv-b{batch}"
    names = write_units(real.unit_dir, rendered, stem, oneshot=True)
    write_units(sim.unit_dir, rendered, stem, oneshot=True)
    show = ("systemctl", "show", "-p", "ExecStart,Environment,LoadState", *names)
    for side in (real, sim):
        assert (await side.sh("systemctl", "daemon-reload")).returncode == 0
    real_show, sim_show = await asyncio.gather(real.sh(*show), sim.sh(*show))
    assert real_show.returncode == 0 and real_show.stderr == b"", real_show
    assert sim_show.stdout == real_show.stdout, _first_difference(real_show.stdout, sim_show.stdout)
    dumps = [Path(item.invocation.environment["DUMP_TO"]) for item in rendered]
    for side in (sim, real):  # one after the other: both write the same dump files
        started = await side.sh("systemctl", "start", *names)
        assert started.returncode == 0, (side.label, started.stderr.decode(errors="replace"))
        missing = await _wait_files(dumps)
        if missing:
            journal = await side.sh("journalctl", "-u", names[missing[0]], "--no-pager")
            item = rendered[missing[0]]
            raise AssertionError((side.label, item.config, item.text, journal.stdout[-2000:]))
        for item, dump in zip(rendered, dumps, strict=True):
            record = read_dump(dump)
            assert record["argv"] == list(item.invocation.argv[2:]), (side.label, item.config)
            assert record["env"] == expected_env(item.invocation), (side.label, item.config)
            dump.unlink()


async def _wait_files(paths: list[Path], timeout: float = 15.0) -> list[int]:
    """The simulator's start returns at fork (it models Type=simple only): wait for the dumps;
    returns the indexes still missing at the deadline."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(path.exists() for path in paths):
            break
        await asyncio.sleep(0.05)
    return [index for index, path in enumerate(paths) if not path.exists()]


def _first_difference(real: bytes, sim: bytes) -> tuple[bytes, bytes]:
    for real_line, sim_line in zip(real.splitlines(), sim.splitlines(), strict=False):
        if real_line != sim_line:
            return real_line, sim_line
    return real[-200:], sim[-200:]
