"""Simulated GPU hosts on loopback (``sim up``) and what they would measure (``sim truth``).

``orchestrator sim up`` starts hosts for manual play and demos; ``orchestrator sim truth``
prints what the simulator expects a sweep to measure, for scoring a search.

``up`` starts N hosts on consecutive 127.0.0.x addresses, writes a client key, a known_hosts
file and a ready-to-run sweep file into the state directory, prints the hosts as soon as they
answer (with ``--json``: one JSON line, flushed at once, every path absolute), then runs until
SIGINT/SIGTERM and stops every process it started. Also runnable as
``python -m orchestrator.sim.cli up ...``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import ipaddress
import json
import os
import signal
import sys
import tempfile
from collections.abc import AsyncIterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import asyncssh
import yaml

from orchestrator.log import configure_logging, get_logger
from orchestrator.sim.content import CONTENT_CLASSES, ContentClass
from orchestrator.sim.faults import FaultsFileError, load_faults_file, settings_for
from orchestrator.sim.host import (
    UNIT_NAME,
    VLLM_UNIT_NAME,
    SimHost,
    SimHostConfig,
    sglang_argv,
    vllm_argv,
)
from orchestrator.sim.settings import ServerSimSettings, SimSettingsError

if TYPE_CHECKING:  # the truth is imported only by the verb that runs it (see _truth)
    from orchestrator.sim.truth import ScheduleTruth, SweepTruth
    from orchestrator.types import KnobValue, LaunchOverlay

CLIENT_KEY_NAME = "id_ed25519"
READY_TIMEOUT_S = 30.0


def configure_parser(parser: argparse.ArgumentParser) -> None:
    """Add ``up`` and its options to ``parser`` (the ``sim`` verb's parser)."""
    verbs = parser.add_subparsers(dest="sim_verb", required=True)
    up = verbs.add_parser("up", help="start simulated GPU hosts on loopback until interrupted")
    up.add_argument("--hosts", type=int, default=2, help="how many hosts (default 2)")
    up.add_argument("--json", action="store_true", help="print one JSON line describing them")
    up.add_argument("--faults", type=Path, help="YAML: host name or '*' -> settings and faults")
    up.add_argument("--time-scale", type=float, default=None, help="multiply simulated durations")
    up.add_argument("--state-dir", type=Path, help="where keys, hosts and the sweep go")
    up.add_argument("--base-address", default="127.0.0.11", help="first host's loopback address")
    up.add_argument("--port", type=int, default=2222, help="SSH port of every host")
    up.add_argument(
        "--engine", choices=("sglang", "vllm"), default="sglang",
        help="the server the hosts' unit runs: SGLang (sglang.service) or vLLM's `vllm serve` "
        "(vllm.service); the sweep file written matches",
    )  # fmt: skip
    truth = verbs.add_parser(
        "truth",
        help="print each config's expected output_tok_s and accept_len in every cell of a sweep",
    )
    truth.add_argument("sweep", type=Path, help="the sweep file (its space and matrix)")
    truth.add_argument(
        "--settings",
        default=None,
        help="the simulated server's settings as a JSON object (what `server:` holds in a "
        "--faults file), or the path of a JSON file holding it; default: the server's defaults",
    )
    truth.add_argument(
        "--replications", type=int, default=None,
        help="replays averaged per cell (more: a smaller Monte-Carlo error, and slower)",
    )
    truth.add_argument(
        "--turnaround-s", type=float, default=0.0,
        help="the client's wall seconds from a request's end to its next request reaching "
        "the server (default 0: an ideal client)",
    )
    truth.add_argument(
        "--content", default=ContentClass.PLAIN.value, metavar="CLASS|SAMPLE",
        help=f"what the sweep's prompts are, as the simulated server classifies them: a class "
        f"({', '.join(CONTENT_CLASSES)}; default plain: the synthetic filler prompts), or a "
        "workload sample (JSONL) whose requests' classes are taken in line order",
    )
    truth.add_argument(
        "--schedule", type=Path, default=None, metavar="FILE",
        help="a speculative schedule in the engine's form (an answer's schedule.native JSON "
        "object: config and overlay): its truth in every cell beside the best fixed config's",
    )
    truth.add_argument("--json", action="store_true", help="print one JSON document")


def run(args: argparse.Namespace) -> int:
    """Run ``sim up`` or ``sim truth``; exit status 0 on success, 2 on bad input."""
    if args.sim_verb == "truth":
        return _truth(args)
    configure_logging()
    try:
        return asyncio.run(_up(args))
    except FaultsFileError as exc:
        sys.stderr.write(f"{exc}\n")
        return 2
    except OSError as exc:
        sys.stderr.write(f"sim up: {exc}\n")
        return 1


def host_names(count: int) -> list[str]:
    return [f"sim-{index:02d}" for index in range(1, count + 1)]


def host_addresses(base: str, count: int) -> list[str]:
    first = ipaddress.IPv4Address(base)
    addresses = [str(first + offset) for offset in range(count)]
    if not all(ipaddress.IPv4Address(a).is_loopback for a in addresses):
        raise ValueError("simulated hosts live on loopback addresses (127.0.0.0/8) only")
    return addresses


def write_client_key(state_dir: Path) -> tuple[Path, str]:
    """An ed25519 client key (mode 600); returns its path and public key line."""
    path = state_dir / CLIENT_KEY_NAME
    if path.exists():
        key = asyncssh.read_private_key(str(path))
    else:
        key = asyncssh.generate_private_key("ssh-ed25519", comment="orchestrator-sim")
        descriptor = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(descriptor, "wb") as handle:
            handle.write(key.export_private_key())
        key.write_public_key(str(path) + ".pub")
    os.chmod(path, 0o600)
    return path, key.export_public_key().decode().strip()


def render_sweep(hosts: list[dict[str, Any]], *, window_flag: str) -> dict[str, Any]:
    """A small sweep for the simulated hosts: baseline + 3 DDTree configs, about a minute."""
    argv = sglang_argv(hosts[0]["address"]) if hosts else []
    return {
        "name": "sim-quick",
        "description": "DDTree budget/top-k/window on simulated hosts (written by `sim up`).",
        "hosts": [
            {
                "name": host["name"],
                "address": host["address"],
                "port": host["port"],
                "user": host["user"],
                "identity_file": host["identity_file"],
                "known_hosts": host["known_hosts"],
                "base_url": host["base_url"],
                "type": "sim-gpu",
            }
            for host in hosts
        ],
        "server": {
            "unit": UNIT_NAME,
            "model": "kimi-k2.6",
            "knobs": {
                "algorithm": {"flag": "--speculative-algorithm"},
                "draft_model": {"flag": "--speculative-draft-model-path"},
                "budget": {"flag": "--speculative-ddtree-budget"},
                "topk": {"env": "SGLANG_DDTREE_MAX_TOPK"},
                "window": {"flag": window_flag},
            },
            "exec_start": argv,
        },
        "baseline": True,
        "configs": [
            {"algorithm": "DDTREE", "draft_model": "/models/Kimi-K2.6-DFlash", "budget": 8,
             "topk": 4},
            {"algorithm": "DDTREE", "draft_model": "/models/Kimi-K2.6-DFlash", "budget": 16,
             "topk": 4, "window": 2048},
            {"algorithm": "DDTREE", "draft_model": "/models/Kimi-K2.6-DFlash", "budget": 12,
             "topk": 6, "window": 2048},
        ],
        "benchmark": {
            "api": "chat",
            "contexts": [60, 512],
            "concurrency": [1, 4],
            "max_tokens": 64,
            "rounds": 1,
            "warmup_requests": 1,
            "temperature": 0.0,
        },
        "coding": {
            "problems": "builtin",
            "select": ["is_palindrome", "fib", "gcd"],
            "max_tokens": 2048,
            "temperature": 0.0,
            "timeout_s": 10,
        },
        "timeouts": {"stop": 60, "memory_release": 60, "ready": 120, "request": 120},
        "policy": {"on_trial_failure": "continue", "trial_retries": 0, "restore": "as-found"},
    }


def render_vllm_sweep(hosts: list[dict[str, Any]]) -> dict[str, Any]:
    """A small vLLM sweep for simulated ``vllm serve`` hosts: baseline, DFlash at three
    draft lengths and EAGLE-3, each speculative config one ``--speculative-config`` JSON."""
    sweep = render_sweep(hosts, window_flag="--speculative-draft-window-size")
    dflash, eagle3 = "/models/Kimi-K2.6-DFlash", "/models/Kimi-K2.6-EAGLE3"
    sweep.update(
        name="sim-vllm-quick",
        description="DFlash draft length and EAGLE-3 on simulated vLLM hosts (`sim up`).",
        engine="vllm",
        configs=[
            {"method": "dflash", "tokens": tokens, "draft": dflash} for tokens in (4, 8, 12)
        ] + [{"method": "eagle3", "tokens": 4, "draft": eagle3}],
    )  # fmt: skip
    sweep["server"] = {
        "unit": VLLM_UNIT_NAME,
        "model": "kimi-k2.6",
        "knobs": {
            "method": {"flag": "--speculative-config", "json_key": "method"},
            "tokens": {"flag": "--speculative-config", "json_key": "num_speculative_tokens"},
            "draft": {"flag": "--speculative-config", "json_key": "model"},
        },
        "exec_start": vllm_argv(hosts[0]["address"]) if hosts else [],
    }
    return sweep


def _window_flag(version: str) -> str:
    parts = tuple(int(p) for p in version.split(".")[:3] if p.isdigit())
    return (
        "--speculative-dflash-draft-window-size"
        if parts and parts < (0, 5, 12)
        else "--speculative-draft-window-size"
    )


@dataclass
class SimCluster:
    """Running simulated hosts and how to reach them (one client key, one known_hosts)."""

    hosts: list[SimHost]
    key_path: Path
    known_hosts: Path
    state_dir: Path

    def describe(self) -> list[dict[str, Any]]:
        return [
            {
                "name": host.name,
                "address": host.address,
                "port": host.port,
                "user": "root",
                "identity_file": str(self.key_path),
                "known_hosts": str(self.known_hosts),
                "base_url": host.base_url,
            }
            for host in self.hosts
        ]


@contextlib.asynccontextmanager
async def simulated_hosts(
    state_dir: Path,
    hosts: Sequence[tuple[str, str, int]],
    *,
    defaults: dict[str, Any],
    faults: dict[str, Any] | None = None,
    units: Mapping[str, str] | None = None,
    engine: str = "sglang",
) -> AsyncIterator[SimCluster]:
    """Start simulated hosts ``(name, address, port)`` with a client key and known_hosts in
    ``state_dir``; once every host answers over SSH, yield them; stop them all on exit.

    ``units`` maps a host name to the unit file it is to start with; the others get the
    simulated server's unit (``engine``: SGLang's or vLLM's), written afresh at every start."""
    key_path, authorized = _prepare_state_dir(state_dir)
    sims = [
        SimHost(
            SimHostConfig(
                name=name,
                address=address,
                port=port,
                directory=state_dir / "hosts" / name,
                authorized_keys=authorized,
                settings=settings_for(name, faults or {}, defaults),
                unit_text=(units or {}).get(name),
                engine=engine,
            )
        )
        for name, address, port in hosts
    ]
    started: list[SimHost] = []
    try:
        for host in sims:
            (state_dir / "hosts" / host.name).mkdir(parents=True, exist_ok=True)
            await host.start()
            started.append(host)
        known_hosts = state_dir / "known_hosts"
        known_hosts.write_text("".join(h.known_hosts_line() + "\n" for h in sims), "utf-8")
        await _wait_answering(sims, key_path, known_hosts)
        yield SimCluster(sims, key_path, known_hosts, state_dir)
    finally:
        for host in reversed(started):
            with contextlib.suppress(Exception):
                await host.stop()


def _prepare_state_dir(state_dir: Path) -> tuple[Path, Path]:
    """The client key and the authorized_keys file every simulated host trusts."""
    state_dir.mkdir(parents=True, exist_ok=True)
    key_path, public_key = write_client_key(state_dir)
    authorized = state_dir / "authorized_keys"
    authorized.write_text(public_key + "\n", encoding="utf-8")
    return key_path, authorized


async def _up(args: argparse.Namespace) -> int:
    log = get_logger(component="sim.up")
    if args.hosts < 1:
        sys.stderr.write("sim up: --hosts must be at least 1\n")
        return 2
    state_dir = (
        args.state_dir or Path(tempfile.mkdtemp(prefix="orchestrator-sim-"))
    ).resolve()
    names = host_names(args.hosts)
    try:
        addresses = host_addresses(args.base_address, args.hosts)
    except ValueError as exc:
        sys.stderr.write(f"sim up: {exc}\n")
        return 2
    faults = load_faults_file(args.faults, names) if args.faults else {}
    defaults: dict[str, Any] = {"ddtree": True}
    if args.time_scale is not None:
        defaults["time_scale"] = args.time_scale
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, stop.set)
    specs = [(name, address, args.port) for name, address in zip(names, addresses, strict=True)]
    try:
        async with simulated_hosts(
            state_dir, specs, defaults=defaults, faults=faults, engine=args.engine
        ) as cluster:
            described = cluster.describe()
            sweep_path = state_dir / "sweep.yaml"
            version = cluster.hosts[0].settings.sglang_version
            sweep = (
                render_vllm_sweep(described)
                if args.engine == "vllm"
                else render_sweep(described, window_flag=_window_flag(version))
            )
            sweep_path.write_text(
                "# Written by `orchestrator sim up`: a quick sweep over the simulated hosts.\n"
                + yaml.safe_dump(sweep, sort_keys=False),
                encoding="utf-8",
            )
            _announce(args.json, described, sweep_path, state_dir)
            log.info("sim.up", hosts=len(cluster.hosts), state_dir=str(state_dir))
            await stop.wait()
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)
    log.info("sim.down", hosts=len(specs))
    return 0


