"""The plan: expansion, dedup, baseline first, stable keys, distribution, and its JSON."""

from __future__ import annotations

import datetime as dt
import json
import subprocess
import sys
from pathlib import Path

from orchestrator.host.dropin import apply_knobs, flag_args, parse_dropin_header, parse_exec_line
from orchestrator.plan import expand_configs, plan_json, plan_sweep, trial_key
from orchestrator.sim.host import sglang_argv
from orchestrator.sweepfile import load_sweep, parse_sweep

ROOT = Path(__file__).resolve().parents[2]

HEAD = """\
name: p
hosts:
  - {name: a1, address: 10.0.0.1, base_url: "http://10.0.0.1:30000", type: a}
  - {name: a2, address: 10.0.0.2, base_url: "http://10.0.0.2:30000", type: a}
  - {name: a3, address: 10.0.0.3, base_url: "http://10.0.0.3:30000", type: a}
  - {name: b1, address: 10.0.0.4, base_url: "http://10.0.0.4:30000", type: b}
server:
  model: m
  knobs:
    algorithm: {flag: --speculative-algorithm}
    budget: {flag: --speculative-ddtree-budget}
    topk: {env: SGLANG_DDTREE_MAX_TOPK}
    window: {flag: --speculative-draft-window-size}
"""


def test_grid_and_list_expand_with_duplicates_removed_and_baseline_first() -> None:
    sweep = parse_sweep(
        HEAD
        + """\
baseline: true
configs:
  - {budget: 8, algorithm: DDTREE, topk: 4}
  - {algorithm: DDTREE, budget: 8, topk: 4, window: null}
  - {window: null}
grid:
  algorithm: [DDTREE]
  budget: [4, 8, 8]
  topk: [4]
  window: [null, 2048]
"""
    )
    configs = expand_configs(sweep)
    assert configs == [
        {},
        {"algorithm": "DDTREE", "budget": 8, "topk": 4},
        {"algorithm": "DDTREE", "budget": 4, "topk": 4},
        {"algorithm": "DDTREE", "budget": 4, "topk": 4, "window": 2048},
        {"algorithm": "DDTREE", "budget": 8, "topk": 4, "window": 2048},
    ]
    plan = plan_sweep(sweep)
    assert len(plan) == 5 * 4
    assert [t.ordinal for t in plan] == list(range(20))
    assert [t.is_baseline for t in plan.trials[:4]] == [True] * 4
    assert not any(t.is_baseline for t in plan.trials[4:])
    assert len({t.key for t in plan}) == 20
    assert [t.host for t in plan.for_host("b1")] == ["b1"] * 5


def test_values_of_different_types_are_different_configs() -> None:
    sweep = parse_sweep(HEAD + "configs:\n  - {budget: 1}\n  - {budget: true}\n  - {budget: '1'}\n")
    assert len(expand_configs(sweep)) == 3


def test_key_is_independent_of_key_order_and_absent_knobs() -> None:
    one = trial_key("h1", "sglang.service", {"budget": 8, "topk": 4})
    assert one == trial_key("h1", "sglang.service", {"topk": 4, "budget": 8, "window": None})
    assert one != trial_key("h2", "sglang.service", {"budget": 8, "topk": 4})
    assert one != trial_key("h1", "other.service", {"budget": 8, "topk": 4})
    assert one != trial_key("h1", "sglang.service", {"budget": 8, "topk": 5})
    assert one.startswith("h1.budget-8_topk-4.")
    assert trial_key("h1", "u.service", {}).startswith("h1.baseline.")


def test_reordered_file_gives_the_same_keys() -> None:
    forward = parse_sweep(
        HEAD + "configs:\n  - {budget: 8, topk: 4}\n  - {algorithm: DDTREE, window: 2048}\n"
    )
    backward = parse_sweep(
        HEAD + "configs:\n  - {window: 2048, algorithm: DDTREE}\n  - {topk: 4, budget: 8}\n"
    )
    keys = {(t.host, t.key) for t in plan_sweep(forward)}
    assert keys == {(t.host, t.key) for t in plan_sweep(backward)}


