"""The one base of every error that comes from a host, or from the way to it.

A host that drops its connection, a ``journalctl`` or ``systemctl daemon-reload`` that exits
non-zero, a stop job that runs past its bound, a D-Bus call that systemd refuses, an
``nvidia-smi`` that gives no usable answer: none of these is a bug of ours, and each says what
it means for the trial or the restore it interrupted. Every such error derives from
:class:`HostError` and carries its :data:`~orchestrator.types.FailureCause` and its evidence, so
the layer above maps them once (``lifecycle.failure_from``) instead of listing the classes it
happens to know (asyncssh's ``DisconnectError`` family carries its code the same way).
"""

from __future__ import annotations

from typing import Any

from orchestrator.types import FailureCause


class HostError(Exception):
    """Something on a host, or between us and it, failed; never a bug of ours.

    ``cause`` says what it means for an attempt (docs/architecture.md, the cause table);
    a subclass sets its own, or an instance its own where it depends on what failed (a stop job
    timing out is ``stop-timeout``, a start job ``ready-timeout``). ``evidence`` is what the
    host said, kept with the failure.
    """

    cause: FailureCause = "host-command-failed"

    @property
    def evidence(self) -> dict[str, Any]:
        return {}