async def _wait_answering(hosts: list[SimHost], key: Path, known_hosts: Path) -> None:
    """Each host answers a command over SSH (so printing the hosts means they are usable)."""
    for host in hosts:
        async with asyncio.timeout(READY_TIMEOUT_S), asyncssh.connect(
            host.address,
            host.port,
            username="root",
            client_keys=[str(key)],
            known_hosts=str(known_hosts),
            config=None,
        ) as conn:
            await conn.run("true", check=True)


def _announce(as_json: bool, hosts: list[dict[str, Any]], sweep: Path, state_dir: Path) -> None:
    if as_json:
        document = {"hosts": hosts, "sweep_file": str(sweep), "state_dir": str(state_dir)}
        sys.stdout.write(json.dumps(document) + "\n")
        sys.stdout.flush()
        return
    lines = [f"Simulated hosts ({len(hosts)}), state in {state_dir}:"]
    for host in hosts:
        lines.append(
            f"  {host['name']}: ssh -i {host['identity_file']} -o UserKnownHostsFile="
            f"{host['known_hosts']} -p {host['port']} root@{host['address']}   "
            f"server {host['base_url']}"
        )
    lines.append(f"Sweep file: {sweep}")
    lines.append("Press Ctrl-C to stop.")
    sys.stdout.write("\n".join(lines) + "\n")
    sys.stdout.flush()


