"""What a simulated host answers to a command line: shell-command dispatch.

Commands arrive as a shell-quoted argv (the orchestrator's transports quote every element), so
they are split with :mod:`shlex`, never run through a shell. The host answers the tools the
orchestrator uses on a real host (``systemctl``, ``journalctl``, ``nvidia-smi``, ``cat``, ``df``,
``id``, ``test``, the file tools ``ls``, ``mkdir``, ``rm``, ``rmdir`` and ``mv`` over the private
root, ``sudo -n CMD``) and runs the unit's own program for real (so a preflight's
``PROGRAM --help`` sees the simulated server's real flag list). Anything else is
``bash: X: command not found`` with status 127, as on a real host.

A unit program (its interpreter) asked ``-c SCRIPT ARGV...`` with a script that imports
``sglang.srt.server_args.prepare_server_args`` (the preflight's parse) is answered by the
simulated server's own parser (:mod:`orchestrator.sim.parse_check`): this host's "SGLang".

A small POSIX shell subset covers what a transport wraps commands in on any host:
``env [-C DIR] [-u NAME] [NAME=VALUE]... CMD``, ``exec CMD``, ``sh -c SCRIPT NAME ARGS...``
(the script split like a command line, with ``$$``, ``$0``, ``$N`` and ``"$@"`` substituted),
``printf FORMAT ARGS`` and ``kill -SIG -- -PGID``, where ``$$`` of such a shell is a
process-group id that ``kill`` stops.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import os
import re
import shlex
import shutil
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol

from orchestrator.sim import nvidia_smi, parse_check
from orchestrator.sim.gpu import GpuState
from orchestrator.sim.journal import Journal, run_journalctl
from orchestrator.sim.manager import ServiceManager
from orchestrator.sim.systemctl import run_systemctl

COMMAND_NOT_FOUND = 127
_REAL_PROC_FILES = {"environ", "cmdline", "comm", "status", "stat"}


class CommandIO(Protocol):
    """Where a command's output goes, and how it learns its caller went away."""

    async def write_out(self, data: bytes) -> None: ...

    async def write_err(self, data: bytes) -> None: ...

    @property
    def stopped(self) -> asyncio.Event:
        """Set when the channel closed or a signal arrived."""
        ...


@dataclass(frozen=True, slots=True)
class HostServices:
    """The parts of a host that commands read and drive."""

    name: str
    root: Path
    manager: ServiceManager
    journal: Journal
    gpu: GpuState
    program_env: Mapping[str, str]
    """Environment added when a unit's program runs for real from a shell."""
    shell_groups: dict[int, asyncio.Event] = field(default_factory=dict)
    """``sh -c`` shells by their ``$$`` (process group): ``kill -- -PGID`` sets the event."""
    refusal: Callable[[Sequence[str]], tuple[int, bytes] | None] | None = None
    """A fault's say on a program about to run (``command_fails``): the exit status and
    stderr it fails with instead of running, or None."""


