"""The daemon's HTTP API against a real daemon process: access, limits, submit semantics, the
report it renders."""

from __future__ import annotations

import hashlib
import io
import os
import sqlite3
import stat
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from rich.console import Console

from orchestrator import store as store_types
from orchestrator.api import sweep_status
from orchestrator.store import NewTrial, Store
from orchestrator.sweepview import SweepView
from orchestrator.verbs.apiclient import call
from orchestrator.verbs.status import print_sweep
from tests.integration.daemon_proc import (
    ORCHESTRATOR,
    DaemonProcess,
    HostEntry,
    UntrustedSSHServer,
    clock_a_minute_ago,
    free_port,
    running_daemon,
    sweep_yaml,
    tcp_config,
)

TOKEN = "t0ken-for-the-api-tests-0123456789"


@pytest.fixture
def daemon(tmp_path: Path) -> Iterator[DaemonProcess]:
    with running_daemon(tmp_path / "state") as process:
        yield process


@pytest.fixture(scope="module")
def untrusted() -> Iterator[UntrustedSSHServer]:
    with UntrustedSSHServer() as server:
        yield server


def waiting_sweep(tmp_path: Path, name: str, port: int, *, budget: int = 4) -> str:
    """A sweep that waits for its not_before time (about a day); once stopped, its host
    (an SSH server nobody trusts) is set aside at once."""
    host = HostEntry(f"h-{name}", port)
    return sweep_yaml(
        name, [host], tmp_path / "keys", budget=budget, not_before=clock_a_minute_ago()
    )


def test_socket_is_private(daemon: DaemonProcess) -> None:
    mode = daemon.socket.lstat().st_mode
    assert stat.S_ISSOCK(mode) and stat.S_IMODE(mode) == 0o600
    assert stat.S_IMODE(daemon.state_dir.stat().st_mode) == 0o700


