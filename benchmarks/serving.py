"""``orchestrator bench`` beside SGLang's ``bench_serving`` on the same simulated server, with the
same fixed arrival schedule, the same prompts and the same connection policy: do they report
the same req/s, output tok/s, TTFT median and ITL median (goal: within 2 %)?

The connection policy is part of the traffic, not of the measurement: bench_serving as it
ships opens a new aiohttp session, so a new TCP connection, for every request, and its TTFT
clock (``st``, stamped before ``session.post``, which connects) includes the connect and the
server's accept; a pooled client (the OpenAI SDK's httpx pool) reuses keep-alive connections.
So each round measures two like-with-like pairs (``--connections``):

- ``per-request`` (the issue's comparison): ``orchestrator bench --connections per-request``
  (a fresh connection per request, its clock started before the connect, as ``st``) beside
  bench_serving as it ships;
- ``keep-alive`` (the control): ``orchestrator bench`` as by default beside bench_serving with
  one shared keep-alive session (``peers.SGLANG_REPLAY``'s ``ORCH_KEEPALIVE``).

Each pair, in each round (the pairs' order alternates between rounds):

1. the server's prefix cache is flushed, then ``orchestrator bench`` runs one open-loop point
   (``--rate R --arrivals poisson --seed S --duration D``, ``/generate``, fixed output length,
   no warm-up, the pair's ``--connections``) as its own process, with ``--output FILE
   --output-prompts``: the point's line holds the arrival schedule it drew and every request
   with the prompt it sent;
2. those prompts are exported as a ShareGPT-style JSON dataset (``conversations``, the human
   turn the prompt; ``--sharegpt-output-len`` fixes the output length, ``ignore_eos`` is
   bench_serving's default) and the schedule, with the prompts in send order, as a replay file;
3. the cache is flushed again and ``bench_serving`` (``--backend sglang``, ``--dataset-name
   sharegpt``, ``--warmup-requests 0``, the same ``--max-concurrency``) runs with its request
   generator replaced (``peers.SGLANG_REPLAY``): bench_serving draws its own exponential gaps
   and sleeps each after the previous yield, so instead the replacement yields the dataset's
   rows in our send order, each at its stored offset from the generator's start;
4. both reports are read as each tool reports itself: ours from the point's line
   (``request_s``, ``output_tok_s``, ``ttft_p50_s``, ``itl_p50_s``), bench_serving's from its
   ``--output-file`` (``request_throughput``, ``output_throughput``, ``median_ttft_ms``,
   ``median_itl_ms``).

The server's own record (``/sim/requests``) is read after each run: the arrivals as it saw
them (the same schedule, up to the clients' send jitter) and its own TTFT and ITL medians, so a
TTFT difference splits into what each client adds (its way in and out) and what the server did
differently (a new connection costs it an accept and a connection handler).

A round's ratios (ours / bench_serving's) compare two runs of the same pair under the same
background load; the figure is each pair's median over the rounds. Beside it,
``ttft_ratio_server_adjusted`` divides each tool's TTFT by the server's own for the same run
first, which takes out what the server did differently between the two runs (on a shared
machine, several ms either way). The server runs at real
speed (``time_scale`` 1: 15 ms decode steps, a 2048-token prefill 174 ms) at 2.5 requests/s,
below its prefill capacity so that latencies are the server's and not a queue's, not at the
capacity benchmark's 1e-4: there every latency would be the clients' own overhead. ``--nice
-10`` (root) lets the server and both clients, alike, wake promptly on a machine shared with
other work.

    python benchmarks/serving.py [--quick] [--json] [--keep] [--rounds N] [--requests N]
                                 [--rate R] [--context N] [--nice N]
                                 [--connections per-request keep-alive]
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import shutil
import subprocess
import tempfile
import time
from pathlib import Path
from typing import Any, get_args

import aiohttp
from client import ADDRESS, server_truth, start_server, wait_healthy
from common import PYTHON, REPO, emit, machine, note, percentile, run_main, summary

from orchestrator.bench.http1 import ConnectionPolicy
from orchestrator.bench.openloop import arrival_schedule
from orchestrator.bench.stats import spread_gaps

MODEL = "bench-model"
PORT = 30073
GOAL = 0.02
MAX_CONCURRENCY = 256
METRICS = ("request_s", "output_tok_s", "ttft_p50_ms", "itl_p50_ms")
"""The compared figures, as both reports name them here."""


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true",
                        help="one round of 100 requests (a smoke run, under 3 minutes)")
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--keep", action="store_true", help="keep the state directory")
    parser.add_argument("--rounds", type=int, default=None, help="paired rounds (default 3)")
    parser.add_argument("--rate", type=float, default=2.5, help="requests/s (default 2.5)")
    parser.add_argument("--requests", type=int, default=None,
                        help="measured requests a round (default 500, --quick 100): the "
                        "schedule's duration ends just after its last arrival")
    parser.add_argument("--context", type=int, default=2048, help="prompt tokens (default 2048)")
    parser.add_argument("--max-tokens", type=int, default=64, help="output tokens (default 64)")
    parser.add_argument("--seed", type=int, default=15, help="the first round's schedule seed")
    parser.add_argument("--connections", nargs="+", choices=get_args(ConnectionPolicy),
                        default=["per-request", "keep-alive"],
                        help="the pairs measured each round (default both): per-request, ours "
                        "with a fresh connection per request beside bench_serving as shipped; "
                        "keep-alive, both on kept connections (bench_serving's session shared)")
    parser.add_argument("--nice", type=int, default=0,
                        help="scheduling priority of the server and both clients (inherited; "
                        "e.g. -10 on a shared machine, root only)")
    parser.add_argument("--time-scale", type=float, default=1.0,
                        help="the server's time scale (default 1: 15 ms decode steps)")
    return parser.parse_args()


async def flush_cache(base_url: str) -> None:
    """Empty the server's radix cache, so the second client's identical prompts get no hits."""
    async with aiohttp.ClientSession() as http, http.post(base_url + "/flush_cache") as response:
        if response.status != 200:
            raise RuntimeError(f"flush_cache: HTTP {response.status}: {await response.text()}")


def load() -> float:
    return round(os.getloadavg()[0], 2)


async def run_process(name: str, argv: list[str], *, env: dict[str, str] | None = None,
                      cwd: Path | None = None, timeout: float = 600.0) -> str:
    """Run one client to completion; its stdout, or RuntimeError with its stderr's tail."""
    process = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    try:
        out, err = await asyncio.wait_for(process.communicate(), timeout)
    except TimeoutError:
        process.kill()
        await process.wait()
        raise RuntimeError(f"{name} ran past {timeout} s") from None
    if process.returncode != 0:
        tail = (err or out).decode(errors="replace")[-3000:]
        raise RuntimeError(f"{name} exited {process.returncode}: {tail}")
    return out.decode(errors="replace")