def test_keys_are_stable_across_processes() -> None:
    path = ROOT / "sweeps" / "demo.yaml"
    code = (
        "import json,sys;from orchestrator.plan import plan_sweep;"
        "from orchestrator.sweepfile import load_sweep;"
        f"print(json.dumps([t.key for t in plan_sweep(load_sweep({str(path)!r}))]))"
    )
    runs = [
        subprocess.run(
            [sys.executable, "-c", code],
            capture_output=True,
            text=True,
            check=True,
            timeout=60,
            env={"PYTHONHASHSEED": seed},
        ).stdout
        for seed in ("1", "2")
    ]
    assert runs[0] == runs[1]
    assert json.loads(runs[0]) == [t.key for t in plan_sweep(load_sweep(path))]


def test_across_type_runs_each_config_once_per_type() -> None:
    """A one-knob grid has nothing to balance: each value on the next least-loaded host.
    (Issue 12 changed round-robin to a balanced assignment; here both give the same.)"""
    sweep = parse_sweep(HEAD + "distribute: across-type\ngrid:\n  budget: [1, 2, 3, 4]\n")
    plan = plan_sweep(sweep)
    assert [(t.config["budget"], t.host) for t in plan] == [
        (1, "a1"),
        (1, "b1"),
        (2, "a2"),
        (2, "b1"),
        (3, "a3"),
        (3, "b1"),
        (4, "a1"),
        (4, "b1"),
    ]


TWO_HOSTS = HEAD.replace(
    '  - {name: a3, address: 10.0.0.3, base_url: "http://10.0.0.3:30000", type: a}\n', ""
).replace('  - {name: b1, address: 10.0.0.4, base_url: "http://10.0.0.4:30000", type: b}\n', "")


def test_across_type_spreads_each_knob_value_over_the_hosts_and_runs_baseline_on_each() -> None:
    """Round-robin put every topk=4 config on a1 and every topk=8 on a2: a host difference
    read as a topk effect, and the baseline ran on a1 only."""
    sweep = parse_sweep(
        TWO_HOSTS + "distribute: across-type\nbaseline: true\n"
        "grid:\n  budget: [1, 2]\n  topk: [4, 8]\n"
    )
    plan = plan_sweep(sweep)
    assert [t.host for t in plan if t.is_baseline] == ["a1", "a2"]
    tested = [t for t in plan if not t.is_baseline]
    assert len(tested) == 4 and len({tuple(sorted(t.config.items())) for t in tested}) == 4
    for knob in ("budget", "topk"):
        for value in {t.config[knob] for t in tested}:
            hosts = {t.host for t in tested if t.config[knob] == value}
            assert hosts == {"a1", "a2"}, (knob, value, [(t.config, t.host) for t in tested])
    assert len(plan.for_host("a1")) == len(plan.for_host("a2")) == 3
    assert plan.warnings == ()


def test_across_type_warns_where_it_cannot_spread() -> None:
    sweep = parse_sweep(TWO_HOSTS + "distribute: across-type\ngrid:\n  budget: [1, 2, 3]\n")
    plan = plan_sweep(sweep)
    assert [(t.config["budget"], t.host) for t in plan] == [(1, "a1"), (2, "a2"), (3, "a1")]
    messages = [str(w) for w in plan.warnings]
    assert messages[0].startswith("host type a: no baseline: each of its 2 hosts")
    assert messages[1] == (
        "host type a: budget=1 only on a1, budget=2 only on a2, budget=3 only on a1 (too few "
        "configs to spread them): compare each with its own host's baseline"
    )
    each_host = parse_sweep(TWO_HOSTS + "grid:\n  budget: [1, 2, 3]\n")
    assert plan_sweep(each_host).warnings == ()


def test_absent_is_a_level_that_is_spread_too() -> None:
    sweep = parse_sweep(
        TWO_HOSTS + "distribute: across-type\nbaseline: true\n"
        "grid:\n  budget: [1, 2]\n  window: [null, 2048]\n"
    )
    tested = [t for t in plan_sweep(sweep) if not t.is_baseline]
    assert {t.host for t in tested if "window" not in t.config} == {"a1", "a2"}
    assert {t.host for t in tested if "window" in t.config} == {"a1", "a2"}


