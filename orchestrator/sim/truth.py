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
import dataclasses
import io
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from orchestrator.bench.workloads import WorkloadSample
from orchestrator.host.dropin import ExtraFlagConflict
from orchestrator.invocation import ServerRecipe, UnitBase
from orchestrator.plan import expand_configs, normalize_config
from orchestrator.sim import vllm_args
from orchestrator.sim.content import ContentClass, classify_turns
from orchestrator.sim.drafting import AdaptiveDraft, BatchDraft, FixedDraft
from orchestrator.sim.host import sglang_argv, vllm_argv
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
from orchestrator.types import KnobValue, LaunchOverlay

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
    known: dict[tuple[FixedDraft | BatchDraft, int], tuple[CellTruth, ...]] = {}
    entries: list[ConfigTruth] = []
    for config in expand_configs(sweep):
        resolved = server_args_for(sweep, config, chosen)
        draft = resolved if isinstance(resolved, str) else replayable(resolved)
        if isinstance(draft, str) or isinstance(resolved, str):
            entries.append(ConfigTruth(config, (), str(draft)))
            continue
        key = (draft, int(resolved.get("max_running_requests")))
        if key not in known:
            known[key] = _cells(sweep, resolved, chosen, replications, turnaround_s, content)
        entries.append(ConfigTruth(config, known[key]))
    return SweepTruth(tuple(entries))


def replayable(args: ServerArgs) -> FixedDraft | BatchDraft | str:
    """How the truth replays a server: its shape at every step, or a shape by batch size; an
    adaptive slot with several candidates (its steps move with what it accepts) is not
    replayed, and says so."""
    draft = args.drafting
    if isinstance(draft, AdaptiveDraft):
        if not all(slot.pinned for slot in draft.slots):
            return (
                "unmodelled: the truth replays adaptive slots pinned to one candidate step "
                "each; a slot with several moves with the acceptance it sees"
            )
        return draft.pinned()
    return draft


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
    draft = replayable(resolved)
    if isinstance(draft, str):
        return ConfigTruth(normal, (), draft)
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
    draft = replayable(resolved)
    if isinstance(draft, str):
        raise ValueError(draft)
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
                draft=draft if isinstance(draft, BatchDraft) else None,
            ),
            time_scale=settings.time_scale,
            replications=replications,
        )
        for context, concurrency in itertools.product(bench.contexts, bench.concurrency)
    )


@dataclass(frozen=True)
class LoadTruth:
    """A schedule's truth in one cell beside the best fixed config's there (the config of
    the sweep's space with the highest ``output_tok_s`` in that cell; None when none
    starts)."""

    schedule: CellTruth
    best_config: dict[str, KnobValue] | None
    best: CellTruth | None

    @property
    def ratio(self) -> float | None:
        """The schedule's ``output_tok_s`` over the best fixed config's."""
        if self.best is None or self.best.output_tok_s <= 0:
            return None
        return self.schedule.output_tok_s / self.best.output_tok_s

    def to_json(self) -> dict[str, Any]:
        best = None
        if self.best is not None:
            best = {"config": self.best_config, **self.best.to_json()}
        return {**self.schedule.to_json(), "best_fixed": best, "ratio": self.ratio}


@dataclass(frozen=True)
class ScheduleTruth:
    """A speculative schedule's truth per cell (per load), each beside the best fixed
    config's, or why the server would not run it (no cells)."""

    config: dict[str, KnobValue]
    overlay: LaunchOverlay
    loads: tuple[LoadTruth, ...]
    error: str | None = None

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "config": dict(self.config),
            "overlay": self.overlay.to_json(),
            "cells": [load.to_json() for load in self.loads],
        }
        if self.error is not None:
            out["error"] = self.error
        return out


class ScheduleFileError(ValueError):
    """A schedule that is not an answer's ``schedule.native`` object."""


def read_schedule(data: Any) -> tuple[dict[str, KnobValue], LaunchOverlay]:
    """The fixed config and the overlay of a schedule in the engine's form: an answer's
    ``schedule.native`` object (``{"config": {...}, "overlay": {"json", "flags", "files",
    "refused_line"}}``), the ``schedule`` object holding it under ``native``, or the flat
    ``{"config", "json", "flags", "files"}``."""
    if isinstance(data, Mapping) and isinstance(data.get("native"), Mapping):
        data = data["native"]
    if not isinstance(data, Mapping) or not isinstance(data.get("config"), Mapping):
        raise ScheduleFileError("a schedule is a JSON object with a \"config\" object")
    overlay = data.get("overlay", data)
    if not isinstance(overlay, Mapping):
        raise ScheduleFileError("\"overlay\" is not an object")
    for key in ("json", "flags", "files"):
        if overlay.get(key) is not None and not isinstance(overlay[key], Mapping):
            raise ScheduleFileError(f"\"{key}\" is not an object")
    config = normalize_config(dict(data["config"]))
    return config, LaunchOverlay.from_json(overlay)