def duration_for(rate: float, seed: int, requests: int) -> float:
    """The measured duration whose Poisson schedule (``arrival_schedule``, this seed) holds
    exactly ``requests`` arrivals: just before the next one. A longer draw with the same seed
    starts with the same offsets, so its ``requests``-th gap ends the window."""
    long = arrival_schedule(rate, 4 * requests / rate + 60, "poisson", seed)
    return (long[requests - 1] + long[requests]) / 2


def ours_argv(args: argparse.Namespace, base_url: str, seed: int, output: Path,
              connections: ConnectionPolicy) -> list[str]:
    return [
        PYTHON, "-m", "orchestrator.cli", "bench", "--url", base_url, "--model", MODEL,
        "--api", "generate", "--contexts", str(args.context), "--rate", f"{args.rate:g}",
        "--arrivals", "poisson", "--seed", str(seed),
        "--duration", repr(duration_for(args.rate, seed, args.requests)),
        "--max-concurrency", str(MAX_CONCURRENCY), "--warmup", "0",
        "--max-tokens", str(args.max_tokens), "--no-metrics", "--output", str(output),
        "--output-prompts", "--connections", connections, "--json",
    ]


def our_point(output: Path) -> dict[str, Any]:
    (line,) = [json.loads(text) for text in output.read_text().splitlines() if text.strip()]
    point: dict[str, Any] = line
    return point


def export_requests(point: dict[str, Any], where: Path) -> tuple[Path, Path, int]:
    """Our measured prompts as a ShareGPT-style dataset, and the replay file: the stored
    schedule's offsets with the prompts in send order. Returns both paths and the count."""
    measured = sorted(
        (r for r in point["raw_requests"] if r["phase"] == "measured"),
        key=lambda r: r["send_time"],
    )
    prompts = [r["prompt"] for r in measured]
    offsets = list(point["arrival_schedule"])
    if len(offsets) != len(prompts) or None in prompts or len(set(prompts)) != len(prompts):
        raise RuntimeError(
            f"our point has {len(prompts)} measured prompts for {len(offsets)} arrivals"
        )
    dataset = where / "dataset.json"
    dataset.write_text(json.dumps([
        {"conversations": [{"from": "human", "value": p}, {"from": "gpt", "value": ""}]}
        for p in reversed(prompts)  # bench_serving shuffles anyway; the replay restores order
    ]))
    replay = where / "replay.json"
    replay.write_text(json.dumps({"offsets": offsets, "prompts": prompts}))
    return dataset, replay, len(prompts)


