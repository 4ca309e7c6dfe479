"""Asking a host's own SGLang whether it takes an argv: its parser, not its ``--help``.

``--help`` hides SGLang's deprecated aliases (``help=argparse.SUPPRESS``: builds newer than
0.5.23 accept ``--speculative-dflash-draft-window-size`` that way), so a flag check against it
fails configs the server would run, and it says nothing of bad values, choices or the rules of
argument resolution. So the unit's own interpreter, with the unit's environment and working
directory, runs ``PYTHON -c PARSE_SCRIPT ARGV_JSON...``: the script imports
``sglang.srt.server_args.prepare_server_args`` (what ``sglang.launch_server`` calls) once, then
parses each argv (one JSON list per argument) and prints one JSON line per argv (:data:`MARKER`
first, with the argv's ``index``): ``ok``, argparse's error line or the resolution's exception,
and the parsed speculative fields. Importing SGLang costs tens of seconds, so a whole sweep's
space is one import, not one per config. Where the import fails the line says so
(``import_error``) and the caller falls back to ``--help``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import Any

from orchestrator.engine import ParseCommand, ParserUnavailable, ParseVerdict
from orchestrator.host.dropin import TrialInvocation
from orchestrator.host.unitcommand import unit_env_prefix

PARSER = "sglang"
"""The parser a verdict names in its evidence."""
MARKER = "ORCHESTRATOR_SGLANG_PARSE "
IMPORT_LINE = "from sglang.srt.server_args import prepare_server_args"

# Runs on the host's Python (any 3.8+), so plain and self-contained. Each argument is one argv
# as a JSON list. argparse reports an error by printing usage and "PROG: error: ..." to stderr
# and exiting 2; resolution (ServerArgs' __post_init__) raises ValueError or fails an assert.
# Anything else (no GPU visible, a model path unreadable from here) is no verdict on the argv:
# ok is null. Resolution may set environment variables, so each argv starts from the
# environment the process was given.
PARSE_SCRIPT = f"""\
import contextlib, io, json, os, sys
def emit(**fields):
    print({MARKER!r} + json.dumps(fields, default=str), flush=True)
try:
    {IMPORT_LINE}
except BaseException as exc:
    emit(import_error=type(exc).__name__ + ": " + str(exc))
    sys.exit(0)
environ = dict(os.environ)
for index, text in enumerate(sys.argv[1:]):
    os.environ.clear()
    os.environ.update(environ)
    argv = json.loads(text)
    err = io.StringIO()
    try:
        with contextlib.redirect_stderr(err):
            args = prepare_server_args(argv)
    except SystemExit:
        lines = [x for x in err.getvalue().splitlines() if ": error: " in x]
        emit(index=index, ok=False, kind="argparse",
             error=lines[-1] if lines else err.getvalue()[-400:])
    except (ValueError, AssertionError) as exc:
        emit(index=index, ok=False, kind="resolution", error=type(exc).__name__ + ": " + str(exc))
    except Exception as exc:
        emit(index=index, ok=None, kind="unchecked", error=type(exc).__name__ + ": " + str(exc))
    else:
        names = [n for n in dir(args) if n.startswith("speculative_")]
        emit(index=index, ok=True, speculative={{n: getattr(args, n) for n in names
                                                if not callable(getattr(args, n))}})
"""

def parse_command(
    exec_start: Sequence[str], invocation: TrialInvocation, working_directory: str | None
) -> ParseCommand | None:
    """``env [-C DIR] [-u NAME]... NAME=VALUE... PYTHON`` and the server's argv for a unit run
    as ``PYTHON -m MODULE ARGV...``; None for any other program (its interpreter unknown)."""
    argv = invocation.argv
    if len(exec_start) < 3 or exec_start[1] != "-m" or len(argv) < 3 or argv[1] != "-m":
        return None
    words = unit_env_prefix(invocation.environment, invocation.unset_environment, working_directory)
    return ParseCommand(prefix=(*words, argv[0]), argv=tuple(argv[3:]))


def batch_command(prefix: Sequence[str], argvs: Sequence[Sequence[str]]) -> list[str]:
    """``PREFIX -c PARSE_SCRIPT ARGV_JSON...``: one process that imports SGLang once and
    answers every argv, in order."""
    return [*prefix, "-c", PARSE_SCRIPT, *(json.dumps(list(argv)) for argv in argvs)]


def read_answers(
    stdout: str, stderr: str, count: int
) -> list[ParseVerdict] | ParserUnavailable:
    """The script's answers to ``count`` argvs, in order, read from its output (the lines
    with :data:`MARKER`); an argv the script never answered (it died or timed out on the way)
    is ``unchecked``. Without any answer, what the command said instead is the reason."""
    lines = [line for line in stdout.splitlines() if line.startswith(MARKER)]
    if not lines:
        tail = (stderr.strip() or stdout.strip())[-200:]
        return ParserUnavailable(f"the parse script gave no answer{': ' + tail if tail else ''}")
    answers: dict[int, Mapping[str, Any]] = {}
    for line in lines:
        try:
            answer = json.loads(line[len(MARKER) :])
        except ValueError as exc:
            return ParserUnavailable(f"the parse script's answer is not JSON: {exc}")
        if not isinstance(answer, dict):
            return ParserUnavailable("the parse script's answer is not an object")
        if "import_error" in answer:
            return ParserUnavailable(f"{IMPORT_LINE} failed: {answer['import_error']}")
        index = answer.get("index")
        if isinstance(index, int) and 0 <= index < count:
            answers[index] = answer
    tail = stderr.strip()[-200:]
    missing = ParseVerdict(
        ok=None,
        kind="unchecked",
        error=f"no answer from the parse script{': ' + tail if tail else ''}",
        parser=PARSER,
    )
    return [_verdict(answers[i]) if i in answers else missing for i in range(count)]


def _verdict(answer: Mapping[str, Any]) -> ParseVerdict:
    ok = answer.get("ok")
    kind = answer.get("kind")
    error = answer.get("error")
    speculative = answer.get("speculative")
    return ParseVerdict(
        ok=ok if isinstance(ok, bool) else None,
        kind=kind if kind in ("argparse", "resolution", "unchecked") else None,
        error=str(error) if error is not None else None,
        speculative=speculative if isinstance(speculative, dict) else {},
        parser=PARSER,
    )
