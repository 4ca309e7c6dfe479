"""SGLang as an engine: its command line, its parser (``argv``), its log lines, readiness,
dialects and config check (``engine``). ``ENGINE`` is what :func:`orchestrator.engines.get`
returns for ``engine: sglang``."""

from orchestrator.engines.sglang.engine import *  # noqa: F403 - the engine's public API
from orchestrator.engines.sglang.engine import SGLANG
from orchestrator.engines.sglang.engine import __all__ as _engine_api

ENGINE = SGLANG

__all__ = ["ENGINE", *_engine_api]
