"""The daemon's API against hostile requests over its loopback TCP listener (bearer token) and its
unix socket: refused cleanly with a JSON error and the right status, never a stack trace, never
a file touched outside the state directory, and the daemon still answers afterwards."""

from __future__ import annotations

import http.client
import json
import secrets
import socket
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

from orchestrator.verbs.apiclient import call
from tests.integration.daemon_proc import DaemonProcess, free_port, running_daemon

ADDRESS = "127.0.0.140"


@dataclass
class Api:
    daemon: DaemonProcess
    port: int
    token: str

    def request(
        self,
        method: str,
        path: str,
        *,
        body: bytes | None = None,
        headers: dict[str, str] | None = None,
        token: str | None = "default",
    ) -> tuple[int, bytes]:
        sent = dict(headers or {})
        if token == "default":
            sent["Authorization"] = f"Bearer {self.token}"
        elif token is not None:
            sent["Authorization"] = token
        connection = http.client.HTTPConnection(ADDRESS, self.port, timeout=15)
        try:
            connection.request(method, path, body=body, headers=sent)  # path sent as is
            response = connection.getresponse()
            return response.status, response.read()
        finally:
            connection.close()


@pytest.fixture(scope="module")
def api(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Api]:
    root = tmp_path_factory.mktemp("hostile-api")
    token = secrets.token_urlsafe(32)
    token_file = root / "token"
    token_file.write_text(token + "\n")
    token_file.chmod(0o600)
    port = free_port(ADDRESS)
    config = root / "daemon.yaml"
    config.write_text(f"tcp: {ADDRESS}:{port}\ntoken_file: {token_file}\n")
    with running_daemon(root / "state", "--config", str(config)) as daemon:
        yield Api(daemon, port, token)


def _clean_error(status: int, body: bytes) -> dict[str, object]:
    """A refusal: a JSON object with an ``error`` string, and no trace of Python inside."""
    text = body.decode("utf-8", errors="replace")
    assert "Traceback" not in text and 'File "' not in text and ".py" not in text, text
    document = json.loads(text)
    assert isinstance(document, dict) and isinstance(document.get("error"), str), document
    return document


@pytest.mark.parametrize(
    "authorization",
    [
        None,
        "",
        "Bearer",
        "Bearer ",
        "Bearer wrong",
        "bearer {token}",
        "Basic {token}",
        "{token}",
        "Bearer  {token}",
        "Bearer {token}x",
        "Bearer {prefix}",
    ],
)
def test_bad_or_missing_token_is_401(api: Api, authorization: str | None) -> None:
    value = (
        None
        if authorization is None
        else authorization.format(token=api.token, prefix=api.token[:-1])
    )
    for method, path, body in (("GET", "/sweeps", None), ("POST", "/sweeps", b"name: x\n"),
                               ("POST", "/restore", b'{"all": true}')):  # fmt: skip
        status, raw = api.request(method, path, body=body, token=value)
        assert status == 401, (authorization, path, raw)
        document = _clean_error(status, raw)
        assert api.token not in raw.decode(errors="replace")
        assert "Bearer" in str(document["error"])


def test_token_in_the_query_string_is_not_accepted(api: Api) -> None:
    status, _ = api.request("GET", f"/sweeps?token={api.token}", token=None)
    assert status == 401


def test_oversized_bodies_are_413_with_a_token_and_401_without(api: Api) -> None:
    big = b"#" * (1024 * 1024 + 1)
    status, raw = api.request("POST", "/sweeps", body=big)
    assert status == 413 and "over" in str(_clean_error(status, raw)["error"])
    status, raw = api.request("POST", "/sweeps", body=big, token=None)
    assert status == 401
    status, raw = api.request("POST", "/restore", body=b"[" * 2_000_000)
    assert status == 413


PATH_TRICKS = [
    "/sweeps/..",
    "/sweeps/%2e%2e",
    "/sweeps/..%2F..%2Fetc%2Fpasswd",
    "/sweeps/%2E%2E%2F%2E%2E%2Fstate%2Fstore.db",
    "/sweeps/..%252F..%252Fetc",
    "/sweeps/a%00b",
    "/sweeps/a%0d%0aX-Evil:%201",
    "/sweeps/" + "a" * 5000,
    "/sweeps/%ff%fe",
    "/sweeps/x/results/../../../../etc/passwd",
    "/sweeps/..%5c..%5cwindows",
    "/sweeps/~root",
    "/sweeps/$(reboot)/cancel",
    "/../../../etc/passwd",
    "//etc/passwd",
]