def _truth(args: argparse.Namespace) -> int:
    """``sim truth``: the sweep's space x matrix with each cell's expected measurement, and
    with ``--schedule`` the schedule's beside the best fixed config's in each cell.

    The truth (and the sweep and plan code it reads) is imported here, not at the top: every
    ``orchestrator`` command builds this verb's parser, and none but this one may load it."""
    from orchestrator.sim.truth import DEFAULT_REPLICATIONS, schedule_truth, sweep_truth
    from orchestrator.sweepfile import SweepFileError, load_sweep

    try:
        sweep = load_sweep(args.sweep)
    except SweepFileError as exc:
        sys.stderr.write("\n".join(str(problem) for problem in exc.problems) + "\n")
        return 2
    except OSError as exc:
        sys.stderr.write(f"sim truth: {args.sweep}: {exc.strerror or exc}\n")
        return 2
    try:
        settings = ServerSimSettings.from_mapping(*_settings_object(args.settings))
    except SimSettingsError as exc:
        sys.stderr.write(f"sim truth: --settings {exc}\n")
        return 2
    replications = DEFAULT_REPLICATIONS if args.replications is None else args.replications
    problem = _truth_problem(replications, args.turnaround_s)
    content = _truth_content(args.content)
    schedule = _schedule_file(args.schedule)
    for refused in (problem, content, schedule):
        if isinstance(refused, str):
            sys.stderr.write(refused + "\n")
            return 2
    assert not isinstance(content, str) and not isinstance(schedule, str)
    options: dict[str, Any] = {
        "replications": replications, "turnaround_s": args.turnaround_s, "content": content,
    }  # fmt: skip
    truth = sweep_truth(sweep, settings, **options)
    scheduled = None
    if schedule is not None:
        scheduled = schedule_truth(sweep, *schedule, truth, settings, **options)
    if args.json:
        document = truth.to_json()
        if scheduled is not None:
            document["schedule"] = scheduled.to_json()
        sys.stdout.write(json.dumps(document) + "\n")
        return 0
    _print_truth(truth)
    if scheduled is not None:
        _print_schedule(scheduled)
    return 0