def ours_figures(point: dict[str, Any]) -> dict[str, Any]:
    return {
        "requests": point["requests_ok"],
        "request_s": point["request_s"],
        "output_tok_s": point["output_tok_s"],
        "ttft_p50_ms": point["ttft_p50_s"] * 1000,
        "itl_p50_ms": point["itl_p50_s"] * 1000,
        "achieved_rate": point.get("achieved_rate"),
        "flags": point["flags"],
    }


def theirs_figures(output: Path) -> dict[str, Any]:
    rows = [json.loads(text) for text in output.read_text().splitlines() if text.strip()]
    row = rows[-1]
    return {
        "requests": row["completed"],
        "request_s": row["request_throughput"],
        "output_tok_s": row["output_throughput"],
        "ttft_p50_ms": row["median_ttft_ms"],
        "itl_p50_ms": row["median_itl_ms"],
        "duration_s": row["duration"],
    }


async def server_record(base_url: str, since: float, requests: int) -> dict[str, Any]:
    """The server's own record of the last ``requests`` requests that arrived since ``since``
    (calibration probes come first): arrival stamps (the kernel's, where the platform keeps
    them) in order, and its TTFT (first emission - arrival) and ITL (emission gaps, a
    k-token chunk's gap spread over its k tokens) medians: what the clients should see."""
    rows = sorted(
        (t for t in await server_truth(base_url) if float(t["arrival_monotonic"]) >= since),
        key=lambda t: float(t["arrival_monotonic"]),
    )[-requests:]

    def arrival(t: dict[str, Any]) -> float:
        return float(t.get("arrival_kernel_monotonic") or t["arrival_monotonic"])

    ttft = [float(t["first_emit_monotonic"]) - arrival(t) for t in rows if t["chunks"]]
    itl = [x for t in rows for x in spread_gaps([(float(a), int(n)) for a, n in t["chunks"]])]
    return {
        "arrivals": [arrival(t) for t in rows],
        "prompt_tokens": sorted({int(t["prompt_tokens"]) for t in rows}),
        "ttft_p50_ms": (percentile(ttft, 50) or 0.0) * 1000,
        "itl_p50_ms": (percentile(itl, 50) or 0.0) * 1000,
    }


def server_adjusted_ttft(row: dict[str, Any]) -> float:
    """Ours / bench_serving's TTFT median, each first divided by the server's own TTFT median
    of the same run: what the two measurements differ by once what the server did differently
    between the two runs (on a shared machine, ±5 % from one run to the next) is taken out."""
    server = row["server"]
    ours = row["orchestrator"]["ttft_p50_ms"] / server["orchestrator_run"]["ttft_p50_ms"]
    theirs = row["bench_serving"]["ttft_p50_ms"] / server["bench_serving_run"]["ttft_p50_ms"]
    return round(ours / theirs, 4)


def rebase(stamps: list[float]) -> list[float]:
    return [x - stamps[0] for x in stamps] if stamps else []


def schedule_gap_ms(ours: list[float], theirs: list[float]) -> dict[str, Any]:
    """How far apart the two runs' arrivals at the server were, request by request, once
    the runs' common shift (the median difference: one run's first request late) is taken
    out; ``shift`` says how large it was."""
    if len(ours) != len(theirs):
        raise RuntimeError(f"the server saw {len(ours)} and {len(theirs)} requests")
    differences = [a - b for a, b in zip(ours, theirs, strict=True)]
    shift = percentile(differences, 50) or 0.0
    return summary([abs(d - shift) for d in differences], 1000, 3) | {
        "shift": round(shift * 1000, 3)
    }