def test_plan_json_says_who_runs_what_and_how_long_it_takes() -> None:
    sweep = parse_sweep(
        TWO_HOSTS + "distribute: across-type\nbaseline: true\ngrid:\n  budget: [1, 2, 3]\n"
        "benchmark: {contexts: [60], concurrency: [1, 2], max_tokens: 100, rounds: 2,"
        " warmup_requests: 1}\n"
        "estimate: {restart: 1m, decode_tokens_per_s: 10, prefill_tokens_per_s: 60}\n"
    )
    plan = plan_sweep(sweep)
    document = plan_json(plan, sweep)
    # one wave: 60/60 s reading + 100/10 s writing = 11 s; concurrency 1: 2 rounds + 1
    # warm-up wave, concurrency 2: 2 rounds + 1 warm-up wave -> 6 waves = 66 s
    assert document["estimate"]["per_trial"] == {
        "restart_s": 60.0,
        "benchmark_s": 66.0,
        "coding_s": 0.0,
    }
    assert document["estimate"]["per_trial_s"] == 126.0
    # a1: baseline, budget 1, budget 3 -> 3 trials + its restore; a2: baseline, budget 2
    assert document["estimate"]["per_host_s"] == {"a1": 3 * 126.0 + 60, "a2": 2 * 126.0 + 60}
    assert document["estimate"]["total_s"] == 3 * 126.0 + 60
    assert any("estimate.restart" in line for line in document["estimate"]["assumptions"])
    assert document["distribute"] == "across-type"
    assert [(h["name"], h["host_type"], h["configs"]) for h in document["hosts"]] == [
        ("a1", "a", [{}, {"budget": 1}, {"budget": 3}]),
        ("a2", "a", [{}, {"budget": 2}]),
    ]
    assert document["hosts"][0]["trials"] == [t.key for t in plan.for_host("a1")]
    assert document["hosts"][0]["estimate_s"] == 3 * 126.0 + 60
    assert all(entry["estimate_s"] == 126.0 for entry in document["trials"])
    assert document["warnings"] == [str(w) for w in plan.warnings]


def test_the_estimate_counts_the_coding_problems() -> None:
    sweep = load_sweep(ROOT / "sweeps" / "kimi-k26-dflash-b300.yaml")
    estimate = plan_json(plan_sweep(sweep), sweep)["estimate"]
    assert sweep.coding is not None and sweep.coding.select is not None
    expected = len(sweep.coding.select) * sweep.coding.max_tokens / 50.0  # the default rate
    assert estimate["per_trial"]["coding_s"] == round(expected, 1)


def test_host_type_defaults_to_name_so_across_type_is_each_host_without_types() -> None:
    text = HEAD.replace(", type: a}", "}").replace(", type: b}", "}")
    plan = plan_sweep(parse_sweep(text + "distribute: across-type\nbaseline: true\n"))
    assert [t.host for t in plan] == ["a1", "a2", "a3", "b1"]


def test_plan_json_renders_each_trials_exact_dropin() -> None:
    sweep = load_sweep(ROOT / "sweeps" / "demo.yaml")
    plan = plan_sweep(sweep)
    document = plan_json(plan, sweep)
    assert document["sweep"] == "demo"
    assert len(document["trials"]) == len(plan)
    for entry, trial in zip(document["trials"], plan.trials, strict=True):
        assert {"key", "host", "config", "dropin"} <= set(entry)
        assert entry["key"] == trial.key
        header = parse_dropin_header(entry["dropin"])
        assert header is not None and header.trial == trial.key and header.sweep == "demo"
        exec_lines = [
            line.removeprefix("ExecStart=")
            for line in entry["dropin"].splitlines()
            if line.startswith("ExecStart=")
        ]
        assert exec_lines[0] == ""
        argv = parse_exec_line(exec_lines[1])
        assert argv[:3] == ["/usr/bin/python3", "-m", "orchestrator.sim.sglang_server"]
        assert "--enable-metrics" in argv
        if trial.is_baseline:
            assert "--speculative-algorithm" not in argv
            assert 'UnsetEnvironment="SGLANG_DDTREE_MAX_TOPK"' in entry["dropin"]
        else:
            index = argv.index("--speculative-algorithm")
            assert argv[index + 1] == trial.config["algorithm"]
            assert argv.count("--speculative-algorithm") == 1
    legacy = next(e for e in document["trials"] if "legacy_window" in e["config"])
    assert '"--speculative-dflash-draft-window-size" "2048"' in legacy["dropin"]
    json.dumps(document)


