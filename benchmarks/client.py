"""The load generator measured against the simulated server's own record: its timing error,
and how many output tokens it can consume per CPU-second, beside SGLang's, GuideLLM's and
AIPerf's clients (``--peers``).

Timing error. A simulated SGLang server at real speed (time scale 1: 15 ms decode steps,
one token per step) stamps every chunk with ``time.monotonic()`` right after writing it to the
socket (``/sim/requests``), and keeps the kernel's receive stamp of each request's arrival on
its socket. The orchestrator's client (``BenchClient``, ``/generate`` streaming) stamps every
block it receives with the kernel's receive stamp on its own socket, moved onto the same
system-wide monotonic clock. Per request:

    TTFT error = client TTFT (first token arrival - send) - server TTFT (first emit - arrival)
    ITL error  = client gap between two chunks - server gap between the same two chunks

where the server's arrival is the kernel's stamp (``ttft_err_ms``; the handler's own stamp,
late by the server's intake queueing, is kept as ``ttft_err_vs_handler_ms``).

at concurrency 1, 16 and 64 (p50 and p99 of the absolute error). The server's emission of a
chunk is when its socket's send call returned. Chunks that came in one read with the stream's
next chunk (the client was a decode step late, and TCP had merged both segments' stamps) are
counted (``chunks_sharing_a_read``), and the ITL error between chunks with reads of their own
is given apart (``itl_err_own_reads_ms``).

Capacity. A second simulated server with every duration scaled by 1e-4 streams as fast as
its own CPU allows. Each client runs as its own process at concurrency 64 and is measured from
outside: the CPU seconds of its whole process tree over the window from the server's first
arrival to its last emission (the client's start-up and report-writing are excluded), the
output tokens the server emitted in that window, and the concurrency the server really saw
(time-weighted requests in flight). With ``--peers``, the orchestrator's client and SGLang's
run alternately in three paired rounds and the ratio is the median of the per-round ratios
(both clients of a round see the same background load); GuideLLM and AIPerf run once.

``--capacity-vs TREE`` runs another checkout's client (an earlier version of this one) in the
same paired rounds: ``tokens_per_cpu_s_ratio_vs_other`` is the median of this client's tokens
per CPU-second over the other's; the other round goes first every second round.

    python benchmarks/client.py [--quick | --smoke] [--json] [--peers] [--capacity-vs TREE]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import aiohttp
from common import (
    PYTHON,
    REPO,
    SMOKE_HELP,
    emit,
    machine,
    note,
    percentile,
    run_main,
    summary,
)

from orchestrator import engines
from orchestrator.bench.client import BenchClient, RawExchange, RequestRecord, parse_exchange

ADDRESS = "127.0.0.167"
ACCURACY_PORT = 30071
CAPACITY_PORT = 30072
MODEL = "bench-model"
CAPACITY_ROUNDS = 3
SGLANG = engines.get("sglang")
"""The simulated server's engine, named: the client's requests, stream reading and counters."""
TTFT_GOAL_S = 0.0005
PROMPT_WORDS = 60


# --------------------------------------------------------------------------- the servers


def start_server(state: Path, port: int, settings: dict[str, Any]) -> subprocess.Popen[bytes]:
    """A simulated SGLang server straight from its module (no simulated host around it)."""
    config = state / f"server-{port}.json"
    config.write_text(json.dumps(settings))
    env = dict(os.environ, ORCH_SIM_CONFIG=str(config))
    argv = [
        PYTHON, "-m", "orchestrator.sim.sglang_server", "--model-path", f"/models/{MODEL}",
        "--served-model-name", MODEL, "--host", ADDRESS, "--port", str(port),
        "--skip-server-warmup", "--max-running-requests", "1024", "--decode-log-interval", "1000",
    ]
    log = (state / f"server-{port}.log").open("wb")
    return subprocess.Popen(argv, env=env, stdout=log, stderr=log, cwd=REPO)


async def wait_healthy(base_url: str, timeout: float = 60.0) -> None:
    deadline = time.monotonic() + timeout
    async with aiohttp.ClientSession() as http:
        while time.monotonic() < deadline:
            try:
                async with http.get(base_url + "/health") as response:
                    if response.status == 200:
                        return
            except aiohttp.ClientError:
                pass
            await asyncio.sleep(0.1)
    raise TimeoutError(f"{base_url} not healthy within {timeout}s")


async def server_truth(base_url: str, ids: Sequence[str] | None = None) -> list[dict[str, Any]]:
    """``/sim/requests``: the server's record of each request (all recent ones without ids)."""
    out: list[dict[str, Any]] = []
    async with aiohttp.ClientSession() as http:
        if ids is None:
            async with http.get(base_url + "/sim/requests") as response:
                return list(await response.json())
        for start in range(0, len(ids), 100):
            batch = ",".join(ids[start : start + 100])
            async with http.get(base_url + "/sim/requests", params={"ids": batch}) as response:
                out.extend(await response.json())
    return out


