"""systemctl show / cat parsing, drop-in merge semantics and load verification."""

from __future__ import annotations

import math
import random

import pytest

from orchestrator.host.dropin import TrialInvocation, render_dropin
from orchestrator.host.systemd import (
    UnitFile,
    UnitFileError,
    merged_service,
    parse_cat,
    parse_show,
    parse_timespan,
    shown_exec_argv,
    unit_state,
    verify_loaded,
)

SHOW_RUNNING = """\
Type=simple
Result=success
NRestarts=0
ExecMainStartTimestampMonotonic=123456789
ExecMainCode=0
ExecMainStatus=0
MainPID=4242
KillMode=control-group
TimeoutStopUSec=1min 30s
Id=sglang.service
LoadState=loaded
ActiveState=active
SubState=running
InvocationID=0123456789abcdef0123456789abcdef
Job=
NeedDaemonReload=no
FragmentPath=/etc/systemd/system/sglang.service
DropInPaths=/etc/systemd/system/sglang.service.d/90-orchestrator.conf /run/systemd/system/sglang.service.d/99-admin.conf
ExecStart={ path=/usr/bin/python3 ; argv[]=/usr/bin/python3 -m sglang.launch_server --port 30000 ; ignore_errors=no ; start_time=[n/a] ; stop_time=[n/a] ; pid=0 ; code=(null) ; status=0/0 }
"""  # noqa: E501


def test_show_in_any_order_with_empty_values() -> None:
    lines = SHOW_RUNNING.splitlines()
    random.Random(7).shuffle(lines)
    state = unit_state(parse_show("\n".join(lines)))
    assert state.load_state == "loaded" and state.active_state == "active"
    assert state.sub_state == "running" and state.result == "success"
    assert state.main_pid == 4242
    assert state.invocation_id == "0123456789abcdef0123456789abcdef"
    assert state.job is None and state.need_daemon_reload is False
    assert state.timeout_stop_s == 90.0 and state.kill_mode == "control-group"
    assert state.drop_in_paths == (
        "/etc/systemd/system/sglang.service.d/90-orchestrator.conf",
        "/run/systemd/system/sglang.service.d/99-admin.conf",
    )
    assert state.exec_main_start_monotonic == 123456789
    assert state.exec_start_shown is not None
    assert shown_exec_argv(state.exec_start_shown) == (
        "/usr/bin/python3 -m sglang.launch_server --port 30000"
    )


def test_show_inactive_and_failed_and_not_found() -> None:
    state = unit_state(
        parse_show(
            "MainPID=0\nInvocationID=\nActiveState=failed\nResult=exit-code\n"
            "ExecMainStatus=2\nExecMainCode=1\nLoadState=loaded\nJob=\nDropInPaths=\n"
        )
    )
    assert state.main_pid is None and state.invocation_id is None
    assert (state.active_state, state.result, state.exec_main_status) == ("failed", "exit-code", 2)
    assert state.drop_in_paths == () and state.exists
    assert not unit_state(parse_show("LoadState=not-found\n")).exists


def test_show_keeps_everything_after_the_first_equals() -> None:
    assert parse_show("Environment=A=1 B=2\nX=\n") == {"Environment": "A=1 B=2", "X": ""}


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("1min 30s", 90.0),
        ("90s", 90.0),
        ("500ms", 0.5),
        ("1h 2min 3s 4ms", 3723.004),
        ("250us", 0.00025),
        ("2d", 172800.0),
        ("90", 90.0),
        ("1min 30.5s", 90.5),
    ],
)
def test_timespans(text: str, seconds: float) -> None:
    assert parse_timespan(text) == pytest.approx(seconds)


def test_timespan_infinity_and_garbage() -> None:
    assert parse_timespan("infinity") == math.inf
    for bad in ("", "soon", "5 parsecs", "1min x"):
        with pytest.raises(ValueError):
            parse_timespan(bad)


CAT = """\
# /etc/systemd/system/sglang.service
[Unit]
Description=SGLang

[Service]
Type=simple
# ExecStart=/old/commented --out
ExecStart=/usr/bin/python3 -m sglang.launch_server \\
    --model-path "/models/my model" \\
    # a comment inside the continuation
    --port 30000
Environment=CUDA_VISIBLE_DEVICES=0,1 "SGLANG_LOG_MS=1"
Environment='HF_HOME=/data/hf cache'
KillMode=control-group
TimeoutStopSec=2min

# /etc/systemd/system/sglang.service.d/50-env.conf
[Service]
Environment=SGLANG_LOG_MS=0
TimeoutStopSec=45s

# /etc/systemd/system/sglang.service.d/90-orchestrator.conf
# managed-by: orchestrator sweep=night trial=t1
[Service]
ExecStart=
ExecStart="/usr/bin/python3" "-m" "sglang.launch_server" "--port" "30000" "--x" "50%%"
Environment="SGLANG_DDTREE_MAX_TOPK=4"
"""


def test_cat_splits_files_exactly() -> None:
    files = parse_cat(CAT)
    assert [f.path for f in files] == [
        "/etc/systemd/system/sglang.service",
        "/etc/systemd/system/sglang.service.d/50-env.conf",
        "/etc/systemd/system/sglang.service.d/90-orchestrator.conf",
    ]
    assert files[0].text.startswith("[Unit]\n") and files[0].text.endswith("TimeoutStopSec=2min\n")
    assert files[1].text == "[Service]\nEnvironment=SGLANG_LOG_MS=0\nTimeoutStopSec=45s\n"
    assert files[2].text.startswith("# managed-by: orchestrator")


