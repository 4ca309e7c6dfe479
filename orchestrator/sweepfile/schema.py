"""The sweep file's schema: pydantic models (strict, closed), one per section of the file.

Checks that involve one field live in :mod:`fields`; checks across fields and sections (a knob
used but not declared, two hosts on one machine) live in :mod:`rules`, which runs on these
models.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from orchestrator.bench.workloads import BUILTIN_WORKLOADS
from orchestrator.engines import DEFAULT_ENGINE
from orchestrator.engines import get as get_engine
from orchestrator.engines import names as engine_names
from orchestrator.sweepfile.fields import (
    Address,
    ArgText,
    BuiltinName,
    ClockTime,
    ConstraintName,
    Duration,
    EnvName,
    EnvValue,
    ExecStart,
    Flag,
    HostName,
    HttpUrl,
    InfoKey,
    Jump,
    KnobName,
    KnobValueField,
    MetricName,
    ProblemName,
    ServiceName,
    SweepName,
    Text,
    UserName,
    parse_bound,
    unique,
    unique_or_none,
)
from orchestrator.sweepfile.workloads import (
    WorkloadContentMissing,
    WorkloadKind,
    WorkloadSpec,
    workload_label,
)
from orchestrator.types import (
    DEFAULT_LEASE_EXPIRY_S,
    SLO_METRICS,
    SYNTHETIC_WORKLOAD,
    ApiKind,
    Arrivals,
    MatrixCell,
    MetricsMode,
    OutputLengths,
    RestorePolicy,
    content_hash,
    metric_is_minimized,
)

DEFAULT_RESTART_S = 300.0
DEFAULT_DECODE_TOKENS_PER_S = 50.0
DEFAULT_PREFILL_TOKENS_PER_S = 5000.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class KnobMapping(_Model):
    """How one sweep knob reaches the server: a flag, a key of a JSON-valued flag, or an
    environment variable."""

    flag: Flag | None = Field(default=None, description="command-line flag, e.g. --x-y")
    json_key: InfoKey | None = Field(
        default=None,
        description="with 'flag': the knob is this key of the flag's JSON object value; the "
        "knobs that share the flag build one object (e.g. vLLM's --speculative-config "
        "with method and num_speculative_tokens); the flag is left out when "
        "every key is absent",
    )
    env: EnvName | None = Field(default=None, description="environment variable of the unit")
    server_info_key: InfoKey | None = Field(
        default=None, description="the /server_info key SGLang resolves this knob to"
    )
    overridden_by_server: bool = Field(
        default=False,
        description="SGLang may replace the value (e.g. DFLASH forces topk 1): a /server_info "
        "mismatch is recorded, not a failure",
    )

    @model_validator(mode="after")
    def _exactly_one_target(self) -> KnobMapping:
        if (self.flag is None) == (self.env is None):
            raise ValueError("give exactly one of 'flag' or 'env'")
        if self.json_key is not None and self.flag is None:
            raise ValueError("'json_key' names a key of a flag's JSON value: give 'flag' too")
        return self


class HostSpec(_Model):
    """One GPU host and how to reach it and its SGLang server."""

    name: HostName
    address: Address
    port: Annotated[int, Field(ge=1, le=65535)] = 22
    user: UserName = "root"
    identity_file: Text | None = None
    known_hosts: Text = "~/.ssh/known_hosts"
    insecure_no_host_check: bool = False
    gpus: Annotated[
        list[Annotated[int, Field(ge=0, le=1023)]] | None,
        Field(min_length=1),
        AfterValidator(unique_or_none),
    ] = None
    base_url: HttpUrl
    type: HostName | None = None
    sudo: bool = False
    jump: Jump | None = None
    knobs: dict[KnobName, KnobMapping] = Field(default_factory=dict)

    @property
    def host_type(self) -> str:
        """The group reports and ``distribute: across-type`` use: ``type``, else the name."""
        return self.type or self.name

    @property
    def is_local(self) -> bool:
        return self.address == "local"

    def effective_knobs(self, sweep_knobs: Mapping[str, KnobMapping]) -> dict[str, KnobMapping]:
        """The sweep's knob map with this host's spellings laid over it (same key order)."""
        merged = dict(sweep_knobs)
        merged.update(self.knobs)
        return merged


class ServerSpec(_Model):
    """The systemd unit the sweep reconfigures, and how knobs reach it."""

    unit: ServiceName | None = Field(
        default=None,
        description="the systemd service the hosts run the engine as (default: the engine's "
        "usual one, sglang.service for SGLang)",
    )
    model: Text
    knobs: dict[KnobName, KnobMapping] = Field(default_factory=dict)
    extra_flags: list[ArgText] = Field(default_factory=list)
    environment: dict[EnvName, EnvValue] = Field(default_factory=dict)
    exec_start: ExecStart | None = None
    metrics: MetricsMode = "auto"
    """``auto``: each trial's drop-in adds ``--enable-metrics`` when the unit lacks it (a second
    accept-length source: the chat API carries no spec stats); ``off``: the unit as it is."""


class WorkloadRef(_Model):
    """One workload of the benchmark: the synthetic prompts, an operator's traffic sample
    (``file``, a JSONL path relative to the sweep file), or a set shipped with the package
    (``builtin``). The sweep file writes the synthetic one as the word ``synthetic``."""

    file: Annotated[str, Field(min_length=1, max_length=4096)] | None = None
    builtin: BuiltinName | None = None

    @model_validator(mode="after")
    def _at_most_one_source(self) -> WorkloadRef:
        if self.file is not None and self.builtin is not None:
            raise ValueError("give one of 'file' or 'builtin', not both")
        return self

    @property
    def kind(self) -> WorkloadKind:
        if self.file is not None:
            return "file"
        return "builtin" if self.builtin is not None else "synthetic"

    @property
    def name(self) -> str:
        """The path as written, the built-in set's name, or ``synthetic``."""
        return self.file or self.builtin or "synthetic"

    @property
    def label(self) -> str:
        """How points name their workload: ``synthetic``, ``file:PATH``, ``builtin:NAME``."""
        return workload_label(self.kind, self.name)