def prompt(index: int) -> str:
    return f"request {index}: " + " ".join(f"word{w % 50}" for w in range(PROMPT_WORDS))


# --------------------------------------------------------------------------- timing error


async def closed_loop(
    client: BenchClient, *, concurrency: int, requests: int, max_tokens: int
) -> list[RawExchange]:
    queue: asyncio.Queue[int] = asyncio.Queue()
    for index in range(requests):
        queue.put_nowait(index)
    raws: list[RawExchange] = []

    async def worker() -> None:
        while not queue.empty():
            index = queue.get_nowait()
            raws.append(await client.stream(prompt(index), max_tokens=max_tokens,
                                            ignore_eos=True, label=str(index)))

    await asyncio.gather(*(worker() for _ in range(concurrency)))
    return raws


def timing_errors(
    record: RequestRecord, truth: dict[str, Any], *, kernel: bool = False
) -> tuple[float | None, list[float], list[float]]:
    """(TTFT error, per-chunk arrival-minus-emission, ITL errors), in seconds. ``kernel``: the
    server's TTFT from the kernel's stamp of the request's arrival on its socket, not from
    when its handler ran (its intake queueing behind other streams is not the client's)."""
    emitted = [(float(t), int(n)) for t, n in truth["chunks"]]
    received = record.chunks
    if len(emitted) != len(received) or any(
        n != c.tokens for (_t, n), c in zip(emitted, received, strict=True)
    ):
        raise ValueError(f"request {record.response_id}: chunks do not line up with the truth")
    offsets = [c.arrival - t for (t, _n), c in zip(emitted, received, strict=True)]
    first = next((i for i, c in enumerate(received) if c.tokens > 0), None)
    ttft_err = None
    if first is not None and record.ttft is not None:
        arrival = truth.get("arrival_kernel_monotonic") if kernel else None
        if kernel and arrival is None:
            raise ValueError("the server keeps no kernel arrival stamps on this platform")
        server_ttft = emitted[first][0] - float(arrival or truth["arrival_monotonic"])
        ttft_err = record.ttft - server_ttft
    itl = [b - a for a, b in itertools.pairwise(offsets)]
    return ttft_err, offsets, itl


def own_stamps(record: RequestRecord) -> list[bool]:
    """Per chunk: whether it came in a read of its own (False: the same read also brought the
    stream's next chunk, so both carry the newer one's arrival). Kernel stamps are in
    nanoseconds, so two reads never share one; chunks of one read always do."""
    chunks = record.chunks
    return [a.arrival != b.arrival for a, b in itertools.pairwise(chunks)] + [True] * bool(chunks)


