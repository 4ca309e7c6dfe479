"""The simulator's truth for a sweep: what each config is expected to measure in each cell.

A search is scored against the answer it should have found, so the simulator states it: for
every config of a sweep's space and every matrix cell, the expected ``output_tok_s`` and
``accept_len`` *as the sweep measures them*, without the noise a single measurement carries
(speed factor 1, i.e. no restart jitter; request sampling averaged out).

"As the sweep measures them" matters: a point is a closed loop of ``rounds x concurrency``
requests of ``max_tokens`` tokens each, started together after an idle server, and its
``output_tok_s`` is all output tokens over the wall time from the first send to the last end
(:mod:`orchestrator.bench.closedloop`); ramp-up, the ragged tail, prefills that stall decoding and
a finished request's slot that waits out one scheduler iteration all count (the client's own
turnaround is a parameter, 0 by default: an ideal client). So the truth is
not a steady-state formula: it replays the simulated server's scheduler
(:mod:`orchestrator.sim.server_engine`: one prefill batch of everything waiting, else one
decode step of everything running, a step lasting what :mod:`orchestrator.sim.perfmodel`
says for the batch) against that closed-loop client (:mod:`orchestrator.sim.replay`), and
averages many replays. The replays
draw each request-step's accepted tokens from the same law the server draws from; the seeds
depend on the cell only, so configs are compared on common random numbers.

A config reaches the server as the sweep's knob mappings make it: flags and environment are
rendered by the orchestrator's own drop-in renderer onto the unit's base command line
(``server.exec_start``, or the simulated host's default unit), then parsed and resolved by the
simulated server's own parser (:mod:`orchestrator.sim.server_args`). A config the server would
refuse to start (unknown flag, SGLang's invalid-config rules, a ``crash_at_start`` fault aimed
at it) has no cells and says why.

This module is a scoring tool: the ``orchestrator sim truth`` verb and benchmarks use it; the
orchestrator's control path never imports it.
"""

from __future__ import annotations

import argparse
import contextlib
import io
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.bench.workloads import WorkloadSample
from orchestrator.host.dropin import ExtraFlagConflict, apply_knobs
from orchestrator.plan import expand_configs, normalize_config
from orchestrator.sim.content import ContentClass, classify_turns
from orchestrator.sim.host import sglang_argv
from orchestrator.sim.perfmodel import SpecShape
from orchestrator.sim.replay import (
    CellModel,
    CellTruth,
    Replay,
    StepSampler,
    cell_truth,
    replay_point,
)
from orchestrator.sim.server_args import ServerArgs, build_parser, resolve
from orchestrator.sim.settings import ServerSimSettings
from orchestrator.sweepfile.schema import Sweep
from orchestrator.types import KnobValue

DEFAULT_REPLICATIONS = 24
"""Replays averaged per cell: the truth's own Monte-Carlo error is the spread of one
measurement over the square root of this (about a fifth of it)."""

_TRUTH_ADDRESS = "127.0.0.1"
"""The simulated unit's base command line names its host's address; it changes nothing the
model measures."""


@dataclass(frozen=True)
class ConfigTruth:
    """Every cell of one config, or why the server would not start with it (no cells)."""

    config: dict[str, KnobValue]
    cells: tuple[CellTruth, ...]
    error: str | None = None

    def cell(self, context: int, concurrency: int) -> CellTruth:
        for cell in self.cells:
            if cell.context == context and cell.concurrency == concurrency:
                return cell
        raise KeyError((context, concurrency))

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "config": dict(self.config),
            "cells": [cell.to_json() for cell in self.cells],
        }
        if self.error is not None:
            out["error"] = self.error
        return out


@dataclass(frozen=True)
class SweepTruth:
    """The truth of every config of a sweep's space, in the space's order."""

    configs: tuple[ConfigTruth, ...]

    def of(self, config: Mapping[str, KnobValue]) -> ConfigTruth:
        """The entry of ``config`` (compared in normalized form, as the plan compares)."""
        wanted = normalize_config(config)
        for entry in self.configs:
            if entry.config == wanted:
                return entry
        raise KeyError(dict(config))

    def to_json(self) -> dict[str, Any]:
        return {"configs": [entry.to_json() for entry in self.configs]}


def sweep_truth(
    sweep: Sweep,
    settings: ServerSimSettings | None = None,
    *,
    replications: int = DEFAULT_REPLICATIONS,
    turnaround_s: float = 0.0,
    content: ContentClass | Sequence[ContentClass] = ContentClass.PLAIN,
) -> SweepTruth:
    """The truth of every config of ``sweep``'s space (the plan's expansion: baseline when
    asked, ``configs``, then ``grid``, duplicates removed) on a server with ``settings``.

    ``turnaround_s`` is the client's time, in wall seconds, from a request's end to its
    worker's next request reaching the server: 0 is an ideal client (the default, and what
    a search is scored against); a loopback client takes a few ms, which counts when the
    time scale makes steps short. ``content`` is the class of the prompts the sweep sends
    (plain: the synthetic filler prompts), or the classes of its requests in the order they
    are sent, cycled: a workload's are what the server makes of its prompts
    (:func:`orchestrator.sim.content.classify_turns`, :func:`sample_content`).

    Configs the server resolves to the same model (e.g. a top-k that DFLASH overrides) share
    one computation, as they share one behaviour."""
    chosen = settings or ServerSimSettings()
    known: dict[tuple[SpecShape, int], tuple[CellTruth, ...]] = {}
    entries: list[ConfigTruth] = []
    for config in expand_configs(sweep):
        resolved = server_args_for(sweep, config, chosen)
        if isinstance(resolved, str):
            entries.append(ConfigTruth(config, (), resolved))
            continue
        key = (resolved.shape, int(resolved.get("max_running_requests")))
        if key not in known:
            known[key] = _cells(sweep, resolved, chosen, replications, turnaround_s, content)
        entries.append(ConfigTruth(config, known[key]))
    return SweepTruth(tuple(entries))


