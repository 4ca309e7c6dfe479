"""Host failures that are not unreachability: a journal read that fails, a daemon-reload the
manager refuses, a stop job that runs past its bound. Each is the host's failure, recorded with
its cause and the host's own words, never as a bug of ours (``orchestrator-error``); in a trial
the next trial still runs, and in the restore it is tried again until the host is back as found.

The restore's faults are armed by its first command (``ls`` of the drop-in directory, which only
the restore runs), so they hit the restore and nothing before it. A fault matches the program's
own command line, as the host's shell runs it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from tests.faults.harness import (
    DRAFT_FLAG,
    FAULTY,
    HEALTHY,
    OTHER,
    SweepRun,
    assert_restored,
    fault_host,
    point_count,
    run,
    sweep_yaml,
    unit_text,
)

RESTORE_BEGAN = r"^rmdir --ignore-fail-on-non-empty -- "
"""A command only the restore runs (it removes the drop-in directory it made): a trial lists
that directory too, for the launch files an engine such as SGLang may write beside the drop-in."""
JOURNAL_READ = r"^journalctl .*--lines=1"
JOURNAL_CORRUPT = "Failed to iterate through journal: Bad message\n"
DAEMON_RELOAD = r"^systemctl daemon-reload"
RELOAD_REFUSED = "Failed to reload daemon: Access denied\n"


def _fails(command: str, stderr: str, *, armed_by: str | None = None) -> dict[str, Any]:
    return {"command": command, "stderr": stderr, "times": 1, "armed_by": armed_by}


def _restore_retried_then_done(done: SweepRun, cause: str) -> None:
    """The restore's first try failed with ``cause`` and a later one finished the job."""
    retries = done.of_kind("restore.retry")
    assert [r["cause"] for r in retries][:1] == [cause], retries
    restores = [kind for kind in done.kinds() if kind.startswith("restore.")]
    assert "restore.failed" not in restores and restores[-1] == "restore.done", restores


FAILING_COMMANDS = {
    # what fails: (address, the program's command line, its stderr, the error the host layer
    # raises, the last word of the failed command the evidence names)
    "journal-read": ("127.0.0.145", JOURNAL_READ, JOURNAL_CORRUPT, "JournalError", "journalctl"),
    "daemon-reload": (
        "127.0.0.146",
        DAEMON_RELOAD,
        RELOAD_REFUSED,
        "SystemdError",
        "daemon-reload",
    ),
}


@pytest.mark.parametrize("what", sorted(FAILING_COMMANDS))
async def test_failing_host_command_is_a_host_failure(tmp_path: Path, what: str) -> None:
    """``journalctl`` exits 1 on a corrupt journal file, or ``systemctl daemon-reload`` is
    refused: the trial it hit fails ``host-command-failed`` with the tool's own words (a trial
    whose drop-in never loaded does not restart the unit), the next trial is measured, and the
    restore that meets the same failure is tried again and puts the host back."""
    address, command, stderr, error_type, last_word = FAILING_COMMANDS[what]
    async with fault_host(
        tmp_path,
        address,
        settings={
            "command_fails": [
                _fails(command, stderr),
                _fails(command, stderr, armed_by=RESTORE_BEGAN),
            ]
        },
    ) as host:
        done = await run(tmp_path, sweep_yaml(host, f"{what}-fails", [FAULTY, HEALTHY]))

        failed = done.trial(FAULTY)
        assert (failed["state"], failed["cause"]) == ("failed", "host-command-failed"), failed
        evidence = failed["evidence"]
        assert evidence["error_type"] == error_type
        assert stderr.split(": ")[-1].strip() in evidence["command"]["stderr"]
        assert evidence["command"]["argv"][-1] == last_word
        assert "traceback" not in evidence
        kinds = done.kinds()
        trials = kinds[: kinds.index("restore.begin")]
        # only HEALTHY's trial restarted the unit
        assert trials.count("unit.stopping") == 1, trials
        measured = done.trial(HEALTHY)
        assert measured["state"] == "done" and point_count(measured) == 1
        _restore_retried_then_done(done, "host-command-failed")
        await assert_restored(host)


async def test_stop_job_timing_out_is_a_host_failure(tmp_path: Path) -> None:
    """Every trial's server ignores SIGTERM (the server as found does not): ``systemctl stop``
    runs until systemd's TimeoutStopSec (2 s) kills it, past the sweep's ``timeouts.stop``
    (1.5 s). The trial whose stop it was fails ``stop-timeout``; the next trial's stop waits out
    the rest of the job and measures; the restore's stop of that trial's server times out too
    and is tried again once systemd has killed it."""
    address = "127.0.0.147"
    async with fault_host(
        tmp_path,
        address,
        unit=unit_text(address, timeout_stop_s=2),
        server_faults={"ignore_sigterm": {"value": True, "when_args": [DRAFT_FLAG]}},
    ) as host:
        text = sweep_yaml(host, "stop-times-out", [HEALTHY, OTHER, FAULTY], timeouts={"stop": 1.5})
        done = await run(tmp_path, text)

        assert done.trial(HEALTHY)["state"] == "done"
        failed = done.trial(OTHER)
        assert (failed["state"], failed["cause"]) == ("failed", "stop-timeout"), failed
        measured = done.trial(FAULTY)
        assert measured["state"] == "done" and point_count(measured) == 1
        evidence = failed["evidence"]
        assert evidence["error_type"] == "JobTimeout"
        assert (evidence["operation"], evidence["timeout_s"]) == ("stop", 1.5)
        _restore_retried_then_done(done, "stop-timeout")
        await assert_restored(host)