async def accuracy(
    base_url: str, concurrency: int, requests: int, max_tokens: int
) -> dict[str, Any]:
    async with BenchClient(base_url, api="generate", model=MODEL, concurrency=concurrency,
                           engine=SGLANG, request_timeout=300) as client:
        # One unmeasured round first, as a matrix point's warm-up does: the measured requests
        # then go out on open keep-alive connections, so a TTFT holds no TCP handshake.
        await closed_loop(client, concurrency=concurrency, requests=concurrency, max_tokens=4)
        raws = await closed_loop(client, concurrency=concurrency, requests=requests,
                                 max_tokens=max_tokens)
    records = [parse_exchange(raw, client.dialect) for raw in raws]
    bad = [r for r in records if not r.ok or r.response_id is None]
    if bad:
        raise RuntimeError(f"{len(bad)} requests failed: {bad[0].error} {bad[0].error_detail}")
    ids = [r.response_id or "" for r in records]
    truths = {t["id"]: t for t in await server_truth(base_url, ids)}
    ttft: list[float] = []
    ttft_kernel: list[float] = []
    first_chunk: list[float] = []
    over_goal: list[tuple[float, float]] = []  # (TTFT error, first token arrival - emission)
    itl: list[float] = []
    itl_own: list[float] = []
    shared = 0
    offsets: list[float] = []
    for record in records:
        truth = truths[record.response_id or ""]
        t_err, offs, i_err = timing_errors(record, truth)
        if t_err is not None:
            ttft.append(t_err)
        k_err, _offs, _itl = timing_errors(record, truth, kernel=True)
        if k_err is not None:
            ttft_kernel.append(k_err)
        first = next((i for i, c in enumerate(record.chunks) if c.tokens > 0), None)
        if first is not None:
            first_chunk.append(offs[first])
            if k_err is not None and abs(k_err) > TTFT_GOAL_S:
                over_goal.append((k_err, offs[first]))
        offsets.extend(offs)
        itl.extend(i_err)
        own = own_stamps(record)
        shared += own.count(False)
        itl_own.extend(e for e, a, b in zip(i_err, own, own[1:], strict=False) if a and b)
    return {
        "concurrency": concurrency,
        "requests": len(records),
        "chunks": len(offsets),
        # Against the kernel's arrival stamp on the server's socket (the goal's reference),
        # and against the server handler's stamp (the reference before kernel stamps).
        "ttft_err_ms": summary([abs(x) for x in ttft_kernel], 1000, 3),
        "ttft_err_signed_p50_ms": round((percentile(ttft_kernel, 50) or 0) * 1000, 3),
        "ttft_err_vs_handler_ms": summary([abs(x) for x in ttft], 1000, 3),
        # Each request whose TTFT error is over the goal, signed, with its first token's
        # arrival - emission beside it: when the first token reads as arriving well before
        # the server's stamp of its send (the server was preempted between its send call
        # and its stamp), the error is the reference's, by about the same amount.
        "ttft_err_over_goal_ms": [
            {"ttft_err": round(err * 1000, 3),
             "first_token_arrival_minus_emit": round(off * 1000, 3)}
            for err, off in sorted(over_goal)
        ],
        # The receive side of the TTFT error alone: first token's arrival - its emission. The
        # rest (server arrival - client send) is the request's way in, the server's own HTTP
        # intake included, which the server stamps only once its handler runs.
        "first_token_receive_err_ms": summary(first_chunk, 1000, 3),
        "itl_err_ms": summary([abs(x) for x in itl], 1000, 3),
        # Chunks that shared one read with the stream's next chunk: the client read them late
        # by a whole decode step, and the kernel had merged both segments' stamps into the
        # newer one (see orchestrator/bench/http1.py). The ITL error between chunks that each
        # had a read of their own is what the stamps alone add.
        "chunks_sharing_a_read": shared,
        "itl_err_own_reads_ms": summary([abs(x) for x in itl_own], 1000, 3),
        "arrival_minus_emit_ms": summary(offsets, 1000, 3),
    }


# --------------------------------------------------------------------------- capacity


def tree_cpu_seconds(root: int) -> float:
    """CPU of a process and all its live descendants, plus what their reaped children used."""
    parents: dict[int, int] = {}
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            raw = (entry / "stat").read_text()
        except OSError:
            continue
        parents[int(entry.name)] = int(raw[raw.rindex(")") + 2 :].split()[1])
    family, frontier = {root}, [root]
    while frontier:
        pid = frontier.pop()
        for child, parent in parents.items():
            if parent == pid and child not in family:
                family.add(child)
                frontier.append(child)
    total = 0.0
    for pid in family:
        try:
            raw = Path(f"/proc/{pid}/stat").read_text()
        except OSError:
            continue
        fields = raw[raw.rindex(")") + 2 :].split()
        total += sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")
    return total