def _truth_problem(replications: int, turnaround_s: float) -> str | None:
    if replications < 2:
        return "sim truth: --replications must be at least 2"
    if turnaround_s < 0:
        return "sim truth: --turnaround-s must be >= 0"
    return None


def _print_truth(truth: SweepTruth) -> None:
    for entry in truth.configs:
        label = json.dumps(entry.config, sort_keys=True) if entry.config else "baseline"
        if entry.error is not None:
            sys.stdout.write(f"{label}: does not start ({entry.error})\n")
            continue
        sys.stdout.write(f"{label}:\n")
        for cell in entry.cells:
            accept = "-" if cell.accept_len is None else f"{cell.accept_len:.3f}"
            sys.stdout.write(
                f"  context {cell.context:>7} x concurrency {cell.concurrency:>4}: "
                f"{cell.output_tok_s:10.1f} tok/s (sd {cell.output_tok_s_sd:.1f}), "
                f"accept len {accept}\n"
            )


def _print_schedule(scheduled: ScheduleTruth) -> None:
    label = json.dumps(scheduled.config, sort_keys=True)
    if scheduled.error is not None:
        sys.stdout.write(f"schedule {label}: does not run ({scheduled.error})\n")
        return
    sys.stdout.write(f"schedule {label}:\n")
    for load in scheduled.loads:
        cell = load.schedule
        best = "no fixed config starts"
        if load.best is not None and load.ratio is not None:
            fixed = json.dumps(load.best_config, sort_keys=True) if load.best_config else "baseline"
            best = (f"best fixed {fixed} {load.best.output_tok_s:.1f} tok/s, the schedule "
                    f"{load.ratio:.1%} of it")  # fmt: skip
        sys.stdout.write(
            f"  context {cell.context:>7} x concurrency {cell.concurrency:>4}: "
            f"{cell.output_tok_s:10.1f} tok/s (sd {cell.output_tok_s_sd:.1f}); {best}\n"
        )


