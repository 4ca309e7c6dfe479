"""A one-host sweep file for unit tests that need a parsed :class:`Sweep` and nothing of a
host: each test overrides the blocks it is about."""

from __future__ import annotations

from typing import Any

import yaml

from orchestrator.sweepfile import Sweep, parse_sweep


def tiny_sweep(**blocks: Any) -> Sweep:
    """A budget x top-k grid on one host, no baseline, ``blocks`` replacing whole blocks."""
    document: dict[str, Any] = {
        "name": "tiny",
        "hosts": [
            {"name": "h1", "address": "127.0.0.1", "base_url": "http://127.0.0.1:30000"},
        ],
        "server": {
            "model": "m",
            "knobs": {
                "budget": {"flag": "--speculative-num-draft-tokens"},
                "topk": {"flag": "--speculative-eagle-topk"},
            },
        },
        "baseline": False,
        "grid": {"budget": [4, 16], "topk": [1, 2, 4]},
        "benchmark": {"contexts": [60], "concurrency": [1], "rounds": 2},
        "objective": {"metric": "output_tok_s", "context": 60, "concurrency": 1},
        **blocks,
    }
    return parse_sweep(yaml.safe_dump(document, sort_keys=False), "tiny.yaml")
