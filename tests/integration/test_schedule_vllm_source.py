"""A vLLM schedule as vLLM 0.33.0's own code reads it: the batch-size ranges the answers
render go through ``validate_and_normalize_dynamic_sd_schedule`` and
``build_dynamic_sd_schedule_lookup`` (``vllm/v1/spec_decode/dynamic/utils.py``, which imports
nothing, run from the sdist's source), and the dense lookup gives each band's draft length at
every batch size it covers.

The source is the one tests/integration/test_vllm_real_parser.py fetches and caches (the same
fixture); the test skips, saying why, when the registry cannot be reached.
"""

from __future__ import annotations

import runpy
from pathlib import Path
from typing import Any

from orchestrator.engines.schedule import NativeSchedule, ScheduleBand
from orchestrator.engines.vllm.schedule import SCHEDULE_KEY, TOKENS_KEY, native_schedule
from tests.integration.test_vllm_real_parser import vllm_source  # noqa: F401 (the fixture)
from tests.unit.test_schedules import VLLM_KNOBS, speculative_config


def _dynamic(source: Path) -> dict[str, Any]:
    return runpy.run_path(str(source / "vllm" / "v1" / "spec_decode" / "dynamic" / "utils.py"))


def test_vllms_own_schedule_code_reads_the_rendered_ranges(vllm_source: Path) -> None:  # noqa: F811
    bands = [
        ScheduleBand(1, {"method": "dflash", "tokens": 15}),
        ScheduleBand(3, {"method": "dflash", "tokens": 7}),
        ScheduleBand(16, {"method": "dflash", "tokens": 3}),
        ScheduleBand(48, {}),
    ]
    form = native_schedule(bands, VLLM_KNOBS)
    assert isinstance(form, NativeSchedule)
    body = speculative_config(form)
    code = _dynamic(vllm_source)
    normalized = code["validate_and_normalize_dynamic_sd_schedule"](body[SCHEDULE_KEY])
    assert normalized == [(1, 2, 15), (3, 15, 7), (16, 47, 3), (48, 48, 0)]
    lookup = code["build_dynamic_sd_schedule_lookup"](
        body[SCHEDULE_KEY], vllm_max_batch_size=256, vllm_num_speculative_tokens=body[TOKENS_KEY]
    )
    assert lookup[1:3] == [15, 15] and lookup[3] == 7 and lookup[15] == 7
    assert lookup[16] == 3 and lookup[47] == 3 and lookup[48] == 0 and lookup[256] == 0


def test_the_schedule_key_is_a_field_of_vllms_speculative_config(vllm_source: Path) -> None:  # noqa: F811
    text = (vllm_source / "vllm" / "config" / "speculative.py").read_text()
    assert f"    {SCHEDULE_KEY}: list[tuple[int, int, int]] | None = None" in text
