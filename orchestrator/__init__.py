"""orchestrator: unattended speculative-decoding config sweeps on inference hosts (SGLang, vLLM,
llama.cpp)."""

__version__ = "0.1.0"
