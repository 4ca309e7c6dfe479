"""Asking a host's own ``llama-server`` whether it takes an argv, without starting a server.

llama.cpp parses its whole command line before it does anything else (``common_params_parse``
in ``common/arg.cpp``): every flag's handler runs in order, an unknown flag throws
``error: invalid argument: --x``, a removed one (``--draft-max``) ``the argument has been
removed. use ...``, a bad value or speculative type ``error while handling argument "--x":
...``; the message goes to stderr and ``llama-server`` returns 1 before it initialises a backend
or opens a model. ``--help`` only sets a flag in that loop: after the whole argv parsed (and the
unit's ``LLAMA_ARG_*`` environment with it) the usage is printed and the process exits 0. So
``llama-server ARGV... --help`` is the host's own parser's verdict on ARGV, in milliseconds,
loading nothing: exit 0 is ``ok``, exit 1 with an error line is a refusal (every such refusal
is about an argument: ``bad-flag``).

What the parse cannot see is what only loading shows (a draft path that does not exist, a
model that is no GGUF file): those fail the trial at startup, read from the journal.

One host command asks about a whole batch: ``env [-C DIR] [-u NAME]... NAME=VALUE... sh -c
SCRIPT sh PROGRAM``, the script running ``"$1" ARGV... --help`` once per argv and printing
:data:`MARKER` lines: ``MARKER INDEX rc=N`` and, for a refusal, its stderr lines as
``MARKER INDEX | LINE``.
"""

from __future__ import annotations

import os.path
import shlex
from collections.abc import Sequence

from orchestrator.engines.base import ParseCommand, ParserUnavailable, ParseVerdict
from orchestrator.host.dropin import TrialInvocation
from orchestrator.host.unitcommand import unit_env_prefix

PARSER = "llamacpp"
MARKER = "ORCHESTRATOR_LLAMACPP_PARSE"
PROGRAM_NAMES = ("llama-server",)
"""The unit's program is asked when its file name is one of these."""
_STDERR_LINES = 6
_NOT_RUNNABLE = (126, 127)


def parse_command(
    exec_start: Sequence[str], invocation: TrialInvocation, working_directory: str | None
) -> ParseCommand | None:
    """``env [-C DIR] [-u NAME]... NAME=VALUE... PROGRAM`` and the server's argv, for a unit
    that runs ``llama-server`` itself; None for any other program (a wrapper script)."""
    argv = invocation.argv
    if not argv or os.path.basename(argv[0]) not in PROGRAM_NAMES:
        return None
    words = unit_env_prefix(invocation.environment, invocation.unset_environment, working_directory)
    return ParseCommand(prefix=(*words, argv[0]), argv=tuple(argv[1:]))


def help_argv(exec_start: Sequence[str]) -> list[str]:
    """``llama-server --help``: the program itself, whatever follows it (its ``-m`` names a
    model, not a Python module)."""
    return [exec_start[0], "--help"]


def _script(argvs: Sequence[Sequence[str]]) -> str:
    lines = [
        "ask() {",
        '  i=$1; shift; err=$("$PROGRAM" "$@" --help 2>&1 >/dev/null); rc=$?',
        f'  printf "%s %s rc=%s\\n" {MARKER} "$i" "$rc"',
        '  [ "$rc" -eq 0 ] || printf "%s\\n" "$err" | grep -v "^$" | head -n '
        f'{_STDERR_LINES} | sed "s/^/{MARKER} $i | /"',
        "}",
        'PROGRAM=$1',
    ]
    lines += [
        f"ask {index} {' '.join(shlex.quote(word) for word in argv)}"
        for index, argv in enumerate(argvs)
    ]
    return "\n".join(lines) + "\n"


def batch_command(prefix: Sequence[str], argvs: Sequence[Sequence[str]]) -> list[str]:
    """``ENV... sh -c SCRIPT sh PROGRAM``: one shell that runs ``PROGRAM ARGV --help`` for each
    argv in order (``prefix`` is :func:`parse_command`'s: the environment words, then the
    program)."""
    *environment, program = prefix
    return [*environment, "sh", "-c", _script(argvs), "sh", program]


def _error_line(lines: Sequence[str]) -> str | None:
    """The line that says why: llama.cpp's ``error...`` line, else the first one."""
    for line in lines:
        if "error" in line.lower() or "removed" in line:
            return line.strip()
    return lines[0].strip() if lines else None


def read_answers(
    stdout: str, stderr: str, count: int
) -> list[ParseVerdict] | ParserUnavailable:
    """The verdicts on ``count`` argvs, in order, from the script's :data:`MARKER` lines; an
    argv never answered is ``unchecked``. No answer at all, or a program that could not run
    (exit 126/127), is no parser."""
    codes: dict[int, int] = {}
    said: dict[int, list[str]] = {}
    for line in stdout.splitlines():
        if not line.startswith(MARKER + " "):
            continue
        index_text, _, rest = line[len(MARKER) + 1 :].partition(" ")
        if not index_text.isdigit():
            continue
        index = int(index_text)
        if rest.startswith("rc=") and rest[3:].strip().lstrip("-").isdigit():
            codes[index] = int(rest[3:])
        elif rest.startswith("| "):
            said.setdefault(index, []).append(rest[2:])
    tail = (stderr.strip() or stdout.strip())[-200:]
    if not codes:
        return ParserUnavailable(f"the parse script gave no answer{': ' + tail if tail else ''}")
    if all(code in _NOT_RUNNABLE for code in codes.values()):
        why = _error_line(next(iter(said.values()), [])) or f"exit {next(iter(codes.values()))}"
        return ParserUnavailable(f"llama-server cannot be run: {why}")
    verdicts = []
    for index in range(count):
        code = codes.get(index)
        if code is None:
            verdicts.append(
                ParseVerdict(ok=None, kind="unchecked", error="no answer", parser=PARSER)
            )
        elif code == 0:
            verdicts.append(ParseVerdict(ok=True, parser=PARSER))
        else:
            error = _error_line(said.get(index, [])) or f"llama-server exited {code}"
            verdicts.append(ParseVerdict(ok=False, kind="argparse", error=error, parser=PARSER))
    return verdicts


__all__ = ["MARKER", "PARSER", "batch_command", "parse_command", "read_answers"]
