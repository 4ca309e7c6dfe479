"""Serving engines by name: each one a package under ``orchestrator/engines/`` that fills the
:class:`~orchestrator.engines.base.Engine` seam, chosen by a sweep file's ``engine:`` field.

An engine owns everything engine-specific (how knobs become its command line, how its parser
is asked about an argv, its readiness endpoint and probe, its log lines and failure texts, its
metrics, its request dialects); the control path asks :func:`get` and nothing else. The
built-in engines are imported on first use, so naming one costs nothing until it is needed;
:func:`register` adds another (a plugin, or a test's own engine).

    >>> from orchestrator import engines
    >>> engines.get("sglang").name
    'sglang'
"""

from __future__ import annotations

import importlib

from orchestrator.engines.base import Engine

DEFAULT_ENGINE = "sglang"
"""The engine of a sweep file that names none."""

_BUILTIN: dict[str, str] = {
    "sglang": "orchestrator.engines.sglang",
    "vllm": "orchestrator.engines.vllm",
    "llamacpp": "orchestrator.engines.llamacpp",
}
"""Built-in engine name -> the package whose ``ENGINE`` it is."""
_registered: dict[str, Engine] = {}


class UnknownEngine(LookupError):
    """No engine of that name; the message names the known ones."""

    def __init__(self, name: str) -> None:
        super().__init__(f"unknown engine {name!r}: known engines are {', '.join(names())}")
        self.name = name


def names() -> tuple[str, ...]:
    """Every engine a sweep file may name, in name order."""
    return tuple(sorted({*_BUILTIN, *_registered}))


def register(engine: Engine) -> None:
    """Make ``engine`` known by its ``name`` (replacing one registered under it before)."""
    _registered[engine.name] = engine


def unregister(name: str) -> None:
    """Forget an engine :func:`register` added (a built-in one stays)."""
    _registered.pop(name, None)


def get(name: str) -> Engine:
    """The engine called ``name``; :class:`UnknownEngine` when there is none. The name is
    required: a caller that serves an engine says which, so none falls back to SGLang's log
    parser or counters unnoticed (:data:`DEFAULT_ENGINE` is the sweep file's default only)."""
    engine = _registered.get(name)
    if engine is not None:
        return engine
    package = _BUILTIN.get(name)
    if package is None:
        raise UnknownEngine(name)
    engine = importlib.import_module(package).ENGINE
    if not isinstance(engine, Engine):  # a package's ENGINE must fill the seam
        raise TypeError(f"{package}.ENGINE is not an Engine")
    _registered[name] = engine
    return engine


__all__ = ["DEFAULT_ENGINE", "UnknownEngine", "get", "names", "register", "unregister"]
