"""Asking a host's own vLLM whether it takes an argv: its parser, not its ``--help``.

The unit's interpreter, with the unit's environment and working directory, runs ``PYTHON -c
PARSE_SCRIPT ARGV_JSON...``. The script builds the parser ``vllm serve`` builds (vLLM 0.33,
and 0.32 whose ``make_arg_parser`` lives in ``vllm.entrypoints.launchers.cli_args``:
a ``FlexibleArgumentParser`` with the ``serve`` subcommand whose parser is
``make_arg_parser``'s; for a unit running ``-m vllm.entrypoints.openai.api_server`` without
``serve``, ``make_arg_parser`` alone), parses each argv (argparse's error line on a refusal,
as ``vllm serve`` exits 2 with it), then checks what ``create_speculative_config`` and
``SpeculativeConfig`` would refuse before any model is loaded: a shortcut flag
(``--spec-method``, ``--spec-model``, ``--spec-tokens``) beside the same JSON key, a key that
is no field of the host's own ``SpeculativeConfig``, a ``method`` outside its
``SpeculativeMethod``; and ``validate_parsed_serve_args``. One line per argv (:data:`MARKER`
first): ``ok``, the error, and the speculative config as parsed.
"""

from __future__ import annotations

import json
import os.path
from collections.abc import Sequence

from orchestrator.engines.base import ParseCommand, ParserUnavailable, ParseVerdict
from orchestrator.engines.shared import parse_script, program_help_argv, read_marked_answers
from orchestrator.host.dropin import TrialInvocation
from orchestrator.host.unitcommand import unit_env_prefix

PARSER = "vllm"
MARKER = "ORCHESTRATOR_VLLM_PARSE "
IMPORT_LINE = "from vllm.entrypoints.common.cli_args import make_arg_parser"
"""The line that marks the script (the simulated host answers it from its own parser)."""

# The parser ``vllm serve`` builds (or ``make_arg_parser``'s alone for an ``api_server``
# module run), then what SpeculativeConfig and validate_parsed_serve_args refuse before a
# model is loaded (pydantic's ValidationError is a ValueError).
PARSE_SCRIPT = parse_script(
    MARKER,
    [
        # vLLM 0.33's module; 0.32 (the CPU build on the registry) keeps both functions in
        # vllm.entrypoints.launchers.cli_args
        "try:",
        "    " + IMPORT_LINE,
        "    from vllm.entrypoints.common.cli_args import validate_parsed_serve_args",
        "except ImportError:",
        "    from vllm.entrypoints.launchers.cli_args import make_arg_parser",
        "    from vllm.entrypoints.launchers.cli_args import validate_parsed_serve_args",
        "from vllm.utils.argparse_utils import FlexibleArgumentParser",
        "from vllm.config.speculative import SpeculativeConfig, SpeculativeMethod",
        "import typing",
    ],
    """\
def literals(hint):
    args = typing.get_args(hint)
    return [a for x in args for a in literals(x)] if args else [hint]
methods = set(literals(SpeculativeMethod))
fields = set(SpeculativeConfig.__dataclass_fields__)
shortcuts = (("--spec-method", "method", "spec_method"), ("--spec-model", "model", "spec_model"),
             ("--spec-tokens", "num_speculative_tokens", "spec_tokens"))
def parse(argv):
    if argv[:1] == ["serve"]:
        top = FlexibleArgumentParser(prog="vllm")
        subs = top.add_subparsers(required=False, dest="subparser")
        make_arg_parser(subs.add_parser("serve", usage="vllm serve [model_tag] [options]"))
    else:
        top = make_arg_parser(FlexibleArgumentParser(prog="api_server.py"))
    return top.parse_args(argv)
def speculative(args):
    spec = dict(getattr(args, "speculative_config", None) or {})
    for flag, key, dest in shortcuts:
        value = getattr(args, dest, None)
        if value is None:
            continue
        if key in spec:
            raise ValueError(
                flag + " and --speculative-config['" + key + "'] are mutually exclusive")
        spec[key] = value
    spec = {k.replace("-", "_"): v for k, v in spec.items()}
    extra = sorted(set(spec) - fields)
    if extra:
        raise ValueError("1 validation error for SpeculativeConfig: " + ", ".join(extra)
                         + ": Extra inputs are not permitted")
    if "method" in spec and spec["method"] not in methods:
        raise ValueError("1 validation error for SpeculativeConfig: method: Input should be "
                         + " or ".join(repr(m) for m in sorted(methods)))
    validate_parsed_serve_args(args)
    return spec
""",
    ["ValueError", "TypeError", "AssertionError"],
)

_MODULE_FORMS = ("-m",)


def parse_command(
    exec_start: Sequence[str], invocation: TrialInvocation, working_directory: str | None
) -> ParseCommand | None:
    """How the host's vLLM is asked about ``invocation``: ``env ... PYTHON`` and the argv
    vLLM's CLI parses. A unit running ``PYTHON -m MODULE ARGV...`` names its interpreter; a
    unit running the ``vllm`` console script (``/venv/bin/vllm serve ...``) is asked with the
    ``python3`` beside it, where pip puts a virtual environment's interpreter. None for any
    other program."""
    argv = invocation.argv
    words = unit_env_prefix(invocation.environment, invocation.unset_environment, working_directory)
    if len(exec_start) >= 3 and exec_start[1] in _MODULE_FORMS and len(argv) >= 3:
        if argv[1] not in _MODULE_FORMS:
            return None
        return ParseCommand(prefix=(*words, argv[0]), argv=tuple(argv[3:]))
    program = argv[0] if argv else ""
    if os.path.isabs(program) and os.path.basename(program) == "vllm":
        python = os.path.join(os.path.dirname(program), "python3")
        return ParseCommand(prefix=(*words, python), argv=tuple(argv[1:]))
    return None


def help_argv(exec_start: Sequence[str]) -> list[str]:
    """vLLM's flags listed: ``vllm serve --help`` where the unit runs the console script (bare
    ``vllm --help`` lists only its subcommands), else as any program is asked."""
    if (
        len(exec_start) >= 2
        and os.path.basename(exec_start[0]) == "vllm"
        and not exec_start[1].startswith("-")
    ):
        return [exec_start[0], exec_start[1], "--help"]
    return program_help_argv(exec_start)


def batch_command(prefix: Sequence[str], argvs: Sequence[Sequence[str]]) -> list[str]:
    """``PREFIX -c PARSE_SCRIPT ARGV_JSON...``: one process that imports vLLM once."""
    return [*prefix, "-c", PARSE_SCRIPT, *(json.dumps(list(argv)) for argv in argvs)]


def read_answers(stdout: str, stderr: str, count: int) -> list[ParseVerdict] | ParserUnavailable:
    """The script's answers to ``count`` argvs, in order (an unanswered one is
    ``unchecked``); without any answer, what the command said instead is the reason."""
    return read_marked_answers(
        stdout, stderr, count, marker=MARKER, import_line=IMPORT_LINE, parser=PARSER
    )


__all__ = ["MARKER", "PARSER", "PARSE_SCRIPT", "batch_command", "parse_command", "read_answers"]
