"""The vLLM tier's configs measured by ``orchestrator bench --engine vllm`` against vLLM
servers started by hand (no systemd, no orchestrator restart): the direct measurement the
sweep's answer is compared with, and the tier's test of ``bench`` against a real vLLM.

    python -m tests.realengine.vllm_compare [--repeats 1] [--rounds 12] [--only NAME ...]

For each repeat and config (in rounds, as the sweep runs them): start the CPU build's API
server with the unit's command line and environment plus the config's
``--speculative-config`` on 127.0.0.1, wait for ``/health``, run ``orchestrator bench``
with the tier's matrix (:data:`tests.realengine.vllm_configs.VLLM_TIER`), read the server's
``SpecDecoding metrics`` lines written meanwhile, stop the server (SIGTERM, by its pid).
Prints one line per measurement and, last, one JSON object: the ranking, and per config its
geometric mean output tok/s, its measurements and accept lengths.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

from tests.realengine.compare import Comparison, Measurement
from tests.realengine.vllm_configs import VLLM_TIER, VllmConfig, tier_configs
from tests.realengine.vllm_cpu import MODULE, SERVER_FLAGS, VllmCpu, unit_environment

ADDRESS = "127.0.0.1"
PORT = 18190
MODEL = "tiny"
READY_TIMEOUT_S = 600.0


def server_argv(engine: VllmCpu, port: int = PORT, address: str = ADDRESS) -> list[str]:
    """The tier's unit's command line as found (no speculation) on ``address:port``."""
    return [
        str(engine.python), "-m", MODULE, "--model", str(engine.models.target),
        "--served-model-name", MODEL, "--host", address, "--port", str(port), *SERVER_FLAGS,
    ]  # fmt: skip


def watch_health(
    base_url: str, alive: Callable[[], bool], timeout: float = READY_TIMEOUT_S
) -> list[str]:
    """What ``/health`` answered while a server started, each change once (``refused``, or
    the status and body), until 200 or ``alive()`` says the process ended."""
    seen: list[str] = []
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(base_url + "/health", timeout=5) as reply:
                state = f"{reply.status} {reply.read().decode()!r}"
        except urllib.error.HTTPError as error:
            state = f"{error.code} {error.read().decode()!r}"
        except OSError:
            state = "refused"
        if not seen or seen[-1] != state:
            seen.append(state)
        if state.startswith("200") or not alive():
            return seen
        time.sleep(0.2)
    raise TimeoutError(f"no 200 from {base_url}/health in {timeout}s: {seen}")


@dataclasses.dataclass
class HandServer:
    """A vLLM started by hand, its output in ``log``; stopped by :meth:`stop`."""

    process: subprocess.Popen[bytes]
    log: Path
    base_url: str

    def await_health(self, timeout: float = READY_TIMEOUT_S) -> None:
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.process.poll() is not None:
                raise RuntimeError(f"vLLM exited {self.process.returncode}: {self.tail()}")
            try:
                with urllib.request.urlopen(self.base_url + "/health", timeout=2) as reply:
                    if reply.status == 200:
                        return
            except OSError:
                pass
            time.sleep(0.5)
        raise TimeoutError(f"vLLM did not answer /health in {timeout}s: {self.tail()}")

    def metrics(self) -> str:
        with urllib.request.urlopen(self.base_url + "/metrics", timeout=10) as reply:
            return str(reply.read().decode())

    def lines(self) -> list[str]:
        return self.log.read_text(errors="replace").splitlines()

    def tail(self) -> str:
        return "\n".join(self.lines()[-30:])

    def stop(self) -> None:
        if self.process.poll() is None:
            os.kill(self.process.pid, signal.SIGTERM)
            try:
                self.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.kill(self.process.pid, signal.SIGKILL)
                self.process.wait(timeout=30)


def start(
    engine: VllmCpu,
    flags: Sequence[str],
    workdir: Path,
    port: int = PORT,
    environment: Mapping[str, str] | None = None,
) -> HandServer:
    """The API server with the unit's environment (and ``environment`` over it) and
    ``flags``, output to a file."""
    log = workdir / f"vllm-{time.monotonic_ns()}.log"
    env = {**os.environ, **unit_environment(engine, workdir / "state"), **(environment or {})}
    with log.open("wb") as out:
        process = subprocess.Popen(
            [*server_argv(engine, port), *flags], stdout=out, stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL, env=env, cwd=workdir,
        )  # fmt: skip
    return HandServer(process, log, f"http://{ADDRESS}:{port}")


def bench(base_url: str, sizing: Any = VLLM_TIER, *extra: str) -> dict[str, Any]:
    """``orchestrator bench --engine vllm`` against ``base_url``: its JSON document."""
    done = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "bench", "--url", base_url, "--model", MODEL,
         "--engine", "vllm", *sizing.bench_args(), *extra, "--json"],
        capture_output=True, text=True, timeout=1200,
    )  # fmt: skip
    if done.returncode != 0:
        raise RuntimeError(f"bench exited {done.returncode}: {done.stderr[-3000:]}")
    document: dict[str, Any] = json.loads(done.stdout)
    return document


STATS_INTERVAL_S = 10.0
"""vLLM's ``VLLM_LOG_STATS_INTERVAL`` default: how often it writes its stats lines."""
SPEC_COUNTERS = (
    "vllm:spec_decode_num_drafts_total",
    "vllm:spec_decode_num_draft_tokens_total",
    "vllm:spec_decode_num_accepted_tokens_total",
)


