"""Security, proven on a real run: a token-protected daemon runs a simulated sweep on two hosts,
one of which presents a CHANGED host key. The changed host is refused before any command runs
on it (host-key verification is on by default), the other completes, and then every output of
the run is searched for the private key's contents and the API token: the daemon's and the
simulator's stdout/stderr, the API's answers, ``results``, every report format, the inbox and
state files, and every row of the store (events and evidence included). None may hold either.
"""

from __future__ import annotations

import base64
import fcntl
import json
import os
import pickle
import secrets
import sqlite3
import subprocess
import time
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import asyncssh
import pytest
import yaml

from tests.integration.daemon_proc import ORCHESTRATOR, free_port, stop_process

SIM_ADDRESS = "127.0.0.141"  # and .142 for the second host
API_ADDRESS = "127.0.0.143"


@dataclass
class Run:
    root: Path
    token: str
    key_path: Path
    sweep: dict[str, Any]
    outputs: dict[str, bytes]
    status: dict[str, Any]
    changed_host_root: Path


def _api(port: int, token: str, method: str, path: str, body: bytes | None = None) -> Any:
    request = urllib.request.Request(
        f"http://{API_ADDRESS}:{port}{path}",
        data=body,
        method=method,
        headers={"Authorization": f"Bearer {token}", "X-Sweep-Filename": "secrets.yaml"},
    )
    try:
        with urllib.request.urlopen(request, timeout=30) as response:
            return response.status, response.read()
    except urllib.error.HTTPError as error:
        return error.code, error.read()


def _shrink(sweep: dict[str, Any], changed_known_hosts: Path) -> dict[str, Any]:
    """The simulator's sweep made small: baseline + one config, one context, one problem; the
    second host gets a known_hosts whose key for it is someone else's."""
    sweep["name"] = "secrets"
    sweep["configs"] = sweep["configs"][:1]
    sweep["benchmark"].update(contexts=[60], concurrency=[1], max_tokens=32)
    sweep["coding"]["select"] = sweep["coding"]["select"][:1]
    sweep["hosts"][1]["known_hosts"] = str(changed_known_hosts)
    sweep["timeouts"]["connect"] = 5
    return sweep


