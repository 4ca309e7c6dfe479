"""An engine that launches from a file (issue 33, item 4): the toy engine's speculative
settings come from ``--toy-spec-config PATH``, a JSON file the orchestrator writes beside the
trial's drop-in (:mod:`orchestrator.host.launchfile`).

A sweep on a simulated host runs end to end with the file written (the new process's own
``/toy/config`` reports the settings and the path it read them from: no depth or kernel flag
is on its command line), backed up in the store as found, and restored: the file gone when the
operator had none, or the operator's own file back byte for byte. ``plan`` shows the file the
lifecycle writes. The fence: a holder whose lease was taken over cannot write or remove one.
A config whose file the toy server would refuse is refused by the preflight, before any
restart, with the flag and the file named.

Runs on the fault harness (addresses 127.0.0.219, 220 and 246 are this file's).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.host import launchdir
from orchestrator.host.dropin import DROPIN_NAME
from orchestrator.host.fence import FencedTransport
from orchestrator.host.launchfile import LaunchFile, launch_file_path
from orchestrator.host.lease import Holder, LeaseLost, LeasePlace, try_take
from orchestrator.host.local import LocalTransport
from orchestrator.plan import plan_json, plan_sweep
from orchestrator.sim.host import UNIT_NAME
from orchestrator.store import Store
from orchestrator.sweepfile import parse_sweep
from tests.faults.harness import STATE_PROPS, FaultHost, fault_host, sweep_yaml
from tests.faults.harness import run as run_sweep_text
from tests.faults.test_toy_engine_sweep import MODEL, toy, toy_unit
from tests.toyengine.engine import SPEC_FLAG, ToyEngine

__all__ = ["toy"]  # the fixture, registering the toy engine for each test

ADDRESS = "127.0.0.219"
PRIOR_ADDRESS = "127.0.0.220"
REFUSED_ADDRESS = "127.0.0.246"
FUSED: dict[str, Any] = {"depth": 2, "kernel": "fused"}
KNOBS = {
    "depth": {"flag": SPEC_FLAG, "json_key": "draft_depth", "server_info_key": "draft_depth"},
    "kernel": {"flag": SPEC_FLAG, "json_key": "kernel", "server_info_key": "kernel"},
}
"""Both knobs are keys of the file ``--toy-spec-config`` names; readiness checks each where
``/toy/config`` reports it."""
DROPIN_DIR = f"/etc/systemd/system/{UNIT_NAME}.d"
LAUNCH_PATH = launch_file_path(f"{DROPIN_DIR}/{DROPIN_NAME}", SPEC_FLAG, "json")
FUSED_BYTES = b'{\n  "draft_depth": 2,\n  "kernel": "fused"\n}\n'
OPERATORS_FILE = b'{"draft_depth": 1}  \n# the operator\'s own, not valid JSON past here\n'


DEEP: dict[str, Any] = {"depth": 12}
"""A depth the toy server refuses when it reads its file (at most 8): its argv is fine."""


def launch_sweep(host: FaultHost, configs: list[dict[str, Any]] | None = None) -> str:
    """A baseline and the fused config, both on the toy engine's file knobs."""
    document = yaml.safe_load(
        sweep_yaml(
            host,
            "launch-files",
            configs or [FUSED],
            baseline=True,
            benchmark={"concurrency": [1], "max_tokens": 16, "rounds": 2},
        )
    )
    document["engine"] = "toy"
    document["server"] = {"unit": UNIT_NAME, "model": MODEL, "knobs": KNOBS}
    return yaml.safe_dump(document, sort_keys=False)


async def _run(
    tmp_path: Path, host: FaultHost, configs: list[dict[str, Any]] | None = None
) -> tuple[Any, dict[str, bytes | None]]:
    """Run the sweep; its result and the unit's backup as the store keeps it."""
    text = launch_sweep(host, configs)
    result = await run_sweep_text(tmp_path, text, sweep=parse_sweep(text, "launch.yaml"))
    async with await Store.open(tmp_path / "orchestrator.db") as store:
        backup = await store.get_unit_backup(result.outcome.sweep_id, host.name, UNIT_NAME)
    assert backup is not None
    return result, backup.files