def _workload_ref(value: object) -> object:
    """``synthetic`` is the empty reference; a mapping must name its source."""
    if value == "synthetic":
        return {}
    if isinstance(value, str):
        raise ValueError(
            f"{value!r} is not a workload: 'synthetic', {{file: PATH}} or {{builtin: NAME}}"
        )
    if isinstance(value, dict) and not value:
        raise ValueError("name the workload: {file: PATH} or {builtin: NAME}")
    return value


WorkloadField = Annotated[
    WorkloadRef,
    BeforeValidator(_workload_ref),
    WithJsonSchema(
        {
            "oneOf": [
                {"const": "synthetic"},
                {
                    "type": "object",
                    "properties": {"file": {"type": "string", "minLength": 1}},
                    "required": ["file"],
                    "additionalProperties": False,
                },
                {
                    "type": "object",
                    "properties": {"builtin": {"enum": list(BUILTIN_WORKLOADS)}},
                    "required": ["builtin"],
                    "additionalProperties": False,
                },
            ]
        }
    ),
]


def _unique_labels(refs: list[WorkloadRef] | None) -> list[WorkloadRef] | None:
    seen: set[str] = set()
    for ref in refs or ():
        if ref.label in seen:
            raise ValueError(f"workload {ref.label} is listed twice")
        seen.add(ref.label)
    return refs


class SloSpec(_Model):
    """Per-request latency bounds (milliseconds), as bench_serving's ``--goodput``: a request
    counts toward goodput when it meets every bound given."""

    ttft_ms: Annotated[float, Field(gt=0, le=86_400_000)] | None = None
    tpot_ms: Annotated[float, Field(gt=0, le=86_400_000)] | None = None
    e2e_ms: Annotated[float, Field(gt=0, le=86_400_000)] | None = None

    @model_validator(mode="after")
    def _some_bound(self) -> SloSpec:
        if self.ttft_ms is None and self.tpot_ms is None and self.e2e_ms is None:
            raise ValueError("give at least one bound: ttft_ms, tpot_ms or e2e_ms")
        return self

    @property
    def ttft_s(self) -> float | None:
        return None if self.ttft_ms is None else self.ttft_ms / 1000.0

    @property
    def tpot_s(self) -> float | None:
        return None if self.tpot_ms is None else self.tpot_ms / 1000.0

    @property
    def e2e_s(self) -> float | None:
        return None if self.e2e_ms is None else self.e2e_ms / 1000.0



_IGNORE_EOS_OF: dict[str, bool] = {"fixed": True, "natural": False, "workload": True}
"""The ``ignore_eos`` each output-length mode sends."""