def test_plan_json_without_exec_start_shows_the_delta() -> None:
    sweep = parse_sweep(
        HEAD + "configs:\n  - {algorithm: DDTREE, budget: 8, topk: 4}\nbaseline: true\n"
    )
    entry = plan_json(plan_sweep(sweep), sweep)["trials"][4]
    text = entry["dropin"]
    assert parse_dropin_header(text) is not None
    assert "#   removed: --speculative-algorithm --speculative-ddtree-budget" in text
    assert '#   added:   "--speculative-algorithm" "DDTREE" "--speculative-ddtree-budget" "8"' in (
        text
    )
    assert 'Environment="SGLANG_DDTREE_MAX_TOPK=4"' in text
    assert "ExecStart=" not in text


def test_host_level_spelling_reaches_that_hosts_dropin() -> None:
    text = HEAD.replace(
        '"http://10.0.0.4:30000", type: b}',
        '"http://10.0.0.4:30000", type: b, knobs: {window: {flag: --old-window}}}',
    )
    sweep = parse_sweep(text + "configs:\n  - {window: 2048}\n")
    by_host = {e["host"]: e["dropin"] for e in plan_json(plan_sweep(sweep), sweep)["trials"]}
    assert '"--old-window" "2048"' in by_host["b1"]
    assert '"--speculative-draft-window-size" "2048"' in by_host["a1"]


def test_seed_sweeps_plan_baseline_plus_four_first_then_their_grid_to_the_cap() -> None:
    """Issue 13 gave the seeds' sweeps a grid behind their four configs, and a restart cap."""
    for name in ("kimi-k26-dflash-rtxpro6000", "kimi-k26-dflash-b300"):
        sweep = load_sweep(ROOT / "sweeps" / f"{name}.yaml")
        plan = plan_sweep(sweep)
        assert [t.is_baseline for t in plan] == [True] + [False] * (len(plan) - 1)
        assert len(plan) == sweep.search.max_restarts
        assert len(expand_configs(sweep)) == 1 + 7 * 4 * 3
        dropins = [entry["dropin"] for entry in plan_json(plan, sweep)["trials"]]
        assert "--speculative-dflash-draft-window-size" not in dropins[1]  # budget 8: no window
        assert 'Environment="SGLANG_DDTREE_MAX_TOPK=4"' in dropins[1]
        assert '"--speculative-dflash-draft-window-size" "2048"' in dropins[2]
        assert '"--speculative-ddtree-budget" "16"' in dropins[2]
        assert 'Environment="SGLANG_DDTREE_MAX_TOPK=6"' in dropins[4]
        assert '"--speculative-algorithm" "DFLASH"' not in "".join(dropins[1:])


def test_the_demo_units_command_line_has_each_flag_once() -> None:
    """The simulated hosts' unit runs --enable-metrics and the demo sweep added it again."""
    sweep = load_sweep(ROOT / "sweeps" / "demo.yaml")
    for trial in plan_sweep(sweep):
        knobs = sweep.host(trial.host).effective_knobs(sweep.server.knobs)
        invocation = apply_knobs(
            sglang_argv("127.0.0.11"),
            {},
            knobs,
            trial.config,
            sweep.server.extra_flags,
            sweep.server.environment,
        )
        flags = [arg.flag for arg in flag_args(invocation.argv[1:]) if not isinstance(arg, str)]
        assert len(flags) == len(set(flags)), (trial.key, invocation.argv)
        assert "--enable-metrics" in flags