async def measure_client(
    name: str, argv: Sequence[str], base_url: str, *, env: dict[str, str] | None = None,
    cwd: Path | None = None, timeout: float = 600.0,
) -> dict[str, Any]:
    """Run one client process; sample its tree's CPU every 50 ms; window it by the server."""
    started_wall = time.monotonic()
    before = {t["id"] for t in await server_truth(base_url)}
    process = await asyncio.create_subprocess_exec(
        *argv, env=env, cwd=cwd, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
        start_new_session=True,
    )
    outputs = asyncio.create_task(process.communicate())
    samples: list[tuple[float, float]] = []
    try:
        while not outputs.done():
            if time.monotonic() - started_wall > timeout:
                raise TimeoutError(f"{name} ran past {timeout}s")
            with contextlib.suppress(OSError):
                samples.append((time.monotonic(), tree_cpu_seconds(process.pid)))
            await asyncio.sleep(0.05)
    finally:
        if process.returncode is None:
            os.killpg(process.pid, signal.SIGKILL)
        out, err = await outputs
    if process.returncode != 0:
        raise RuntimeError(
            f"{name} exited {process.returncode}: {(err or out).decode(errors='replace')[-3000:]}"
        )
    truth = [t for t in await server_truth(base_url) if t["id"] not in before]
    finished = [t for t in truth if t["chunks"]]
    if not finished:
        raise RuntimeError(f"{name}: the server saw no requests")
    begin = min(float(t["arrival_monotonic"]) for t in finished)
    end = max(float(t["chunks"][-1][0]) for t in finished)
    tokens = sum(int(n) for t in finished for _e, n in t["chunks"])
    cpu = _cpu_between(samples, begin, end)
    held = _held_concurrency(finished, begin, end)
    return {
        "client": name,
        "requests": len(finished),
        "output_tokens": tokens,
        "window_s": round(end - begin, 3),
        "output_tok_s": round(tokens / (end - begin), 1),
        "client_cpu_s": round(cpu, 3),
        "cpu_s_per_1m_tokens": round(cpu / tokens * 1e6, 1) if tokens else None,
        "tokens_per_cpu_s": round(tokens / cpu, 1) if cpu > 0 else None,
        "concurrency_held": round(held, 2),
        "stdout_tail": out.decode(errors="replace")[-300:],
    }


def _cpu_between(samples: list[tuple[float, float]], begin: float, end: float) -> float:
    """Tree CPU consumed between two monotonic instants (linear between samples)."""
    def at(moment: float) -> float:
        previous = samples[0]
        for sample in samples:
            if sample[0] >= moment:
                span = sample[0] - previous[0]
                if span <= 0:
                    return sample[1]
                return previous[1] + (sample[1] - previous[1]) * (moment - previous[0]) / span
            previous = sample
        return samples[-1][1]

    return at(end) - at(begin)


def _held_concurrency(truth: list[dict[str, Any]], begin: float, end: float) -> float:
    busy = sum(float(t["chunks"][-1][0]) - float(t["arrival_monotonic"]) for t in truth)
    return busy / (end - begin)


def own_client_argv(
    base_url: str, concurrency: int, requests: int, max_tokens: int, *, tree: Path | None = None
) -> list[str]:
    """This checkout's client as a process, or (``tree``) another checkout's."""
    script = (tree / "benchmarks" / "client.py") if tree else Path(__file__).resolve()
    return [PYTHON, str(script), "--drive", base_url, "--concurrency",
            str(concurrency), "--requests", str(requests), "--max-tokens", str(max_tokens)]


def tree_env(tree: Path) -> dict[str, str]:
    """The environment that makes ``tree``'s ``orchestrator`` package the one imported (ahead
    of this checkout's editable install)."""
    return dict(os.environ, PYTHONPATH=str(tree))


async def drive(base_url: str, concurrency: int, requests: int, max_tokens: int) -> None:
    """The orchestrator's client as a process of its own (what ``measure_client`` runs)."""
    async with BenchClient(base_url, api="generate", model=MODEL, concurrency=concurrency,
                           engine=SGLANG, request_timeout=600) as client:
        raws = await closed_loop(client, concurrency=concurrency, requests=requests,
                                 max_tokens=max_tokens)
    records = [parse_exchange(raw, client.dialect) for raw in raws]
    print(json.dumps({"requests": len(records), "errors": sum(not r.ok for r in records),
                      "tokens": sum(r.completion_tokens or 0 for r in records)}))