Rate = Annotated[float, Field(gt=0, le=100_000)]


class BenchmarkSpec(_Model):
    """The points each trial is measured on: contexts x (concurrency | rate) x workloads."""

    api: ApiKind = "chat"
    contexts: Annotated[
        list[Annotated[int, Field(ge=1, le=2_000_000)]],
        Field(min_length=1),
        AfterValidator(unique),
    ] = Field(default_factory=lambda: [60, 1024, 4096, 8192])
    concurrency: Annotated[list[Annotated[int, Field(ge=1, le=4096)]], AfterValidator(unique)] = (
        Field(
            default_factory=lambda: [1, 8, 32, 64],
            description="closed-loop points (workers); may be empty when rate is given",
        )
    )
    rate: Annotated[list[Rate], AfterValidator(unique)] = Field(
        default_factory=list, description="open-loop points: requests per second"
    )
    workload: WorkloadField | None = Field(
        default=None, description="the prompts: synthetic (default), {file: PATH}, {builtin: NAME}"
    )
    workloads: Annotated[
        list[WorkloadField] | None, Field(min_length=1), AfterValidator(_unique_labels)
    ] = Field(default=None, description="several workloads, each measured at every point")
    arrivals: Arrivals = "poisson"
    rate_duration_s: Annotated[float, Field(gt=0, le=86_400)] = Field(
        default=30.0, description="measured seconds of each rate point, after warm-up"
    )
    max_concurrency: Annotated[int, Field(ge=1, le=65_536)] = Field(
        default=256, description="cap on requests in flight at a rate point"
    )
    slo: SloSpec | None = None
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 512
    rounds: Annotated[int, Field(ge=1, le=1000)] = 3
    warmup_requests: Annotated[int, Field(ge=0, le=1000)] = 2
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.0
    ignore_eos: bool = True
    output_lengths: OutputLengths = Field(
        default="fixed",
        description="fixed (ignore_eos, to max_tokens), natural (the model stops) or workload "
        "(each request's output_tokens); the default follows ignore_eos",
    )
    repeats: Annotated[int, Field(ge=1, le=100)] = Field(
        default=1,
        description="how many times each config is measured per host type, each after its own "
        "restart, interleaved with the other configs",
    )
    _workload_content: Mapping[str, tuple[str, str]] | None = PrivateAttr(default=None)
    """Each file workload's (content, sha256) by its path as written, attached by the loader
    (None: the sweep was parsed from its text alone)."""

    @model_validator(mode="before")
    @classmethod
    def _one_output_switch(cls, data: object) -> object:
        """``output_lengths`` and ``ignore_eos`` say one thing: the one given sets the other
        (a contradiction, both given, is refused by :meth:`_agrees_with_ignore_eos`)."""
        if not isinstance(data, dict):
            return data
        mode, ignore_eos = data.get("output_lengths"), data.get("ignore_eos")
        if "output_lengths" not in data and isinstance(ignore_eos, bool):
            return {**data, "output_lengths": "fixed" if ignore_eos else "natural"}
        if "ignore_eos" not in data and isinstance(mode, str) and mode in _IGNORE_EOS_OF:
            return {**data, "ignore_eos": _IGNORE_EOS_OF[mode]}
        return data

    @field_validator("output_lengths")
    @classmethod
    def _agrees_with_ignore_eos(cls, mode: OutputLengths, info: ValidationInfo) -> OutputLengths:
        ignore_eos = info.data.get("ignore_eos")
        if isinstance(ignore_eos, bool) and ignore_eos != _IGNORE_EOS_OF[mode]:
            raise ValueError(
                f"output_lengths {mode} contradicts ignore_eos {str(ignore_eos).lower()} "
                f"({mode} sends ignore_eos {str(_IGNORE_EOS_OF[mode]).lower()}); give one of "
                "the two, or make them agree"
            )
        refs = cls._refs(info.data.get("workload"), info.data.get("workloads"))
        if mode == "workload" and all(ref.kind == "synthetic" for ref in refs):
            raise ValueError(
                "output_lengths workload takes each request's length from a workload file or "
                "built-in set, and this benchmark has only the synthetic prompts"
            )
        return mode

    @model_validator(mode="after")
    def _points_and_workloads(self) -> BenchmarkSpec:
        if self.workload is not None and self.workloads is not None:
            raise ValueError("give 'workload' or 'workloads', not both")
        if not self.concurrency and not self.rate:
            raise ValueError(
                "no points to measure: concurrency and rate are both empty (give either)"
            )
        return self

    @staticmethod
    def _refs(workload: object, workloads: object) -> tuple[WorkloadRef, ...]:
        if isinstance(workloads, list) and workloads:
            return tuple(ref for ref in workloads if isinstance(ref, WorkloadRef))
        if isinstance(workload, WorkloadRef):
            return (workload,)
        return (WorkloadRef(),)

    @property
    def workload_refs(self) -> tuple[WorkloadRef, ...]:
        """The workloads in the file's order (the synthetic one when none is named)."""
        return self._refs(self.workload, self.workloads)

    @property
    def workload_labels(self) -> tuple[str, ...]:
        return tuple(ref.label for ref in self.workload_refs)

    @property
    def workloads_resolved(self) -> bool:
        """Every file workload's content is attached (the loader read or was given it)."""
        content = self._workload_content or {}
        return all(ref.file in content for ref in self.workload_refs if ref.file is not None)

    def attach_workload_content(self, content: Mapping[str, str]) -> None:
        """Record the file workloads' content (the loader's job, once, after it checked it)."""
        self._workload_content = {
            path: (text, content_hash(text)) for path, text in content.items()
        }

    def workload_files(self) -> dict[str, str]:
        """Each file workload's content by its path as written (what ``submit`` sends and the
        store keeps)."""
        specs = self.workload_specs()
        return {spec.name: spec.content for spec in specs if spec.content is not None}

    def workload_specs(self) -> tuple[WorkloadSpec, ...]:
        """The workloads, typed, each file one with its content and sha256.

        Raises :class:`WorkloadContentMissing` for a sweep parsed from its text alone (answers
        and reports do that; a run needs the content, from the file or the store)."""
        content = self._workload_content or {}
        specs = []
        for ref in self.workload_refs:
            text: str | None = None
            digest: str | None = None
            if ref.file is not None:
                if ref.file not in content:
                    raise WorkloadContentMissing(ref.file)
                text, digest = content[ref.file]
            specs.append(WorkloadSpec(ref.label, ref.kind, ref.name, text, digest))
        return tuple(specs)

    def matrix_cells(self) -> tuple[MatrixCell, ...]:
        """Every cell a full trial measures, in the order it measures them: per workload (the
        file's order), per context, the closed-loop concurrencies then the open-loop rates."""
        cells: list[MatrixCell] = []
        for workload in self.workload_labels:
            for context in self.contexts:
                cells += [MatrixCell(context, c, workload=workload) for c in self.concurrency]
                cells += [MatrixCell(context, rate=r, workload=workload) for r in self.rate]
        return tuple(cells)


