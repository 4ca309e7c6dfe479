"""The peer load generators for ``client.py --peers`` (and SGLang's for ``serving.py``): each
installed from PyPI into its own virtualenv under ``~/.cache/orchestrator-bench/peers`` (never
into the project's), run against the same fast simulated server at the same concurrency, and
measured the same way.

- SGLang's ``bench_serving`` (``sglang.benchmark.serving`` in 0.5.x), ``--backend sglang``
  (``/generate``, as the orchestrator's row), ``--dataset-name random-ids``. The wheel is
  installed without its dependencies; its benchmark module is loaded without the package's
  start-up code (``sglang/__init__.py`` imports torch and the runtime): the ``sglang``,
  ``sglang.srt``, ``sglang.srt.utils`` and ``sglang.srt.disaggregation`` packages are entered
  as bare package objects, and the one name the benchmark takes from the runtime's
  ``disaggregation.utils`` (``FAKE_BOOTSTRAP_HOST``) is read from that file's text.
- GuideLLM (``guidellm run``, chat completions) and AIPerf (``aiperf profile``, chat,
  streaming): their own command lines. AIPerf, offline, resolves any tokenizer name as a hub
  repository (a local folder too), so the folder is laid out as a hub cache snapshot for it.

For ``serving.py``, ``SGLANG_REPLAY_LAUNCHER`` loads the same module and replaces its request
generator (``get_request``) with one that replays a stored arrival schedule and prompt order
(``sglang_replay_client``), so bench_serving sends exactly the orchestrator's requests.

All three need a tokenizer: a small BPE trained here with ``tokenizers`` on generated text and
saved by ``transformers`` as a folder ``AutoTokenizer`` loads (``HF_HUB_OFFLINE=1``).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from common import note

PEERS_DIR = Path(
    os.environ.get("ORCH_BENCH_PEERS", Path.home() / ".cache" / "orchestrator-bench" / "peers")
)
SGLANG_VERSION = "0.5.23"
SGLANG_RUNTIME_DEPS = ["aiohttp", "msgspec", "numpy", "orjson", "requests", "tqdm",
                       "transformers", "tokenizers", "psutil", "pyzmq", "pybase64",
                       "pillow", "datasets"]
# torch from the file this machine keeps for pip (a plain resolve would take a CUDA build)
TORCH_CPU = "torch==2.13.0"
INPUT_LEN = 64  # prompt tokens of every capacity request, as the orchestrator's own client

Measure = Callable[..., Awaitable[dict[str, Any]]]


def venv(name: str, packages: list[list[str]]) -> Path:
    """``PEERS_DIR/name``, created and filled once (a marker file records success)."""
    home = PEERS_DIR / name
    marker = home / ".installed"
    python = home / "bin" / "python"
    if marker.exists():
        return python
    note(f"peers: installing {name} into {home}")
    subprocess.run([sys.executable, "-m", "venv", str(home)], check=True)
    for step in packages:
        subprocess.run([str(python), "-m", "pip", "install", "-q", *step], check=True)
    marker.write_text("ok\n")
    return python


def tokenizer(python: Path, where: Path) -> Path:
    """A small byte-level BPE, trained offline and saved as a transformers tokenizer folder."""
    folder = where / "tokenizer"
    if (folder / "tokenizer.json").exists():
        return folder
    script = textwrap.dedent(f"""
        from tokenizers import Tokenizer, models, pre_tokenizers, decoders, trainers
        from transformers import PreTrainedTokenizerFast
        words = [f"word{{i}}" for i in range(3000)] + "the of and to in a is that for it".split()
        corpus = [" ".join(words[(i * 7 + j) % len(words)] for j in range(40)) for i in range(3000)]
        tok = Tokenizer(models.BPE(unk_token="<unk>"))
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
        tok.decoder = decoders.ByteLevel()
        trainer = trainers.BpeTrainer(vocab_size=4000, special_tokens=["<unk>", "<s>", "</s>"],
                                      initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
        tok.train_from_iterator(corpus, trainer)
        fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="<unk>",
                                       bos_token="<s>", eos_token="</s>")
        fast.chat_template = ("{{% for m in messages %}}{{{{ m['content'] }}}}\\n{{% endfor %}}")
        fast.save_pretrained({str(folder)!r})
    """)
    subprocess.run([str(python), "-c", script], check=True, env=offline_env())
    return folder


def offline_env() -> dict[str, str]:
    return dict(os.environ, HF_HUB_OFFLINE="1", TRANSFORMERS_OFFLINE="1",
                HF_HUB_DISABLE_TELEMETRY="1", TOKENIZERS_PARALLELISM="false")


SGLANG_LOADER = textwrap.dedent("""
    # Load sglang's serving benchmark without sglang/__init__.py (torch, the runtime).
    import importlib.util, pathlib, re, sys, types
    root = pathlib.Path(importlib.util.find_spec("sglang").submodule_search_locations[0])
    for name, path in (("sglang", root), ("sglang.srt", root / "srt"),
                       ("sglang.srt.utils", root / "srt" / "utils"),
                       ("sglang.srt.disaggregation", root / "srt" / "disaggregation")):
        package = types.ModuleType(name)
        package.__path__ = [str(path)]
        sys.modules[name] = package
    source = (root / "srt" / "disaggregation" / "utils.py").read_text()
    utils = types.ModuleType("sglang.srt.disaggregation.utils")
    utils.FAKE_BOOTSTRAP_HOST = re.search(r'^FAKE_BOOTSTRAP_HOST = "([^"]*)"', source, re.M)[1]
    sys.modules[utils.__name__] = utils
