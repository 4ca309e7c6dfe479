"""The same configs as the tier's sweep, measured by ``orchestrator bench`` against a
``llama-server`` started by hand (no systemd, no orchestrator restart): the direct measurement
the sweep's answer is compared with.

    python -m tests.realengine.compare [--repeats 2] [--json]

For each config and repeat: start ``llama-server`` with the unit's command line plus the
config's flags and ``--metrics`` on 127.0.0.1, wait for ``/health``, run ``orchestrator bench
--engine llamacpp`` with the tier sweep's matrix (same context, rounds, warm-up, output length,
synthetic prompts), stop the server. Prints one line per measurement and, last, one JSON
object: per config the mean output tok/s, its measurements and the accept length.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
import urllib.request
from collections.abc import Sequence
from typing import Any

from tests.realengine.prepare import RealEngine, prepare
from tests.realengine.unit import MODEL, THREADS

ADDRESS = "127.0.0.1"
PORT = 18090
CONTEXT = 128
MATRIX = ("--contexts", str(CONTEXT), "--concurrency", "1", "--rounds", "3", "--warmup", "1",
          "--max-tokens", "128")  # fmt: skip
DRAFT_SIZES = (2, 4, 8, 16)


def configs(engine: RealEngine) -> dict[str, list[str]]:
    """Config name -> its flags (the tier sweep's knobs as llama-server flags)."""
    draft = str(engine.models.drafts["layers1"])
    out: dict[str, list[str]] = {"baseline": []}
    for n_max in DRAFT_SIZES:
        out[f"n_max={n_max}"] = [
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


def measure(engine: RealEngine, flags: Sequence[str]) -> dict[str, Any]:
    """One hand-started server, one ``orchestrator bench`` run: its point."""
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
             "--model", MODEL, "--engine", "llamacpp", *MATRIX, "--json"],
            capture_output=True, text=True, timeout=600, check=True,
        )  # fmt: skip
    finally:
        server.terminate()
        server.wait(timeout=30)
    (point,) = json.loads(done.stdout)["points"]
    return point  # type: ignore[no-any-return]


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=2)
    args = parser.parse_args(argv)
    engine = prepare()
    results: dict[str, dict[str, Any]] = {}
    for repeat in range(args.repeats):
        for name, flags in configs(engine).items():
            point = measure(engine, flags)
            entry = results.setdefault(name, {"output_tok_s": [], "accept_len": []})
            entry["output_tok_s"].append(point["output_tok_s"])
            entry["accept_len"].append(point["accept_len"])
            print(f"repeat {repeat + 1} {name:9s} {point['output_tok_s']:7.1f} tok/s "
                  f"accept_len {point['accept_len']}", flush=True)  # fmt: skip
    for entry in results.values():
        entry["mean_output_tok_s"] = statistics.fmean(entry["output_tok_s"])
    ranking = sorted(results, key=lambda n: -results[n]["mean_output_tok_s"])
    print(json.dumps({"ranking": ranking, "configs": results}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