DEADLINE_SWEEP = (
    TWO_HOSTS + "baseline: true\ngrid:\n  budget: [1, 2, 3]\n"
    "benchmark: {contexts: [60], concurrency: [1], max_tokens: 100, rounds: 1,"
    " warmup_requests: 0}\n"
)


def test_plan_warns_when_its_estimate_overruns_finish_by() -> None:
    """Issue 22: with finish_by 3 minutes away only the baselines ran, and plan had said
    nothing. The estimate (default restart, 5m: the load time is unknown before a run) is
    compared with the time from the start to the deadline, and the warning says what it
    assumes."""
    sweep = parse_sweep(DEADLINE_SWEEP + "schedule: {finish_by: '09:00'}\n")
    now = dt.datetime(2026, 12, 3, 8, 57)
    document = plan_json(plan_sweep(sweep), sweep, now=now)
    deadline = document["deadline"]
    assert deadline["overruns"] is True
    assert deadline["available_s"] == 180.0
    assert deadline["start_from"] == "now"
    assert deadline["estimate_s"] == document["estimate"]["total_s"] > 180.0
    warning = deadline["warning"]
    assert warning in document["warnings"]
    assert warning.startswith("schedule.finish_by 09:00: started now (08:57), the sweep has 3m")
    assert "an estimate, not a measurement" in warning
    assert "5m per restart (estimate.restart's default; the load time is unknown" in warning
    assert "part of the plan not measured" in warning


def test_finish_by_counts_from_not_before_and_a_plan_that_fits_is_not_warned() -> None:
    sweep = parse_sweep(
        DEADLINE_SWEEP
        + "schedule: {not_before: '22:00', finish_by: '07:00'}\nestimate: {restart: 6m}\n"
    )
    document = plan_json(plan_sweep(sweep), sweep, now=dt.datetime(2026, 12, 3, 14, 0))
    deadline = document["deadline"]
    assert deadline["start"] == "2026-12-03T22:00" and deadline["available_s"] == 9 * 3600
    assert deadline["overruns"] is False and deadline["warning"] is None
    assert "6m per restart (estimate.restart)" in deadline["assumes"]
    assert not any("finish_by" in w for w in document["warnings"])
    no_deadline = parse_sweep(DEADLINE_SWEEP)
    assert plan_json(plan_sweep(no_deadline), no_deadline)["deadline"] is None


def test_a_search_plan_says_it_explores_less_under_the_deadline() -> None:
    sweep = parse_sweep(
        DEADLINE_SWEEP
        + "search: {strategy: random, max_restarts: 4}\nschedule: {finish_by: '09:00'}\n"
    )
    document = plan_json(plan_sweep(sweep), sweep, now=dt.datetime(2026, 12, 3, 8, 57))
    warning = document["deadline"]["warning"]
    assert "all 4 starts per host type at full fidelity" in warning
    assert "the search will explore less and stop for the deadline" in warning


def test_the_plan_command_warns_on_stderr_and_in_its_json(tmp_path: Path) -> None:
    soon = (dt.datetime.now() + dt.timedelta(minutes=2)).strftime("%H:%M")
    path = tmp_path / "soon.yaml"
    path.write_text(DEADLINE_SWEEP + f"schedule: {{finish_by: '{soon}'}}\n")
    command = [sys.executable, "-m", "orchestrator.cli", "plan", str(path)]
    shown = subprocess.run(command, capture_output=True, text=True, timeout=60, check=False)
    assert shown.returncode == 0, shown.stderr
    assert f"warning: schedule.finish_by {soon}: started now" in shown.stderr
    assert "for the sweep, from the assumptions below, not from measurements" in shown.stdout
    as_json = subprocess.run(
        [*command, "--json"], capture_output=True, text=True, timeout=60, check=False
    )
    assert json.loads(as_json.stdout)["deadline"]["overruns"] is True
    assert f"warning: schedule.finish_by {soon}" in as_json.stderr