async def capacity(
    args: argparse.Namespace, base_url: str, state: Path, requests: int, max_tokens: int
) -> dict[str, Any]:
    """The orchestrator's client and SGLang's, alternately for ``CAPACITY_ROUNDS`` paired
    rounds (the ratio is the median of the per-round ratios: both clients of a round see the
    same background load), then GuideLLM and AIPerf once each."""
    ours = own_client_argv(base_url, 64, requests, max_tokens)
    sglang = folder = None
    if args.peers:
        from peers import sglang_client

        sglang, folder = sglang_client(base_url, state, concurrency=64, requests=requests,
                                       max_tokens=max_tokens, model=MODEL)
    other = args.capacity_vs.resolve() if args.capacity_vs else None
    rounds = args.capacity_rounds or (CAPACITY_ROUNDS if sglang or other else 1)
    our_rows: list[dict[str, Any]] = []
    sglang_rows: list[dict[str, Any]] = []
    other_rows: list[dict[str, Any]] = []
    for index in range(rounds):
        if other and index % 2:  # the other checkout first in every second round
            other_rows.append(await measure_other(other, base_url, requests, max_tokens))
        note(f"capacity {index + 1}/{rounds}: the orchestrator's client")
        our_rows.append(await measure_client("orchestrator", ours, base_url, cwd=REPO))
        our_rows[-1]["load_average_1m"] = os.getloadavg()[0]
        if other and not index % 2:
            other_rows.append(await measure_other(other, base_url, requests, max_tokens))
        if sglang:
            note(f"capacity {index + 1}/{rounds}: {sglang.name}")
            sglang_rows.append(await measure_client(sglang.name, sglang.argv, base_url,
                                                    env=sglang.env, cwd=sglang.cwd))
    table = [median_row(our_rows)]
    result: dict[str, Any] = {"tokens_per_cpu_s_ratio_vs_sglang": None}
    if other:
        # Paired rounds, as with SGLang: both clients of a round see the same background load.
        ratios = [ours_row["tokens_per_cpu_s"] / theirs["tokens_per_cpu_s"]
                  for ours_row, theirs in zip(our_rows, other_rows, strict=True)]
        result["tokens_per_cpu_s_ratio_vs_other"] = round(percentile(ratios, 50) or 0, 3)
        result["tokens_per_cpu_s_ratios_vs_other"] = [round(r, 3) for r in ratios]
        table.append(median_row(other_rows))
    if sglang and folder:
        from peers import run_other_peers

        ratios = [ours_row["tokens_per_cpu_s"] / theirs["tokens_per_cpu_s"]
                  for ours_row, theirs in zip(our_rows, sglang_rows, strict=True)]
        result["tokens_per_cpu_s_ratio_vs_sglang"] = round(percentile(ratios, 50), 2)
        result["tokens_per_cpu_s_ratios"] = [round(r, 3) for r in ratios]
        table.append(median_row(sglang_rows))
        table.extend(await run_other_peers(base_url, state, folder, concurrency=64,
                                           requests=requests, max_tokens=max_tokens,
                                           measure=measure_client, model=MODEL))
    result["capacity"] = table
    result["capacity_rounds"] = {"orchestrator": our_rows, "sglang": sglang_rows,
                                 "other": other_rows}
    return result


async def measure_other(
    tree: Path, base_url: str, requests: int, max_tokens: int
) -> dict[str, Any]:
    """One capacity round of another checkout's client (``--capacity-vs``)."""
    note(f"capacity: the client of {tree}")
    row = await measure_client(
        f"orchestrator at {tree}", own_client_argv(base_url, 64, requests, max_tokens, tree=tree),
        base_url, env=tree_env(tree), cwd=tree,
    )
    return row | {"load_average_1m": os.getloadavg()[0]}


