"""sd_notify over a real datagram socket: path and abstract addresses, the watchdog interval."""

from __future__ import annotations

import os
import socket
import uuid
from pathlib import Path

from orchestrator.sdnotify import Notifier, render_message, socket_address, watchdog_interval_s


def test_messages_are_key_value_lines() -> None:
    assert render_message({"READY": 1, "STATUS": "2 running"}) == b"READY=1\nSTATUS=2 running\n"
    assert render_message({"STATUS": "a\nb"}) == b"STATUS=a b\n"


def test_abstract_socket_address() -> None:
    assert socket_address("@orchestrator/notify") == b"\0orchestrator/notify"
    assert socket_address("/run/systemd/notify") == "/run/systemd/notify"


def test_watchdog_interval_is_half_of_watchdog_usec() -> None:
    assert watchdog_interval_s({"WATCHDOG_USEC": "60000000"}) == 30.0
    assert watchdog_interval_s({}) is None
    assert watchdog_interval_s({"WATCHDOG_USEC": "0"}) is None
    mine = {"WATCHDOG_USEC": "2000000", "WATCHDOG_PID": str(os.getpid())}
    assert watchdog_interval_s(mine) == 1.0
    assert watchdog_interval_s({**mine, "WATCHDOG_PID": str(os.getpid() + 1)}) is None


def test_sends_to_a_path_socket(tmp_path: Path) -> None:
    path = tmp_path / "notify"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(str(path))
        listener.settimeout(2)
        notifier = Notifier(str(path))
        assert notifier.ready(status="ready")
        message = listener.recv(4096).decode()
        assert message.splitlines() == ["READY=1", f"MAINPID={os.getpid()}", "STATUS=ready"]
        assert notifier.watchdog()
        assert listener.recv(4096) == b"WATCHDOG=1\n"
        assert notifier.status("1 running")
        assert not notifier.status("1 running")  # unchanged: not sent again
        assert notifier.stopping()
        assert listener.recv(4096) == b"STATUS=1 running\n"
        assert listener.recv(4096) == b"STOPPING=1\n"
        notifier.close()


def test_sends_to_an_abstract_socket() -> None:
    name = f"orchestrator-test-{uuid.uuid4().hex}"
    with socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM) as listener:
        listener.bind(b"\0" + name.encode())
        listener.settimeout(2)
        notifier = Notifier(f"@{name}")
        assert notifier.watchdog()
        assert listener.recv(4096) == b"WATCHDOG=1\n"
        notifier.close()


def test_without_notify_socket_nothing_is_sent(tmp_path: Path) -> None:
    notifier = Notifier("")
    assert not notifier.enabled
    assert notifier.ready() is False
    gone = Notifier(str(tmp_path / "nobody-listens"))
    assert gone.watchdog() is False  # logged, never raised
