"""The same configs as the tier's sweep, measured by ``orchestrator bench`` against a
``llama-server`` started by hand (no systemd, no orchestrator restart): the direct measurement
the sweep's answer is compared with.

    python -m tests.realengine.compare [--repeats 2] [--rounds 8]

For each repeat and config (in rounds, ``A B C A B C``, as the sweep runs them): start
``llama-server`` with the unit's command line plus the config's flags and ``--metrics`` on
127.0.0.1, wait for ``/health``, run ``orchestrator bench --engine llamacpp`` with the tier's
matrix (:mod:`tests.realengine.sizing`: same context, rounds, warm-up, output length, synthetic
prompts), stop the server. Prints one line per measurement and, last, one JSON object: the
ranking, and per config its geometric mean output tok/s, its measurements and accept lengths.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import math
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from tests.realengine.prepare import RealEngine, prepare
from tests.realengine.sizing import TIER, Sizing
from tests.realengine.unit import MODEL, THREADS

ADDRESS = "127.0.0.1"
PORT = 18090
BASELINE = "baseline"


def config_name(n_max: int | None) -> str:
    """A config's name here and in the tier's report: ``baseline`` or ``n_max=N``."""
    return BASELINE if n_max is None else f"n_max={n_max}"


def configs(engine: RealEngine, sizing: Sizing = TIER) -> dict[str, list[str]]:
    """Config name -> its flags (the tier sweep's knobs as llama-server flags)."""
    draft = str(engine.models.drafts["layers1"])
    out: dict[str, list[str]] = {BASELINE: []}
    for n_max in sizing.draft_sizes:
        out[config_name(n_max)] = [
            "--spec-type", "draft-simple", "--spec-draft-model", draft,
            "--spec-draft-n-max", str(n_max),
        ]  # fmt: skip
    return out


def _serving(timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(f"http://{ADDRESS}:{PORT}/health", timeout=2) as reply:
                if reply.status == 200:
                    return
        except OSError:
            pass
        time.sleep(0.1)
    raise TimeoutError("llama-server did not answer /health")


def measure(engine: RealEngine, flags: Sequence[str], sizing: Sizing = TIER) -> dict[str, Any]:
    """One hand-started server, one ``orchestrator bench`` run: its point (bench's JSON)."""
    argv = [
        str(engine.llama_server), "--model", str(engine.models.target), "--alias", MODEL,
        "--host", ADDRESS, "--port", str(PORT), *THREADS, "--ctx-size", "2048",
        "--parallel", "1", "--metrics", *flags,
    ]  # fmt: skip
    server = subprocess.Popen(argv, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        _serving()
        done = subprocess.run(
            [sys.executable, "-m", "orchestrator.cli", "bench", "--url", f"http://{ADDRESS}:{PORT}",
             "--model", MODEL, "--engine", "llamacpp", *sizing.bench_args(), "--json"],
            capture_output=True, text=True, timeout=900, check=True,
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)
    (point,) = json.loads(done.stdout)["points"]
    return point  # type: ignore[no-any-return]


@dataclass(frozen=True)
class Measurement:
    config: str
    repeat: int
    output_tok_s: float
    accept_len: float | None
    point: dict[str, Any]
    """The point as ``orchestrator bench --json`` printed it."""


@dataclass(frozen=True)
class Comparison:
    """Every measurement of the direct comparison, and the ranking they give."""

    measurements: tuple[Measurement, ...]

    def values(self, config: str) -> list[float]:
        return [m.output_tok_s for m in self.measurements if m.config == config]

    def mean(self, config: str) -> float:
        """The geometric mean of a config's output tok/s (the answer's scale is the log)."""
        values = self.values(config)
        return math.exp(math.fsum(math.log(v) for v in values) / len(values))

    @property
    def ranking(self) -> list[str]:
        """Config names, fastest first."""
        names = list(dict.fromkeys(m.config for m in self.measurements))
        return sorted(names, key=self.mean, reverse=True)

    def to_json(self) -> dict[str, Any]:
        return {
            "ranking": self.ranking,
            "configs": {
                name: {
                    "mean_output_tok_s": round(self.mean(name), 2),
                    "output_tok_s": [round(v, 2) for v in self.values(name)],
                    "accept_len": [m.accept_len for m in self.measurements if m.config == name],
                }
                for name in self.ranking
            },
        }


def run_comparison(engine: RealEngine, sizing: Sizing = TIER) -> Comparison:
    """``sizing.direct_repeats`` rounds, each measuring every config once on a fresh server."""
    measurements = []
    for repeat in range(1, sizing.direct_repeats + 1):
        for name, flags in configs(engine, sizing).items():
            point = measure(engine, flags, sizing)
            measurements.append(
                Measurement(name, repeat, float(point["output_tok_s"]), point["accept_len"], point)
            )
            print(f"repeat {repeat} {name:9s} {point['output_tok_s']:7.1f} tok/s "
                  f"accept_len {point['accept_len']}", flush=True)  # fmt: skip
    return Comparison(tuple(measurements))


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=TIER.direct_repeats)
    parser.add_argument("--rounds", type=int, default=TIER.rounds)
    args = parser.parse_args(argv)
    sizing = dataclasses.replace(TIER, direct_repeats=args.repeats, rounds=args.rounds)
    print(json.dumps(run_comparison(prepare(), sizing).to_json()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
