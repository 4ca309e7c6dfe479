"""The preflight's reading of a build's ``--help``: unknown flags, each with the build's closest
spelling when there is one (argparse's help format, as SGLang prints it)."""

from __future__ import annotations

from orchestrator.preflight import flag_problem, flags_known, help_flags, suggest_flags

HELP = """usage: launch_server.py [-h] --model-path MODEL_PATH [--served-model-name NAME]
                        [--speculative-algorithm {EAGLE,EAGLE3,NEXTN,DFLASH}]
                        [--speculative-draft-window-size N]

options:
  -h, --help            show this help message and exit
  --model-path MODEL_PATH, --model MODEL_PATH
                        The path of the model weights.
  --speculative-num-draft-tokens SPECULATIVE_NUM_DRAFT_TOKENS
  --speculative-draft-window-size SPECULATIVE_DRAFT_WINDOW_SIZE
                        Draft window (--speculative-dflash-block-size sets the block).
  --enable-metrics      Enable Prometheus metrics.
"""


def test_help_flags_are_every_long_flag_once_in_order() -> None:
    flags = help_flags(HELP)
    assert flags[:4] == ["--model-path", "--served-model-name", "--speculative-algorithm",
                         "--speculative-draft-window-size"]  # fmt: skip
    assert "--help" in flags and "--speculative-dflash-block-size" in flags
    assert len(flags) == len(set(flags))


def test_unknown_flags_name_the_builds_closest_spelling() -> None:
    asked = ["--speculative-dflash-draft-window-size", "--enable-metric", "--tree-budget",
             "--enable-metrics"]  # fmt: skip
    unknown = flags_known(HELP, asked)
    assert unknown == {"--speculative-dflash-draft-window-size", "--enable-metric", "--tree-budget"}
    suggestions = suggest_flags(HELP, unknown)
    assert suggestions == {
        "--speculative-dflash-draft-window-size": "--speculative-draft-window-size",
        "--enable-metric": "--enable-metrics",
    }
    assert flag_problem(unknown, suggestions) == (
        "unknown to this build: --enable-metric (did you mean --enable-metrics?), "
        "--speculative-dflash-draft-window-size (did you mean --speculative-draft-window-size?), "
        "--tree-budget"
    )
