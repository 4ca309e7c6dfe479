"""Launch files, the pure part (orchestrator/host/launchfile.py and the invocation builder):
where a file goes, which names in the drop-in's directory are ours, the bytes a config writes,
the argv that names the file, and the backup that keeps the files as found."""

from __future__ import annotations

import hashlib
from typing import Any

import pytest

from orchestrator.host.dropin import apply_knobs, render_dropin
from orchestrator.host.launchfile import (
    MARK_SUFFIX,
    LaunchFile,
    is_launch_file,
    is_mark,
    is_ours,
    launch_file_path,
    mark_path,
    operators_files,
    render_launch_content,
    render_mark,
)

DROPIN = "/etc/systemd/system/trtllm.service.d/90-orchestrator.conf"
ADOPTED = "/etc/systemd/system/trtllm.service.d/80-orchestrator-adopted.conf"
FLAG = "--extra_llm_api_options"


class Knob:
    def __init__(self, flag: str | None = None, json_key: str | None = None) -> None:
        self.flag, self.json_key, self.env = flag, json_key, None


KNOBS: dict[str, Any] = {
    "draft": Knob(FLAG, "speculative_config.max_draft_len"),
    "kind": Knob(FLAG, "speculative_config.decoding_type"),
    "batch": Knob("--max_batch_size"),
}


def test_a_launch_file_goes_beside_its_drop_in_named_after_it() -> None:
    path = launch_file_path(DROPIN, FLAG, "yaml")
    assert path == "/etc/systemd/system/trtllm.service.d/90-orchestrator.extra-llm-api-options.yaml"
    adopted = launch_file_path(ADOPTED, FLAG, "yaml")
    assert adopted.endswith("/80-orchestrator-adopted.extra-llm-api-options.yaml")
    assert is_launch_file(path.rsplit("/", 1)[1], "90-orchestrator.conf")
    # adopt's files, systemd's drop-ins, the operator's and our temporary writes are not ours
    assert not is_launch_file(adopted.rsplit("/", 1)[1], "90-orchestrator.conf")
    assert not is_launch_file("90-orchestrator.conf", "90-orchestrator.conf")
    assert not is_launch_file("90-orchestrator.x.conf", "90-orchestrator.conf")
    assert not is_launch_file("50-mine.yaml", "90-orchestrator.conf")
    assert not is_launch_file("90-orchestrator.a.json.orchestrator-tmp-1f", "90-orchestrator.conf")
    # an operator's copy beside ours only looks similar: a restore must leave it
    assert not is_launch_file("90-orchestrator.conf.bak", "90-orchestrator.conf")
    assert not is_launch_file("90-orchestrator.a.json.bak", "90-orchestrator.conf")
    with pytest.raises(ValueError):
        launch_file_path(DROPIN, "--../x", "json")


def test_the_same_config_always_writes_the_same_bytes_dotted_keys_nested() -> None:
    entries = {"speculative_config.max_draft_len": 3, "speculative_config.decoding_type": "Eagle"}
    assert render_launch_content(entries, "yaml") == (
        b"speculative_config:\n  decoding_type: Eagle\n  max_draft_len: 3\n"
    )
    assert render_launch_content(dict(reversed(entries.items())), "yaml") == (
        render_launch_content(entries, "yaml")
    )
    assert render_launch_content({"b": 1, "a": True}, "json") == b'{\n  "a": true,\n  "b": 1\n}\n'


def test_the_argv_names_the_file_the_knobs_fill_and_no_file_without_them() -> None:
    base = ["trtllm-serve", "serve", "m"]
    config = {"draft": 3, "kind": "Eagle", "batch": 8}
    invocation = apply_knobs(base, {}, KNOBS, config, file_flags={FLAG: "yaml"}, dropin=DROPIN)
    path = launch_file_path(DROPIN, FLAG, "yaml")
    assert invocation.argv == (*base, "--max_batch_size", "8", FLAG, path)
    assert invocation.launch_files == (
        LaunchFile(path, b"speculative_config:\n  decoding_type: Eagle\n  max_draft_len: 3\n"),
    )
    text = render_dropin("s", "k", invocation)
    assert f"# launch file, written with this drop-in and removed with it: {path}\n" in text
    # Without a file flag the same knobs are one JSON value, as vLLM's --speculative-config.
    inline = apply_knobs(base, {}, KNOBS, config)
    assert inline.launch_files == () and inline.argv[-2] == FLAG
    assert inline.argv[-1].startswith('{"speculative_config.decoding_type"')
    # Every key absent: no flag and no file.
    baseline = apply_knobs(base, {}, KNOBS, {}, file_flags={FLAG: "yaml"}, dropin=DROPIN)
    assert baseline.argv == tuple(base) and baseline.launch_files == ()
    with pytest.raises(ValueError, match="drop-in path"):
        apply_knobs(base, {}, KNOBS, config, file_flags={FLAG: "yaml"})


def test_a_file_is_ours_only_where_its_mark_names_its_bytes() -> None:
    """The mark beside a launch file says which bytes we wrote there: the file is ours only
    while it holds them, so an operator's file put back over ours (or one the mark never
    named) is theirs, and a crashed run's leftover is not taken for the operator's."""
    path = launch_file_path(DROPIN, FLAG, "yaml")
    name = path.rsplit("/", 1)[1]
    assert mark_path(path) == path + MARK_SUFFIX
    assert is_mark(name + MARK_SUFFIX, "90-orchestrator.conf")
    assert not is_launch_file(name + MARK_SUFFIX, "90-orchestrator.conf")
    assert not is_mark(name, "90-orchestrator.conf")
    assert not is_mark("50-mine.yaml" + MARK_SUFFIX, "90-orchestrator.conf")
    ours, theirs = b"a: 1\n", b"a: 2\n"
    mark = render_mark(ours)
    assert mark == hashlib.sha256(ours).hexdigest().encode() + b"  -\n"  # as sha256sum writes
    assert is_ours(ours, mark) and not is_ours(theirs, mark) and not is_ours(ours, None)
    found = (LaunchFile(path, ours), LaunchFile(path.replace("extra", "other"), theirs, 0o600))
    marks = {path: mark, found[1].path: mark}
    assert operators_files(found, marks) == (found[1],)