class CodingSpec(_Model):
    """The correctness anchor: small coding problems whose final code is run and checked."""

    problems: Text = "builtin"
    select: Annotated[
        list[ProblemName] | None,
        Field(min_length=1),
        AfterValidator(unique_or_none),
    ] = None
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 4096
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.0
    timeout_s: Annotated[float, Field(gt=0, le=3600)] = 10.0


class Timeouts(_Model):
    """Deadlines (seconds) of the restart protocol's steps and of one request."""

    connect: Duration = 30.0
    stop: Duration = 180.0
    memory_release: Duration = 300.0
    ready: Duration = 900.0
    probe: Duration = 300.0
    request: Duration = 600.0


class Policy(_Model):
    """What to do when a trial fails and how to leave the hosts at the end."""

    on_trial_failure: Literal["continue", "abort"] = "continue"
    trial_retries: Annotated[int, Field(ge=0, le=10)] = 1
    restore: RestorePolicy = "as-found"
    hosts_busy: Literal["wait", "set-aside"] = "wait"
    """A host another controller's live lease holds: wait for it (until ``finish_by`` or a
    stop), or set it aside at once."""
    lease_expiry: Duration = DEFAULT_LEASE_EXPIRY_S
    """Seconds a host's lease lasts without a renewal (the holder renews every quarter of it):
    how long a dead holder on another machine keeps others waiting."""


class Schedule(_Model):
    """When the daemon may start the sweep and by when it must stop (control machine time)."""

    not_before: ClockTime | None = None
    finish_by: ClockTime | None = None


