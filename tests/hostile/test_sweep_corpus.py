"""Hostile sweep files: every one is refused by ``orchestrator validate`` (exit 2, each problem as
``FILE:LINE: FIELD: message``, never a traceback) and queues nothing on a daemon, whether it comes
through ``orchestrator submit`` or the inbox.

The corpus is ``tests/data/sweeps/bad/`` (each file's ``# expect:`` lines name its problems) plus
files generated here that are too big or too binary to keep in the repository: a billion-laughs
alias bomb, a 100,000-deep flow collection, a file over the size limit, 30,000 keys, NUL bytes,
invalid UTF-8, and paths that are not regular files.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from orchestrator.cli import main
from tests.integration.daemon_proc import ORCHESTRATOR, DaemonProcess, running_daemon

ROOT = Path(__file__).resolve().parents[2]
BAD = sorted((ROOT / "tests" / "data" / "sweeps" / "bad").glob("*.yaml"))
_EXPECT = re.compile(r"^# expect: (?P<line>\d+) (?P<path>.+?) \| (?P<text>.+)$")
MINIMAL = (
    "name: t\nhosts:\n"
    '  - {name: h1, address: 127.0.0.140, base_url: "http://127.0.0.140:30000"}\n'
    "server:\n  model: m\nbaseline: true\n"
)
LAUGHS = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 9) if prev else ', '.join(['lol'] * 9)}]\n"
    for prev, name in zip(["", *"abcdefgh"], "abcdefghi", strict=True)
)


def _generated() -> dict[str, bytes]:
    """name -> content of the hostile files built at test time."""
    return {
        "billion_laughs.yaml": (LAUGHS + MINIMAL).encode(),
        "deep_flow.yaml": ("name: t\nx: " + "[" * 100_000 + "]" * 100_000 + "\n").encode(),
        "deep_mapping.yaml": ("name: t\nx: " + "{a: " * 20_000 + "1" + "}" * 20_000).encode(),
        "huge.yaml": MINIMAL.encode() + b"# " + b"x" * (2 * 1024 * 1024) + b"\n",
        "many_keys.yaml": (MINIMAL + "".join(f"k{i}: {i}\n" for i in range(30_000))).encode(),
        "nul_byte.yaml": MINIMAL.replace("model: m", "model: m\0x").encode(),
        "not_utf8.yaml": MINIMAL.encode().replace(b"model: m", b"model: \xff\xfe"),
        "binary.yaml": bytes(range(256)) * 64,
        "long_scalar.yaml": MINIMAL.replace("model: m", "model: " + "m" * 500_000).encode(),
        "python_apply.yaml": MINIMAL.replace(
            "model: m", "model: !!python/object/apply:os.system ['touch /tmp/orch-pwned']"
        ).encode(),
        "huge_integer.yaml": MINIMAL.replace("baseline: true", "priority: " + "9" * 5000).encode(),
        # one-line exec_start: an escaped newline would smuggle a second unit-file line
        "exec_start_escaped_newline.yaml": MINIMAL.replace(
            "model: m", "model: m\n  exec_start: '/bin/x \"a\\nExecStartPre=/bin/sh -c reboot\"'"
        ).encode(),
        "exec_start_expansion.yaml": MINIMAL.replace(
            "model: m", "model: m\n  exec_start: '/bin/x $$$(reboot) ${LD_PRELOAD}'"
        ).encode(),
        "exec_start_escaped_nul.yaml": MINIMAL.replace(
            "model: m", "model: m\n  exec_start: '/bin/x \\x00'"
        ).encode(),
    }


@pytest.fixture(scope="module")
def generated(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    directory = tmp_path_factory.mktemp("hostile-sweeps")
    paths = {}
    for name, content in _generated().items():
        path = directory / name
        path.write_bytes(content)
        paths[name] = path
    (directory / "a_directory.yaml").mkdir()
    paths["a_directory.yaml"] = directory / "a_directory.yaml"
    os.symlink("/dev/zero", directory / "dev_zero.yaml")
    paths["dev_zero.yaml"] = directory / "dev_zero.yaml"
    return paths


def _expectations(path: Path) -> list[tuple[int, str, str]]:
    found = []
    for line in path.read_text(errors="replace").splitlines():
        match = _EXPECT.match(line)
        if match:
            field = "" if match["path"] == "-" else match["path"]
            found.append((int(match["line"]), field, match["text"]))
    return found


def _validate(path: Path, capsys: pytest.CaptureFixture[str], *extra: str) -> tuple[int, str, str]:
    code = main(["validate", str(path), *extra])
    out, err = capsys.readouterr()
    return code, out, err


_PROBLEM_LINE = re.compile(r"^(?P<file>[^:]+):(?P<line>\d+): (?:(?P<field>[^ ].*?): )?(?P<msg>.+)$")


@pytest.mark.parametrize("path", BAD, ids=lambda p: p.name)
def test_validate_names_every_problem_of_the_corpus(
    path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = _validate(path, capsys)
    assert code == 2 and out == ""
    assert "Traceback" not in err
    lines = [line for line in err.splitlines() if line.startswith(str(path))]
    assert lines, err
    for line_no, field, text in _expectations(path):
        prefix = f"{path}:{line_no}: {field}: " if field else f"{path}:{line_no}: "
        assert any(line.startswith(prefix) and text in line for line in lines), (prefix, text, err)


def test_validate_refuses_every_generated_file(
    generated: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    for name, path in generated.items():
        # CPU, not wall time: a hostile file must not make the parser work for long, and a
        # loaded machine stretches only the wall clock (validate runs in this process).
        began = time.process_time()
        code, out, err = _validate(path, capsys, "--json")
        took = time.process_time() - began
        assert code == 2, (name, err)
        assert "Traceback" not in err, name
        document = json.loads(out)
        assert document["valid"] is False and document["problems"], name
        for problem in document["problems"]:
            assert problem["file"] == str(path) and isinstance(problem["line"], int), problem
        assert took < 5, f"{name} took {took:.1f} s of CPU to refuse"
    assert not Path("/tmp/orch-pwned").exists()
    problems = {}
    for name, path in generated.items():
        document = json.loads(_validate(path, capsys, "--json")[1])
        problems[name] = " ".join(problem["message"] for problem in document["problems"])
    assert "anchors and aliases are not supported" in problems["billion_laughs.yaml"]
    assert "nested deeper than 32 levels" in problems["deep_flow.yaml"]
    assert "nested deeper than 32 levels" in problems["deep_mapping.yaml"]
    assert "1048576 bytes" in problems["huge.yaml"]
    assert "more than 20000 YAML nodes" in problems["many_keys.yaml"]
    assert "unsupported tag" in problems["python_apply.yaml"]
    assert (
        "contains a newline once its escapes are decoded"
        in problems["exec_start_escaped_newline.yaml"]
    )
    assert "environment expansion ${...}" in problems["exec_start_expansion.yaml"]
    assert "escape of NUL" in problems["exec_start_escaped_nul.yaml"]


def test_the_real_command_exits_2_without_a_traceback(generated: dict[str, Path]) -> None:
    """The same through the installed entry point, as an operator runs it (one process each)."""
    for path in (BAD[0], generated["billion_laughs.yaml"], generated["dev_zero.yaml"]):
        done = subprocess.run(
            [*ORCHESTRATOR, "validate", str(path)], capture_output=True, text=True, timeout=60
        )
        assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr
        assert done.stderr.startswith(f"{path}:"), done.stderr


@pytest.fixture(scope="module")
def daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DaemonProcess]:
    with running_daemon(tmp_path_factory.mktemp("hostile-daemon") / "state") as process:
        yield process


def test_nothing_is_queued_through_submit(
    daemon: DaemonProcess, generated: dict[str, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    files = [*BAD, *(p for n, p in generated.items() if n != "a_directory.yaml")]
    for path in files:
        code = main(["submit", str(path), "--socket", str(daemon.socket)])
        _, err = capsys.readouterr()
        assert code == 2, (path.name, err)
        assert "Traceback" not in err
        assert re.search(rf"{re.escape(path.name)}:\d+:", err), (path.name, err)
    status = daemon.cli("status", "--json")
    assert status.returncode == 0 and status.json() == {"sweeps": []}
    assert "Traceback" not in daemon.log()


def test_nothing_is_queued_through_the_inbox(
    daemon: DaemonProcess, generated: dict[str, Path]
) -> None:
    inbox, rejected = daemon.state_dir / "inbox", daemon.state_dir / "rejected"
    names = []
    for path in [*BAD[:6], generated["billion_laughs.yaml"], generated["huge.yaml"],
                 generated["not_utf8.yaml"], generated["deep_flow.yaml"]]:  # fmt: skip
        name = f"inbox-{path.name}"
        staging = daemon.state_dir / f".{name}.staging"
        shutil.copyfile(path, staging)
        os.replace(staging, inbox / name)
        names.append(name)
    deadline = time.monotonic() + 30
    while not all((rejected / f"{n}.error").exists() for n in names):
        assert time.monotonic() < deadline, sorted(p.name for p in rejected.iterdir())
        time.sleep(0.2)
    for name in names:
        errors = (rejected / f"{name}.error").read_text().splitlines()
        # FILE:LINE: ... where FILE is the name (the size check names the inbox path in full)
        assert errors and all(line.split(":")[0].endswith(name) for line in errors), errors
        assert all(re.match(r"^[^:]+:\d+: ", line) for line in errors), errors
        assert not (inbox / name).exists()
    status = daemon.cli("status", "--json")
    assert status.returncode == 0 and status.json() == {"sweeps": []}
    assert "Traceback" not in daemon.log()


def test_a_unit_name_that_reads_as_an_option_is_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "dash_unit.yaml"
    path.write_text(MINIMAL.replace("  model: m\n", "  model: m\n  unit: -sglang.service\n"))
    code, _, err = _validate(path, capsys)
    assert code == 2 and f"{path}:6: server.unit:" in err, err
