"""A whole sweep through `orchestrator run` against a REAL systemd + journald + sshd host."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
from pathlib import Path

from orchestrator.host.dropin import ADOPTED_DROPIN_NAME
from tests.realhost.realhost import RealHost
from tests.realhost.test_lifecycle_real import UNIT, _install_host


def _sweep_file(host: RealHost, path: Path) -> Path:
    path.write_text(
        textwrap.dedent(
            f"""\
            name: realhost-e2e
            hosts:
              - name: {host.name}
                address: {host.address}
                port: {host.port}
                user: root
                identity_file: {host.identity_file}
                known_hosts: {host.known_hosts}
                base_url: http://{host.address}:30000
            server:
              unit: {UNIT}
              model: kimi-k2.6
              knobs:
                algorithm: {{flag: --speculative-algorithm}}
                block: {{flag: --speculative-num-draft-tokens}}
                window: {{flag: --speculative-draft-window-size}}
                legacy_window: {{flag: --speculative-dflash-draft-window-size}}
            baseline: true
            configs:
              - {{algorithm: DFLASH, block: 16, window: 2048}}
              - {{algorithm: DFLASH, block: 16, window: 8}}
              - {{algorithm: DFLASH, legacy_window: 2048}}
            benchmark:
              contexts: [60]
              concurrency: [1, 2]
              max_tokens: 128
              rounds: 1
              warmup_requests: 1
            coding:
              select: [fib]
              max_tokens: 2048
            objective: {{metric: output_tok_s, context: 60, concurrency: 2}}
            timeouts: {{connect: 15, stop: 30, memory_release: 20, ready: 40, request: 60}}
            policy: {{trial_retries: 0, restore: as-found}}
            """
        )
    )
    return path


def _key(config: dict[str, object]) -> str:
    return json.dumps(config, sort_keys=True)


def test_sweep_runs_and_restores(real_host: RealHost, tmp_path: Path) -> None:
    _install_host(
        real_host,
        {"time_scale": 0.05, "load_s": 10.0, "warmup_s": 2.0, "stop_delay_s": 2.0,
         "coding_wrong_rate": 0.0},
    )
    real_host.ssh(["systemctl", "start", UNIT])
    before = {p.name: p.read_bytes() for p in real_host.unit_dir.rglob("*") if p.is_file()}
    sweep = _sweep_file(real_host, tmp_path / "sweep.yaml")
    result = subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", "run", str(sweep), "--db",
         str(tmp_path / "o.db"), "--json"],
        capture_output=True, text=True, timeout=400,
    )  # fmt: skip
    assert result.returncode == 1, result.stderr[-3000:]  # two configs fail by design
    results = json.loads(result.stdout)
    by_config = {_key(t["config"]): t for t in results["trials"]}
    baseline = by_config["{}"]
    assert baseline["state"] == "done", baseline
    good = by_config[_key({"algorithm": "DFLASH", "block": 16, "window": 2048})]
    assert good["state"] == "done", good
    throughput = [p for p in good["points"] if p["kind"] == "throughput"]
    kinds = sorted((p["kind"], p["concurrency"]) for p in throughput)
    assert kinds == [("throughput", 1), ("throughput", 2)]
    accept = [p["accept_len"] for p in good["points"] if p["kind"] == "throughput"]
    # Both sources of THIS run: the journal window between the point's cursors and /metrics.
    assert all(a["accept_len_journal"] and a["accept_len_metrics"] for a in accept), accept
    for a in accept:  # sources that disagree by more than 5% are flagged, never averaged away
        apart = abs(a["accept_len_journal"] / a["accept_len_metrics"] - 1) > 0.05
        assert apart == ("disagree" in a["accept_len_flags"]), a
    coding = [p for p in good["points"] if p["kind"] == "coding"]
    assert [p["metrics"]["outcome"] for p in coding] == ["pass"]
    invalid = by_config[_key({"algorithm": "DFLASH", "block": 16, "window": 8})]
    assert (invalid["state"], invalid["cause"]) == ("failed", "invalid-config")
    flag = by_config[_key({"algorithm": "DFLASH", "legacy_window": 2048})]
    assert (flag["state"], flag["cause"]) == ("failed", "bad-flag")
    assert flag["evidence"]["found_by"] == "preflight"

    after = {p.name: p.read_bytes() for p in real_host.unit_dir.rglob("*") if p.is_file()}
    assert after == before
    show = real_host.ssh(["systemctl", "show", "-p", "ActiveState", UNIT]).stdout.decode()
    assert "ActiveState=active" in show

    # The answer, adopted as the unit's lasting config on real systemd, then undone.
    db = str(tmp_path / "o.db")
    adopt = _cli("adopt", "realhost-e2e", "--type", real_host.name, "--db", db, "--allow-tie")
    assert adopt.returncode == 0, adopt.stderr[-3000:]
    adoption = json.loads(adopt.stdout)
    assert adoption["ok"], adoption
    adopted = {p.name for p in real_host.unit_dir.rglob("*") if p.is_file()} - set(before)
    assert adopted == {ADOPTED_DROPIN_NAME}
    show = real_host.ssh(["systemctl", "show", "-p", "ActiveState,DropInPaths", UNIT])
    assert "ActiveState=active" in show.stdout.decode()
    assert ADOPTED_DROPIN_NAME in show.stdout.decode()
    undo = _cli("restore", "--all", "--db", db)
    assert undo.returncode == 0, undo.stderr[-3000:]
    assert json.loads(undo.stdout)["restored"][0]["ok"]
    again = {p.name: p.read_bytes() for p in real_host.unit_dir.rglob("*") if p.is_file()}
    assert again == before
    show = real_host.ssh(["systemctl", "show", "-p", "ActiveState", UNIT]).stdout.decode()
    assert "ActiveState=active" in show


def _cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "orchestrator.cli", *args, "--json"],
        capture_output=True, text=True, timeout=300,
    )  # fmt: skip