@pytest.mark.parametrize("path", PATH_TRICKS)
def test_path_tricks_in_sweep_refs_are_refused(api: Api, path: str) -> None:
    for method in ("GET", "POST"):
        status, raw = api.request(method, path, body=b"{}" if method == "POST" else None)
        assert status in (400, 404, 405), (method, path, status, raw)
        _clean_error(status, raw)
        assert b"root:" not in raw  # nothing of /etc/passwd


@pytest.mark.parametrize(
    ("method", "path"),
    [
        ("DELETE", "/sweeps"),
        ("PUT", "/sweeps"),
        ("PATCH", "/sweeps/x"),
        ("GET", "/restore"),
        ("DELETE", "/sweeps/x"),
        ("GET", "/sweeps/x/cancel"),
        ("POST", "/health"),
        ("TRACE", "/sweeps"),
        ("PUT", "/sweeps/x/results"),
    ],
)
def test_wrong_methods_are_405(api: Api, method: str, path: str) -> None:
    status, raw = api.request(method, path, body=b"x" if method in ("PUT", "PATCH") else None)
    assert status == 405, (method, path, status, raw)
    _clean_error(status, raw)


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"null",
        b"[]",
        b"{",
        b'{"host": 1}',
        b'{"host": "../x"}',
        b'{"all": "yes"}',
        b'{"host": "h", "all": true}',
        b"\xff\xfe",
        b'{"host": "' + b"h" * 100_000 + b'"}',
    ],
)
def test_malformed_restore_bodies_are_400(api: Api, body: bytes) -> None:
    status, raw = api.request("POST", "/restore", body=body)
    assert status == 400, (body[:40], status, raw)
    _clean_error(status, raw)


def test_a_hostile_filename_header_is_only_a_label(api: Api) -> None:
    """The header names the file in messages; nothing is ever written under that name."""
    for filename in ("../../../../tmp/orch-evil.yaml", "/etc/cron.d/orch-evil", "x" * 600):
        status, raw = api.request(
            "POST", "/sweeps", body=b"name: x\nhostz: []\n", headers={"X-Sweep-Filename": filename}
        )
        assert status == 400
        document = _clean_error(status, raw)
        files = {problem["file"] for problem in document["problems"]}  # type: ignore[attr-defined]
        assert files in ({filename}, {"submitted.yaml"}), files
    assert not Path("/tmp/orch-evil.yaml").exists()
    assert not Path("/etc/cron.d/orch-evil").exists()


def test_garbage_on_the_wire_and_the_daemon_still_answers(api: Api) -> None:
    for junk in (b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + b"\0" * 64,  # a TLS hello
                 b"GET / HTTP/1.1\r\nHost: x\r\n" + b"X: " + b"a" * 70_000 + b"\r\n\r\n",
                 b"GET /sweeps HTTP/9.9\r\n\r\n", b"\r\n\r\n\r\n"):  # fmt: skip
        with socket.create_connection((ADDRESS, api.port), timeout=10) as sock:
            sock.sendall(junk)
            sock.shutdown(socket.SHUT_WR)
            reply = b""
            while chunk := sock.recv(65536):
                reply += chunk
        assert b"Traceback" not in reply
        if reply:
            assert reply.startswith(b"HTTP/1.") and int(reply.split()[1]) >= 400, reply[:200]
    status, raw = api.request("GET", "/sweeps")
    assert status == 200 and json.loads(raw) == {"sweeps": []}
    log = api.daemon.log()
    assert "api.internal_error" not in log
    assert api.token not in log


def test_garbage_on_the_wire_leaves_no_traceback_in_the_log(api: Api) -> None:
    with socket.create_connection((ADDRESS, api.port), timeout=10) as sock:
        sock.sendall(b"GET / HTTP/1.1\r\nHost: x\r\nX: " + b"a" * 70_000 + b"\r\n\r\n")
        sock.shutdown(socket.SHUT_WR)
        while sock.recv(65536):
            pass
    log = api.daemon.log()
    assert "Traceback" not in log
    # ... but one line that says what happened, in the daemon's own format.
    for _ in range(300):  # 30 s for a line that never comes; it ends at the line
        if events := api.daemon.events("http.malformed_request"):
            break
        time.sleep(0.1)
    assert events and events[0]["level"] == "warning", log[-2000:]
    assert "LineTooLong" in events[0]["error"]


def test_the_unix_socket_refuses_the_same_tricks(api: Api) -> None:
    for path in ("/sweeps/..%2F..%2Fetc", "/sweeps/%00"):
        response = call(api.daemon.socket, "GET", path)
        assert response.status in (400, 404), (path, response.status)
    assert call(api.daemon.socket, "DELETE", "/sweeps").status == 405