class CommandLineError(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class Step:
    """One simple command of a command line, and how it joins the previous one."""

    argv: list[str]
    connector: str = ";"


def split_command(command: str) -> list[Step]:
    """Split a command line into simple commands joined by ``;``, ``&&`` or ``||`` (no shell:
    no pipes, redirections or expansions, which the orchestrator never sends)."""
    lexer = shlex.shlex(command, posix=True, punctuation_chars=";&|")
    lexer.whitespace_split = True
    try:
        tokens = list(lexer)
    except ValueError as exc:
        raise CommandLineError(str(exc)) from exc
    steps: list[Step] = []
    current: list[str] = []
    connector = ";"
    for token in tokens:
        if token in (";", "&&", "||"):
            if current:
                steps.append(Step(current, connector))
            current, connector = [], token
        elif token and set(token) <= set(";&|"):
            raise CommandLineError(f"'{token}' is not supported by the simulated host")
        else:
            current.append(token)
    if current:
        steps.append(Step(current, connector))
    return steps


async def run_command_line(services: HostServices, steps: Sequence[Step], io: CommandIO) -> int:
    """Run simple commands in order with ``;`` / ``&&`` / ``||`` semantics."""
    status = 0
    for step in steps:
        if (step.connector == "&&" and status != 0) or (step.connector == "||" and status == 0):
            continue
        if io.stopped.is_set():
            break
        status = await run_command(services, step.argv, io)
    return status


def strip_sudo(argv: Sequence[str]) -> list[str]:
    """``sudo [-n] [-u root] [--] CMD...`` -> ``CMD...`` (everyone here is root already)."""
    words = list(argv)
    while words and words[0] == "sudo":
        words = words[1:]
        while words and words[0].startswith("-"):
            option = words.pop(0)
            if option == "--":
                break
            if option in ("-u", "-g", "-C", "-D") and words:
                words.pop(0)
    return words


def resolve(services: HostServices, path: str) -> Path:
    """A host path inside the private root (``..`` cannot climb out of it)."""
    parts = [part for part in Path("/" + path).parts[1:] if part not in ("", ".")]
    clean: list[str] = []
    for part in parts:
        if part == "..":
            if clean:
                clean.pop()
        else:
            clean.append(part)
    return services.root.joinpath(*clean) if clean else services.root


def _real_proc_path(services: HostServices, path: str) -> Path | None:
    """``/proc/PID/FILE`` of one of the host's unit processes, else None."""
    match = re.fullmatch(r"/proc/(\d+)/(\w+)", path)
    if match is None or match.group(2) not in _REAL_PROC_FILES:
        return None
    if int(match.group(1)) not in services.manager.unit_pids():
        return None
    return Path(path)


def _lookup(services: HostServices, path: str) -> Path:
    proc = _real_proc_path(services, path)
    if proc is not None:
        return proc
    private = resolve(services, path)
    if not private.exists() and path in services.manager.unit_programs():
        return Path(path)
    return private


async def run_command(
    services: HostServices,
    argv: Sequence[str],
    io: CommandIO,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run one command; returns its exit status. ``environ``: variables ``env`` set for it."""
    words = strip_sudo(argv)
    if not words:
        return 0
    program, args = words[0], words[1:]
    if program == "exec":
        return await run_command(services, args, io, environ)
    if program == "env":
        parsed = _env_words(args)
        if isinstance(parsed, str):
            await io.write_err(parsed.encode())
            return 125
        assignments, rest = parsed
        if not rest:
            shown = {**(environ or {}), **assignments}
            await io.write_out("".join(f"{k}={v}\n" for k, v in shown.items()).encode())
            return 0
        return await run_command(services, rest, io, {**(environ or {}), **assignments})
    if program == "sh" and args[:1] == ["-c"] and len(args) >= 2:
        return await _run_sh(services, args[1], args[2:], io)
    refused = services.refusal(words) if services.refusal is not None else None
    if refused is not None:
        await io.write_err(refused[1])
        return refused[0]
    if program == "kill":
        status, out, err = _kill(services, args)
        await _emit(io, out, err)
        return status
    if program == "systemctl":
        result = await run_systemctl(services.manager, args)
        await _emit(io, result.stdout, result.stderr)
        return result.exit_status
    if program == "journalctl":
        return await run_journalctl(services.journal, args, io.write_out, io.write_err, io.stopped)
    if program == "nvidia-smi":
        smi = await asyncio.to_thread(nvidia_smi.run, args, services.gpu)
        await _emit(io, smi.stdout.encode(), smi.stderr.encode())
        return smi.exit_status
    if program in services.manager.unit_programs():
        if parse_check.is_parse_script(args):
            env = {**services.program_env, **(environ or {})}
            line = await asyncio.to_thread(parse_check.answer_script, args[1], args[2:], env)
            await io.write_out(line.encode())
            return 0
        return await _run_real(services, words, io, environ)
    handler = _SIMPLE.get(program)
    if handler is None:
        await io.write_err(f"bash: line 1: {program}: command not found\n".encode())
        return COMMAND_NOT_FOUND
    status, out, err = handler(services, args)
    await _emit(io, out, err)
    return status


_GROUP_IDS = itertools.count(41000)


async def _run_sh(
    services: HostServices, script: str, positional: Sequence[str], io: CommandIO
) -> int:
    """``sh -c SCRIPT [NAME [ARGS...]]``: the script's commands with parameters substituted."""
    name, args = (positional[0], list(positional[1:])) if positional else ("sh", [])
    group = next(_GROUP_IDS)
    services.shell_groups[group] = io.stopped
    try:
        steps = split_command(script)
    except CommandLineError as exc:
        await io.write_err(f"sh: 1: Syntax error: {exc}\n".encode())
        return 2
    try:
        expanded = [
            Step(_substitute(step.argv, group, name, args), step.connector) for step in steps
        ]
        return await run_command_line(services, expanded, io)
    finally:
        services.shell_groups.pop(group, None)


def _substitute(words: Sequence[str], group: int, name: str, args: Sequence[str]) -> list[str]:
    out: list[str] = []
    for word in words:
        if word == "$@":
            out.extend(args)
        elif word == "$$":
            out.append(str(group))
        elif word == "$0":
            out.append(name)
        elif re.fullmatch(r"\$\d", word):
            index = int(word[1:])
            out.append(args[index - 1] if index <= len(args) else "")
        else:
            out.append(word)
    return out


def _printf(services: HostServices, args: list[str]) -> Result:
    if not args:
        return 2, b"", b"printf: usage: printf format [arguments]\n"
    template = args[0].replace("\\n", "\n").replace("\\t", "\t")
    values = args[1:] or [""]
    slots = max(template.count("%s"), 1)
    text = ""
    for start in range(0, len(values), slots):
        chunk = values[start : start + slots]
        text += template.replace("%s", "{}").format(*chunk, *[""] * (slots - len(chunk)))
    return 0, text.encode(), b""


def _kill(services: HostServices, args: list[str]) -> Result:
    """``kill [-SIG] [--] -PGID...``: stop the ``sh -c`` shell of that process group."""
    # The first word may be the signal (-TERM, -9); after it (or "--") come targets, and a
    # negative number there is a process group, not a signal.
    targets = args[1:] if args and re.fullmatch(r"-[A-Z]+|-\d{1,2}", args[0]) else list(args)
    targets = targets[1:] if targets[:1] == ["--"] else targets
    status, err = 0, b""
    for target in targets:
        group = int(target.lstrip("-")) if target.lstrip("-").isdigit() else None
        event = services.shell_groups.get(group) if group is not None else None
        if event is None:
            status, err = 1, err + f"kill: ({target}) - No such process\n".encode()
        else:
            event.set()
    return status, b"", err


async def _emit(io: CommandIO, out: bytes, err: bytes) -> None:
    if out:
        await io.write_out(out)
    if err:
        await io.write_err(err)


def _env_words(args: Sequence[str]) -> tuple[dict[str, str], list[str]] | str:
    """``env``'s options and assignments, and the command after them (or its error text).
    ``-C DIR`` is accepted and has no effect: the host's programs run in its private root."""
    words = list(args)
    assignments: dict[str, str] = {}
    while words:
        word = words[0]
        if word in ("-C", "--chdir", "-u", "--unset") and len(words) > 1:
            words = words[2:]
        elif word.startswith(("--chdir=", "--unset=")) or word == "-i":
            words = words[1:]
        elif word.startswith("-"):
            return f"env: invalid option -- '{word.lstrip('-')}'\n"
        elif "=" in word:
            name, _, value = word.partition("=")
            assignments[name] = value
            words = words[1:]
        else:
            break
    return assignments, words


async def _run_real(
    services: HostServices,
    argv: Sequence[str],
    io: CommandIO,
    environ: Mapping[str, str] | None = None,
) -> int:
    """Run a unit's program as a real subprocess, streaming its output; a signal stops it."""
    env = {
        "PATH": os.environ.get("PATH", ""),
        "LANG": "C.UTF-8",
        **services.program_env,
        **(environ or {}),
    }
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.PIPE,
        env=env,
        cwd="/",
        start_new_session=True,
    )
    assert process.stdout is not None and process.stderr is not None

    async def pump(stream: asyncio.StreamReader, write: Callable[[bytes], Awaitable[None]]) -> None:
        while chunk := await stream.read(65536):
            await write(chunk)

    async def pump_both() -> None:
        assert process.stdout is not None and process.stderr is not None
        await asyncio.gather(pump(process.stdout, io.write_out), pump(process.stderr, io.write_err))

    pumps = asyncio.ensure_future(pump_both())
    stopper = asyncio.ensure_future(io.stopped.wait())
    try:
        await asyncio.wait({pumps, stopper}, return_when=asyncio.FIRST_COMPLETED)
        if stopper.done():
            with contextlib.suppress(ProcessLookupError):
                process.terminate()
        return await process.wait()
    finally:
        stopper.cancel()
        if process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                process.kill()
            await process.wait()
        pumps.cancel()
        with contextlib.suppress(asyncio.CancelledError, Exception):
            await pumps


# --- the small tools --------------------------------------------------------------------------

Result = tuple[int, bytes, bytes]


def _cat(services: HostServices, args: list[str]) -> Result:
    out, err, status = b"", b"", 0
    for name in [a for a in args if a != "--"]:
        path = _lookup(services, name)
        try:
            out += path.read_bytes()
        except IsADirectoryError:
            err += f"cat: {name}: Is a directory\n".encode()
            status = 1
        except OSError:
            err += f"cat: {name}: No such file or directory\n".encode()
            status = 1
    return status, out, err


def _df(services: HostServices, args: list[str]) -> Result:
    """``df -P PATH`` and ``df -B1 --output=avail PATH`` (real numbers of the backing disk)."""
    block = 1024
    columns: list[str] | None = None
    paths: list[str] = []
    words = list(args)
    while words:
        word = words.pop(0)
        if word == "-P" or word == "--portability":
            continue
        if word == "-B" and words:
            block = _block_size(words.pop(0))
        elif word.startswith("-B"):
            block = _block_size(word[2:])
        elif word.startswith("--block-size="):
            block = _block_size(word.split("=", 1)[1])
        elif word.startswith("--output="):
            columns = word.split("=", 1)[1].split(",")
        elif word.startswith("-"):
            return 1, b"", f"df: invalid option -- '{word.lstrip('-')}'\n".encode()
        else:
            paths.append(word)
    chosen = columns or ["source", "size", "used", "avail", "pcent", "target"]
    rows: list[list[str]] = []
    for name in paths or ["/"]:
        path = _lookup(services, name)
        if not path.exists():
            return 1, b"", f"df: {name}: No such file or directory\n".encode()
        stat = os.statvfs(path)
        size = stat.f_blocks * stat.f_frsize
        avail = stat.f_bavail * stat.f_frsize
        used = (stat.f_blocks - stat.f_bfree) * stat.f_frsize
        pcent = -(-used * 100 // max(used + avail, 1))
        values = {
            "source": "/dev/nvme0n1p2",
            "size": str(-(-size // block)),
            "used": str(-(-used // block)),
            "avail": str(avail // block),
            "pcent": f"{pcent}%",
            "target": "/",
        }
        rows.append([values[c] for c in chosen])
    headers = {
        "source": "Filesystem",
        "size": f"{block}B-blocks" if block != 1024 else "1024-blocks",
        "used": "Used",
        "avail": "Avail" if columns else "Available",
        "pcent": "Use%" if columns else "Capacity",
        "target": "Mounted on",
    }
    table = [[headers[c] for c in chosen], *rows]
    widths = [max(len(row[i]) for row in table) for i in range(len(chosen))]
    lines = []
    for row in table:
        cells = [
            cell.ljust(widths[i]) if chosen[i] in ("source", "target") else cell.rjust(widths[i])
            for i, cell in enumerate(row)
        ]
        lines.append(" ".join(cells).rstrip())
    return 0, "".join(line + "\n" for line in lines).encode(), b""


def _block_size(text: str) -> int:
    units = {"": 1, "K": 1024, "M": 1024**2, "G": 1024**3}
    match = re.fullmatch(r"(\d*)([KMG]?)", text)
    if match is None:
        return 1024
    return int(match.group(1) or 1) * units[match.group(2)]


def _id(services: HostServices, args: list[str]) -> Result:
    if args in (["-u"], ["-g"]):
        return 0, b"0\n", b""
    if args in (["-un"], ["-u", "-n"], ["-nu"]):
        return 0, b"root\n", b""
    if not args:
        return 0, b"uid=0(root) gid=0(root) groups=0(root)\n", b""
    return 1, b"", f"id: invalid option -- '{args[0].lstrip('-')}'\n".encode()


def _test(services: HostServices, args: list[str]) -> Result:
    if args and args[-1] == "]":
        args = args[:-1]
    if len(args) == 2 and args[0] in ("-e", "-f", "-d", "-x", "-r", "-s"):
        path = _lookup(services, args[1])
        checks = {
            "-e": path.exists(),
            "-f": path.is_file(),
            "-d": path.is_dir(),
            "-x": path.exists() and os.access(path, os.X_OK),
            "-r": path.exists(),
            "-s": path.is_file() and path.stat().st_size > 0,
        }
        return (0 if checks[args[0]] else 1), b"", b""
    if len(args) == 1:
        return (0 if args[0] else 1), b"", b""
    return 2, b"", b"bash: test: unsupported expression in the simulator\n"


def _mkdir(services: HostServices, args: list[str]) -> Result:
    parents = "-p" in args
    for name in [a for a in args if not a.startswith("-")]:
        path = resolve(services, name)
        try:
            path.mkdir(parents=parents, exist_ok=parents)
        except FileExistsError:
            return 1, b"", f"mkdir: cannot create directory '{name}': File exists\n".encode()
        except FileNotFoundError:
            return 1, b"", (
                f"mkdir: cannot create directory '{name}': No such file or directory\n".encode()
            )
    return 0, b"", b""


def _rm(services: HostServices, args: list[str]) -> Result:
    force = any(a.startswith("-") and "f" in a for a in args)
    recursive = any(a.startswith("-") and ("r" in a or "R" in a) for a in args)
    for name in [a for a in args if not a.startswith("-")]:
        path = resolve(services, name)
        if path == services.root:
            return 1, b"", b"rm: it is dangerous to operate recursively on '/'\n"
        if path.is_dir() and not path.is_symlink():
            if not recursive:
                return 1, b"", f"rm: cannot remove '{name}': Is a directory\n".encode()
            shutil.rmtree(path)
        elif path.exists() or path.is_symlink():
            path.unlink()
        elif not force:
            return 1, b"", (
                f"rm: cannot remove '{name}': No such file or directory\n".encode()
            )
    return 0, b"", b""


def _rmdir(services: HostServices, args: list[str]) -> Result:
    lenient = "--ignore-fail-on-non-empty" in args
    for name in [a for a in args if not a.startswith("-")]:
        path = resolve(services, name)
        if not path.is_dir() or path.is_symlink():
            reason = "Not a directory" if path.exists() else "No such file or directory"
            return 1, b"", f"rmdir: failed to remove '{name}': {reason}\n".encode()
        if any(path.iterdir()):
            if lenient:
                continue
            return 1, b"", f"rmdir: failed to remove '{name}': Directory not empty\n".encode()
        path.rmdir()
    return 0, b"", b""


def _mv(services: HostServices, args: list[str]) -> Result:
    names = [a for a in args if not a.startswith("-")]
    if len(names) != 2:
        return 1, b"", b"mv: missing file operand\n"
    source, target = resolve(services, names[0]), resolve(services, names[1])
    if target.is_dir():
        target = target / source.name
    try:
        os.replace(source, target)
    except FileNotFoundError:
        return 1, b"", f"mv: cannot stat '{names[0]}': No such file or directory\n".encode()
    return 0, b"", b""


def _ls(services: HostServices, args: list[str]) -> Result:
    out, err, status = b"", b"", 0
    for name in [a for a in args if not a.startswith("-")] or ["."]:
        path = resolve(services, name)
        if path.is_dir():
            out += "".join(f"{p.name}\n" for p in sorted(path.iterdir())).encode()
        elif path.exists():
            out += f"{name}\n".encode()
        else:
            err += f"ls: cannot access '{name}': No such file or directory\n".encode()
            status = 2
    return status, out, err


_SIMPLE = {
    "cat": _cat,
    "df": _df,
    "id": _id,
    "test": _test,
    "[": _test,
    "true": lambda s, a: (0, b"", b""),
    "false": lambda s, a: (1, b"", b""),
    "echo": lambda s, a: (0, (" ".join(a) + "\n").encode(), b""),
    "printf": _printf,
    "hostname": lambda s, a: (0, f"{s.name}\n".encode(), b""),
    "mkdir": _mkdir,
    "rm": _rm,
    "rmdir": _rmdir,
    "mv": _mv,
    "ls": _ls,
}