def _check_trials(result: Any) -> None:
    """Every trial done; the fused one's server read its settings from the launch file."""
    assert result.outcome.state == "done", result.results
    fused = result.trial(FUSED)
    baseline = result.trial({})
    for trial in (fused, baseline):
        assert trial["state"] == "done" and trial["cause"] is None, trial
    running = fused["evidence"]["provenance"]["server_args"]  # /toy/config at readiness
    assert running["spec_config"] == LAUNCH_PATH, running
    assert (running["draft_depth"], running["kernel"]) == (2, "fused"), running
    argv = fused["evidence"]["provenance"]["exec_start"]
    assert argv[argv.index(SPEC_FLAG) + 1] == LAUNCH_PATH, argv
    assert "--toy-draft-depth" not in argv and "--toy-kernel" not in argv, argv
    assert fused["evidence"]["provenance"]["launch_files"] == [
        {"path": LAUNCH_PATH, "mode": "0644", "content": FUSED_BYTES.decode()}
    ]  # what ran, as stored with the trial
    plain = baseline["evidence"]["provenance"]
    assert plain["server_args"]["spec_config"] is None and SPEC_FLAG not in plain["exec_start"]
    assert plain["launch_files"] == []


async def test_a_file_launched_sweep_writes_backs_up_and_removes_its_file(
    tmp_path: Path, toy: ToyEngine
) -> None:
    async with fault_host(tmp_path, ADDRESS, unit=toy_unit(ADDRESS)) as host:
        launch = host.root / LAUNCH_PATH.lstrip("/")
        assert not launch.parent.exists()  # the unit as found has no drop-in directory
        result, backup = await _run(tmp_path, host)
        assert host.unit_files() == host.unit_files_before
        assert await host.show(*STATE_PROPS) == host.state_before
        assert not launch.exists() and not launch.parent.exists()  # made for the sweep, gone
    _check_trials(result)
    assert LAUNCH_PATH not in backup  # nothing of the kind was found: a restore removes it
    installed = [e for e in result.events if e.kind == "dropin.installed"]
    assert len(installed) == 2, installed


async def test_the_operators_own_file_in_its_place_comes_back_byte_for_byte(
    tmp_path: Path, toy: ToyEngine
) -> None:
    async with fault_host(tmp_path, PRIOR_ADDRESS, unit=toy_unit(PRIOR_ADDRESS)) as host:
        launch = host.root / LAUNCH_PATH.lstrip("/")
        launch.parent.mkdir(parents=True)
        launch.write_bytes(OPERATORS_FILE)
        before = host.unit_files()
        result, backup = await _run(tmp_path, host)
        assert host.unit_files() == before  # the operator's file among them, as it was
        assert launch.read_bytes() == OPERATORS_FILE
        assert await host.show(*STATE_PROPS) == host.state_before
    _check_trials(result)
    assert backup[LAUNCH_PATH] == OPERATORS_FILE


async def test_a_file_the_engine_would_refuse_is_refused_before_any_restart(
    tmp_path: Path, toy: ToyEngine
) -> None:
    """The toy's parser takes the argv (it names a path); the file's settings are what its
    start would refuse. The preflight reads the file as the engine would: the config fails as
    ``invalid-config`` with the flag and the file in the evidence, and nothing restarts for it
    (before: a restart, then the server's own TOYFAIL at its start)."""
    async with fault_host(tmp_path, REFUSED_ADDRESS, unit=toy_unit(REFUSED_ADDRESS)) as host:
        result, _ = await _run(tmp_path, host, [FUSED, DEEP])
        assert host.unit_files() == host.unit_files_before
        assert await host.show(*STATE_PROPS) == host.state_before
    _check_trials(result)
    deep = result.trial(DEEP)
    assert (deep["state"], deep["cause"]) == ("failed", "invalid-config"), deep
    evidence = deep["evidence"]
    assert evidence["found_by"] == "preflight" and evidence["parser"] == "toy", evidence
    assert evidence["error"] == (
        f"launch file {LAUNCH_PATH} ({SPEC_FLAG}): draft_depth 12 is not a whole number in 0..8"
    )
    assert len(result.of_kind("dropin.installed")) == 2  # the baseline and the fused config
    assert toy.calls["check_launch_file"] == 2  # each config's file, once


