"""How a command runs as a unit would run it: in its working directory, with its environment
set and the variables it unsets removed.

The preflight asks the unit's own program about a trial's argv (an engine's parser, or its
``--help``) before anything restarts. Run bare, that program may not even import: an engine
found only through the unit's ``Environment=PYTHONPATH=...`` or its ``WorkingDirectory=`` would
be set aside as missing. So every such question goes through ``env``, which the host has
whatever its engine, and this prefix is the one place that says how.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence


def unit_env_prefix(
    environment: Mapping[str, str],
    unset: Sequence[str] = (),
    working_directory: str | None = None,
) -> tuple[str, ...]:
    """``env [-C DIR] [-u NAME]... NAME=VALUE...``: put a program after it to run the program
    as the unit would (variables sorted, so one environment is always one prefix)."""
    words = ["env"]
    if working_directory:
        words += ["-C", working_directory]
    for name in unset:
        words += ["-u", name]
    words += [f"{name}={value}" for name, value in sorted(environment.items())]
    return tuple(words)


def working_directory(settings: Mapping[str, Sequence[str]]) -> str | None:
    """The unit's ``WorkingDirectory=`` (its last non-empty assignment), or None."""
    directories = settings.get("WorkingDirectory", ())
    return next((d for d in reversed(directories) if d), None)
