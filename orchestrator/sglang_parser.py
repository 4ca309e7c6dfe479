"""Asking a host's own SGLang whether it takes an argv: its parser, not its ``--help``.

``--help`` hides SGLang's deprecated aliases (``help=argparse.SUPPRESS``: builds newer than
0.5.23 accept ``--speculative-dflash-draft-window-size`` that way), so a flag check against it
fails configs the server would run, and it says nothing of bad values, choices or the rules of
argument resolution. So the unit's own interpreter, with the unit's environment and working
directory, runs ``PYTHON -c PARSE_SCRIPT ARGV...``: the script imports
``sglang.srt.server_args.prepare_server_args`` (what ``sglang.launch_server`` calls), parses the
argv and prints one JSON line (:data:`MARKER` first): ``ok``, argparse's error line or the
resolution's exception, and the parsed speculative fields. Where the import fails the line says
so (``import_error``) and the caller falls back to ``--help``.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

from orchestrator.host.dropin import TrialInvocation
from orchestrator.types import FailureCause

MARKER = "ORCHESTRATOR_SGLANG_PARSE "
IMPORT_LINE = "from sglang.srt.server_args import prepare_server_args"

# Runs on the host's Python (any 3.8+), so plain and self-contained. argparse reports an error
# by printing usage and "PROG: error: ..." to stderr and exiting 2; resolution (ServerArgs'
# __post_init__) raises ValueError or fails an assert. Anything else (no GPU visible, a model
# path unreadable from here) is no verdict on the argv: ok is null.
PARSE_SCRIPT = f"""\
import contextlib, io, json, sys
def emit(**fields):
    print({MARKER!r} + json.dumps(fields, default=str), flush=True)
try:
    {IMPORT_LINE}
except BaseException as exc:
    emit(import_error=type(exc).__name__ + ": " + str(exc))
    sys.exit(0)
err = io.StringIO()
try:
    with contextlib.redirect_stderr(err):
        args = prepare_server_args(sys.argv[1:])
except SystemExit:
    lines = [x for x in err.getvalue().splitlines() if ": error: " in x]
    emit(ok=False, kind="argparse", error=lines[-1] if lines else err.getvalue()[-400:])
except (ValueError, AssertionError) as exc:
    emit(ok=False, kind="resolution", error=type(exc).__name__ + ": " + str(exc))
except Exception as exc:
    emit(ok=None, kind="unchecked", error=type(exc).__name__ + ": " + str(exc))
else:
    names = [n for n in dir(args) if n.startswith("speculative_")]
    emit(ok=True, speculative={{n: getattr(args, n) for n in names
                                if not callable(getattr(args, n))}})
"""

ParseKind = Literal["argparse", "resolution", "unchecked"]


@dataclass(frozen=True, slots=True)
class ParseVerdict:
    """What the host's SGLang said of one argv. ``ok`` None: parsed, but resolution failed for
    a reason that is no verdict on the argv (the trial goes ahead)."""

    ok: bool | None
    kind: ParseKind | None = None
    error: str | None = None
    speculative: Mapping[str, Any] = field(default_factory=dict)

    @property
    def cause(self) -> FailureCause | None:
        """The trial's failure cause: argparse's rejection is ``bad-flag`` (unknown flag, bad
        value or choice, ambiguous prefix), resolution's is ``invalid-config``."""
        if self.ok is not False:
            return None
        return "bad-flag" if self.kind == "argparse" else "invalid-config"

    @property
    def unknown_flags(self) -> tuple[str, ...]:
        """The flags of argparse's ``unrecognized arguments: ...`` line."""
        if self.kind != "argparse" or not self.error:
            return ()
        _, sep, rest = self.error.partition("unrecognized arguments:")
        return tuple(word for word in rest.split() if word.startswith("--")) if sep else ()

    def evidence(self) -> dict[str, Any]:
        return {"found_by": "preflight", "parser": "sglang", "error": self.error}


@dataclass(frozen=True, slots=True)
class ParserUnavailable:
    """The host's SGLang parser cannot be asked: why (the import failed, the unit's program
    is not ``PYTHON -m MODULE``, the script gave no answer)."""

    reason: str


def parse_command(
    exec_start: Sequence[str], invocation: TrialInvocation, working_directory: str | None
) -> list[str] | None:
    """``env [-C DIR] [-u NAME]... NAME=VALUE... PYTHON -c PARSE_SCRIPT ARGV...`` for a unit
    run as ``PYTHON -m MODULE ARGV...``; None for any other program (its interpreter unknown)."""
    argv = invocation.argv
    if len(exec_start) < 3 or exec_start[1] != "-m" or len(argv) < 3 or argv[1] != "-m":
        return None
    words = ["env"]
    if working_directory:
        words += ["-C", working_directory]
    for name in invocation.unset_environment:
        words += ["-u", name]
    words += [f"{name}={value}" for name, value in sorted(invocation.environment.items())]
    return [*words, argv[0], "-c", PARSE_SCRIPT, *argv[3:]]


def read_answer(stdout: str, stderr: str = "") -> ParseVerdict | ParserUnavailable:
    """The script's JSON line, read from its output (the last line with :data:`MARKER`);
    without one, what the command said instead is the reason."""
    lines = [line for line in stdout.splitlines() if line.startswith(MARKER)]
    if not lines:
        tail = (stderr.strip() or stdout.strip())[-200:]
        return ParserUnavailable(f"the parse script gave no answer{': ' + tail if tail else ''}")
    try:
        answer = json.loads(lines[-1][len(MARKER) :])
    except ValueError as exc:
        return ParserUnavailable(f"the parse script's answer is not JSON: {exc}")
    if not isinstance(answer, dict):
        return ParserUnavailable("the parse script's answer is not an object")
    if "import_error" in answer:
        return ParserUnavailable(f"{IMPORT_LINE} failed: {answer['import_error']}")
    ok = answer.get("ok")
    kind = answer.get("kind")
    error = answer.get("error")
    speculative = answer.get("speculative")
    return ParseVerdict(
        ok=ok if isinstance(ok, bool) else None,
        kind=kind if kind in ("argparse", "resolution", "unchecked") else None,
        error=str(error) if error is not None else None,
        speculative=speculative if isinstance(speculative, dict) else {},
    )
