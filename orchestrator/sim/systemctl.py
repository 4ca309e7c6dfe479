"""``systemctl`` against a host's service manager: systemctl's words, output and exit codes."""

from __future__ import annotations

import asyncio
import getopt
from collections.abc import Sequence
from dataclasses import dataclass

from orchestrator.sim.manager import BadUnitSetting, JobFailed, ServiceManager, UnitNotFound
from orchestrator.sim.unitfile import mangle_unit_name


@dataclass(frozen=True, slots=True)
class CommandOutput:
    exit_status: int
    stdout: bytes = b""
    stderr: bytes = b""


_JOB_EXPLANATIONS = {
    "start-limit-hit": "start of the service was attempted too often",
    "exit-code": "the control process exited with error code",
    "timeout": "a timeout was exceeded",
    "signal": "a fatal signal was delivered to the control process",
}


def _job_failed_message(name: str, result: str) -> str:
    why = _JOB_EXPLANATIONS.get(result)
    head = f"Job for {name} failed because {why}." if why else f"Job for {name} failed."
    text = f'{head}\nSee "systemctl status {name}" and "journalctl -xeu {name}" for details.\n'
    if result == "start-limit-hit":
        text += (
            f'To force a start use "systemctl reset-failed {name}"\n'
            f'followed by "systemctl start {name}" again.\n'
        )
    return text


def _reload_warning(name: str) -> str:
    return (
        f"Warning: The unit file, source configuration file or drop-ins of {name} changed on "
        "disk. Run 'systemctl daemon-reload' to reload units.\n"
    )


async def run_systemctl(manager: ServiceManager, argv: Sequence[str]) -> CommandOutput:
    """``systemctl ARGS`` against ``manager`` with systemctl's output and exit codes.

    Jobs run as tasks of their own: a caller that goes away (SSH connection dropped) does not
    cancel a job, as on a real host where the job belongs to PID 1, not to systemctl.
    """
    try:
        options, words = getopt.gnu_getopt(
            list(argv),
            "p:P:aql",
            ["property=", "value", "all", "no-block", "no-pager", "quiet", "no-legend", "full",
             "system", "no-ask-password", "plain"],
        )
    except getopt.GetoptError as exc:
        return CommandOutput(1, stderr=f"systemctl: unrecognized option '{exc.opt}'\n".encode())
    properties: list[str] = []
    value_only = show_all = no_block = quiet = False
    for option, value in options:
        if option in ("-p", "--property", "-P"):
            properties += [part for part in value.split(",") if part]
            value_only = value_only or option == "-P"
        elif option == "--value":
            value_only = True
        elif option in ("-a", "--all"):
            show_all = True
        elif option == "--no-block":
            no_block = True
        elif option in ("-q", "--quiet"):
            quiet = True
    if not words:
        return CommandOutput(1, stderr=b"Too few arguments.\n")
    verb, names = words[0], [mangle_unit_name(n) for n in words[1:]]
    if verb == "daemon-reload":
        manager.daemon_reload()
        return CommandOutput(0)
    if verb == "show":
        return _show(manager, names, properties, value_only, show_all)
    if verb == "cat":
        return _cat(manager, names)
    if verb in ("is-active", "is-failed"):
        return _is_state(manager, verb, names, quiet)
    if verb == "reset-failed":
        return _reset_failed(manager, names)
    if verb in ("start", "stop", "restart"):
        if not names:
            return CommandOutput(1, stderr=b"Too few arguments.\n")
        return await _job_verb(manager, verb, names, no_block)
    return CommandOutput(1, stderr=f"Unknown command verb '{verb}'.\n".encode())


def _show(
    manager: ServiceManager,
    names: list[str],
    wanted: list[str],
    value_only: bool,
    show_all: bool,
) -> CommandOutput:
    if not names:
        return CommandOutput(1, stderr=b"systemctl show without a unit is not simulated\n")
    blocks: list[str] = []
    for name in names:
        lines: list[str] = []
        for key, value in manager.properties(name):
            if wanted and key not in wanted:
                continue
            if not wanted and not show_all and value == "":
                continue
            lines.append(value if value_only else f"{key}={value}")
        blocks.append("".join(line + "\n" for line in lines))
    return CommandOutput(0, stdout="\n".join(blocks).encode())


def _cat(manager: ServiceManager, names: list[str]) -> CommandOutput:
    out, err = b"", b""
    for index, name in enumerate(names):
        content, found = manager.cat(name)
        if not found:
            missing = f"No files found for {name}.\n".encode()
            return CommandOutput(1, stdout=out, stderr=err + missing)
        if manager.needs_reload(name):
            err += (
                f"# Warning: {name} changed on disk, the version systemd has loaded is outdated.\n"
                "# This output shows the current version of the unit's original fragment and "
                "drop-in files.\n"
                "# If fragments or drop-ins were added or removed, they are not properly "
                "reflected in this output.\n"
                "# Run 'systemctl daemon-reload' to reload units.\n"
            ).encode()
        out += (b"\n" if index else b"") + content
    return CommandOutput(0, stdout=out, stderr=err)


def _is_state(manager: ServiceManager, verb: str, names: list[str], quiet: bool) -> CommandOutput:
    states = [manager.runtime(name).active_state for name in names]
    good = {"active", "reloading"} if verb == "is-active" else {"failed"}
    ok = any(state in good for state in states)
    out = b"" if quiet else "".join(f"{s}\n" for s in states).encode()
    return CommandOutput(0 if ok else (3 if verb == "is-active" else 1), stdout=out)


def _reset_failed(manager: ServiceManager, names: list[str]) -> CommandOutput:
    for name in names:
        try:
            manager.reset_failed(name)
        except UnitNotFound:
            return CommandOutput(
                1, stderr=f"Failed to reset failed state of unit {name}: Unit {name} not loaded.\n"
                .encode()
            )
    return CommandOutput(0)


async def _job_verb(
    manager: ServiceManager, verb: str, names: list[str], no_block: bool
) -> CommandOutput:
    err = b""
    operation = {"start": manager.start, "stop": manager.stop, "restart": manager.restart}[verb]
    for name in names:
        config = manager.unit(name)
        enqueues = config.load_state == "loaded" or (
            verb == "stop" and config.load_state != "not-found"
        )
        if verb != "stop" and enqueues and manager.needs_reload(name):
            err += _reload_warning(name).encode()
        job = asyncio.ensure_future(operation(name))
        job.add_done_callback(_consume_outcome)
        if no_block:
            await asyncio.sleep(0)
            if not job.done():
                continue
        try:
            await asyncio.shield(job)
        except UnitNotFound:
            what = "not found" if verb != "stop" else "not loaded"
            return CommandOutput(
                5, stderr=err + f"Failed to {verb} {name}: Unit {name} {what}.\n".encode()
            )
        except BadUnitSetting:
            return CommandOutput(
                1,
                stderr=err
                + (
                    f"Failed to {verb} {name}: Unit {name} has a bad unit file setting.\n"
                    f"See system logs and 'systemctl status {name}' for details.\n"
                ).encode(),
            )
        except JobFailed as exc:
            return CommandOutput(1, stderr=err + _job_failed_message(name, exc.result).encode())
    return CommandOutput(0, stderr=err)


def _consume_outcome(job: asyncio.Future[None]) -> None:
    """A job's failure is reported to the caller that waited; nobody else needs it."""
    if not job.cancelled():
        job.exception()