@pytest.fixture(scope="module")
def run(tmp_path_factory: pytest.TempPathFactory, worker_id: str) -> Run:
    """The run, made once per test session: its tests may land on different pytest-xdist
    workers, and each would otherwise repeat the whole run (a sweep, a daemon, eight CLI
    calls, four reports). The first worker makes it under a lock in the directory the
    session's workers share; the others read what it left (every process is stopped by then,
    so only files and data remain)."""
    if worker_id == "master":  # not a parallel run
        return _make_run(tmp_path_factory.mktemp("secrets"))
    shared = tmp_path_factory.getbasetemp().parent  # this session's, shared by its workers
    made = shared / "secrets-run.pickle"
    with (shared / "secrets-run.lock").open("a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        if made.exists():
            loaded: Run = pickle.loads(made.read_bytes())
            return loaded
        root = shared / "secrets"
        root.mkdir()
        made_run = _make_run(root)
        made.write_bytes(pickle.dumps(made_run))
        return made_run


def _make_run(root: Path) -> Run:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    sim_out, sim_err = root / "sim.stdout", root / "sim.stderr"
    sim = subprocess.Popen(
        [*ORCHESTRATOR, "sim", "up", "--hosts", "2", "--json", "--time-scale", "0.05",
         "--state-dir", str(root / "sim"), "--base-address", SIM_ADDRESS,
         "--port", str(free_port(SIM_ADDRESS))],
        stdout=sim_out.open("wb"), stderr=sim_err.open("wb"), env=env,
    )  # fmt: skip
    daemon: subprocess.Popen[bytes] | None = None
    try:
        deadline = time.monotonic() + 60
        while not sim_out.read_bytes().endswith(b"\n"):
            assert sim.poll() is None and time.monotonic() < deadline, sim_err.read_text()
            time.sleep(0.2)
        announced = json.loads(sim_out.read_text().splitlines()[0])
        key_path = Path(announced["hosts"][0]["identity_file"])
        changed = root / "changed_known_hosts"
        second = announced["hosts"][1]
        stranger = asyncssh.generate_private_key("ssh-ed25519").export_public_key().decode()
        changed.write_text(f"[{second['address']}]:{second['port']} {stranger.strip()}\n")
        sweep = _shrink(yaml.safe_load(Path(announced["sweep_file"]).read_text()), changed)
        sweep_text = yaml.safe_dump(sweep, sort_keys=False)

        token = secrets.token_urlsafe(32)
        token_file = root / "token"
        token_file.write_text(token + "\n")
        token_file.chmod(0o600)
        port = free_port(API_ADDRESS)
        config = root / "daemon.yaml"
        config.write_text(f"tcp: {API_ADDRESS}:{port}\ntoken_file: {token_file}\n")
        state = root / "state"
        daemon = subprocess.Popen(
            [*ORCHESTRATOR, "--log-level", "debug", "daemon", "--state-dir", str(state),
             "--config", str(config)],
            stdout=(root / "daemon.stdout").open("wb"),
            stderr=(root / "daemon.stderr").open("wb"),
            env=env,
        )  # fmt: skip
        outputs: dict[str, bytes] = {}
        deadline = time.monotonic() + 30
        while True:
            try:
                if _api(port, token, "GET", "/health")[0] == 200:
                    break
            except OSError:
                pass
            assert daemon.poll() is None and time.monotonic() < deadline
            time.sleep(0.2)
        code, body = _api(port, token, "POST", "/sweeps", sweep_text.encode())
        outputs["api.submit"] = body
        assert code == 201, body
        deadline = time.monotonic() + 240
        while True:
            code, body = _api(port, token, "GET", "/sweeps/secrets")
            status = json.loads(body)
            if status["state"] not in ("queued", "running"):
                break
            assert time.monotonic() < deadline, status
            time.sleep(1)
        outputs["api.status"] = body
        outputs["api.results"] = _api(port, token, "GET", "/sweeps/secrets/results")[1]
        outputs["api.list"] = _api(port, token, "GET", "/sweeps?all=1")[1]
        client_env = {**env, "ORCHESTRATOR_SOCKET": str(state / "orchestrator.sock")}
        for args in (["results", "secrets", "--json"], ["results", "secrets"],
                     ["status", "--json"], ["status", "secrets"]):  # fmt: skip
            done = subprocess.run(
                [*ORCHESTRATOR, *args], capture_output=True, timeout=60, env=client_env
            )
            outputs[f"cli.{' '.join(args)}"] = done.stdout + done.stderr
        db = state / "orchestrator.db"
        for fmt in ("md", "html", "csv", "json"):
            target = root / f"report.{fmt}"
            done = subprocess.run(
                [*ORCHESTRATOR, "report", "secrets", "--db", str(db), "--format", fmt,
                 "--requests", "-o", str(target)],
                capture_output=True, timeout=120, env=env,
            )  # fmt: skip
            assert done.returncode == 0, done.stderr
            outputs[f"report.{fmt}"] = target.read_bytes() + done.stdout + done.stderr
        stop_process(daemon)
        stop_process(sim)
        outputs["store.rows"] = _dump_store(db)
        for path in sorted(root.rglob("*")):
            if path.is_file() and path != key_path and path.suffix not in (".db", ".db-wal"):
                if path.name in ("token", "id_ed25519") or path.name.startswith("ssh_host_"):
                    continue
                outputs[f"file:{path.relative_to(root)}"] = path.read_bytes()
        return Run(
            root, token, key_path, sweep, outputs, status,
            root / "sim" / "hosts" / second["name"],
        )  # fmt: skip
    finally:
        for process in (daemon, sim):
            if process is not None:
                stop_process(process)


def _dump_store(db: Path) -> bytes:
    """Every row of every table, as text (blobs decoded as far as they go)."""
    lines = []
    with sqlite3.connect(db) as connection:
        for line in connection.iterdump():
            lines.append(line)
    return "\n".join(lines).encode()


def _key_fragments(key_path: Path) -> list[bytes]:
    """Pieces of the private key any leak would contain: its armoured lines and raw bytes."""
    text = key_path.read_text()
    body = [line for line in text.splitlines() if line and not line.startswith("-----")]
    raw = base64.b64decode("".join(body))
    fragments = [line.encode() for line in body if len(line) >= 16]
    fragments += [raw[i : i + 24] for i in range(0, len(raw) - 24, 24)]
    fragments.append(base64.b64encode(raw[-48:]))
    return fragments


def test_the_run_happened_as_planned(run: Run) -> None:
    assert run.status["state"] in ("done", "failed"), run.status
    hosts = {h["name"]: h for h in run.status["hosts"]}
    first, second = (h["name"] for h in run.sweep["hosts"])
    assert hosts[second]["set_aside"], hosts
    assert not hosts[first]["set_aside"], hosts
    results = json.loads(run.outputs["api.results"])
    states = {(t["host"], t["state"]) for t in results["trials"]}
    assert (first, "done") in states, states
    assert all(state != "done" for host, state in states if host == second), states


def test_a_changed_host_key_is_refused_before_anything_runs(run: Run) -> None:
    everything = b"\n".join(run.outputs.values()).decode(errors="replace").lower()
    assert "host key" in everything
    units = run.changed_host_root / "root" / "etc" / "systemd" / "system"
    assert units.is_dir()
    assert not (units / "sglang.service.d").exists(), "a drop-in reached the refused host"


def test_neither_the_private_key_nor_the_token_appears_anywhere(run: Run) -> None:
    fragments = _key_fragments(run.key_path)
    token = run.token.encode()
    assert len(run.outputs) > 15, sorted(run.outputs)
    for name, content in run.outputs.items():
        assert token not in content, f"the API token is in {name}"
        assert b"PRIVATE KEY-----" not in content, f"a private key is in {name}"
        for fragment in fragments:
            assert fragment not in content, f"the private key's contents are in {name}"


def test_the_grep_would_have_found_them(run: Run) -> None:
    """The control: the search above finds the secrets where they are."""
    token_file = (run.root / "token").read_bytes()
    assert run.token.encode() in token_file
    key = run.key_path.read_bytes()
    assert any(fragment in key for fragment in _key_fragments(run.key_path))


def test_private_files_have_private_modes(run: Run) -> None:
    state = run.root / "state"
    assert (state.stat().st_mode & 0o777) == 0o700
    db = state / "orchestrator.db"
    assert db.stat().st_mode & 0o077 == 0, oct(db.stat().st_mode)