class Notify(_Model):
    """Where to announce the end of a sweep."""

    webhook: HttpUrl


class EstimateSpec(_Model):
    """What ``plan`` assumes to estimate how long the sweep takes (the timeouts are upper
    bounds, not expectations, so the typical times come from here)."""

    restart: Duration = Field(
        default=DEFAULT_RESTART_S,
        description="one clean restart: stop, memory release, model load and warm-up",
    )
    decode_tokens_per_s: Annotated[float, Field(gt=0, le=1_000_000)] = Field(
        default=DEFAULT_DECODE_TOKENS_PER_S, description="output tokens per second of one request"
    )
    prefill_tokens_per_s: Annotated[float, Field(gt=0, le=100_000_000)] = Field(
        default=DEFAULT_PREFILL_TOKENS_PER_S, description="prompt tokens per second of one request"
    )


class CellSpec(_Model):
    """One point an objective names: a context and a concurrency or a rate, and (when the
    sweep has several workloads) a workload."""

    context: Annotated[int, Field(ge=1, le=2_000_000)]
    concurrency: Annotated[int, Field(ge=1, le=4096)] | None = None
    rate: Rate | None = None
    workload: Annotated[str, Field(min_length=1, max_length=4200)] | None = None

    @model_validator(mode="after")
    def _closed_or_open(self) -> CellSpec:
        if (self.concurrency is None) == (self.rate is None):
            raise ValueError("give one of 'concurrency' or 'rate'")
        return self


Concurrency = Annotated[int, Field(ge=1, le=4096)]
LoadShare = Annotated[float, Field(ge=0, le=1_000_000)]