def test_plan_shows_the_file_the_lifecycle_writes(toy: ToyEngine) -> None:
    """The plan (no host reached) shows each trial's launch file: the path and bytes the
    lifecycle writes, from the same invocation builder."""
    document = {
        "name": "launch-plan",
        "engine": "toy",
        "hosts": [{"name": "gpu-a", "address": "10.0.0.1", "base_url": "http://10.0.0.1:1"}],
        "server": {"unit": UNIT_NAME, "model": MODEL, "knobs": KNOBS},
        "configs": [FUSED],
    }
    sweep = parse_sweep(yaml.safe_dump(document, sort_keys=False), "launch-plan.yaml")
    trials = plan_json(plan_sweep(sweep), sweep)["trials"]
    (fused,) = [t for t in trials if t["config"] == FUSED]
    assert fused["launch_files"] == [
        {"path": LAUNCH_PATH, "mode": "0644", "content": FUSED_BYTES.decode()}
    ]
    assert f"{SPEC_FLAG} {LAUNCH_PATH}" in fused["dropin"].replace('"', "")
    assert (
        f"# launch file, written with this drop-in and removed with it: {LAUNCH_PATH}"
        in (fused["dropin"])
    )
    assert all(t["launch_files"] == [] for t in trials if t["config"] != FUSED)


def _holder(sweep: str, controller: str) -> Holder:
    here = Holder.here(store="/tmp/x.db", kind="run", sweep=sweep, sweep_id=len(sweep))
    return Holder(controller, 1, None, here.store, "run", sweep, here.sweep_id)


class _Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_holder_taken_over_cannot_write_or_remove_a_launch_file(tmp_path: Path) -> None:
    """The launch files go through the same fenced transport as the drop-in: once another
    controller took the lease over, the stalled holder's write and removal are refused and the
    host keeps what the new holder put there."""
    transport = LocalTransport("gpu-a")
    place = LeasePlace(transport, directory=str(tmp_path / "lease"), timeout=5)
    wall = _Clock()
    stalled = (await try_take(place, _holder("old", "ctl-old"), expiry_s=10, wall=wall)).lease
    wall.now += 11
    new = (await try_take(place, _holder("new", "ctl-new"), expiry_s=10, wall=wall)).lease
    assert stalled is not None and new is not None
    dropin = str(tmp_path / "toy.service.d" / DROPIN_NAME)
    (tmp_path / "toy.service.d").mkdir()
    mine = LaunchFile(launch_file_path(dropin, SPEC_FLAG, "json"), FUSED_BYTES)
    theirs = LaunchFile(mine.path, b'{"draft_depth": 4}\n')

    with pytest.raises(LeaseLost):
        await launchdir.put_launch_files(
            FencedTransport(transport, stalled), dropin, [theirs], timeout=5
        )
    assert not Path(mine.path).exists()
    await launchdir.put_launch_files(FencedTransport(transport, new), dropin, [mine], timeout=5)
    with pytest.raises(LeaseLost):  # nor may it remove the new holder's file
        await launchdir.put_launch_files(FencedTransport(transport, stalled), dropin, [], timeout=5)
    assert Path(mine.path).read_bytes() == FUSED_BYTES
    assert stalled.fenced and all(c.startswith(("write", "remove")) for c in stalled.fenced)
