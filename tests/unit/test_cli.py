"""The ``orchestrator`` command as scripts meet it: exit codes, and stdout that is pure JSON."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from orchestrator import __version__, cli
from orchestrator.plan import plan_json, plan_sweep
from orchestrator.search.budget import screening_warnings
from orchestrator.sweepfile import load_sweep

ROOT = Path(__file__).resolve().parents[2]
SCRIPT = ROOT / ".venv" / "bin" / "orchestrator"
DEMO = ROOT / "sweeps" / "demo.yaml"
BAD = ROOT / "tests" / "data" / "sweeps" / "bad" / "unknown_keys.yaml"


def orchestrator(*args: str) -> subprocess.CompletedProcess[str]:
    command = [str(SCRIPT)] if SCRIPT.exists() else [sys.executable, "-m", "orchestrator.cli"]
    return subprocess.run(
        [*command, *args], capture_output=True, text=True, timeout=60, check=False
    )


def test_validate_good_file_prints_one_summary_line() -> None:
    result = orchestrator("validate", str(DEMO))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert len(lines) == 1
    assert lines[0].startswith(f"{DEMO}: ok: sweep 'demo', 2 host(s), 16 trial(s)")


def test_validate_bad_file_lists_problems_on_stderr_and_exits_2() -> None:
    result = orchestrator("validate", str(BAD))
    assert result.returncode == 2
    assert result.stdout == ""
    lines = result.stderr.splitlines()
    assert f"{BAD}:2: hostz: unknown key (did you mean 'hosts'?)" in lines
    assert f"{BAD}:1: hosts: required key missing" in lines
    assert all(line.startswith(f"{BAD}:") for line in lines)


def test_validate_json_is_one_document_either_way() -> None:
    good = orchestrator("validate", "--json", str(DEMO))
    assert good.returncode == 0
    document = json.loads(good.stdout)
    assert document["valid"] is True and document["problems"] == []
    assert document["sweep"] == "demo" and len(document["sha256"]) == 64
    bad = orchestrator("validate", "--json", str(BAD))
    assert bad.returncode == 2
    document = json.loads(bad.stdout)
    assert document["valid"] is False
    assert {"file": str(BAD), "line": 2, "field": "hostz"}.items() <= document["problems"][
        1
    ].items()


def test_validate_missing_file_is_bad_input(tmp_path: Path) -> None:
    result = orchestrator("validate", str(tmp_path / "nope.yaml"))
    assert result.returncode == 2
    assert "cannot read" in result.stderr


def test_schema_prints_the_json_schema() -> None:
    result = orchestrator("schema")
    assert result.returncode == 0
    schema = json.loads(result.stdout)
    assert schema["title"] == "orchestrator sweep file"
    assert "hosts" in schema["properties"]


def test_plan_json_matches_the_library_and_nothing_else_is_on_stdout() -> None:
    result = orchestrator("plan", str(DEMO), "--json")
    assert result.returncode == 0, result.stderr
    document = json.loads(result.stdout)  # the whole of stdout is one document
    sweep = load_sweep(DEMO)
    # the verb adds what it warns of about the file (the demo's restarts cannot screen its
    # whole space) to the file's own warnings
    warned = screening_warnings(sweep)
    assert warned, "the demo's max_restarts no longer falls short: this test checks less"
    library = plan_json(plan_sweep(sweep), sweep, file_warnings=warned)
    assert document == json.loads(json.dumps(library))


def test_plan_table_names_hosts_and_trials() -> None:
    result = orchestrator("plan", str(DEMO), "--show-dropins")
    assert result.returncode == 0, result.stderr
    assert "sweep demo: 16 trials on 2 hosts" in result.stdout
    assert "sim-01" in result.stdout and "sim-02" in result.stdout
    assert "# managed-by: orchestrator sweep=demo trial=sim-01.baseline." in result.stdout


def test_piped_plan_is_not_wrapped_and_shows_each_dropin_verbatim() -> None:
    """Piped, rich folded every line at 80 columns: a drop-in cut in two is not the drop-in."""
    result = orchestrator("plan", str(DEMO), "--show-dropins")
    assert result.returncode == 0, result.stderr
    out = result.stdout.splitlines()
    sweep = load_sweep(DEMO)
    document = plan_json(plan_sweep(sweep), sweep)
    for entry in document["trials"]:
        dropin = entry["dropin"].splitlines()
        start = out.index(dropin[0])
        assert out[start : start + len(dropin)] == dropin
        assert any(line.startswith("ExecStart=") and len(line) > 80 for line in dropin)
    rows = [line for line in out if line.split()[:1] and line.split()[0].isdigit()]
    assert len(rows) == len(document["trials"])
    for row, entry in zip(rows, document["trials"], strict=True):
        assert row.split()[1] == entry["host"] and row.endswith(entry["key"])


def test_plan_says_who_runs_what_and_how_long_with_its_assumptions(tmp_path: Path) -> None:
    sweep_file = tmp_path / "across.yaml"
    sweep_file.write_text(
        "name: across\nhosts:\n"
        '  - {name: a1, address: 10.0.0.1, base_url: "http://10.0.0.1:30000", type: a}\n'
        '  - {name: a2, address: 10.0.0.2, base_url: "http://10.0.0.2:30000", type: a}\n'
        "server:\n  model: m\n  knobs: {budget: {flag: --b}}\n"
        "distribute: across-type\ngrid: {budget: [1, 2, 3]}\n"
        "estimate: {restart: 10m}\n"
    )
    result = orchestrator("plan", str(sweep_file))
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    at = lines.index("who runs what (across-type):")
    assert lines[at + 1].startswith("  a1 (type a): 2 trial(s), about ")
    assert lines[at + 2 : at + 4] == ["    budget=1", "    budget=3"]
    assert lines[at + 4].startswith("  a2 (type a): 1 trial(s), about ")
    estimate = next(line for line in lines if line.startswith("estimate: about "))
    assert "restart 10m" in estimate
    assert any("takes 10m (estimate.restart)" in line for line in lines)
    warnings = result.stderr.splitlines()
    assert warnings[0].startswith("warning: host type a: no baseline")
    assert "budget=2 only on a2" in warnings[1]
    as_json = json.loads(orchestrator("plan", "--json", str(sweep_file)).stdout)
    assert as_json["hosts"][1] == {
        "name": "a2",
        "host_type": "a",
        "trials": [as_json["trials"][1]["key"]],
        "configs": [{"budget": 2}],
        "estimate_s": as_json["estimate"]["per_host_s"]["a2"],
    }
    assert len(as_json["warnings"]) == 2


def test_validate_warns_of_a_repeated_extra_flag_and_still_accepts(tmp_path: Path) -> None:
    sweep_file = tmp_path / "repeat.yaml"
    sweep_file.write_text(
        "name: r\nhosts:\n"
        '  - {name: h1, address: 10.0.0.1, base_url: "http://10.0.0.1:30000"}\n'
        "server:\n  model: m\n"
        "  exec_start: /usr/bin/python3 -m sglang.launch_server --enable-metrics\n"
        "  extra_flags: [--enable-metrics]\nbaseline: true\n"
    )
    result = orchestrator("validate", str(sweep_file))
    assert result.returncode == 0
    assert result.stderr.splitlines() == [
        f"warning: {sweep_file}:7: server.extra_flags[0]: --enable-metrics is already on the "
        "command line (server.exec_start or an earlier extra flag): it is not repeated"
    ]
    document = json.loads(orchestrator("validate", "--json", str(sweep_file)).stdout)
    assert document["valid"] is True and len(document["warnings"]) == 1
    dropin = plan_json(plan_sweep(load_sweep(sweep_file)), load_sweep(sweep_file))["trials"][0]
    assert dropin["dropin"].count("--enable-metrics") == 2  # the comment, and ExecStart once
    exec_line = next(x for x in dropin["dropin"].splitlines() if x.startswith('ExecStart="'))
    assert exec_line.count("--enable-metrics") == 1


def test_plan_bad_file_exits_2() -> None:
    result = orchestrator("plan", "--json", str(BAD))
    assert result.returncode == 2
    assert result.stdout == ""


def test_version_and_usage_errors() -> None:
    version = orchestrator("--version")
    assert version.returncode == 0
    assert version.stdout.strip() == f"orchestrator {__version__}"
    as_module = subprocess.run(
        [sys.executable, "-m", "orchestrator", "--version"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert as_module.stdout == version.stdout
    assert orchestrator().returncode == 2
    assert orchestrator("frobnicate").returncode == 2
    assert orchestrator("validate").returncode == 2
    helptext = orchestrator("--help")
    assert helptext.returncode == 0
    for verb in ("validate", "schema", "plan", "check", "run", "bench", "demo", "daemon",
                 "submit", "status", "cancel", "results", "restore", "report", "sim"):  # fmt: skip
        assert verb in helptext.stdout


def test_a_verb_from_another_module_is_one_table_entry(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "extra_verb_for_test.py").write_text(
        textwrap.dedent(
            '''
            """Say hello to someone (a verb living outside cli.py)."""
            import argparse

            def configure_parser(parser: argparse.ArgumentParser) -> None:
                parser.add_argument("who")

            def run(args: argparse.Namespace) -> int:
                print(f"hello {args.who}")
                return 1
            '''
        )
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setitem(cli.VERBS, "hello", "extra_verb_for_test")
    assert cli.main(["hello", "world"]) == 1
    assert capsys.readouterr().out == "hello world\n"
    cli.main(["--help"])
    assert "Say hello to someone" in capsys.readouterr().out


_IMPORTED = """
import sys
from orchestrator import cli
cli.main(sys.argv[1:])
print(" ".join(sorted(m for m in sys.modules if m.startswith("orchestrator.") or m == "aiohttp")))
"""


def _modules_loaded_by(*args: str, env: dict[str, str] | None = None) -> set[str]:
    done = subprocess.run(
        [sys.executable, "-c", _IMPORTED, *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
        env={**os.environ, **(env or {})},
    )
    return set(done.stdout.splitlines()[-1].split())


def test_only_the_chosen_verbs_module_is_imported(tmp_path: Path) -> None:
    """Each CLI start-up pays for the verb it runs, not for every verb (the runner, the
    simulator, the daemon and the report take about a second to import)."""
    everyone = set(cli.VERBS.values())
    assert not _modules_loaded_by("--help") & everyone
    loaded = _modules_loaded_by("schema")
    assert loaded & everyone == {"orchestrator.verbs.schema"}
    assert not loaded & {"orchestrator.runner", "orchestrator.sim.host", "orchestrator.daemon"}
    # the store (every verb's common module loads it) is not the HTTP client and the sandbox
    assert "orchestrator.store" in loaded and "orchestrator.bench.coding" not in loaded
    # a client of the daemon builds no sweep-file schema and loads no server side
    client = _modules_loaded_by(
        "status", "--json", env={"ORCHESTRATOR_SOCKET": str(tmp_path / "no-daemon.sock")}
    )
    assert "orchestrator.verbs.apiclient" in client
    assert not client & {"orchestrator.sweepfile", "orchestrator.api"}


def test_verbs_that_make_no_http_request_do_not_import_aiohttp(tmp_path: Path) -> None:
    """Importing aiohttp costs a process a third of a second of CPU. validate, plan, results
    and submit (the daemon's client speaks http.client over its socket) make no request with
    it, so they do not load it."""
    demo = str(Path(cli.__file__).parent / "data" / "demo.yaml")
    env = {"ORCHESTRATOR_SOCKET": str(tmp_path / "no-daemon.sock")}
    for args in (("validate", demo), ("plan", demo), ("results", "demo"), ("submit", demo)):
        loaded = _modules_loaded_by(*args, env=env)
        assert "orchestrator.verbs." + args[0] in loaded, args
        assert "aiohttp" not in loaded, args