class ObjectiveSpec(_Model):
    """What "best" means: one metric at one point, or combined over several points.

    Latencies, errors and wall time are minimized, every other metric (goodput too)
    maximized (:func:`orchestrator.types.metric_is_minimized`). ``concurrency`` (or ``rate``)
    given as a list asks the question across load: the answer is given at each load as well
    as over all of them, each load weighing its share of ``load`` (equal without it).
    """

    metric: MetricName
    context: Annotated[int, Field(ge=1, le=2_000_000)] | None = None
    concurrency: (
        Concurrency
        | Annotated[list[Concurrency], Field(min_length=2), AfterValidator(unique)]
        | None
    ) = None
    rate: Rate | Annotated[list[Rate], Field(min_length=2), AfterValidator(unique)] | None = None
    workload: Annotated[str, Field(min_length=1, max_length=4200)] | None = Field(
        default=None, description="the workload's label (synthetic, file:PATH, builtin:NAME)"
    )
    cells: Annotated[list[CellSpec], Field(min_length=1), AfterValidator(unique)] | None = None
    combine: Literal["geomean"] = "geomean"
    load: dict[str, LoadShare] | None = Field(
        default=None,
        description="with a list of loads: the share of time the servers spend at each (keys: "
        "the listed concurrencies or rates), weighing the overall answer; equal without it",
    )

    @model_validator(mode="after")
    def _one_way_to_name_cells(self) -> ObjectiveSpec:
        single = self.context is not None or self.concurrency is not None or self.rate is not None
        if single and self.cells is not None:
            raise ValueError(
                "give either 'context' and 'concurrency' (or 'rate'), or 'cells', not both"
            )
        if not single and self.cells is None:
            raise ValueError("name the cell: 'context' and 'concurrency' (or 'rate'), or 'cells'")
        if single and self.context is None:
            raise ValueError("give 'context' with 'concurrency' or 'rate'")
        if single and (self.concurrency is None) == (self.rate is None):
            raise ValueError("give one of 'concurrency' or 'rate' with 'context'")
        self._check_load()
        return self

    def _check_load(self) -> None:
        """``load`` weighs a list of loads: one share per listed load, not all zero."""
        if self.load is None:
            return
        if not self.across_load:
            raise ValueError(
                "load weighs the answer across loads: give 'concurrency' (or 'rate') as a list"
            )
        listed = set(self.load_values)
        given = set(self.load_shares())
        if given != listed:
            missing = ", ".join(f"{v:g}" for v in sorted(listed - given))
            extra = ", ".join(f"{v:g}" for v in sorted(given - listed))
            parts = [f"missing {missing}" * bool(missing), f"not listed {extra}" * bool(extra)]
            raise ValueError(
                "load needs one share per listed load (" + "; ".join(p for p in parts if p) + ")"
            )
        if not any(self.load.values()):
            raise ValueError("load's shares are all 0: give at least one load a share")

    def load_shares(self) -> dict[float, float]:
        """``load`` by the number of each key (a YAML mapping's keys arrive as text)."""
        shares: dict[float, float] = {}
        for key, share in (self.load or {}).items():
            try:
                shares[float(key)] = share
            except ValueError:
                raise ValueError(f"load key {key!r} is not a concurrency or rate") from None
        return shares

    @property
    def across_load(self) -> bool:
        """Whether the objective asks its question at several loads (a list was given)."""
        return isinstance(self.concurrency, list) or isinstance(self.rate, list)

    @property
    def load_values(self) -> tuple[float, ...]:
        """The loads listed (concurrencies or rates), in the file's order; () for one load."""
        listed = self.concurrency if isinstance(self.concurrency, list) else self.rate
        return tuple(float(v) for v in listed) if isinstance(listed, list) else ()

    def weights(self) -> tuple[float, ...] | None:
        """Each load's share of the overall answer, summing to 1, in :attr:`load_values`'
        order; None when the objective does not weigh its cells."""
        if not self.across_load:
            return None
        values = self.load_values
        given = self.load_shares()
        shares = [given[v] for v in values] if given else [1.0] * len(values)
        total = sum(shares)
        return tuple(share / total for share in shares)

    @property
    def minimized(self) -> bool:
        return metric_is_minimized(self.metric)

    @property
    def target_cells(self) -> tuple[MatrixCell, ...]:
        """The cells the objective reads, in the file's order, an unnamed workload read as
        the synthetic one (:meth:`Sweep.objective_cells` reads it as the sweep's own)."""
        return self.cells_on(SYNTHETIC_WORKLOAD)

    def cells_on(self, default_workload: str) -> tuple[MatrixCell, ...]:
        """The cells the objective reads: a cell's own workload, else the objective's, else
        ``default_workload``."""
        named: list[tuple[int, int | None, float | None, str | None]]
        if self.cells is not None:
            named = [
                (c.context, c.concurrency, c.rate, c.workload or self.workload) for c in self.cells
            ]
        else:
            assert self.context is not None
            context, workload = self.context, self.workload
            if isinstance(self.concurrency, list):
                named = [(context, c, None, workload) for c in self.concurrency]
            elif isinstance(self.rate, list):
                named = [(context, None, r, workload) for r in self.rate]
            else:
                named = [(context, self.concurrency, self.rate, workload)]
        return tuple(
            MatrixCell(context, concurrency, rate, workload or default_workload)
            for context, concurrency, rate, workload in named
        )

    @property
    def names_workloads(self) -> bool:
        """Whether every cell the objective reads names its workload."""
        if self.cells is not None:
            return all((c.workload or self.workload) is not None for c in self.cells)
        return self.workload is not None


_BOUND_OPS: Mapping[str, Callable[[float, float], bool]] = {
    ">=": operator.ge,
    "<=": operator.le,
    ">": operator.gt,
    "<": operator.lt,
    "==": operator.eq,
}


class Bound(_Model):
    """A constraint's bound: ``op`` against a number or against the baseline's value."""

    op: Literal[">=", "<=", ">", "<", "=="]
    value: float | Literal["baseline"]

    def holds(self, value: float, limit: float) -> bool:
        """Whether ``value`` is ``op`` ``limit``: the caller decides the limit (the number, or
        the baseline's value), so the answers and the search judge a bound alike."""
        return _BOUND_OPS[self.op](value, limit)


def _constraint_value(value: object) -> Bound | bool:
    parsed = parse_bound(value)
    if isinstance(parsed, bool):
        return parsed
    op, operand = parsed
    return Bound.model_validate({"op": op, "value": operand})


ConstraintValue = Annotated[
    Bound | bool,
    BeforeValidator(_constraint_value),
    WithJsonSchema(
        {
            "oneOf": [
                {"type": "boolean"},
                {"type": "string", "pattern": r"^\s*(>=|<=|>|<|==)\s*\S+\s*$"},
            ]
        }
    ),
]
"""``"<= 2.0"``, ``">= baseline"``, or (for ``lossless``) ``true``."""


