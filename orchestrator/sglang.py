"""The documented name of SGLang's parsing API (``orchestrator.sglang.parse_log_line``): the
engine itself lives in :mod:`orchestrator.engines.sglang`, and this module only re-exports it
for tools written against the old name."""

from orchestrator.engines.sglang.engine import *  # noqa: F403
from orchestrator.engines.sglang.engine import __all__  # noqa: F401
