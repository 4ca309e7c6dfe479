"""What ``/proc`` says of a process, read over any transport (pure parsing)."""

from __future__ import annotations


def parse_proc_environ(data: bytes) -> dict[str, str]:
    """``/proc/<pid>/environ`` (NUL-separated ``K=V``) -> dict; odd bytes replaced, not fatal."""
    environ: dict[str, str] = {}
    for item in data.split(b"\0"):
        if not item:
            continue
        name, sep, value = item.decode("utf-8", errors="replace").partition("=")
        if sep:
            environ[name] = value
    return environ


__all__ = ["parse_proc_environ"]