class SearchSpec(_Model):
    """How the sweep's space is explored on each host type."""

    strategy: Literal["grid", "random", "adaptive"] = "grid"
    max_restarts: Annotated[int, Field(ge=1, le=100_000)] | None = Field(
        default=None,
        description="hard cap on unit starts per host type for the sweep (baseline, screening, "
        "promotions, repeats, retries and the confirmation reserve all count)",
    )
    seed: Annotated[int, Field(ge=0, le=2**63 - 1)] = 0
    confirmations: Annotated[int, Field(ge=0, le=1000)] = Field(
        default=2,
        description="restarts kept back (random, adaptive) to measure the leading configs "
        "again once exploring stops, so the winner's estimate is not the one it was picked on",
    )
    race: Annotated[int, Field(ge=0, le=100_000)] | None = Field(
        default=None,
        description="restarts (random, adaptive) spent measuring the leading configs again once "
        "exploring stops, before the confirmations, so the pick rests on more than one restart "
        "of each leader (default: a quarter of max_restarts)",
    )
    screen_rounds: Annotated[int, Field(ge=1, le=10_000)] | None = Field(
        default=None,
        description="rounds of an adaptive search's screening look at a new config, on the "
        "objective's cells only (default: half of benchmark.rounds, at least 1)",
    )
    promote_fraction: Annotated[float, Field(gt=0.0, le=1.0)] = Field(
        default=1 / 3,
        description="a screened config continues to the full matrix when its screening score "
        "is in this top fraction of the type's screened configs (successive halving's rung)",
    )
    schedule_trials: Annotated[int, Field(ge=0, le=1000)] | None = Field(
        default=None,
        description="restarts per host type spent last, measuring the speculative schedule an "
        "across-load objective proposes against the best fixed config (default: 2 for random "
        "and adaptive with such an objective, else 0)",
    )

    def schedule_restarts(self, across_concurrency: bool) -> int:
        """The restarts per host type kept for schedule trials: as set, else 2 for a search
        whose objective asks across concurrencies, else none."""
        if self.schedule_trials is not None:
            return self.schedule_trials
        return 2 if across_concurrency and self.strategy != "grid" else 0

    @model_validator(mode="after")
    def _needs_a_budget(self) -> SearchSpec:
        if self.strategy != "grid" and self.max_restarts is None:
            raise ValueError(
                f"strategy {self.strategy} needs max_restarts (the unit starts each host type "
                "may spend)"
            )
        return self