async def one_pair(args: argparse.Namespace, base_url: str, state: Path, index: int,
                   seed: int, connections: ConnectionPolicy) -> dict[str, Any]:
    """One paired run: ours with ``connections``, then bench_serving with the same policy
    (``per-request`` is bench_serving as shipped) on our prompts and schedule."""
    from peers import sglang_replay_client

    where = state / f"round-{index}-{connections}"
    where.mkdir()
    ours_out = where / "ours.jsonl"
    await flush_cache(base_url)
    load_before = load()
    note(f"round {index} {connections}: orchestrator bench, rate {args.rate:g}/s, seed {seed}")
    started = time.monotonic()
    await run_process("orchestrator bench",
                      ours_argv(args, base_url, seed, ours_out, connections), cwd=REPO)
    ours_wall = time.monotonic() - started
    point = our_point(ours_out)
    if point.get("connections") != connections:
        raise RuntimeError(f"our point says connections {point.get('connections')!r}")
    requests = len(point["arrival_schedule"])
    ours_server = await server_record(base_url, started, requests)
    dataset, replay, requests = export_requests(point, where)
    theirs_out = where / "theirs.jsonl"
    peer = sglang_replay_client(
        base_url, state, dataset=dataset, replay=replay, output_len=args.max_tokens,
        max_concurrency=MAX_CONCURRENCY, rate=args.rate, model=MODEL, output=theirs_out,
        keepalive=connections == "keep-alive",
    )
    await flush_cache(base_url)
    load_between = load()
    note(f"round {index} {connections}: {peer.name}, the same {requests} requests at the "
         "same offsets")
    started = time.monotonic()
    await run_process(peer.name, peer.argv, env=peer.env, cwd=peer.cwd)
    theirs_wall = time.monotonic() - started
    theirs_server = await server_record(base_url, started, requests)
    ours, theirs = ours_figures(point), theirs_figures(theirs_out)
    if ours["requests"] != requests or theirs["requests"] != requests:
        raise RuntimeError(f"completed: ours {ours['requests']}, bench_serving "
                           f"{theirs['requests']}, of {requests}")
    ratios = {m: round(ours[m] / theirs[m], 4) for m in METRICS}
    row = {
        "round": index, "connections": connections, "seed": seed, "requests": requests,
        "orchestrator": ours, "bench_serving": theirs, "ratio": ratios,
        "arrival_gap_ms": schedule_gap_ms(
            rebase(ours_server.pop("arrivals")), rebase(theirs_server.pop("arrivals"))
        ),
        "server": {"orchestrator_run": ours_server, "bench_serving_run": theirs_server},
        # each client's TTFT median over the server's own (its way in and out, connects)
        "ttft_client_minus_server_ms": {
            "orchestrator": round(ours["ttft_p50_ms"] - ours_server["ttft_p50_ms"], 3),
            "bench_serving": round(theirs["ttft_p50_ms"] - theirs_server["ttft_p50_ms"], 3),
        },
        "load": [load_before, load_between, load()],
        "wall_s": {"orchestrator": round(ours_wall, 1), "bench_serving": round(theirs_wall, 1)},
    }
    row["ttft_ratio_server_adjusted"] = server_adjusted_ttft(row)
    return row


async def main(args: argparse.Namespace) -> dict[str, Any]:
    from orchestrator.log import configure_logging

    configure_logging("warning")
    if args.nice:
        # Before anything starts: the server and both clients inherit it, so they compete
        # with the machine's other work alike (they sleep most of the time; the priority
        # only shortens their wake-ups).
        os.setpriority(os.PRIO_PROCESS, 0, args.nice)
    state = Path(tempfile.mkdtemp(prefix="orch-bench-serving-"))
    settings = {"time_scale": args.time_scale, "load_s": 0.0, "warmup_s": 0.0}
    server = start_server(state, PORT, settings)
    base_url = f"http://{ADDRESS}:{PORT}"
    rounds = args.rounds or (1 if args.quick else 3)
    args.requests = args.requests or (100 if args.quick else 500)
    result: dict[str, Any] = {"machine": machine()}
    try:
        await wait_healthy(base_url)
        rows = []
        for i in range(rounds):
            # the pairs' order alternates, so neither always runs first in a round
            order = args.connections if i % 2 == 0 else list(reversed(args.connections))
            for connections in order:
                rows.append(await one_pair(args, base_url, state, i + 1, args.seed + i,
                                           connections))
    finally:
        server.terminate()
        try:
            server.wait(10)
        except subprocess.TimeoutExpired:
            server.kill()
        if not args.keep:
            shutil.rmtree(state, ignore_errors=True)
    result["ratio_median"] = {}
    result["agree_within_2pct"] = {}
    result["ttft_ratio_server_adjusted_median"] = {}
    for connections in args.connections:
        pair = [r for r in rows if r["connections"] == connections]
        medians = {m: round(percentile([r["ratio"][m] for r in pair], 50) or 0.0, 4)
                   for m in METRICS}
        result["ratio_median"][connections] = medians
        result["agree_within_2pct"][connections] = all(
            abs(v - 1) <= GOAL for v in medians.values()
        )
        result["ttft_ratio_server_adjusted_median"][connections] = round(
            percentile([r["ttft_ratio_server_adjusted"] for r in pair], 50) or 0.0, 4
        )
    result["rounds"] = rows
    result["settings"] = {
        "rate": args.rate, "arrivals": "poisson", "requests": args.requests,
        "context": args.context, "max_tokens": args.max_tokens, "api": "generate",
        "time_scale": args.time_scale, "max_concurrency": MAX_CONCURRENCY, "warmup": 0,
        "first_seed": args.seed, "rounds": rounds, "connections": args.connections,
        "nice": os.getpriority(os.PRIO_PROCESS, 0),
    }
    return result


if __name__ == "__main__":
    arguments = parse()
    emit(run_main(main(arguments)), arguments.json)
