"""Capture what a real vLLM prints and serves, as the parsers' fixtures in
``tests/data/vllm_real/`` (read by tests/unit/test_vllm_real_fixtures.py).

    python -m tests.realengine.vllm_capture [--out tests/data/vllm_real]

Each scenario starts the CPU build that ``make real-engine`` installed, by hand, one at a time,
with the tier's unit's command line and environment (:mod:`tests.realengine.vllm_compare`)
and keeps its whole output (stdout and stderr, as journald would get them line by line):

- ``baseline``, ``ngram`` (k 4, lookup 4) and ``draft`` (the 1-layer draft, k 2): the start,
  what ``/health`` answered while it loaded (``refused``, a status), ``/version``,
  ``/v1/models``, ``/metrics`` before and after three 64-token requests (the second after the
  engine's next stats interval, so every drafted token is in a ``SpecDecoding metrics``
  line), then a SIGTERM stop and its lines;
- ``unknown-flag`` (``--bogus-flag 1``), ``missing-draft`` (a draft directory that does not
  exist), ``bad-method`` (``"method": "ngrm"``), ``no-room`` (1024 sequences of 8 draft
  tokens in vLLM's default 8192 batched tokens), ``model-len`` (a ``--max-model-len`` past the
  model's 4096 positions) and ``kv-cache`` (``VLLM_CPU_KVCACHE_SPACE`` past the machine's
  RAM): the failed start and its exit status;
- ``preflight``: the orchestrator's own parse script (what the preflight runs on a host,
  :mod:`orchestrator.engines.vllm.argv`) against this vLLM, its stdout and stderr, for
  argvs it takes and refuses.

``manifest.json`` says per scenario the argv, the exit status, how long it took, the health
sequence, and the vLLM version and date of the capture.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tests.realengine.vllm_compare import MODEL, server_argv, start, watch_health
from tests.realengine.vllm_configs import VllmConfig
from tests.realengine.vllm_cpu import VllmCpu, unit_environment

OUT = Path(__file__).resolve().parents[1] / "data" / "vllm_real"
MISSING_DRAFT = "/nonexistent/draft"
REQUESTS = 3


@dataclass
class Scenario:
    name: str
    flags: list[str]
    serves: bool
    environment: dict[str, str] = field(default_factory=dict)
    record: dict[str, Any] = field(default_factory=dict)


def scenarios(engine: VllmCpu) -> list[Scenario]:
    draft = str(engine.models.drafts["layers1"])
    return [
        Scenario("baseline", [], True),
        Scenario("ngram", VllmConfig("ngram", "ngram", 4).flags(), True),
        Scenario("draft", VllmConfig("draft", "draft_model", 2, draft).flags(), True),
        Scenario("unknown-flag", ["--bogus-flag", "1"], False),
        Scenario("missing-draft", VllmConfig("x", "draft_model", 2, MISSING_DRAFT).flags(), False),
        Scenario("bad-method", ["--speculative-config",
                                '{"method":"ngrm","num_speculative_tokens":4}'], False),
        Scenario("no-room", ["--max-num-seqs", "1024",
                             *VllmConfig("ngram", "ngram", 8).flags()], False),
        Scenario("model-len", ["--max-model-len", "100000"], False),
        Scenario("kv-cache", [], False, {"VLLM_CPU_KVCACHE_SPACE": "200"}),
    ]  # fmt: skip
    # SERVER_FLAGS' own --max-num-seqs and --max-model-len come first: argparse takes the last


PREFLIGHT_ARGVS = {
    "baseline": [],
    "ngram": VllmConfig("ngram", "ngram", 4).flags(),
    "missing-draft": VllmConfig("x", "draft_model", 2, MISSING_DRAFT).flags(),
    "unknown-flag": ["--bogus-flag", "1"],
    "bad-method": ["--speculative-config", '{"method":"ngrm","num_speculative_tokens":4}'],
    "extra-key": ["--speculative-config",
                  '{"method":"ngram","num_speculative_tokens":4,"lookup":4}'],
    "shortcut-twice": ["--spec-method", "ngram", "--speculative-config",
                       '{"method":"ngram","num_speculative_tokens":4}'],
}  # fmt: skip
"""Argvs the preflight asks about (each after the unit's own), by name, as the fixture's
``preflight.json`` lists them."""


def capture_preflight(engine: VllmCpu, out: Path, workdir: Path) -> dict[str, Any]:
    """The parse script's answers, as a host's preflight gets them (the unit's interpreter
    and environment, one process for every argv)."""
    from orchestrator.engines.vllm.argv import batch_command

    base = server_argv(engine)[3:]
    argvs = [[*base, *tail] for tail in PREFLIGHT_ARGVS.values()]
    env = {**os.environ, **unit_environment(engine, workdir / "state")}
    started = time.monotonic()
    done = subprocess.run(
        batch_command([str(engine.python)], argvs), capture_output=True, text=True, env=env,
        cwd=workdir, timeout=600,
    )  # fmt: skip
    (out / "preflight.stdout").write_text(done.stdout)
    (out / "preflight.stderr").write_text(done.stderr)
    (out / "preflight-argvs.json").write_text(json.dumps(argvs, indent=1) + "\n")
    seconds = round(time.monotonic() - started, 1)
    print(f"preflight: exit {done.returncode} in {seconds} s", flush=True)
    return {"names": list(PREFLIGHT_ARGVS), "exit": done.returncode, "seconds": seconds}


def _get(url: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=10) as reply:
            return reply.status, reply.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def chat(base_url: str, nonce: int) -> dict[str, Any]:
    body = json.dumps({
        "model": MODEL, "max_tokens": 64, "temperature": 0, "ignore_eos": True,
        "messages": [{"role": "user", "content": f"{nonce} the of and to in a is that"}],
    }).encode()  # fmt: skip
    request = urllib.request.Request(
        base_url + "/v1/chat/completions", body, {"content-type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=120) as reply:
        answer: dict[str, Any] = json.loads(reply.read())
    return answer


def run(engine: VllmCpu, scenario: Scenario, out: Path, workdir: Path) -> None:
    started = time.monotonic()
    server = start(engine, scenario.flags, workdir, environment=scenario.environment)
    record = scenario.record
    record["argv_tail"] = scenario.flags
    record["environment"] = scenario.environment
    try:
        record["health"] = watch_health(server.base_url, lambda: server.process.poll() is None)
        if scenario.serves and record["health"][-1].startswith("200"):
            record["ready_s"] = round(time.monotonic() - started, 1)
            for path, name in (("/version", "version.json"), ("/v1/models", "models.json")):
                _, body = _get(server.base_url + path)
                (out / f"{scenario.name}-{name}").write_text(body + "\n")
            (out / f"{scenario.name}-metrics-before.txt").write_text(server.metrics())
            record["usage"] = [chat(server.base_url, n)["usage"] for n in range(REQUESTS)]
            time.sleep(12)  # one stats interval (10 s): the last drafts reach a line
            (out / f"{scenario.name}-metrics-after.txt").write_text(server.metrics())
        if record["health"][-1].startswith("200"):
            os.kill(server.process.pid, signal.SIGTERM)  # served: stopped as a unit is
        record["exit"] = server.process.wait(timeout=120)
    finally:
        server.stop()
    record["seconds"] = round(time.monotonic() - started, 1)
    (out / f"{scenario.name}.log").write_text(server.log.read_text(errors="replace"))
    print(f"{scenario.name}: exit {record['exit']} in {record['seconds']} s", flush=True)


def capture(engine: VllmCpu, out: Path = OUT, only: Sequence[str] = ()) -> dict[str, Any]:
    out.mkdir(parents=True, exist_ok=True)
    manifest_path = out / "manifest.json"
    manifest: dict[str, Any] = (
        json.loads(manifest_path.read_text()) if manifest_path.exists() else {"scenarios": {}}
    )
    manifest.update({
        "vllm": f"vllm-cpu {engine.version} (python -m vllm.entrypoints.openai.api_server)",
        "captured": time.strftime("%Y-%m-%d"),
        "how": "python -m tests.realengine.vllm_capture: hand-started servers, one at a time, "
               "2-core x86_64 machine, AVX2; the unit's flags and environment "
               "(tests/realengine/vllm_cpu.py)",
        "model": str(engine.models.target),
        "draft": str(engine.models.drafts["layers1"]),
    })  # fmt: skip
    with tempfile.TemporaryDirectory(prefix="vllm-capture-") as tmp:
        for scenario in scenarios(engine):
            if only and scenario.name not in only:
                continue
            run(engine, scenario, out, Path(tmp))
            manifest["scenarios"][scenario.name] = scenario.record
            manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
        if not only or "preflight" in only:
            manifest["scenarios"]["preflight"] = capture_preflight(engine, out, Path(tmp))
            manifest_path.write_text(json.dumps(manifest, indent=1) + "\n")
    return manifest


def main(argv: Sequence[str] | None = None) -> int:
    from tests.realengine.prepare import DEFAULT_CACHE
    from tests.realengine.vllm_cpu import prepare_vllm

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--only", nargs="*", default=(), help="scenario names")
    args = parser.parse_args(argv)
    capture(prepare_vllm(DEFAULT_CACHE), args.out, args.only)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