def median_row(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The round with the median tokens per CPU-second (a real row, not a blend)."""
    ranked = sorted(rows, key=lambda row: row["tokens_per_cpu_s"])
    return ranked[(len(ranked) - 1) // 2] | {"rounds": len(rows)}


# --------------------------------------------------------------------------- main


def parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="the short form (< 4 minutes)")
    parser.add_argument("--smoke", action="store_true", help=SMOKE_HELP)
    parser.add_argument("--json", action="store_true", help="print one JSON document on stdout")
    parser.add_argument("--peers", action="store_true",
                        help="also install and run SGLang's, GuideLLM's and AIPerf's clients")
    parser.add_argument("--keep", action="store_true", help="keep the state directory")
    parser.add_argument("--capacity-vs", type=Path, metavar="TREE",
                        help="also run the client of another checkout (e.g. an earlier "
                             "version) in paired capacity rounds with this one")
    parser.add_argument("--capacity-rounds", type=int, default=0, metavar="N",
                        help="paired capacity rounds (default 3 with a peer, else 1)")
    parser.add_argument("--capacity-only", action="store_true",
                        help="skip the timing-error part")
    parser.add_argument("--timing-only", action="store_true", help="skip the capacity part")
    parser.add_argument("--drive", help=argparse.SUPPRESS)
    parser.add_argument("--concurrency", type=int, default=64, help=argparse.SUPPRESS)
    parser.add_argument("--requests", type=int, default=256, help=argparse.SUPPRESS)
    parser.add_argument("--max-tokens", type=int, default=256, help=argparse.SUPPRESS)
    return parser.parse_args()


async def main(args: argparse.Namespace) -> dict[str, Any]:
    import tempfile

    from orchestrator.log import configure_logging

    configure_logging("warning")
    state = Path(tempfile.mkdtemp(prefix="orch-bench-client-"))
    real = {"time_scale": 1.0, "load_s": 0.0, "warmup_s": 0.0}
    fast = {"time_scale": 1e-4, "load_s": 0.0, "warmup_s": 0.0}
    servers = [start_server(state, ACCURACY_PORT, real), start_server(state, CAPACITY_PORT, fast)]
    accuracy_url = f"http://{ADDRESS}:{ACCURACY_PORT}"
    capacity_url = f"http://{ADDRESS}:{CAPACITY_PORT}"
    plan = {1: 12, 16: 48, 64: 128} if args.quick else {1: 40, 16: 160, 64: 384}
    capacity_requests, capacity_tokens = (256, 256) if args.quick else (1024, 512)
    if args.smoke:
        plan, capacity_requests, capacity_tokens = {1: 2, 16: 16}, 64, 16
    result: dict[str, Any] = {}
    try:
        await wait_healthy(accuracy_url)
        await wait_healthy(capacity_url)
        levels = []
        for concurrency, requests in ({} if args.capacity_only else plan).items():
            note(f"timing error at concurrency {concurrency} ({requests} requests)")
            levels.append(await accuracy(accuracy_url, concurrency, requests, max_tokens=64))
            levels[-1]["load_average_1m"] = os.getloadavg()[0]
        if levels:
            result["ttft_err_p99_ms"] = max(level["ttft_err_ms"]["p99"] for level in levels)
            result["itl_err_p99_ms"] = max(level["itl_err_ms"]["p99"] for level in levels)
        result["timing"] = levels
        if not args.timing_only:
            result.update(await capacity(args, capacity_url, state, capacity_requests,
                                         capacity_tokens))
    finally:
        for server in servers:
            server.terminate()
        for server in servers:
            try:
                server.wait(10)
            except subprocess.TimeoutExpired:
                server.kill()
        if not args.keep:
            shutil.rmtree(state, ignore_errors=True)
    result["goals"] = {"ttft_err_p99_ms": TTFT_GOAL_S * 1000, "itl_err_p99_ms": 0.5,
                       "tokens_per_cpu_s_ratio_vs_sglang": 1.5}
    result["settings"] = {"quick": args.quick, "smoke": args.smoke, "accuracy_requests": plan,
                          "max_tokens": 64,
                          "capacity_requests": capacity_requests,
                          "capacity_max_tokens": capacity_tokens, "capacity_concurrency": 64}
    result["machine"] = machine()
    return result


if __name__ == "__main__":
    arguments = parse()
    if arguments.drive:
        asyncio.run(drive(arguments.drive, arguments.concurrency, arguments.requests,
                          arguments.max_tokens))
        sys.exit(0)
    emit(run_main(main(arguments)), arguments.json)