""")
SGLANG_MAIN = textwrap.dedent("""
    from sglang.benchmark.serving import cli_main
    sys.argv = ["sglang.bench_serving", *sys.argv[1:]]
    cli_main()
""")
SGLANG_LAUNCHER = SGLANG_LOADER + SGLANG_MAIN
SGLANG_REPLAY = textwrap.dedent("""
    # Replay a stored arrival schedule: bench_serving's request generator (which draws its own
    # exponential gaps and sleeps each one after the previous yield) is replaced by one that
    # yields the requests in the file's prompt order, each at its stored offset from the
    # generator's start (absolute deadlines, as the orchestrator's open loop sends them).
    import asyncio, json, os, time
    import sglang.benchmark.serving as serving
    _replay = json.loads(pathlib.Path(os.environ["ORCH_REPLAY"]).read_text())

    async def _replayed(input_requests, request_rate, use_trace_timestamps=False,
                        slowdown_factor=1.0):
        by_prompt = {row.prompt: row for row in input_requests}
        missing = [i for i, p in enumerate(_replay["prompts"]) if p not in by_prompt]
        if missing or len(by_prompt) != len(_replay["prompts"]):
            raise SystemExit(f"replay: dataset and schedule differ (first missing {missing[:1]})")
        start = time.perf_counter()
        for offset, prompt in zip(_replay["offsets"], _replay["prompts"], strict=True):
            delay = start + offset - time.perf_counter()
            if delay > 0:
                await asyncio.sleep(delay)
            yield by_prompt[prompt]

    serving.get_request = _replayed

    if os.environ.get("ORCH_KEEPALIVE") == "1":
        # Control: one keep-alive session for every request, instead of bench_serving's new
        # session (and TCP connection) per request; its request function, stamps and
        # metrics are unchanged.
        _factory = serving._create_bench_client_session
        _shared = []

        class _Kept:
            async def __aenter__(self):
                if not _shared:
                    _shared.append(_factory())
                return _shared[0]

            async def __aexit__(self, *exc):
                return False

        serving._create_bench_client_session = _Kept
""")
SGLANG_REPLAY_LAUNCHER = SGLANG_LOADER + SGLANG_REPLAY + SGLANG_MAIN


@dataclass(frozen=True)
class PeerClient:
    """One installed peer's command line, ready for ``measure``."""

    name: str
    argv: list[str]
    env: dict[str, str]
    cwd: Path


def sglang_python() -> Path:
    """The interpreter of the venv holding ``sglang`` (installed once, without its runtime)."""
    return venv("sglang", [[f"sglang=={SGLANG_VERSION}", "--no-deps"], SGLANG_RUNTIME_DEPS])


def sglang_client(
    base_url: str, state: Path, *, concurrency: int, requests: int, max_tokens: int,
    model: str,
) -> tuple[PeerClient, Path]:
    """``sglang.bench_serving`` installed and its command line, and the tokenizer folder the
    other peers share."""
    sglang_python_path = sglang_python()
    folder = tokenizer(sglang_python_path, state)
    launcher = state / "sglang_bench_serving.py"
    launcher.write_text(SGLANG_LAUNCHER)
    argv = [
        str(sglang_python_path), str(launcher), "--backend", "sglang", "--base-url", base_url,
        "--model", model, "--tokenizer", str(folder), "--dataset-name", "random-ids",
        "--random-input-len", str(INPUT_LEN), "--random-output-len", str(max_tokens),
        "--random-range-ratio", "1.0", "--num-prompts", str(requests),
        "--max-concurrency", str(concurrency), "--request-rate", "inf", "--disable-tqdm",
        "--warmup-requests", "0", "--output-file", str(state / "sglang.jsonl"),
    ]
    client = PeerClient(f"sglang.bench_serving {SGLANG_VERSION}", argv, offline_env(), state)
    return client, folder


