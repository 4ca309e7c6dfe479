"""orchestrator: unattended speculative-decoding config sweeps on SGLang GPU hosts."""

__version__ = "0.1.0"
