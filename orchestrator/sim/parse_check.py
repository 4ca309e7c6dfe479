"""The simulated host's SGLang asked to parse an argv, as the real one answers it.

A preflight runs ``PYTHON -c SCRIPT ARGV_JSON...`` with the unit's interpreter, where SCRIPT
imports ``sglang.srt.server_args.prepare_server_args`` once, parses each ARGV_JSON (one argv as
a JSON list) and prints one JSON line per argv, with its ``index``. The
simulated host has no ``sglang`` package (nothing of that name is ever installed here: it would
shadow a real install), so its shell answers a script that makes that import from the simulated
server's own parser and resolution (``server_args.build_parser`` + ``resolve``), with the same
answer the real script prints: ``ok``, argparse's error line (``PROG: error: ...``) or the
resolution's exception, and the resolved speculative fields.
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence
from typing import Any, NoReturn

from orchestrator.sim import vllm_args
from orchestrator.sim.server_args import build_parser, resolve
from orchestrator.sim.settings import ServerSimSettings, SimSettingsError

SGLANG_IMPORT = "from sglang.srt.server_args import prepare_server_args"
"""What marks the script as one the simulated SGLang answers."""
MARKER = "ORCHESTRATOR_SGLANG_PARSE "
"""The prefix of the script's answer line (the script prints it, so the sim does too)."""


VLLM_IMPORT = "from vllm.entrypoints.common.cli_args import make_arg_parser"
"""What marks the vLLM engine's parse script (the simulated host has no ``vllm`` either)."""
VLLM_MARKER = "ORCHESTRATOR_VLLM_PARSE "


class _ArgparseError(Exception):
    pass


def is_parse_script(args: Sequence[str]) -> bool:
    """``-c SCRIPT ...`` where the script imports SGLang's ``prepare_server_args`` or vLLM's
    ``make_arg_parser``."""
    return (
        len(args) >= 2 and args[0] == "-c" and (SGLANG_IMPORT in args[1] or VLLM_IMPORT in args[1])
    )


def answer_script(script: str, batch: Sequence[str], environ: Mapping[str, str]) -> str:
    """The output of the parse script ``script`` (SGLang's or vLLM's) for ``batch``."""
    if VLLM_IMPORT in script:
        return answer_vllm(batch)
    return answer(batch, environ)


def answer_vllm(batch: Sequence[str]) -> str:
    """The vLLM parse script's output: the simulated ``vllm serve`` parser and its checks."""
    lines = []
    for index, text in enumerate(batch):
        try:
            argv = [str(word) for word in json.loads(text)]
        except ValueError:
            break
        try:
            resolved = vllm_args.resolve(vllm_args.parse(argv))
        except vllm_args.ArgparseExit as exc:
            fields: dict[str, Any] = {"ok": False, "kind": "argparse", "error": exc.message}
        except ValueError as exc:
            fields = {"ok": False, "kind": "resolution", "error": f"ValueError: {exc}"}
        else:
            fields = {"ok": True, "speculative": resolved.values["speculative_config"] or {}}
        lines.append(VLLM_MARKER + json.dumps({"index": index, **fields}, default=str) + "\n")
    return "".join(lines)


def answer(batch: Sequence[str], environ: Mapping[str, str]) -> str:
    """The script's output for ``batch`` (each one argv as a JSON list) under ``environ``
    (whose ``ORCH_SIM_CONFIG`` names the simulated build: version, DDTree): one line per argv,
    as one process that imported SGLang once answers them."""
    lines = []
    for index, text in enumerate(batch):
        try:
            argv = json.loads(text)
        except ValueError:
            break  # the script dies here (a traceback): the rest go unanswered
        lines.append(_answer_one(index, [str(word) for word in argv], environ))
    return "".join(lines)


def _answer_one(index: int, argv: Sequence[str], environ: Mapping[str, str]) -> str:
    try:
        settings = ServerSimSettings.from_env(environ)
    except SimSettingsError as exc:
        return _line(index=index, ok=None, kind="unchecked", error=f"SimSettingsError: {exc}")
    parser = build_parser(settings.sglang_version, settings.ddtree)

    def error(message: str) -> NoReturn:
        raise _ArgparseError(f"{parser.prog}: error: {message}")

    parser.error = error  # type: ignore[method-assign]  # argparse's own hook for its errors
    try:
        namespace: argparse.Namespace = parser.parse_args(list(argv))
    except _ArgparseError as exc:
        return _line(index=index, ok=False, kind="argparse", error=str(exc))
    try:
        resolved = resolve(
            namespace, argv, version=settings.sglang_version, ddtree=settings.ddtree,
            environ=environ,
        )  # fmt: skip
    except (ValueError, AssertionError) as exc:
        return _line(
            index=index, ok=False, kind="resolution", error=f"{type(exc).__name__}: {exc}"
        )
    except (OSError, AttributeError) as exc:  # the script's catch-all (an unreadable file)
        return _line(index=index, ok=None, kind="unchecked", error=f"{type(exc).__name__}: {exc}")
    speculative = {k: v for k, v in resolved.values.items() if k.startswith("speculative_")}
    return _line(index=index, ok=True, speculative=speculative)


def _line(**fields: Any) -> str:
    return MARKER + json.dumps(fields, default=str) + "\n"
