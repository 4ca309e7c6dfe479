"""The real-systemd host itself works: a unit starts, logs to journald, stops, over real SSH."""

from __future__ import annotations

import json
import time

from tests.realhost.realhost import RealHost


def test_unit_runs_logs_and_stops(real_host: RealHost) -> None:
    (real_host.unit_dir / "probe.service").write_text(
        "[Service]\nExecStart=/bin/sh -c 'echo probe-started; exec sleep 600'\n"
    )
    real_host.ssh(["systemctl", "daemon-reload"])
    real_host.ssh(["systemctl", "start", "probe.service"])
    show = real_host.ssh(
        ["systemctl", "show", "-p", "ActiveState,MainPID,InvocationID", "probe.service"]
    ).stdout.decode()
    fields = dict(line.split("=", 1) for line in show.splitlines())
    assert fields["ActiveState"] == "active"
    assert len(fields["InvocationID"]) == 32
    for _ in range(50):
        out = real_host.ssh(["journalctl", "-u", "probe.service", "-o", "json", "--no-pager"])
        messages = [json.loads(line)["MESSAGE"] for line in out.stdout.splitlines()]
        if "probe-started" in messages:
            break
        time.sleep(0.1)
    assert "probe-started" in messages
    real_host.ssh(["systemctl", "stop", "probe.service"])
    show = real_host.ssh(["systemctl", "show", "-p", "ActiveState,MainPID", "probe.service"])
    assert "ActiveState=inactive" in show.stdout.decode()
    assert "MainPID=0" in show.stdout.decode()
