"""One simulated GPU host: a private root, a small systemd, a journal, GPUs and an SSH server.

The orchestrator reaches it only as it reaches a real host: SSH on a loopback address (commands,
SFTP) and HTTP to the simulated SGLang server the unit runs. The host owns every process its
unit starts and, when stopped, kills each of them by pid and leaves nothing behind.

Layout of a host directory::

    root/                 the private root (SFTP's /): etc/systemd/system/sglang.service, ...
    gpu/                  GPU state: host.json + <pid>.json registrations (see gpu.py)
    ssh_host_ed25519_key  the host key
    sim-server.json       settings for the simulated SGLang server (ORCH_SIM_CONFIG)
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
import shlex
import sys
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import asyncssh

from orchestrator.log import get_logger
from orchestrator.sim.commands import (
    CommandLineError,
    HostServices,
    run_command_line,
    split_command,
)
from orchestrator.sim.faults import CommandFailFault, CommandTrigger, HostSettings
from orchestrator.sim.gpu import GpuHostSpec, GpuState
from orchestrator.sim.journal import Journal
from orchestrator.sim.manager import ManagerOptions, ServiceManager
from orchestrator.sim.settings import CONFIG_ENV, ROOT_ENV, ServerSimSettings
from orchestrator.sim.sshd import ChannelIO, FreezeGate, SimSshServer, SshServerConfig
from orchestrator.sim.unitfile import quote_exec_word

UNIT_NAME = "sglang.service"
SERVER_PORT = 30000
MODEL_PATH = "/models/Kimi-K2.6"


def _serving_kimi(tp_flag: str, address: str, port: int) -> list[str]:
    """The flags both simulated units serve Kimi K2.6 with: its served name, tensor parallel
    over 8 GPUs (``tp_flag``: each engine's own spelling), the address and port, the kimi_k2
    reasoning parser."""
    return [
        "--served-model-name", "kimi-k2.6", tp_flag, "8", "--host", address, "--port", str(port),
        "--reasoning-parser", "kimi_k2",
    ]  # fmt: skip


def sglang_argv(address: str, port: int = SERVER_PORT) -> list[str]:
    """The unit's base command line: what a Kimi K2.6 host's SGLang unit runs."""
    return [
        sys.executable, "-m", "orchestrator.sim.sglang_server", "--model-path", MODEL_PATH,
        *_serving_kimi("--tp-size", address, port),
        "--decode-log-interval", "40", "--enable-metrics", "--trust-remote-code",
    ]  # fmt: skip


VLLM_UNIT_NAME = "vllm.service"


def vllm_argv(address: str, port: int = SERVER_PORT) -> list[str]:
    """The base command line of a Kimi K2.6 host's vLLM unit (``vllm serve``, simulated)."""
    return [
        sys.executable, "-m", "orchestrator.sim.vllm_server", "serve", MODEL_PATH,
        *_serving_kimi("--tensor-parallel-size", address, port),
        "--trust-remote-code",
    ]  # fmt: skip


def render_unit(argv: list[str], *, description: str, timeout_stop_s: int = 30) -> str:
    """The unit file a simulated host starts with."""
    exec_start = " ".join(quote_exec_word(word) for word in argv)
    return (
        "[Unit]\n"
        f"Description={description}\n"
        "After=network-online.target\n"
        "\n"
        "[Service]\n"
        "Type=simple\n"
        f"ExecStart={exec_start}\n"
        "KillMode=control-group\n"
        f"TimeoutStopSec={timeout_stop_s}\n"
        "Restart=no\n"
        "\n"
        "[Install]\n"
        "WantedBy=multi-user.target\n"
    )


@dataclass(frozen=True, slots=True)
class SimHostConfig:
    name: str
    address: str
    port: int
    directory: Path
    authorized_keys: Path
    settings: HostSettings = field(default_factory=HostSettings)
    unit_text: str | None = None
    """The initial unit file; None = the simulated server's unit of ``engine``."""
    engine: str = "sglang"
    """Which server the host's unit runs: ``sglang`` (sglang.service) or ``vllm``
    (vllm.service, ``vllm serve``)."""

    @property
    def unit_name(self) -> str:
        return VLLM_UNIT_NAME if self.engine == "vllm" else UNIT_NAME


class SimHost:
    """A simulated host; ``await start()``, talk to it over SSH, ``await stop()``."""

    def __init__(self, config: SimHostConfig) -> None:
        self.config = config
        self.settings = config.settings
        self.root = config.directory / "root"
        self.gpu_dir = config.directory / "gpu"
        self.host_key_path = config.directory / "ssh_host_ed25519_key"
        self.server_config_path = config.directory / "sim-server.json"
        self.journal = Journal(
            config.name, drop_rate=self.settings.journal_drop_rate, seed=self.settings.seed
        )
        self.gpu = GpuState(self.gpu_dir)
        self.gate = FreezeGate()
        self.manager: ServiceManager | None = None
        self.sshd: SimSshServer | None = None
        self._drops_left = self._budget(self.settings.ssh_drop)
        self._freezes_left = self._budget(self.settings.frozen)
        self._fails_left = [self._budget(fault) for fault in self.settings.command_fails]
        self._fails_armed = [fault.armed_by is None for fault in self.settings.command_fails]
        self._tasks: set[asyncio.Task[None]] = set()
        self._shell_groups: dict[int, asyncio.Event] = {}  # one per host, so kill finds them
        self._log = get_logger(component="sim.host", host=config.name)

    @staticmethod
    def _budget(trigger: CommandTrigger | None) -> int | None:
        if trigger is None or trigger.command is None:
            return 0
        return None if trigger.times == 0 else trigger.times

    @property
    def name(self) -> str:
        return self.config.name

    @property
    def address(self) -> str:
        return self.config.address

    @property
    def port(self) -> int:
        return self.config.port

    @property
    def base_url(self) -> str:
        return f"http://{self.config.address}:{SERVER_PORT}"

    def host_public_key(self) -> str:
        """``ssh-ed25519 AAAA...`` for known_hosts."""
        key = asyncssh.read_private_key(str(self.host_key_path))
        return key.export_public_key("openssh").decode().strip()

    def known_hosts_line(self) -> str:
        host = self.address if self.port == 22 else f"[{self.address}]:{self.port}"
        return f"{host} {self.host_public_key()}"

    # lifecycle

    async def start(self) -> None:
        """Bring the host up: SSH listens first, so a port that cannot be taken
        (:class:`~orchestrator.sim.sshd.BindError`) fails before the unit starts anything; on
        any failure whatever did start is stopped again."""
        self._prepare_files()
        settings = self.settings
        self.manager = ServiceManager(
            self.root,
            self.journal,
            ManagerOptions(
                hostname=self.name,
                child_env={CONFIG_ENV: str(self.server_config_path), ROOT_ENV: str(self.root)},
                survives_sigkill_s=settings.survives_sigkill_s,
                on_stuck=self.gpu.hold,
            ),
        )
        self.manager.daemon_reload()
        self.sshd = SimSshServer(
            SshServerConfig(
                address=self.address,
                port=self.port,
                host_key=self.host_key_path,
                authorized_keys=self.config.authorized_keys,
                sftp_root=self.root,
            ),
            self._handle,
            self.gate,
        )
        try:
            await self.sshd.start()
            if settings.unit_running:
                await self.manager.start(self.config.unit_name)
        except BaseException:
            await self.stop()
            raise
        self._schedule_timed_faults()
        self._log.info("host.started", address=self.address, port=self.port)

    async def stop(self) -> None:
        """Close SSH, kill every process the unit ever started, forget pending faults."""
        self.gate.thaw()  # a frozen host's sessions wait on the gate: let them end
        for task in list(self._tasks):
            task.cancel()
        if self.sshd is not None:
            await self.sshd.close()
        if self.manager is not None:
            await self.manager.shutdown()
        self._log.info("host.stopped")

    def _prepare_files(self) -> None:
        settings = self.settings
        for path in ("etc/systemd/system", "run/systemd/system", "lib/systemd/system",
                     "var/log", "tmp", "root", MODEL_PATH.lstrip("/")):
            (self.root / path).mkdir(parents=True, exist_ok=True)
        if not self.host_key_path.exists():
            key = asyncssh.generate_private_key("ssh-ed25519")
            key.write_private_key(str(self.host_key_path))
            self.host_key_path.chmod(0o600)
        self.gpu.write_spec(
            GpuHostSpec.build(
                self.name,
                count=settings.gpu_count,
                name=settings.gpu_name,
                total_mib=settings.gpu_total_mib,
                baseline_mib=settings.gpu_baseline_mib,
                driver_version=settings.driver_version,
                release_lag_s=settings.release_lag_s,
                never_released=settings.memory_never_released,
                memory_reporting=settings.gpu_memory_reporting,
            )
        )
        server = {
            "time_scale": settings.time_scale,
            "sglang_version": settings.sglang_version,
            "ddtree": settings.ddtree,
            "gpu_count": settings.gpu_count,
            "gpu_total_mib": settings.gpu_total_mib,
            "gpu_state_dir": str(self.gpu_dir),
            "seed": settings.seed,
            **settings.server,
        }
        self.server_config_path.write_text(json.dumps(server, indent=2), encoding="utf-8")
        ServerSimSettings.load(self.server_config_path)
        self._write_unit()
        # Enabled, as a GPU host's SGLang unit is: multi-user.target references it, so systemd
        # keeps its state (ExecMain*, Result) after a stop instead of garbage-collecting it.
        wants = self.root / "etc/systemd/system/multi-user.target.wants"
        wants.mkdir(exist_ok=True)
        unit = self.config.unit_name
        if not (wants / unit).is_symlink():
            (wants / unit).symlink_to(f"../{unit}")

    def _write_unit(self) -> None:
        """The unit file as this checkout renders it, on every start.

        A host directory outlives the checkout that wrote it: a unit kept from an earlier
        checkout can name an interpreter that is gone (every start then fails with 203/EXEC) or
        run another checkout's server. A unit as found that a test or a person wants is given
        as ``SimHostConfig.unit_text``, never left lying in the root."""
        unit_path = self.root / "etc/systemd/system" / self.config.unit_name
        if self.config.engine == "vllm":
            argv, description = vllm_argv(self.address), f"vLLM server ({self.name}, simulated)"
        else:
            argv, description = sglang_argv(self.address), f"SGLang server ({self.name}, simulated)"
        text = self.config.unit_text or render_unit(argv, description=description)
        try:
            current: str | None = unit_path.read_text(encoding="utf-8")
        except (OSError, UnicodeDecodeError):
            current = None
        if current != text:  # unchanged files keep their mtime
            unit_path.write_text(text, encoding="utf-8")

    # commands and faults

    def shell_groups(self) -> dict[int, asyncio.Event]:
        """The ``sh -c`` shells running now, by process group (what ``kill -- -PGID`` stops)."""
        return dict(self._shell_groups)

    def services(self) -> HostServices:
        assert self.manager is not None
        return HostServices(
            name=self.name,
            root=self.root,
            manager=self.manager,
            journal=self.journal,
            gpu=self.gpu,
            program_env={CONFIG_ENV: str(self.server_config_path), ROOT_ENV: str(self.root)},
            shell_groups=self._shell_groups,
            refusal=self._refusal,
        )

    async def _handle(self, command: str, io: ChannelIO) -> int:
        try:
            steps = split_command(command)
        except CommandLineError as exc:
            await io.write_err(f"bash: -c: line 1: syntax error: {exc}\n".encode())
            return 2
        self._command_faults(" ; ".join(shlex.join(step.argv) for step in steps))
        if self.gate.frozen:
            await self.gate.wait_open()
        return await run_command_line(self.services(), steps, io)

    def _refusal(self, argv: Sequence[str]) -> tuple[int, bytes] | None:
        """How a program about to run fails under ``command_fails`` (its exit status and
        stderr, as the real tool fails), or None to run it. Matched against the program's own
        argv (``journalctl ...``), after the login shell's ``sh -c`` wrapping is gone."""
        fired = self._command_failure(shlex.join(argv))
        return None if fired is None else (fired.exit_status, fired.stderr.encode())

    def _command_failure(self, command_line: str) -> CommandFailFault | None:
        """The first ``command_fails`` entry that fires on this command (armed, matching,
        budget left). An entry with ``armed_by`` arms on a command matching it and fires from
        the next command on."""
        fired: CommandFailFault | None = None
        for index, fault in enumerate(self.settings.command_fails):
            if not self._fails_armed[index]:
                assert fault.armed_by is not None
                self._fails_armed[index] = re.search(fault.armed_by, command_line) is not None
                continue
            left = self._fails_left[index]
            if fired is None and left != 0 and fault.matches(command_line):
                self._fails_left[index] = None if left is None else left - 1
                fired = fault
        if fired is not None:
            self._log.info("sim.command_failed", command=command_line[:200])
        return fired

    def _command_faults(self, command_line: str) -> None:
        drop = self.settings.ssh_drop
        if drop is not None and drop.matches(command_line) and self._take(drop_budget=True):
            self._spawn(self._drop_later(drop.delay_s))
        frozen = self.settings.frozen
        if frozen is not None and frozen.matches(command_line) and self._take(drop_budget=False):
            self.gate.freeze()  # this very command already gets no answer
            self._spawn(self._freeze_for(frozen.duration_s))

    def _take(self, *, drop_budget: bool) -> bool:
        left = self._drops_left if drop_budget else self._freezes_left
        if left is None:
            return True
        if left <= 0:
            return False
        if drop_budget:
            self._drops_left = left - 1
        else:
            self._freezes_left = left - 1
        return True

    def _schedule_timed_faults(self) -> None:
        drop = self.settings.ssh_drop
        if drop is not None and drop.after_s is not None:
            self._spawn(self._drop_later(drop.after_s))
        frozen = self.settings.frozen
        if frozen is not None and frozen.after_s is not None:
            self._spawn(self._freeze_later(frozen.after_s, frozen.duration_s))

    def _spawn(self, coro: Coroutine[object, object, None]) -> None:
        task = asyncio.ensure_future(coro)
        self._tasks.add(task)
        task.add_done_callback(self._tasks.discard)

    async def _drop_later(self, delay_s: float) -> None:
        await asyncio.sleep(delay_s)
        if self.sshd is not None:
            self.sshd.drop_connections()

    async def _freeze_later(self, delay_s: float, duration_s: float | None) -> None:
        await asyncio.sleep(delay_s)
        await self._freeze_for(duration_s)

    async def _freeze_for(self, duration_s: float | None) -> None:
        if self.sshd is None:
            return
        await self.sshd.freeze()
        if duration_s is None:
            return
        await asyncio.sleep(duration_s)
        with contextlib.suppress(OSError):
            await self.sshd.thaw()
