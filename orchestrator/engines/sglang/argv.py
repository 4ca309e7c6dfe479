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
from collections.abc import Sequence

from orchestrator.engines.base import ParseCommand, ParserUnavailable, ParseVerdict
from orchestrator.engines.shared import parse_script, read_marked_answers
from orchestrator.host.dropin import TrialInvocation
from orchestrator.host.unitcommand import unit_env_prefix

PARSER = "sglang"
"""The parser a verdict names in its evidence."""
MARKER = "ORCHESTRATOR_SGLANG_PARSE "
IMPORT_LINE = "from sglang.srt.server_args import prepare_server_args"

# prepare_server_args parses (argparse) and resolves (ServerArgs' __post_init__, which raises
# ValueError or fails an assert) in one call.
PARSE_SCRIPT = parse_script(
    MARKER,
    [IMPORT_LINE],
    """\
def parse(argv):
    return prepare_server_args(argv)
def speculative(args):
    names = [n for n in dir(args) if n.startswith("speculative_")]
    return {n: getattr(args, n) for n in names if not callable(getattr(args, n))}
""",
    ["ValueError", "AssertionError"],
)


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
    return read_marked_answers(
        stdout, stderr, count, marker=MARKER, import_line=IMPORT_LINE, parser=PARSER
    )
