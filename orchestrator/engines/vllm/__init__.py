"""vLLM as an engine: ``vllm serve`` under systemd, speculation through
``--speculative-config`` (:mod:`.engine`). ``ENGINE`` is what
:func:`orchestrator.engines.get` returns for ``engine: vllm``."""

from orchestrator.engines.vllm.engine import VLLM

ENGINE = VLLM

__all__ = ["ENGINE"]