def schedule_truth(
    sweep: Sweep,
    config: Mapping[str, KnobValue],
    overlay: LaunchOverlay,
    fixed: SweepTruth,
    settings: ServerSimSettings,
    *,
    replications: int = DEFAULT_REPLICATIONS,
    turnaround_s: float = 0.0,
    content: ContentClass | Sequence[ContentClass] = ContentClass.PLAIN,
) -> ScheduleTruth:
    """``config`` launched with ``overlay`` (a schedule in the engine's form) in every cell
    of ``sweep``'s matrix, each cell beside the best config of ``fixed`` (the sweep's truth,
    on the same ``settings``) there. The replays meet the same requests as the fixed
    configs' (:func:`~orchestrator.sim.replay.replay_point`), so a schedule that runs a
    fixed config's shape at a load measures what that config does there, up to the batches
    of its ragged tail."""
    normal = normalize_config(config)
    resolved = server_args_for(sweep, normal, settings, overlay)
    draft = resolved if isinstance(resolved, str) else replayable(resolved)
    if isinstance(draft, str) or isinstance(resolved, str):
        return ScheduleTruth(normal, overlay, (), str(draft))
    refusal = next((warning for warning in resolved.warnings
                    if overlay.refused_line and warning.startswith(overlay.refused_line)), None)
    if refusal is not None:  # the engine runs its static params: not the schedule
        return ScheduleTruth(normal, overlay, (), f"invalid-config: {refusal}")
    cells = _cells(sweep, resolved, settings, replications, turnaround_s, content)
    loads = []
    for cell in cells:
        best_config, best = _best_fixed(fixed, cell.context, cell.concurrency)
        loads.append(LoadTruth(cell, best_config, best))
    return ScheduleTruth(normal, overlay, tuple(loads))


def _best_fixed(
    fixed: SweepTruth, context: int, concurrency: int
) -> tuple[dict[str, KnobValue] | None, CellTruth | None]:
    ranked = [(entry.cell(context, concurrency), entry.config)
              for entry in fixed.configs if entry.error is None]  # fmt: skip
    if not ranked:
        return None, None
    cell, config = max(ranked, key=lambda pair: pair[0].output_tok_s)
    return dict(config), cell


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
    sweep: Sweep, config: Mapping[str, KnobValue], overlay: LaunchOverlay | None = None
) -> tuple[list[str], dict[str, str], dict[str, str]]:
    """The server's flags, the unit's environment and the launch files (content by host path)
    for ``config`` with ``overlay`` (a schedule in the engine's form), built as a trial's are
    (:class:`orchestrator.invocation.ServerRecipe`, the first host's knob spellings; hosts of
    one sweep serve the same server). The base command line is ``server.exec_start``, else
    the simulated host's unit for the sweep's engine; the flags are what follows the program
    (from ``serve`` for vLLM, else from the first ``--`` token)."""
    units = {"sglang": sglang_argv, "vllm": vllm_argv}
    base = list(sweep.server.exec_start or units.get(sweep.engine, sglang_argv)(_TRUTH_ADDRESS))
    recipe = ServerRecipe.of(sweep, sweep.hosts[0])
    invocation = recipe.invocation(config, UnitBase(tuple(base)), overlay=overlay)
    argv = list(invocation.argv)
    start = next((i for i, token in enumerate(argv) if token.startswith("--")), len(argv))
    if sweep.engine == "vllm" and "serve" in argv[:start]:
        start = argv.index("serve")
    files = {f.path: f.content.decode("utf-8") for f in invocation.launch_files}
    return argv[start:], dict(invocation.environment), files


def server_args_for(
    sweep: Sweep,
    config: Mapping[str, KnobValue],
    settings: ServerSimSettings,
    overlay: LaunchOverlay | None = None,
) -> ServerArgs | str:
    """What the simulated server of the sweep's engine resolves ``config`` (with
    ``overlay``) to, or the reason it would not start."""
    if sweep.engine not in ("sglang", "vllm"):
        return f"unmodelled: the simulator speaks SGLang and vLLM, not {sweep.engine}"
    try:
        argv, environ, files = server_invocation(sweep, config, overlay)
    except ExtraFlagConflict as exc:
        return f"config-mismatch: {exc}"
    args = (_vllm_args if sweep.engine == "vllm" else _sglang_args)(argv, environ, files, settings)
    if isinstance(args, str):
        return args
    crash = settings.faults.crash_at_start.active(argv)
    if crash is not None:
        return f"{crash}: the settings' crash_at_start fault fires for this config"
    return args


def _sglang_args(
    argv: list[str], environ: dict[str, str], files: dict[str, str], settings: ServerSimSettings
) -> ServerArgs | str:
    """The simulated SGLang's parse and resolution, its launch files read from ``files``."""
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

    def read(path: str) -> str:
        if path not in files:
            raise FileNotFoundError(2, "No such file or directory", path)
        return files[path]

    try:
        return resolve(
            ns, argv, version=settings.sglang_version, ddtree=settings.ddtree, environ=environ,
            read_file=read,
        )  # fmt: skip
    except (ValueError, AssertionError, AttributeError, OSError) as exc:
        return f"invalid-config: {type(exc).__name__}: {exc}".rstrip(": ")


def _vllm_args(
    argv: list[str], environ: dict[str, str], files: dict[str, str], settings: ServerSimSettings
) -> ServerArgs | str:
    """The simulated ``vllm serve``'s parse, resolution, startup check and engine-core
    lookup: the server it starts, or why it does not."""
    try:
        ns = vllm_args.parse(argv)
    except vllm_args.ArgparseExit as exc:
        return f"bad-flag: {exc.message}"
    try:
        args = vllm_args.resolve(ns, environ)
        vllm_args.check_engine_config(args)
        return dataclasses.replace(args, draft=vllm_args.engine_draft(args))
    except ValueError as exc:
        return f"invalid-config: ValueError: {exc}"


__all__ = [
    "CellModel",
    "CellTruth",
    "ConfigTruth",
    "LoadTruth",
    "Replay",
    "ScheduleFileError",
    "ScheduleTruth",
    "StepSampler",
    "SweepTruth",
    "cell_truth",
    "config_truth",
    "read_schedule",
    "replay_point",
    "replayable",
    "sample_content",
    "schedule_truth",
    "server_args_for",
    "server_invocation",
    "sweep_truth",
]
