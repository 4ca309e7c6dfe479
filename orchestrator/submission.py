"""What ``POST /sweeps`` carries as JSON, shared by the daemon's API and the ``submit`` verb.

Its own module so that the client builds the body without importing the server (the API
module loads aiohttp's web half and the answers, a second of a short command's start).
"""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict, Field

MAX_WORKLOADS_PER_SWEEP = 16


class SubmitBody(BaseModel):
    """``POST /sweeps`` as JSON: the sweep file's text with the workload files it names (the
    daemon never reads the submitter's disk)."""

    model_config = ConfigDict(extra="forbid", strict=True, frozen=True)

    sweep: str
    filename: str = "submitted.yaml"
    workloads: dict[str, str] = Field(default_factory=dict, max_length=MAX_WORKLOADS_PER_SWEEP)