def config_truth(
    sweep: Sweep,
    config: Mapping[str, KnobValue],
    settings: ServerSimSettings,
    *,
    replications: int = DEFAULT_REPLICATIONS,
    turnaround_s: float = 0.0,
    content: ContentClass | Sequence[ContentClass] = ContentClass.PLAIN,
) -> ConfigTruth:
    """One config's truth in every cell of ``sweep``'s matrix (see :func:`sweep_truth`)."""
    normal = normalize_config(config)
    resolved = server_args_for(sweep, normal, settings)
    if isinstance(resolved, str):
        return ConfigTruth(normal, (), resolved)
    return ConfigTruth(
        normal, _cells(sweep, resolved, settings, replications, turnaround_s, content)
    )


def _cells(
    sweep: Sweep,
    resolved: ServerArgs,
    settings: ServerSimSettings,
    replications: int,
    turnaround_s: float,
    content: ContentClass | Sequence[ContentClass],
) -> tuple[CellTruth, ...]:
    bench = sweep.benchmark
    classes = (content,) if isinstance(content, ContentClass) else tuple(content)
    if not classes:
        raise ValueError("content: at least one class")
    return tuple(
        cell_truth(
            CellModel(
                shape=resolved.shape,
                perf=settings.perf,
                context=context,
                concurrency=concurrency,
                rounds=bench.rounds,
                max_tokens=bench.max_tokens,
                ignore_eos=bench.ignore_eos,
                max_running=int(resolved.get("max_running_requests")),
                turnaround_ms=1000.0 * turnaround_s / settings.time_scale,
                content=classes,
            ),
            time_scale=settings.time_scale,
            replications=replications,
        )
        for context, concurrency in itertools.product(bench.contexts, bench.concurrency)
    )


def sample_content(sample: WorkloadSample) -> tuple[ContentClass, ...]:
    """The content class the server gives each request of a workload sample, in line order:
    what :func:`sweep_truth` takes as ``content`` for a sweep that sends the sample's prompts.

    Exact for the prompts as the sample has them; a prompt padded or trimmed to a context
    length keeps its class when the sample's lines share one (the padding comes from other
    lines), so a sample of one class has an exact truth at every context."""
    return tuple(
        classify_turns(message.content for message in request.messages)
        for request in sample.requests
    )


def server_invocation(
    sweep: Sweep, config: Mapping[str, KnobValue]
) -> tuple[list[str], dict[str, str]]:
    """The server's flags and the unit's environment for ``config``, rendered as a trial's
    drop-in renders them (the first host's knob spellings; hosts of one sweep serve the same
    server). The base command line is ``server.exec_start``, else the simulated host's unit;
    the flags are what follows the program (from the first ``--`` token)."""
    host = sweep.hosts[0]
    knob_map = host.effective_knobs(sweep.server.knobs)
    base = list(sweep.server.exec_start or sglang_argv(_TRUTH_ADDRESS))
    invocation = apply_knobs(
        base, {}, knob_map, config, sweep.server.extra_flags, sweep.server.environment
    )
    argv = list(invocation.argv)
    first_flag = next((i for i, token in enumerate(argv) if token.startswith("--")), len(argv))
    return argv[first_flag:], dict(invocation.environment)


def server_args_for(
    sweep: Sweep, config: Mapping[str, KnobValue], settings: ServerSimSettings
) -> ServerArgs | str:
    """What the simulated server resolves ``config`` to, or the reason it would not start."""
    try:
        argv, environ = server_invocation(sweep, config)
    except ExtraFlagConflict as exc:
        return f"config-mismatch: {exc}"
    parser = build_parser(settings.sglang_version, settings.ddtree)
    parser.exit_on_error = False
    refused = io.StringIO()
    try:
        with contextlib.redirect_stderr(refused):
            ns, unknown = parser.parse_known_args(argv)
    except (argparse.ArgumentError, SystemExit) as exc:
        detail = refused.getvalue().strip().splitlines()
        return f"bad-flag: {detail[-1] if detail else exc}"
    if unknown:
        return f"bad-flag: unrecognized arguments: {' '.join(unknown)}"
    try:
        args = resolve(
            ns, argv, version=settings.sglang_version, ddtree=settings.ddtree, environ=environ
        )
    except (ValueError, AssertionError) as exc:
        return f"invalid-config: {type(exc).__name__}: {exc}".rstrip(": ")
    crash = settings.faults.crash_at_start.active(argv)
    if crash is not None:
        return f"{crash}: the settings' crash_at_start fault fires for this config"
    return args


__all__ = [
    "CellModel",
    "CellTruth",
    "ConfigTruth",
    "Replay",
    "StepSampler",
    "SweepTruth",
    "cell_truth",
    "config_truth",
    "replay_point",
    "sample_content",
    "server_args_for",
    "server_invocation",
    "sweep_truth",
]