@dataclasses.dataclass(frozen=True)
class DirectRun:
    """One config on one hand-started server: bench's point, and the speculative counters
    and ``SpecDecoding metrics`` lines over the whole bench run (its warm-up included), from
    an idle server to one stats interval after the last request."""

    config: VllmConfig
    point: dict[str, Any]
    counters_before: dict[str, float]
    counters_after: dict[str, float]
    spec_lines: tuple[str, ...]

    def counter_deltas(self) -> dict[str, float]:
        return {
            name: self.counters_after.get(name, 0.0) - self.counters_before.get(name, 0.0)
            for name in SPEC_COUNTERS
        }


def measure(
    engine: VllmCpu, config: VllmConfig, workdir: Path, sizing: Any = VLLM_TIER
) -> DirectRun:
    """One hand-started server, one ``orchestrator bench`` run (:class:`DirectRun`)."""
    from orchestrator.bench.acceptlen import parse_prometheus_totals

    server = start(engine, config.flags(), workdir)
    try:
        server.await_health()
        before = parse_prometheus_totals(server.metrics(), SPEC_COUNTERS)
        seen = len(server.lines())
        (point,) = bench(server.base_url, sizing)["points"]
        time.sleep(STATS_INTERVAL_S + 2)  # the last interval's line is written
        after = parse_prometheus_totals(server.metrics(), SPEC_COUNTERS)
        lines = tuple(x for x in server.lines()[seen:] if "SpecDecoding metrics:" in x)
    finally:
        server.stop()
    return DirectRun(config, point, before, after, lines)


@dataclasses.dataclass(frozen=True)
class DirectComparison:
    """The direct comparison's runs, and the ranking they give (:class:`Comparison`)."""

    runs: tuple[DirectRun, ...]
    comparison: Comparison


def run_comparison(
    engine: VllmCpu, sizing: Any = VLLM_TIER, only: Sequence[str] = ()
) -> DirectComparison:
    """``sizing.direct_repeats`` rounds, each measuring every config once on a fresh server."""
    configs = [c for c in tier_configs(str(engine.models.drafts["layers1"])) if not only
               or c.name in only]  # fmt: skip
    runs: list[DirectRun] = []
    measurements: list[Measurement] = []
    with tempfile.TemporaryDirectory(prefix="vllm-compare-") as tmp:
        for repeat in range(1, sizing.direct_repeats + 1):
            for config in configs:
                run = measure(engine, config, Path(tmp), sizing)
                point = run.point
                output = float(point["output_tok_s"])
                runs.append(run)
                measurements.append(
                    Measurement(config.name, repeat, output, point["accept_len"], point)
                )
                print(f"repeat {repeat} {config.name:9s} {output:7.1f} tok/s "
                      f"accept_len {point['accept_len']}", flush=True)  # fmt: skip
    return DirectComparison(tuple(runs), Comparison(tuple(measurements)))


def main(argv: Sequence[str] | None = None) -> int:
    from tests.realengine.prepare import DEFAULT_CACHE
    from tests.realengine.vllm_cpu import prepare_vllm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=VLLM_TIER.direct_repeats)
    parser.add_argument("--rounds", type=int, default=VLLM_TIER.rounds)
    parser.add_argument("--only", nargs="*", default=(), help="config names")
    args = parser.parse_args(argv)
    sizing = dataclasses.replace(VLLM_TIER, direct_repeats=args.repeats, rounds=args.rounds)
    comparison = run_comparison(prepare_vllm(DEFAULT_CACHE), sizing, args.only)
    print(json.dumps(comparison.comparison.to_json()))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
