"""The SSH transport asks a real OpenSSH sshd for AES-GCM first (orchestrator/host/ssh.py
``_PREFERRED_CIPHERS``): chacha20-poly1305, asyncssh's own first choice, costs it more than twice
the CPU per packet, and every journal line and command output is a packet."""

from __future__ import annotations

from typing import TYPE_CHECKING

from orchestrator.host.ssh import SSHTransport
from tests.integration.test_ssh_transport import settings_for

if TYPE_CHECKING:
    from tests.integration.sshd_fixture import SSHDServer

pytest_plugins = ["tests.integration.sshd_fixture"]


async def test_the_connection_uses_aes_gcm_both_ways(sshd: SSHDServer) -> None:
    transport = SSHTransport(settings_for(sshd))
    try:
        assert (await transport.run(["echo", "ok"], timeout=10.0)).stdout == b"ok\n"
        conn = transport._conn  # the one supervised connection the run went over
        assert conn is not None
        assert conn.get_extra_info("send_cipher") == "aes128-gcm@openssh.com"
        assert conn.get_extra_info("recv_cipher") == "aes128-gcm@openssh.com"
    finally:
        await transport.close()
