"""An SGLang schedule as SGLang 0.5.23's own code reads it: the adaptive config file the
answers render (:mod:`orchestrator.engines.sglang.schedule`) loaded by
``resolve_candidate_steps_from_config`` and ``AdaptiveSpeculativeParams`` from
``sglang/srt/speculative/adaptive_spec_params.py`` of the 0.5.23 wheel, each running batch
routed to the steps its band measured best.

The wheel (cp311, x86_64; the release has no sdist) comes from the package registry's simple
index, checked against the index's sha256, and only that module is kept, cached under
``${XDG_CACHE_HOME:-~/.cache}/orchestrator/sglang-0.5.23``; the test skips, saying why, when
the registry cannot be reached. The module's imports from the rest of SGLang (server-argument
views, the runtime context, the algorithm enum, a logging helper: used only by
``adaptive_unsupported_reason`` and a log line) are stubbed; the file reading, its checks and
the batch routing are SGLang's own.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import runpy
import subprocess
import sys
import types
import urllib.request
import zipfile
from pathlib import Path
from typing import Any

import pytest

from orchestrator.engines.schedule import NativeSchedule, ScheduleBand
from orchestrator.engines.sglang.schedule import ADAPTIVE_CONFIG_FLAG, native_schedule
from tests.parallel import host_network_argv
from tests.unit.test_schedules import SGLANG_KNOBS

VERSION = "0.5.23"
WHEEL = f"sglang-{VERSION}-cp311-cp311-manylinux_2_34_x86_64.whl"
INDEX = "https://pypi.org/simple/sglang/"
MODULE = "sglang/srt/speculative/adaptive_spec_params.py"
CACHE = Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / (
    f"orchestrator/sglang-{VERSION}"
)
REPO = Path(__file__).resolve().parents[2]


def fetch_module(root: Path) -> str:
    """The wheel's adaptive module under ``root``, checked against the index's sha256."""
    page = urllib.request.urlopen(INDEX, timeout=30).read().decode()
    found = re.search(r'href="([^"#]*/' + re.escape(WHEEL) + r')#sha256=([0-9a-f]{64})"', page)
    if found is None:
        raise RuntimeError(f"{INDEX} lists no {WHEEL}")
    url, expected = found.groups()
    archive = root / WHEEL
    digest = hashlib.sha256()
    with urllib.request.urlopen(url, timeout=300) as response, archive.open("wb") as out:
        while chunk := response.read(1 << 20):
            digest.update(chunk)
            out.write(chunk)
    try:
        if digest.hexdigest() != expected:
            raise RuntimeError(f"{WHEEL}: sha256 {digest.hexdigest()}, the index says {expected}")
        with zipfile.ZipFile(archive) as wheel:
            (root / "adaptive_spec_params.py").write_bytes(wheel.read(MODULE))
    finally:
        archive.unlink(missing_ok=True)
    return expected


@pytest.fixture(scope="module")
def sglang_module() -> Path:
    """SGLang 0.5.23's ``adaptive_spec_params.py``, fetched once."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with (CACHE / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if not (CACHE / "adaptive_spec_params.py").exists():
            argv, fds = host_network_argv(
                [sys.executable, "-c",
                 "import sys; from pathlib import Path; "
                 "from tests.integration.test_sglang_adaptive_source import fetch_module; "
                 "print(fetch_module(Path(sys.argv[1])))", str(CACHE)]
            )  # fmt: skip
            done = subprocess.run(
                argv, cwd=REPO, pass_fds=fds, capture_output=True, text=True, timeout=900
            )
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                if "URLError" in done.stderr or "timed out" in done.stderr:
                    pytest.skip(f"the package registry is unreachable ({INDEX}): {last}")
                raise AssertionError(f"fetching {WHEEL} failed: {done.stderr[-2000:]}")
    return CACHE / "adaptive_spec_params.py"


def _stub(name: str, **attributes: Any) -> types.ModuleType:
    module = types.ModuleType(name)
    module.__dict__.update(attributes)
    return module


def sglang_reader(path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """The module's globals, its SGLang imports stubbed for the time of the test."""
    def inert(*args: object, **kwargs: object) -> None:
        return None

    stubs = {
        "sglang": _stub("sglang"),
        "sglang.srt": _stub("sglang.srt"),
        "sglang.srt.arg_groups": _stub("sglang.srt.arg_groups"),
        "sglang.srt.arg_groups.overrides": _stub(
            "sglang.srt.arg_groups.overrides", resolved_view=inert, resolving_view=inert
        ),
        "sglang.srt.runtime_context": _stub(
            "sglang.srt.runtime_context", attn_dp_enabled_of=inert
        ),
        "sglang.srt.speculative": _stub("sglang.srt.speculative"),
        "sglang.srt.speculative.spec_info": _stub(
            "sglang.srt.speculative.spec_info", SpeculativeAlgorithm=object
        ),
        "sglang.srt.utils": _stub("sglang.srt.utils", log_info_on_rank0=inert),
    }
    for name, module in stubs.items():
        monkeypatch.setitem(sys.modules, name, module)
    return runpy.run_path(str(path))


def test_sglang_reads_the_rendered_adaptive_file_and_routes_each_batch_to_its_band(
    sglang_module: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    eagle = {"algorithm": "EAGLE3", "topk": 1}
    bands = [
        ScheduleBand(1, {**eagle, "steps": 7}),
        ScheduleBand(3, {**eagle, "steps": 4}),
        ScheduleBand(16, {**eagle, "steps": 2}),
        ScheduleBand(48, {}),
    ]
    form = native_schedule(bands, SGLANG_KNOBS)
    assert isinstance(form, NativeSchedule)
    path = tmp_path / "adaptive.json"
    path.write_text(form.overlay.files[ADAPTIVE_CONFIG_FLAG])
    code = sglang_reader(sglang_module, monkeypatch)
    assert code["resolve_candidate_steps_from_config"](cfg_path=str(path)) == [0, 2, 4, 7]
    params = code["AdaptiveSpeculativeParams"](initial_steps=7, cfg_path=str(path))
    routed = {batch: params.get_steps_for_batch(batch) for batch in (1, 2, 3, 15, 16, 47, 48, 256)}
    assert routed == {1: 7, 2: 7, 3: 4, 15: 4, 16: 2, 47: 2, 48: 0, 256: 0}
    # One candidate per slot: SGLang's adaptation cannot move a slot off the measured steps.
    for batch in (1, 3, 16):
        for _ in range(100):  # past the warm-up, an update every 5 batches: none moves it
            assert params.on_verify_complete([0] * 8, batch) is None
    assert [params.get_steps_for_batch(b) for b in (1, 3, 16)] == [7, 4, 2]
    assert json.loads(path.read_text())["1"]["candidate_steps"] == [7]