def test_merge_applies_reset_env_and_later_values() -> None:
    service = merged_service(parse_cat(CAT))
    assert service.exec_start == (
        "/usr/bin/python3", "-m", "sglang.launch_server", "--port", "30000", "--x", "50%",
    )  # fmt: skip
    assert service.exec_start_source == "/etc/systemd/system/sglang.service.d/90-orchestrator.conf"
    assert dict(service.environment) == {
        "CUDA_VISIBLE_DEVICES": "0,1",
        "SGLANG_LOG_MS": "0",
        "HF_HOME": "/data/hf cache",
        "SGLANG_DDTREE_MAX_TOPK": "4",
    }
    assert service.timeout_stop_s == 45.0 and service.kill_mode == "control-group"
    assert service.type == "simple"


def test_fragment_continuation_and_quoting() -> None:
    service = merged_service(parse_cat(CAT)[:1])
    assert service.exec_start == (
        "/usr/bin/python3", "-m", "sglang.launch_server", "--model-path", "/models/my model",
        "--port", "30000",
    )  # fmt: skip


def test_dropins_apply_in_lexical_order_across_directories() -> None:
    files = [
        UnitFile("/lib/systemd/system/sglang.service", "[Service]\nExecStart=/bin/a\n"),
        UnitFile(
            "/run/systemd/system/sglang.service.d/99-admin.conf",
            "[Service]\nExecStart=\nExecStart=/bin/admin\n",
        ),
        UnitFile(
            "/etc/systemd/system/sglang.service.d/90-orchestrator.conf",
            "[Service]\nExecStart=\nExecStart=/bin/ours\n",
        ),
        # masked by the /etc file of the same name
        UnitFile(
            "/lib/systemd/system/sglang.service.d/90-orchestrator.conf",
            "[Service]\nExecStart=\nExecStart=/bin/masked\n",
        ),
    ]
    service = merged_service(files)
    assert service.exec_start == ("/bin/admin",)
    assert service.exec_start_source == "/run/systemd/system/sglang.service.d/99-admin.conf"


def test_exec_prefixes_and_environment_reset() -> None:
    service = merged_service(
        [
            UnitFile(
                "/etc/systemd/system/u.service",
                "[Service]\nEnvironment=A=1\nEnvironment=\nEnvironment=B=2\n"
                "ExecStart=@-/usr/bin/python3 sglang-server --port 1\n",
            )
        ]
    )
    assert service.exec_start == ("sglang-server", "--port", "1")
    assert service.exec_start_prefix == "@-"
    assert dict(service.environment) == {"B": "2"}


def test_runtime_expansion_is_a_typed_error() -> None:
    with pytest.raises(UnitFileError) as caught:
        merged_service(
            [UnitFile("/etc/systemd/system/u.service", "[Service]\nExecStart=/x $ARGS\n")]
        )
    assert caught.value.path == "/etc/systemd/system/u.service"


OURS = "/etc/systemd/system/sglang.service.d/90-orchestrator.conf"


def _loaded(dropin_text: str, *, later: str | None = None) -> tuple[list[UnitFile], str]:
    files = [
        UnitFile(
            "/etc/systemd/system/sglang.service",
            "[Service]\nExecStart=/usr/bin/python3 -m sglang.launch_server\nEnvironment=A=1\n",
        ),
        UnitFile(OURS, dropin_text),
    ]
    paths = OURS
    if later is not None:
        files.append(UnitFile("/etc/systemd/system/sglang.service.d/99-admin.conf", later))
        paths += " /etc/systemd/system/sglang.service.d/99-admin.conf"
    return files, paths


def _state(paths: str, shown: str | None = None, reload: str = "no") -> str:
    text = f"LoadState=loaded\nNeedDaemonReload={reload}\nDropInPaths={paths}\n"
    if shown is not None:
        text += f"ExecStart={{ path=/x ; argv[]={shown} ; ignore_errors=no ; pid=0 }}\n"
    return text


INVOCATION = TrialInvocation(
    argv=("/usr/bin/python3", "-m", "sglang.launch_server", "--speculative-eagle-topk", "4"),
    environment={"A": "1", "SGLANG_DDTREE_MAX_TOPK": "8"},
)


def test_verify_loaded_accepts_exactly_our_dropin() -> None:
    files, paths = _loaded(render_dropin("night", "t1", INVOCATION))
    state = unit_state(parse_show(_state(paths, " ".join(INVOCATION.argv))))
    assert verify_loaded(state, merged_service(files), OURS, INVOCATION) == []


def test_verify_loaded_reports_later_override_stale_load_and_env() -> None:
    files, paths = _loaded(
        render_dropin("night", "t1", INVOCATION),
        later="[Service]\nExecStart=\nExecStart=/bin/admin\nEnvironment=A=2\n",
    )
    state = unit_state(parse_show(_state(paths, "/usr/bin/old", reload="yes")))
    problems = verify_loaded(state, merged_service(files), OURS, INVOCATION)
    text = "\n".join(problems)
    assert "99-admin.conf" in text and "NeedDaemonReload" in text
    assert "argv" in text and "Environment differs in ['A']" in text


def test_verify_loaded_reports_missing_dropin() -> None:
    files, _ = _loaded(render_dropin("night", "t1", INVOCATION))
    state = unit_state(parse_show(_state("")))
    problems = verify_loaded(state, merged_service(files[:1]), OURS, INVOCATION)
    assert any("not in DropInPaths" in p for p in problems)
