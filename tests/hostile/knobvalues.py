"""Any knob value, rendered into the orchestrator's drop-in or refused: the shared half of the
property tests (``test_knob_values.py`` offline with ``systemd-analyze verify``, and
``tests/realhost/test_fidelity_argv.py`` against the real manager and the simulator).

A knob value either renders (``apply_knobs`` + ``render_dropin``) into a drop-in that systemd
reads back to exactly the argv and environment the orchestrator meant, or is refused with
:class:`UnsafeValueError` naming the reason, and only when the value holds something a unit file
cannot carry (a line break or NUL anywhere, a control character in an environment value).
"""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import pytest
from hypothesis import strategies as st

from orchestrator.host.dropin import (
    DROPIN_NAME,
    TrialInvocation,
    UnsafeValueError,
    apply_knobs,
    render_dropin,
)
from orchestrator.sweepfile import KnobMapping
from orchestrator.types import KnobValue
from tests.sysdeps import CannotInstall, apt_install

KNOBS = {
    "algorithm": KnobMapping(flag="--speculative-algorithm"),
    "budget": KnobMapping(flag="--speculative-ddtree-budget"),
    "topk": KnobMapping(env="SGLANG_DDTREE_MAX_TOPK"),
    "bonus": KnobMapping(env="SGLANG_DDTREE_DEPTH_BONUS"),
}
ENV_NAMES = sorted(k.env for k in KNOBS.values() if k.env)


def _is_noncharacter(ch: str) -> bool:
    code = ord(ch)
    return 0xFDD0 <= code <= 0xFDEF or (code & 0xFFFE) == 0xFFFE


NONCHARACTERS = ("\ufdd0", "\uffff", "\U0010fffe")
"""Valid in Python, refused by systemd ("String is not UTF-8 clean, ignoring assignment"): the
renderer does not refuse them yet, see test_knob_values.py::test_noncharacters_are_refused."""
TEXT = st.text(
    st.characters(codec="utf-8").filter(lambda ch: not _is_noncharacter(ch)), max_size=24
)
NASTY = st.sampled_from(
    ['"', "\\", "'", "$", "$$", "${HOME}", "$HOME", "%", "%n", "%%", ";", " ", "\t", "\n", "\r",
     "\0", "\x1b[31m", "\x7f", "\x85", "\u2028", "#", "=", "--x", "-", "", "é", "☃", "\\n"]
)  # fmt: skip
VALUE: st.SearchStrategy[KnobValue] = st.one_of(
    st.none(),
    st.booleans(),
    st.integers(),
    st.floats(),
    TEXT,
    st.lists(st.one_of(NASTY, TEXT), max_size=5).map("".join),
)
CONFIG = st.fixed_dictionaries({}, optional={name: VALUE for name in KNOBS})

DUMPER = r"""
import json, os, sys
names = os.environ["DUMP_ENV_NAMES"].split(",")
record = {"argv": sys.argv[1:], "env": {n: os.environ.get(n) for n in names}}
with open(os.environ["DUMP_TO"] + ".tmp", "w", encoding="utf-8") as handle:
    json.dump(record, handle)
os.replace(os.environ["DUMP_TO"] + ".tmp", os.environ["DUMP_TO"])
"""


@dataclass(frozen=True)
class Rendered:
    """A config that rendered: what systemd must read back."""

    config: Mapping[str, KnobValue]
    invocation: TrialInvocation
    text: str


@dataclass(frozen=True)
class Refused:
    config: Mapping[str, KnobValue]
    error: UnsafeValueError


def _noncharacter(ch: str) -> bool:
    return 0xFDD0 <= ord(ch) <= 0xFDEF or (ord(ch) & 0xFFFE) == 0xFFFE


def _forbidden_in_exec(value: str) -> bool:
    # systemd drops an assignment holding a noncharacter ("not UTF-8 clean").
    return any(ch in "\n\r\0" or _noncharacter(ch) for ch in value)


def _forbidden_in_env(value: str) -> bool:
    return any(
        (ord(ch) < 0x20 and ch != "\t") or ord(ch) == 0x7F or _noncharacter(ch) for ch in value
    )


def base_argv(dumper: Path) -> list[str]:
    """The unit's own command line: the dumper, a model flag and knob flags to be replaced."""
    return [sys.executable, str(dumper), "--model-path", "/models/m", "--speculative-algorithm",
            "DFLASH", "--speculative-ddtree-budget=7"]  # fmt: skip


def render(config: Mapping[str, KnobValue], dumper: Path, dump_to: str) -> Rendered | Refused:
    """Render one config, or the refusal; a refusal must be justified by the value."""
    invocation = apply_knobs(
        base_argv(dumper),
        {"SGLANG_DDTREE_MAX_TOPK": "9"},
        KNOBS,
        config,
        environment={"DUMP_TO": dump_to, "DUMP_ENV_NAMES": ",".join(ENV_NAMES)},
    )
    try:
        text = render_dropin("hostile", "k.0", invocation)
    except UnsafeValueError as error:
        assert error.reason and repr(error.value) in str(error)
        is_env = any(error.value.endswith(f"={v}") for v in invocation.environment.values())
        if "environment" in error.reason:
            assert _forbidden_in_env(error.value) or is_env, error
        else:
            assert _forbidden_in_exec(error.value), error
        return Refused(config, error)
    return Rendered(config, invocation, text)


def expected_env(invocation: TrialInvocation) -> dict[str, str | None]:
    """The knob variables the server must see: set ones with their value, unset ones absent."""
    return {name: invocation.environment.get(name) for name in ENV_NAMES}


def write_units(
    unit_dir: Path, rendered: Sequence[Rendered], stem: str, *, oneshot: bool
) -> list[str]:
    """One unit per rendered config (base unit + our drop-in); returns the unit names."""
    names = []
    for index, item in enumerate(rendered):
        name = f"{stem}-{index}.service"
        unit_type = "oneshot" if oneshot else "simple"
        # The base unit's own line is quoted the same way: it must not matter for the result.
        (unit_dir / name).write_text(
            f"[Unit]\nDescription=knob value probe\n[Service]\nType={unit_type}\n"
            f'Environment="SGLANG_DDTREE_MAX_TOPK=9"\nExecStart={sys.executable} -c pass\n'
        )
        dropins = unit_dir / f"{name}.d"
        dropins.mkdir(exist_ok=True)
        (dropins / DROPIN_NAME).write_text(item.text)
        names.append(name)
    return names


def systemd_analyze() -> str:
    """systemd-analyze, installed with apt-get when missing and we may (CI runs as root)."""
    found = shutil.which("systemd-analyze")
    if found is None:
        try:
            apt_install("systemd")
        except (CannotInstall, subprocess.CalledProcessError) as reason:
            pytest.skip(f"systemd-analyze is not installed and could not be installed: {reason}")
        found = shutil.which("systemd-analyze")
    if found is None:
        pytest.skip("apt-get installed systemd but systemd-analyze is not on PATH")
    return found


def read_dump(path: Path) -> dict[str, object]:
    record: dict[str, object] = json.loads(path.read_text(encoding="utf-8"))
    return record
