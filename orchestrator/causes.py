"""Why an attempt failed, one table: each cause's words for a person, and what it means for
the runner's retries, the search and the answers.

Every engine classifies its own failure texts into these causes (``Engine.classify_failure``);
what a cause then means is the same whatever the engine, so the words name no engine: "the
server" is whatever the unit runs. docs/architecture.md tells what each means for an operator.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType

from orchestrator.types import FailureCause


@dataclass(frozen=True, slots=True)
class Cause:
    """What one failure cause means."""

    words: str
    """The cause in plain words, as the outcome lines and the report write it."""
    retry_cures: bool = True
    """False where the same config fails the same way again (a retry is a lost restart)."""
    condemns_everywhere: bool = False
    """The config itself is refused (not the host): the search never proposes it again on any
    host type."""
    started: bool = True
    """An attempt with this cause started the unit (it spent a restart)."""
    loses_host: bool = False
    """Every further trial on the host would fail the same way: the host is set aside."""


CAUSES: Mapping[FailureCause, Cause] = MappingProxyType(
    {
        "bad-flag": Cause("the server does not know a flag", retry_cures=False),
        "invalid-config": Cause(
            "the server refused the config at startup",
            retry_cures=False,
            condemns_everywhere=True,
        ),
        "oom": Cause("the GPU ran out of memory while loading"),
        "port-in-use": Cause("the server's port was taken by another process"),
        "warmup-failed": Cause("the new server never answered a real generation"),
        "exited": Cause("the server exited at startup"),
        "start-limit": Cause("systemd's start rate limit refused the start"),
        "memory-not-released": Cause(
            "GPU memory stayed in use after the stop; the unit was not started"
        ),
        "ready-timeout": Cause("the server was not ready within timeouts.ready"),
        "config-mismatch": Cause(
            "the server runs something other than the config asked", retry_cures=False
        ),
        "host-unreachable": Cause(
            "SSH to the host failed past the reconnect budget", loses_host=True
        ),
        "stop-timeout": Cause("the old server did not stop within timeouts.stop"),
        "crashed": Cause("the server died during the benchmark"),
        "gpu-query-failed": Cause("the GPUs could not be queried (nvidia-smi)"),
        "host-command-failed": Cause(
            "a command on the host failed (journalctl, systemctl, D-Bus)"
        ),
        "orchestrator-error": Cause(
            "a bug in the orchestrator (the traceback is in the results)", retry_cures=False
        ),
        "stopped": Cause("the sweep was stopped before this trial finished"),
        "host-set-aside": Cause("its host was set aside", started=False),
        "lease-lost": Cause(
            "another controller took the host over (its lease was lost); nothing was changed"
            " after that",
            retry_cures=False,
            loses_host=True,
        ),
    }
)

CAUSE_WORDS: Mapping[str, str] = MappingProxyType(
    {name: cause.words for name, cause in CAUSES.items()}
)
"""Each cause's words by its name (what stored attempts carry)."""
PREFLIGHT_REFUSAL = (
    "the host's own parser refused the config (found by the preflight, before any restart)"
)
"""A config the preflight's parser refused for other than an unknown flag: nothing started."""

DETERMINISTIC_CAUSES = frozenset(name for name, cause in CAUSES.items() if not cause.retry_cures)
"""Causes a retry cannot cure: the same config fails the same way (a bug of ours included)."""
INVALID_CONFIG_CAUSES = frozenset(
    name for name, cause in CAUSES.items() if cause.condemns_everywhere
)
"""Causes that condemn a config on every host type (a bad flag condemns it on its own type,
where the config is paid for already and never proposed again)."""
HOST_LOSING_CAUSES = frozenset(name for name, cause in CAUSES.items() if cause.loses_host)
"""Causes after which the host's remaining trials are skipped and the host set aside."""
NEVER_STARTED = frozenset(name for name, cause in CAUSES.items() if not cause.started)
"""Causes of attempts that never reached the unit (no restart was spent)."""


__all__ = [
    "CAUSES",
    "CAUSE_WORDS",
    "DETERMINISTIC_CAUSES",
    "HOST_LOSING_CAUSES",
    "INVALID_CONFIG_CAUSES",
    "NEVER_STARTED",
    "PREFLIGHT_REFUSAL",
    "Cause",
]
