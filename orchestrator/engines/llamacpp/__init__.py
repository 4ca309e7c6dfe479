"""llama.cpp's ``llama-server`` as an engine: speculation by ``--spec-type`` with a draft
model or n-grams (:mod:`.engine`). ``ENGINE`` is what :func:`orchestrator.engines.get`
returns for ``engine: llamacpp``."""

from orchestrator.engines.llamacpp.engine import LLAMACPP

ENGINE = LLAMACPP

__all__ = ["ENGINE"]