class Sweep(_Model):
    """A whole sweep file."""

    model_config = ConfigDict(
        title="orchestrator sweep file",
        json_schema_extra={"$schema": "https://json-schema.org/draft/2020-12/schema"},
    )

    name: SweepName
    description: Annotated[str, Field(max_length=65536)] = ""
    priority: Annotated[int, Field(ge=-1000, le=1000)] = 0
    engine: str = Field(
        default=DEFAULT_ENGINE,
        description="the serving engine the hosts' unit runs (its flags, parser, readiness, "
        "log lines and metrics); one of orchestrator.engines.names()",
    )
    hosts: Annotated[list[HostSpec], Field(min_length=1)]
    server: ServerSpec
    baseline: bool = False
    distribute: Literal["each-host", "across-type"] = "each-host"
    configs: list[dict[str, KnobValueField]] = Field(default_factory=list)
    grid: Annotated[
        dict[str, Annotated[list[KnobValueField], Field(min_length=1)]] | None,
        Field(min_length=1),
    ] = None
    benchmark: BenchmarkSpec = Field(default_factory=BenchmarkSpec)
    coding: CodingSpec | None = None
    timeouts: Timeouts = Field(default_factory=Timeouts)
    policy: Policy = Field(default_factory=Policy)
    schedule: Schedule | None = None
    notify: Notify | None = None
    estimate: EstimateSpec = Field(default_factory=EstimateSpec)
    objective: ObjectiveSpec | None = None
    constraints: dict[ConstraintName, ConstraintValue] = Field(default_factory=dict)
    search: SearchSpec = Field(default_factory=SearchSpec)

    @property
    def unit(self) -> str:
        """The systemd service to reconfigure: ``server.unit``, else the engine's usual one."""
        return self.server.unit or get_engine(self.engine).default_unit

    @field_validator("engine")
    @classmethod
    def _known_engine(cls, engine: str) -> str:
        if engine not in engine_names():
            known = ", ".join(engine_names())
            raise ValueError(f"unknown engine {engine!r}: known engines are {known}")
        return engine

    @field_validator("benchmark")
    @classmethod
    def _an_api_the_engine_serves(
        cls, bench: BenchmarkSpec, info: ValidationInfo
    ) -> BenchmarkSpec:
        name = info.data.get("engine")
        if not isinstance(name, str) or name not in engine_names():
            return bench
        apis = get_engine(name).apis
        if bench.api not in apis:
            served = ", ".join(sorted(apis))
            raise ValueError(f"api {bench.api!r} is not one engine {name!r} serves ({served})")
        return bench

    @field_validator("objective")
    @classmethod
    def _objective_cells_in_matrix(
        cls, objective: ObjectiveSpec | None, info: ValidationInfo
    ) -> ObjectiveSpec | None:
        bench = info.data.get("benchmark")
        if objective is None or not isinstance(bench, BenchmarkSpec):
            return objective
        labels = bench.workload_labels
        if not objective.names_workloads and len(labels) > 1:
            raise ValueError(
                f"the sweep has several workloads ({', '.join(labels)}): name the one the "
                "objective reads (workload: LABEL)"
            )
        for cell in objective.cells_on(labels[0]):
            if cell.concurrency is not None and (
                cell.context not in bench.contexts or cell.concurrency not in bench.concurrency
            ):
                raise ValueError(
                    f"cell context {cell.context} / concurrency {cell.concurrency} is not in the "
                    "benchmark matrix (benchmark.contexts x benchmark.concurrency)"
                )
            if cell.rate is not None and (
                cell.context not in bench.contexts or cell.rate not in bench.rate
            ):
                raise ValueError(
                    f"cell context {cell.context} / rate {cell.rate:g} is not in the benchmark's "
                    "rate points (benchmark.contexts x benchmark.rate)"
                )
            if cell.workload not in labels:
                raise ValueError(
                    f"workload {cell.workload!r} is not one of the sweep's workloads "
                    f"({', '.join(labels)})"
                )
        if objective.metric in SLO_METRICS and bench.slo is None:
            raise ValueError(f"{objective.metric} counts requests meeting benchmark.slo: give one")
        return objective

    @field_validator("constraints")
    @classmethod
    def _constraint_kinds(
        cls, constraints: dict[str, Bound | bool], info: ValidationInfo
    ) -> dict[str, Bound | bool]:
        bench = info.data.get("benchmark")
        for name, value in constraints.items():
            if name in SLO_METRICS and isinstance(bench, BenchmarkSpec) and bench.slo is None:
                raise ValueError(f"{name} counts requests meeting benchmark.slo: give one")
            if name == "lossless" and not isinstance(value, bool):
                raise ValueError("lossless takes true or false")
            if name != "lossless" and not isinstance(value, Bound):
                raise ValueError(f"{name} takes a bound such as '<= 2.0' or '>= baseline'")
        return constraints

    @model_validator(mode="after")
    def _schedules_need_loads(self) -> Sweep:
        wanted = self.search.schedule_trials
        if wanted and not self.schedules_across_load:
            raise ValueError(
                "search.schedule_trials measures a schedule across concurrencies: give "
                "objective.concurrency as a list"
            )
        return self

    @property
    def schedules_across_load(self) -> bool:
        """Whether the objective asks across concurrencies (a schedule's batch sizes)."""
        objective = self.objective
        return objective is not None and isinstance(objective.concurrency, list)

    def schedule_restarts(self) -> int:
        """Restarts per host type spent on schedule trials (``search.schedule_trials``)."""
        return self.search.schedule_restarts(self.schedules_across_load)

    def objective_cells(self) -> tuple[MatrixCell, ...]:
        """The objective's cells, an unnamed workload read as the sweep's own (a sweep that
        names several must name it, see the objective's check); () without an objective."""
        if self.objective is None:
            return ()
        return self.objective.cells_on(self.benchmark.workload_labels[0])

    @property
    def knob_names(self) -> list[str]:
        return list(self.server.knobs)

    def host(self, name: str) -> HostSpec:
        for host in self.hosts:
            if host.name == name:
                return host
        raise KeyError(name)


def sweep_json_schema() -> dict[str, Any]:
    """The JSON Schema of a sweep file, for editors' YAML language servers."""
    return Sweep.model_json_schema(mode="validation")