def test_tcp_needs_the_bearer_token(tmp_path: Path) -> None:
    import urllib.error
    import urllib.request

    config, port = tcp_config(tmp_path, TOKEN)

    def get(headers: dict[str, str]) -> tuple[int, bytes]:
        request = urllib.request.Request(f"http://127.0.0.1:{port}/sweeps", headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return response.status, response.read()
        except urllib.error.HTTPError as error:
            return error.code, error.read()

    with running_daemon(tmp_path / "state", "--config", str(config)):
        status, body = get({})
        assert status == 401 and b"Bearer" in body
        assert get({"Authorization": "Bearer wrong-token"})[0] == 401
        assert get({"Authorization": TOKEN})[0] == 401
        status, body = get({"Authorization": f"Bearer {TOKEN}"})
        assert status == 200 and body == b'{"sweeps": []}'


def test_daemon_refuses_a_readable_token_or_a_public_address(tmp_path: Path) -> None:
    token_file = tmp_path / "token"
    token_file.write_text(TOKEN)
    token_file.chmod(0o644)
    config = tmp_path / "daemon.yaml"
    config.write_text(f"tcp: 127.0.0.1:{free_port()}\ntoken_file: {token_file}\n")
    state = ["--state-dir", str(tmp_path / "state")]
    result = subprocess.run(
        [*ORCHESTRATOR, "daemon", "--config", str(config), *state],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 1 and "chmod 600" in result.stderr
    config.write_text(f"tcp: 0.0.0.0:{free_port()}\ntoken_file: {token_file}\n")
    result = subprocess.run(
        [*ORCHESTRATOR, "daemon", "--config", str(config), *state],
        capture_output=True,
        text=True,
        timeout=30,
    )
    assert result.returncode == 2 and "not a loopback address" in result.stderr


def test_oversized_body_is_413(daemon: DaemonProcess) -> None:
    response = call(daemon.socket, "POST", "/sweeps", body=b"#" * (1024 * 1024 + 1))
    assert response.status == 413
    assert "over" in response.document["error"]


def test_invalid_sweep_is_400_with_every_problem(daemon: DaemonProcess) -> None:
    response = call(
        daemon.socket,
        "POST",
        "/sweeps",
        body=b"name: x\nhostz: []\n",
        headers={"X-Sweep-Filename": "mine.yaml"},
    )
    assert response.status == 400
    problems = response.document["problems"]
    assert {"file": "mine.yaml", "line": 2, "field": "hostz"}.items() <= problems[-1].items()
    assert len(problems) >= 2
    assert call(daemon.socket, "GET", "/sweeps").document == {"sweeps": []}
    assert call(daemon.socket, "POST", "/sweeps", body=b"\xff\xfe").status == 400


def test_same_file_twice_is_one_sweep_and_other_content_needs_replace(
    daemon: DaemonProcess, tmp_path: Path, untrusted: UntrustedSSHServer
) -> None:
    first = waiting_sweep(tmp_path, "nightly", untrusted.port).encode()
    created = call(daemon.socket, "POST", "/sweeps", body=first)
    assert created.status == 201 and created.document["created"] is True
    again = call(daemon.socket, "POST", "/sweeps", body=first)
    assert again.status == 200 and again.document["created"] is False
    assert again.document["id"] == created.document["id"]

    other = waiting_sweep(tmp_path, "nightly", untrusted.port, budget=8)
    path = tmp_path / "other.yaml"
    path.write_text(other)
    conflict = call(daemon.socket, "POST", "/sweeps", body=other.encode())
    assert conflict.status == 409 and "--replace" in conflict.document["error"]
    assert conflict.document["existing"]["id"] == created.document["id"]
    cli = daemon.cli("submit", str(path))
    assert cli.returncode == 2 and "--replace" in cli.stderr

    replaced = daemon.cli("submit", str(path), "--replace", "--json")
    assert replaced.returncode == 0
    document = replaced.json()
    assert document["created"] is True and document["replaced"] == created.document["id"]
    listed = call(daemon.socket, "GET", "/sweeps").document["sweeps"]
    assert [(s["name"], s["id"]) for s in listed] == [("nightly", document["id"])]
    everything = call(daemon.socket, "GET", "/sweeps", params={"all": "1"}).document["sweeps"]
    old = next(s for s in everything if s["id"] == created.document["id"])
    assert old["replaced_by"] == document["id"]
    assert old["state"] == "cancelled"  # it was running (waiting): stopped, hosts restored
    # A name means the latest run; the old one stays reachable by id.
    assert call(daemon.socket, "GET", "/sweeps/nightly").document["id"] == document["id"]
    by_id = call(daemon.socket, "GET", f"/sweeps/{created.document['id']}/results")
    assert by_id.status == 200 and by_id.document["id"] == created.document["id"]


def test_refs_and_unknown_paths_are_refused_without_traces(daemon: DaemonProcess) -> None:
    for path in ("/sweeps/..%2F..%2Fetc%2Fpasswd", "/sweeps/%2E%2E/results", "/sweeps/a%00b"):
        response = call(daemon.socket, "GET", path)
        assert response.status in (400, 404), path
        assert "Traceback" not in str(response.document)
    assert call(daemon.socket, "GET", "/sweeps/nope").status == 404
    assert call(daemon.socket, "POST", "/sweeps/nope/cancel").status == 404
    assert call(daemon.socket, "GET", "/nowhere").status == 404
    assert call(daemon.socket, "DELETE", "/sweeps").status == 405
    bad_restore = call(daemon.socket, "POST", "/restore", body=b'{"host": "a", "all": true}')
    assert bad_restore.status == 400
    assert call(daemon.socket, "POST", "/restore", body=b"[1]").status == 400


def test_restore_with_nothing_pending(daemon: DaemonProcess) -> None:
    response = call(daemon.socket, "POST", "/restore", body=b'{"all": true}')
    assert response.status == 200 and response.document == {"restored": []}
    cli = daemon.cli("restore", "--all", "--json")
    assert cli.returncode == 0 and cli.json() == {"restored": []}
    unknown = daemon.cli("restore", "gpu-1")  # no sweep names it: a typo, not "nothing to do"
    assert unknown.returncode == 2 and "unknown host 'gpu-1'" in unknown.stderr
    assert daemon.cli("restore").returncode == 2  # a host or --all


def test_socket_access_is_its_file_mode(daemon: DaemonProcess, tmp_path: Path) -> None:
    """A user other than the owner cannot connect (root bypasses modes, so drop to nobody)."""
    if os.geteuid() != 0:
        pytest.skip("needs root to run a client as another user")
    import pwd

    nobody = pwd.getpwnam("nobody")
    script = (
        "import socket,sys\n"
        "s=socket.socket(socket.AF_UNIX)\n"
        "try:\n s.connect(sys.argv[1])\nexcept PermissionError:\n sys.exit(13)\n"
    )
    daemon.state_dir.chmod(0o755)  # let nobody reach the socket file, so its own mode decides
    try:
        result = subprocess.run(
            ["python3", "-c", script, str(daemon.socket)],
            user=nobody.pw_uid,
            group=nobody.pw_gid,
            capture_output=True,
            timeout=30,
        )
    finally:
        daemon.state_dir.chmod(0o700)
    assert result.returncode == 13


async def test_status_names_each_hosts_config_by_its_knob_values(tmp_path: Path) -> None:
    """`status SWEEP` showed the runner's trial key; it shows the config's knob values, and
    counts trials by their latest attempt without reading a point."""
    async with await Store.open(tmp_path / "store.db") as store:
        sweep = (await store.submit_sweep("live", "name: live\n")).sweep
        await store.add_hosts(
            sweep.id,
            [store_types.HostEntry("gpu-a", "h200"), store_types.HostEntry("gpu-b", "h200")],
        )
        base, b8 = await store.add_trials(
            sweep.id,
            [
                NewTrial("a1b2c3d4e5f6", "gpu-a", {}, 0, is_baseline=True),
                NewTrial("f6e5d4c3b2a1", "gpu-a", {"algorithm": "DDTREE", "budget": 8}, 1),
            ],
        )
        await store.set_sweep_state(sweep.id, "running")
        await store.finish_attempt((await store.start_attempt(base.id)).id, "done")
        await store.start_attempt(b8.id)
        await store.set_host_aside(sweep.id, "gpu-b", "preflight failed: no GPU")
        record = await store.get_sweep(sweep.id)
        live = {"gpu-a": {"trial": "f6e5d4c3b2a1", "step": "ctx 60 x c4", "done": 2, "total": 9}}
        status = await sweep_status(store, SweepView(record, active=True), live)

    document = status.to_json()
    assert document["trials"] == {"done": 1, "running": 1}
    assert document["active"] is True and document["name"] == "live"
    (gpu_a, gpu_b) = document["hosts"]
    assert gpu_a["current"]["config"] == "algorithm=DDTREE budget=8"
    assert gpu_b == {"name": "gpu-b", "set_aside": "preflight failed: no GPU", "current": None}
    console = Console(file=io.StringIO(), width=200)
    print_sweep(document, console)
    shown = console.file.getvalue()  # type: ignore[attr-defined]
    assert "gpu-a: algorithm=DDTREE budget=8 ctx 60 x c4 2/9" in shown
    assert "f6e5d4c3b2a1" not in shown and "f6e5d4" not in shown


def test_submit_carries_the_workload_files_content_and_refuses_a_bad_line(
    daemon: DaemonProcess, untrusted: UntrustedSSHServer, tmp_path: Path
) -> None:
    good = '{"messages": [{"role": "user", "content": "Summarise RFC 9110."}]}\n'
    sample = tmp_path / "traffic.jsonl"
    path = tmp_path / "traffic.yaml"
    path.write_text(
        waiting_sweep(tmp_path, "traffic", untrusted.port)
        + "benchmark:\n  workload: {file: traffic.jsonl}\n"
    )
    sample.write_text(good + "{oops\n")
    refused = daemon.cli("submit", str(path))
    assert refused.returncode == 2 and f"{sample}:2: not JSON" in refused.stderr
    assert call(daemon.socket, "GET", "/sweeps").document["sweeps"] == []  # nothing queued

    good *= 20_000  # over the YAML body's 1 MiB: the JSON body is read whole, past it
    sample.write_text(good)
    assert daemon.cli("submit", str(path)).returncode == 0
    sample.unlink()  # the daemon parses and runs it from the stored content alone
    deadline = time.monotonic() + 30
    while not call(daemon.socket, "GET", "/sweeps/traffic").document["active"]:
        assert time.monotonic() < deadline, "the scheduler never started the sweep"
        time.sleep(0.1)
    # Started, not failed: the scheduler parsed it from the stored text and workload content.
    assert call(daemon.socket, "GET", "/sweeps/traffic").document["state"] != "failed"
    db = sqlite3.connect(f"file:{daemon.state_dir / 'orchestrator.db'}?mode=ro", uri=True)
    try:
        rows = db.execute("SELECT path, content, content_hash FROM sweep_workloads").fetchall()
    finally:
        db.close()
    assert rows == [("traffic.jsonl", good, hashlib.sha256(good.encode()).hexdigest())]


def test_report_over_the_socket_is_the_daemons_store_rendered(
    daemon: DaemonProcess, tmp_path: Path, untrusted: UntrustedSSHServer
) -> None:
    """`report --socket`: the daemon renders the report from its own store, as `results`
    reads its results; an operator without the daemon's store file gets the same page."""
    for name in ("nightly", "other"):
        text = waiting_sweep(tmp_path, name, untrusted.port).encode()
        assert call(daemon.socket, "POST", "/sweeps", body=text).status == 201
    socket = str(daemon.socket)

    md = daemon.cli("report", "nightly", "--socket", socket)
    assert md.returncode == 0, md.stderr
    assert md.stdout.startswith("# Sweep report: nightly")

    out = tmp_path / "both.html"
    html = daemon.cli("report", "nightly", "other", "--socket", socket, "-o", str(out))
    assert html.returncode == 0, html.stderr
    page = out.read_text()
    assert page.lstrip().lower().startswith("<!doctype html") and "other" in page

    raw = call(daemon.socket, "GET", "/sweeps/nightly/report", params={"format": "csv"})
    assert raw.status == 200 and raw.text.splitlines()[0]

    missing = daemon.cli("report", "nope", "--socket", socket)
    assert missing.returncode == 2 and "nope" in missing.stderr
    bad = call(daemon.socket, "GET", "/sweeps/nightly/report", params={"format": "pdf"})
    assert bad.status == 400
    both = daemon.cli("report", "nightly", "--socket", socket, "--db", str(tmp_path / "x.db"))
    assert both.returncode == 2  # one source or the other
