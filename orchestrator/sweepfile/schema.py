"""The sweep file's schema: pydantic models (strict, closed), one per section of the file.

Checks that involve one field live in :mod:`fields`; checks across fields and sections (a knob
used but not declared, two hosts on one machine) live in :mod:`rules`, which runs on these
models.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    ValidationInfo,
    WithJsonSchema,
    field_validator,
    model_validator,
)

from orchestrator.sweepfile.fields import (
    Address,
    ArgText,
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
from orchestrator.types import ApiKind, MatrixCell, MetricsMode, metric_is_minimized

DEFAULT_RESTART_S = 300.0
DEFAULT_DECODE_TOKENS_PER_S = 50.0
DEFAULT_PREFILL_TOKENS_PER_S = 5000.0


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)


class KnobMapping(_Model):
    """How one sweep knob reaches this build of SGLang: a flag or an environment variable."""

    flag: Flag | None = Field(default=None, description="command-line flag, e.g. --x-y")
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
    """The SGLang systemd unit the sweep reconfigures, and how knobs reach it."""

    unit: ServiceName = "sglang.service"
    model: Text
    knobs: dict[KnobName, KnobMapping] = Field(default_factory=dict)
    extra_flags: list[ArgText] = Field(default_factory=list)
    environment: dict[EnvName, EnvValue] = Field(default_factory=dict)
    exec_start: ExecStart | None = None
    metrics: MetricsMode = "auto"
    """``auto``: each trial's drop-in adds ``--enable-metrics`` when the unit lacks it (a second
    accept-length source: the chat API carries no spec stats); ``off``: the unit as it is."""


class BenchmarkSpec(_Model):
    """The context x concurrency matrix each trial is measured on."""

    api: ApiKind = "chat"
    contexts: Annotated[
        list[Annotated[int, Field(ge=1, le=2_000_000)]],
        Field(min_length=1),
        AfterValidator(unique),
    ] = Field(default_factory=lambda: [60, 1024, 4096, 8192])
    concurrency: Annotated[
        list[Annotated[int, Field(ge=1, le=4096)]], Field(min_length=1), AfterValidator(unique)
    ] = Field(default_factory=lambda: [1, 8, 32, 64])
    max_tokens: Annotated[int, Field(ge=1, le=1_000_000)] = 512
    rounds: Annotated[int, Field(ge=1, le=1000)] = 3
    warmup_requests: Annotated[int, Field(ge=0, le=1000)] = 2
    temperature: Annotated[float, Field(ge=0.0, le=2.0)] = 0.0
    ignore_eos: bool = True
    repeats: Annotated[int, Field(ge=1, le=100)] = Field(
        default=1,
        description="how many times each config is measured per host type, each after its own "
        "restart, interleaved with the other configs",
    )

    def matrix_cells(self) -> tuple[MatrixCell, ...]:
        """Every cell a full trial measures, in the order it measures them."""
        return tuple(
            MatrixCell(context, concurrency)
            for context in self.contexts
            for concurrency in self.concurrency
        )


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
    restore: Literal["as-found", "stopped", "leave"] = "as-found"


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
    """One matrix cell an objective names."""

    context: Annotated[int, Field(ge=1, le=2_000_000)]
    concurrency: Annotated[int, Field(ge=1, le=4096)]


class ObjectiveSpec(_Model):
    """What "best" means: one metric at one cell, or combined over several cells.

    Latencies, errors and wall time are minimized, every other metric maximized
    (:func:`orchestrator.types.metric_is_minimized`).
    """

    metric: MetricName
    context: Annotated[int, Field(ge=1, le=2_000_000)] | None = None
    concurrency: Annotated[int, Field(ge=1, le=4096)] | None = None
    cells: Annotated[list[CellSpec], Field(min_length=1), AfterValidator(unique)] | None = None
    combine: Literal["geomean"] = "geomean"

    @model_validator(mode="after")
    def _one_way_to_name_cells(self) -> ObjectiveSpec:
        single = self.context is not None or self.concurrency is not None
        if single and self.cells is not None:
            raise ValueError("give either 'context' and 'concurrency', or 'cells', not both")
        if not single and self.cells is None:
            raise ValueError("name the cell: 'context' and 'concurrency', or 'cells'")
        if single and (self.context is None or self.concurrency is None):
            raise ValueError("give both 'context' and 'concurrency'")
        return self

    @property
    def minimized(self) -> bool:
        return metric_is_minimized(self.metric)

    @property
    def target_cells(self) -> tuple[MatrixCell, ...]:
        """The cells the objective reads, in the file's order."""
        if self.cells is not None:
            return tuple(MatrixCell(cell.context, cell.concurrency) for cell in self.cells)
        assert self.context is not None and self.concurrency is not None
        return (MatrixCell(self.context, self.concurrency),)


class Bound(_Model):
    """A constraint's bound: ``op`` against a number or against the baseline's value."""

    op: Literal[">=", "<=", ">", "<", "=="]
    value: float | Literal["baseline"]


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
        "of each leader (default: a fifth of max_restarts)",
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

    @property
    def race_restarts(self) -> int:
        """The race's restarts: as given, else a fifth of ``max_restarts``."""
        if self.race is not None:
            return self.race
        return (self.max_restarts or 0) // 5

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

    @field_validator("objective")
    @classmethod
    def _objective_cells_in_matrix(
        cls, objective: ObjectiveSpec | None, info: ValidationInfo
    ) -> ObjectiveSpec | None:
        bench = info.data.get("benchmark")
        if objective is None or not isinstance(bench, BenchmarkSpec):
            return objective
        cells = set(bench.matrix_cells())
        for cell in objective.target_cells:
            if cell not in cells:
                raise ValueError(
                    f"cell context {cell.context} / concurrency {cell.concurrency} is not in the "
                    "benchmark matrix (benchmark.contexts x benchmark.concurrency)"
                )
        return objective

    @field_validator("constraints")
    @classmethod
    def _constraint_kinds(cls, constraints: dict[str, Bound | bool]) -> dict[str, Bound | bool]:
        for name, value in constraints.items():
            if name == "lossless" and not isinstance(value, bool):
                raise ValueError("lossless takes true or false")
            if name != "lossless" and not isinstance(value, Bound):
                raise ValueError(f"{name} takes a bound such as '<= 2.0' or '>= baseline'")
        return constraints

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