def _schedule_file(path: Path | None) -> tuple[dict[str, KnobValue], LaunchOverlay] | str | None:
    """``--schedule``: the fixed config and overlay it holds, else the error's text."""
    from orchestrator.sim.truth import ScheduleFileError, read_schedule

    if path is None:
        return None
    try:
        return read_schedule(json.loads(path.read_text(encoding="utf-8")))
    except OSError as exc:
        return f"sim truth: --schedule {path}: {exc.strerror or exc}"
    except (ValueError, ScheduleFileError) as exc:
        return f"sim truth: --schedule {path}: {exc}"


def _truth_content(raw: str) -> tuple[ContentClass, ...] | str:
    """``--content``: a class name, or a workload sample's classes; else the error's text."""
    from orchestrator.bench.workloads import WorkloadFileError, parse_sample
    from orchestrator.sim.truth import sample_content

    if raw in CONTENT_CLASSES:
        return (ContentClass(raw),)
    try:
        text = Path(raw).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else exc
        return (
            f"sim truth: --content {raw}: neither a class ({', '.join(CONTENT_CLASSES)}) "
            f"nor a readable sample: {reason}"
        )
    try:
        return sample_content(parse_sample(text, filename=raw, label=f"file:{raw}"))
    except WorkloadFileError as exc:
        return "\n".join(exc.problems)


def _settings_object(raw: str | None) -> tuple[dict[str, Any], str]:
    """``--settings``: inline JSON, or a file of it; (object, where) for the error messages."""
    if raw is None:
        return {}, "<defaults>"
    where = "<inline>"
    text = raw
    if not raw.lstrip().startswith("{"):
        where = raw
        try:
            text = Path(raw).read_text(encoding="utf-8")
        except OSError as exc:
            raise SimSettingsError(where, f"cannot read: {exc.strerror or exc}") from exc
    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise SimSettingsError(where, f"not JSON: {exc}") from exc
    if not isinstance(value, dict):
        raise SimSettingsError(where, "expected a JSON object")
    return value, where


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="orchestrator sim")
    configure_parser(parser)
    return run(parser.parse_args(argv))


if __name__ == "__main__":
    raise SystemExit(main())