def sglang_replay_client(
    base_url: str, state: Path, *, dataset: Path, replay: Path, output_len: int,
    max_concurrency: int, rate: float, model: str, output: Path, keepalive: bool = False,
) -> PeerClient:
    """``sglang.bench_serving`` on a ShareGPT-style ``dataset`` (our prompts, in any order)
    with a fixed output length, sending at the offsets and in the order ``replay`` stores
    (``{"offsets": [...], "prompts": [...]}``; see ``SGLANG_REPLAY``). ``--request-rate`` is
    passed for its report only: the replayed schedule decides every send. ``keepalive``: the
    control where all requests share one aiohttp session (keep-alive connections, as ours)
    instead of a new session per request."""
    python = sglang_python()
    folder = tokenizer(python, state)
    launcher = state / "sglang_bench_serving_replay.py"
    launcher.write_text(SGLANG_REPLAY_LAUNCHER)
    requests = len(json.loads(replay.read_text())["prompts"])
    argv = [
        str(python), str(launcher), "--backend", "sglang", "--base-url", base_url,
        "--model", model, "--tokenizer", str(folder), "--dataset-name", "sharegpt",
        "--dataset-path", str(dataset), "--sharegpt-output-len", str(output_len),
        "--num-prompts", str(requests), "--request-rate", str(rate),
        "--max-concurrency", str(max_concurrency), "--disable-tqdm", "--warmup-requests", "0",
        "--output-file", str(output),
    ]
    env = offline_env() | {"ORCH_REPLAY": str(replay), "ORCH_KEEPALIVE": "1" if keepalive else "0"}
    return PeerClient(f"sglang.bench_serving {SGLANG_VERSION}", argv, env, state)


async def run_other_peers(
    base_url: str, state: Path, folder: Path, *, concurrency: int, requests: int,
    max_tokens: int, measure: Measure, model: str,
) -> list[dict[str, Any]]:
    """GuideLLM and AIPerf, once each (a failure is a row with its error, not an abort)."""
    rows: list[dict[str, Any]] = []
    for name, runner in (("guidellm", _guidellm), ("aiperf", _aiperf)):
        try:
            rows.append(await runner(base_url, state, folder, concurrency=concurrency,
                                     requests=requests, max_tokens=max_tokens,
                                     input_len=INPUT_LEN, measure=measure, model=model))
        except (subprocess.CalledProcessError, RuntimeError, TimeoutError) as exc:
            rows.append({"client": name, "error": str(exc)[-1500:]})
    return rows


async def _guidellm(
    base_url: str, state: Path, folder: Path, *, concurrency: int, requests: int,
    max_tokens: int, input_len: int, measure: Measure, model: str,
) -> dict[str, Any]:
    python = venv("guidellm", [[TORCH_CPU], ["guidellm"]])
    version = _version(python, "guidellm")
    note(f"capacity: guidellm {version}")
    cli = python.parent / "guidellm"
    return await measure(
        f"guidellm {version}",
        [str(cli), "run",
         "--backend", f"kind=openai_http,target={base_url},model={model}",
         "--profile", f"kind=concurrent,streams={concurrency}",
         "--constraint", f"kind=max_requests,count={requests}",
         "--data", f"kind=synthetic_text,prompt_tokens={input_len},output_tokens={max_tokens}",
         "--tokenizer", f"kind=huggingface_auto,model={folder}",
         "--output", f"kind=json,path={state / 'guidellm.json'}",
         "--disable-console-interactive"],
        base_url, env=offline_env(), cwd=state,
    )


async def _aiperf(
    base_url: str, state: Path, folder: Path, *, concurrency: int, requests: int,
    max_tokens: int, input_len: int, measure: Measure, model: str,
) -> dict[str, Any]:
    python = venv("aiperf", [["aiperf"]])
    version = _version(python, "aiperf")
    note(f"capacity: aiperf {version}")
    cli = python.parent / "aiperf"
    return await measure(
        f"aiperf {version}",
        [str(cli), "profile", "--model", model, "--url", base_url, "--endpoint-type", "chat",
         "--streaming", "--concurrency", str(concurrency), "--request-count", str(requests),
         "--synthetic-input-tokens-mean", str(input_len),
         "--synthetic-input-tokens-stddev", "0", "--output-tokens-mean", str(max_tokens),
         "--output-tokens-stddev", "0", "--extra-inputs", "ignore_eos:true",
         "--tokenizer", HUB_NAME, "--artifact-dir", str(state / "aiperf"), "--ui", "none",
         "--no-server-metrics"],
        base_url, env=offline_env() | {"HF_HOME": str(hub_cache(folder, state))}, cwd=state,
    )


HUB_NAME = "local/bench-tokenizer"


def hub_cache(folder: Path, state: Path) -> Path:
    """An HF cache holding the tokenizer folder as the snapshot of ``HUB_NAME`` (AIPerf, offline,
    resolves every tokenizer name as a hub repository, a local path included)."""
    home = state / "hf-home"
    repo = home / "hub" / ("models--" + HUB_NAME.replace("/", "--"))
    revision = "0" * 40
    snapshot = repo / "snapshots" / revision
    if not snapshot.exists():
        snapshot.mkdir(parents=True)
        for item in folder.iterdir():
            (snapshot / item.name).write_bytes(item.read_bytes())
        (repo / "refs").mkdir()
        (repo / "refs" / "main").write_text(revision)
    return home


def _version(python: Path, package: str) -> str:
    result = subprocess.run(
        [str(python), "-c", f"import importlib.metadata as m; print(m.version({package!r}))"],
        capture_output=True, text=True, check=True,
    )
    return result.stdout.strip()
