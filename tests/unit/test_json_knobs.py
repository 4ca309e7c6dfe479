"""Knobs that are keys of one JSON-valued flag (vLLM's ``--speculative-config``): built into
one object, left out when every key is absent, refused where a flag would mean two things."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from orchestrator.host.dropin import apply_knobs, parse_exec_line, render_dropin
from orchestrator.sweepfile import KnobMapping, SweepFileError, load_sweep

BASE = ["/usr/bin/vllm", "serve", "/models/m", "--speculative-config", '{"method":"ngram"}']
KNOBS = {
    "method": KnobMapping(flag="--speculative-config", json_key="method"),
    "tokens": KnobMapping(flag="--speculative-config", json_key="num_speculative_tokens"),
    "model": KnobMapping(flag="--speculative-config", json_key="model"),
    "gpu_util": KnobMapping(flag="--gpu-memory-utilization"),
}


def test_the_keys_of_one_flag_build_one_object_and_the_base_value_goes() -> None:
    invocation = apply_knobs(
        BASE, {}, KNOBS, {"method": "dflash", "tokens": 5, "model": None, "gpu_util": 0.9}
    )
    argv = list(invocation.argv)
    assert argv.count("--speculative-config") == 1
    value = json.loads(argv[argv.index("--speculative-config") + 1])
    assert value == {"method": "dflash", "num_speculative_tokens": 5}  # model absent: no key
    assert argv[argv.index("--gpu-memory-utilization") + 1] == "0.9"


def test_every_key_absent_leaves_the_flag_out() -> None:
    invocation = apply_knobs(BASE, {}, KNOBS, {})
    assert "--speculative-config" not in invocation.argv


def test_the_json_value_survives_the_drop_in_quoting() -> None:
    invocation = apply_knobs(BASE, {}, KNOBS, {"method": "eagle3", "model": "/d/e3 draft"})
    text = render_dropin("s", "k", invocation)
    line = next(x for x in text.splitlines() if x.startswith("ExecStart=") and len(x) > 10)
    argv = parse_exec_line(line.removeprefix("ExecStart="))
    value = json.loads(argv[argv.index("--speculative-config") + 1])
    assert value == {"method": "eagle3", "model": "/d/e3 draft"}


SWEEP = """\
name: t
hosts:
  - {name: a, address: 127.0.0.1, base_url: "http://127.0.0.1:8000", type: gpu}
server:
  model: m
  knobs:
    method: {flag: --speculative-config, json_key: method}
    tokens: {flag: --speculative-config, json_key: num_speculative_tokens}
"""


def _problems(tmp_path: Path, text: str) -> str:
    path = tmp_path / "s.yaml"
    path.write_text(text + "configs: [{method: dflash, tokens: 4}]\n")
    with pytest.raises(SweepFileError) as caught:
        load_sweep(path)
    return str(caught.value)


def test_a_sweep_with_json_knobs_loads(tmp_path: Path) -> None:
    path = tmp_path / "s.yaml"
    path.write_text(SWEEP + "configs: [{method: dflash, tokens: 4}]\n")
    sweep = load_sweep(path)
    assert sweep.server.knobs["tokens"].json_key == "num_speculative_tokens"


def test_a_plain_knob_on_a_json_flag_is_an_error(tmp_path: Path) -> None:
    text = SWEEP + "    config: {flag: --speculative-config}\n"
    assert "flag --speculative-config is already JSON knob 'method'" in _problems(tmp_path, text)


def test_two_knobs_on_one_key_is_an_error(tmp_path: Path) -> None:
    text = SWEEP + "    again: {flag: --speculative-config, json_key: method}\n"
    assert "key --speculative-config method is already knob 'method'" in _problems(tmp_path, text)


def test_a_json_key_without_a_flag_is_an_error(tmp_path: Path) -> None:
    text = SWEEP + "    lone: {env: X, json_key: method}\n"
    assert "'json_key' names a key of a flag's JSON value" in _problems(tmp_path, text)
