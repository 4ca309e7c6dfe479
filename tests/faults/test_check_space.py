"""The preflight parses every config of the sweep's space, in one process on the host.

A search (``random``/``adaptive``) may propose any config of the space, while the plan's own
trials are only the grid's order cut to ``search.max_restarts``. Issue 22 saw ``check`` parse 6
of 16 configs: a config proposed later met its bad flag at startup, a lost restart. Here the
simulated host's SGLang (its parser, answered over real SSH) is asked about the whole space,
and a refused config the search reaches later fails with the preflight as its finder, without
a restart.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator.engines.sglang.argv import PARSE_SCRIPT
from orchestrator.host.connect import open_host
from orchestrator.host.handle import HostHandle
from orchestrator.host.transport import CompletedCommand, Transport
from orchestrator.plan import plan_sweep, trial_key
from orchestrator.runner import run_sweep
from orchestrator.search.budget import RESTART_EVENT
from orchestrator.search.source import trial_source_for
from orchestrator.sim.host import UNIT_NAME
from orchestrator.store import Store
from orchestrator.sweepfile import HostSpec, parse_sweep
from orchestrator.verbs import check
from tests.faults.harness import (
    HEALTHY,
    OTHER,
    SweepRun,
    assert_restored,
    fault_host,
    sweep_yaml,
)

ADDRESS = "127.0.0.251"
RUN_ADDRESS = "127.0.0.252"
UNKNOWN_ALGORITHM = {"algorithm": "FOO", "draft_tokens": 5}
"""The simulated build's resolution refuses it: ``ValueError: Unknown speculative algorithm
name: FOO``."""


class _CountingTransport:
    """The host's real transport, recording the argv of every command it runs."""

    def __init__(self, inner: Transport) -> None:
        self.inner = inner
        self.commands: list[tuple[str, ...]] = []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    async def run(self, argv: Any, **options: Any) -> CompletedCommand:
        self.commands.append(tuple(argv))
        return await self.inner.run(argv, **options)


def _search(text: str, **search: Any) -> str:
    document = yaml.safe_load(text)
    document["search"] = {"strategy": "adaptive", "seed": 1, **search}
    return yaml.safe_dump(document, sort_keys=False)


async def test_check_parses_every_config_of_the_space_in_one_process(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An adaptive sweep of 7 configs (2 listed, a grid of 6, one shared), capped at 2
    restarts: the plan's table holds 2 trials, yet every config is parsed, by one run of the
    host's interpreter, and the 3 the build refuses are named."""
    async with fault_host(tmp_path, ADDRESS) as host:
        text = _search(
            sweep_yaml(host, "check-space", [HEALTHY, OTHER]), max_restarts=2, confirmations=0
        )
        document = yaml.safe_load(text)
        document["grid"] = {"algorithm": ["NGRAM", "FOO"], "draft_tokens": [3, 4, 5]}
        sweep = parse_sweep(yaml.safe_dump(document, sort_keys=False), "check-space.yaml")
        assert len(plan_sweep(sweep)) == 2
        counting: list[_CountingTransport] = []

        def opened(spec: HostSpec, *, connect_timeout: float) -> HostHandle:
            handle = open_host(spec, connect_timeout=connect_timeout)
            transport = _CountingTransport(handle.transport)
            counting.append(transport)
            return HostHandle(transport, handle.control, handle.gpu)  # type: ignore[arg-type]

        monkeypatch.setattr(check, "open_host", opened)
        (found,) = await check.check_sweep_hosts(sweep)

        assert found.ok and found.parser == "sglang"
        refused = {
            trial_key(host.name, UNIT_NAME, {"algorithm": "FOO", "draft_tokens": n}): n
            for n in (3, 4, 5)
        }
        assert set(found.rejected) == set(refused)
        assert {v.error for v in found.rejected.values()} == {
            "ValueError: Unknown speculative algorithm name: FOO"
        }
        assert not found.clean
        (parser_check,) = [c for c in found.checks if c.name == "sglang_parser"]
        assert "parsed 7 configs' argv" in parser_check.detail
        (transport,) = counting
        parses = [argv for argv in transport.commands if PARSE_SCRIPT in argv]
        assert len(parses) == 1, "one process on the host for the whole space"
        assert sum(argv.startswith("[") for argv in parses[0] if isinstance(argv, str)) == 7


async def test_a_refused_config_the_search_reaches_late_costs_no_restart(
    tmp_path: Path,
) -> None:
    """The plan's first two trials (the cap) are two spellings of one server; the search runs
    that server once, then reaches the refused config: the preflight, which parsed the whole
    space, fails it before any restart, so the sweep spends one restart, not two."""
    same_server = {"algorithm": "ngram", "draft_tokens": 5}  # HEALTHY, as SGLang reads it
    async with fault_host(tmp_path, RUN_ADDRESS) as host:
        text = _search(
            sweep_yaml(host, "search-refused", [HEALTHY, same_server, UNKNOWN_ALGORITHM]),
            max_restarts=2,
            confirmations=0,
            race=0,
        )
        sweep = parse_sweep(text, "search-refused.yaml")
        assert [t.config for t in plan_sweep(sweep)] == [HEALTHY, same_server]
        async with await Store.open(tmp_path / "orchestrator.db") as store:
            outcome = await run_sweep(sweep, text, store, trials=trial_source_for(sweep))
            events = await store.events(outcome.sweep_id)
        done = SweepRun(outcome, events, 0.0)

        refused = done.trial(UNKNOWN_ALGORITHM)
        assert (refused["state"], refused["cause"]) == ("failed", "invalid-config")
        assert refused["evidence"]["found_by"] == "preflight"
        assert done.trial(HEALTHY)["state"] == "done"
        assert len(done.of_kind(RESTART_EVENT)) == 1
        assert len(done.of_kind("dropin.installed")) == 1
        await assert_restored(host)
