"""Every host-side error is a :class:`HostError` that maps to a host cause with its evidence; only
an exception that is not one is ``orchestrator-error`` (a bug of ours, with its traceback)."""

from __future__ import annotations

import typing

import pytest

from orchestrator.host.dbus import BusCallFailed, BusUnavailable
from orchestrator.host.errors import HostError
from orchestrator.host.gpu import (
    GpuQueryError,
    Leftover,
    MemoryNotReleased,
    NvmlUnavailable,
    ReleaseStatus,
)
from orchestrator.host.journal import JournalError
from orchestrator.host.systemd import DropInNotApplied, RestoreIncomplete, SystemdError, unit_state
from orchestrator.host.transport import (
    AuthenticationFailed,
    CommandFailed,
    CommandTimeout,
    CompletedCommand,
    HostKeyMismatch,
    HostUnreachable,
    TransportError,
)
from orchestrator.host.unitcontrol import JobFailed, JobTimeout
from orchestrator.lifecycle import TrialFailed, failure_from
from orchestrator.types import FailureCause

RELOAD = CompletedCommand(
    ("systemctl", "daemon-reload"), 1, b"", b"Failed to reload daemon: Access denied\n"
)
STATE = unit_state({"Id": "sglang.service", "LoadState": "loaded"})

CASES: list[tuple[HostError, FailureCause]] = [
    (TransportError("h", "refused"), "host-unreachable"),
    (HostUnreachable("h", "keepalive lost"), "host-unreachable"),
    (AuthenticationFailed("h", "key refused"), "host-unreachable"),
    (HostKeyMismatch("h", "unknown key"), "host-unreachable"),
    (CommandTimeout("h", "ran past 30s"), "host-unreachable"),
    (CommandFailed("h", RELOAD), "host-command-failed"),
    (SystemdError("(manager)", "daemon-reload exited 1", RELOAD), "host-command-failed"),
    (DropInNotApplied("sglang.service", ["99-admin.conf sets ExecStart"], STATE, []),
     "config-mismatch"),
    (RestoreIncomplete("sglang.service", ["/etc/x.conf"]), "config-mismatch"),
    (JobTimeout("sglang.service", "stop", 20.0), "stop-timeout"),
    (JobTimeout("sglang.service", "start", 30.0), "ready-timeout"),
    (JobFailed("sglang.service", "stop", "failed"), "stop-timeout"),
    (JobFailed("sglang.service", "start", "failed"), "exited"),
    (BusCallFailed("sglang.service", "StartUnit", "org.freedesktop.systemd1.NoSuchUnit", "x"),
     "host-command-failed"),
    (BusUnavailable("unix:path=/run/dbus", "connection lost"), "host-unreachable"),
    (JournalError("sglang.service", 1, "Failed to iterate through journal: Bad message"),
     "host-command-failed"),
    (GpuQueryError("nvidia-smi exited 9", "couldn't communicate with the NVIDIA driver"),
     "gpu-query-failed"),
    (NvmlUnavailable("NVML library not found"), "gpu-query-failed"),
    (MemoryNotReleased(ReleaseStatus(False, (Leftover(4242, 0, 70000),), {0: 70000}), 300.0),
     "memory-not-released"),
]  # fmt: skip


@pytest.mark.parametrize(("error", "cause"), CASES, ids=lambda v: type(v).__name__)
def test_each_host_error_is_a_host_cause_with_its_evidence(
    error: HostError, cause: FailureCause
) -> None:
    failed = failure_from(error)
    assert failed.cause == cause
    assert cause in typing.get_args(FailureCause)
    assert failed.message == str(error)
    assert failed.evidence["error_type"] == type(error).__name__
    assert "traceback" not in failed.evidence


def test_evidence_keeps_what_the_host_said() -> None:
    reload = failure_from(SystemdError("(manager)", "daemon-reload exited 1", RELOAD)).to_json()
    assert reload["command"] == {
        "argv": ["systemctl", "daemon-reload"],
        "exit_status": 1,
        "stderr": "Failed to reload daemon: Access denied",
    }
    journal = failure_from(JournalError("u", 1, "Failed to iterate through journal: Bad message"))
    assert "Bad message" in journal.evidence["command"]["stderr"]
    stop = failure_from(JobTimeout("u", "stop", 20.0)).evidence
    assert (stop["operation"], stop["timeout_s"]) == ("stop", 20.0)
    held = MemoryNotReleased(ReleaseStatus(False, (Leftover(4242, 0, 70000),), {0: 70000}), 3.0)
    memory = failure_from(held).evidence
    assert memory["leftovers"] == [{"pid": 4242, "gpu": 0, "used_mib": 70000}]
    assert memory["excess_mib"] == {0: 70000}


def test_a_typed_failure_is_kept_as_it_is() -> None:
    failed = TrialFailed("oom", "CUDA out of memory", excerpt=["torch.OutOfMemoryError"])
    assert failure_from(failed) is failed


def test_anything_else_is_a_bug_of_ours_with_its_traceback() -> None:
    try:
        {}["missing"]
    except KeyError as exc:
        failed = failure_from(exc)
    assert failed.cause == "orchestrator-error"
    assert failed.evidence["error"] == "KeyError('missing')"
    assert "test_anything_else_is_a_bug_of_ours" in failed.evidence["traceback"]
