"""Every command line the plan renders for ``engine: vllm`` parsed by vLLM 0.33.0's own parser.

The source is the vLLM sdist from the package registry (PEP 503 simple index, sha256 from the
link's fragment), cached under ``$VLLM_SOURCE_CACHE`` or
``${XDG_CACHE_HOME:-~/.cache}/orchestrator/vllm-0.33.0`` with only its ``vllm/**/*.py`` kept;
the test skips, saying why, when the registry cannot be reached. The argvs are the
orchestrator's own: ``plan_sweep`` for the trials, ``ServerRecipe.invocation`` for each
trial's command line (what the drop-in installs), ``Vllm.parse_command`` for the argv and
environment the preflight asks about, and ``Vllm.batch_command``'s script
(:data:`orchestrator.engines.vllm.argv.PARSE_SCRIPT`), run unchanged.

One subprocess (so no stub reaches this process) imports vLLM's real modules with a stub for
each heavy dependency (:data:`STUBBED`: torch, transformers, triton, ...; one generic stub
module type, whose attributes are inert classes), for any other package outside vLLM that
this venv lacks (urllib3 in a fresh ``make test`` venv; pydantic is always real), and for
``vllm.v1.executor`` (imported by ``ParallelConfig``'s validator only for an ``issubclass``
check against ``Executor``; importing it for real pulls in the model runner), with
``VLLM_TARGET_DEVICE=cpu`` so that ``DeviceConfig`` knows its device.

What is checked, for every trial of the vLLM sweeps (sweeps/kimi-k26-dflash-vllm.yaml, the
simulator's ``sim up --engine vllm`` sweep, and the configs of tests/faults/test_vllm_sweep.py):

- vLLM's real ``vllm serve`` parser accepts the argv: vLLM's ``FlexibleArgumentParser`` with a
  ``serve`` subparser filled by vLLM's ``make_arg_parser`` (the frontend's arguments and
  ``AsyncEngineArgs.add_cli_args``), no argparse exit. The two lines that wire them up are
  ``ServeSubcommand.subparser_init``'s, copied: importing ``vllm.entrypoints.cli.serve`` pulls
  in the whole API server, whose request models need a real torch;
- the orchestrator's preflight script says ``ok`` for it (so the preflight would pass on a
  real host with this vLLM);
- the parsed ``speculative_config`` (vLLM's ``optional_type(json.loads)``) equals the JSON
  the trial's knobs meant; every key is a field of the real ``SpeculativeConfig`` dataclass
  and ``method`` is one of the real ``SpeculativeMethod`` Literal's values;
- ``AsyncEngineArgs.from_cli_args`` builds the engine arguments (``EngineArgs.__post_init__``
  runs), and ``create_speculative_config`` builds a real ``SpeculativeConfig``: pydantic's
  validation of every field (extra keys forbidden, types, ``num_speculative_tokens > 0``, the
  method Literal) and its ``_verify_args`` model validator.
- negative: a typo'd ``json_key`` is refused by ``orchestrator validate``'s parse of the sweep
  file, and the argv the same typo would render is refused by vLLM's own
  ``SpeculativeConfig`` ("Extra inputs are not permitted") and by the preflight script.

What is not checked: ``SpeculativeConfig.__post_init__`` is replaced by a no-op (it loads the
draft model's Hugging Face config, which needs transformers, torch and the model files), and
so is everything after it: the draft's ``ModelConfig``/``ParallelConfig``, the target model's
config, ``VllmConfig``'s cross-checks (e.g. the speculative token budget of ``config/vllm.py``),
and anything that needs a GPU. The stubbed libraries' own checks (e.g. a dtype name torch
would refuse) are not made.
"""

from __future__ import annotations

import contextlib
import dataclasses
import fcntl
import hashlib
import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from orchestrator import engines
from orchestrator.engines.schedule import NativeSchedule, ScheduleBand, probe_schedule
from orchestrator.engines.vllm import facts
from orchestrator.engines.vllm.argv import MARKER, batch_command, read_answers
from orchestrator.engines.vllm.schedule import native_schedule as vllm_schedule
from orchestrator.invocation import ServerRecipe
from orchestrator.plan import expand_configs, plan_sweep
from orchestrator.sim.cli import render_vllm_sweep
from orchestrator.sweepfile import Sweep, parse_sweep
from orchestrator.sweepfile.problems import SweepFileError
from tests.faults import test_vllm_sweep as fault_sweeps
from tests.parallel import host_network_argv

REPO = Path(__file__).resolve().parents[2]
VERSION = facts.VERSION
INDEX = "https://pypi.org/simple/vllm/"
SDIST = f"vllm-{VERSION}.tar.gz"
CACHE = (
    Path(
        os.environ.get("VLLM_SOURCE_CACHE")
        or Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache") / "orchestrator"
    )
    / f"vllm-{VERSION}"
)
STAMP = ".complete"
"""Written last, with the sdist's sha256: a cache without it is fetched again."""

STUBBED = (
    "torch", "transformers", "triton", "huggingface_hub", "safetensors", "cbor2", "xxhash",
    "psutil", "zmq", "openai_harmony", "msgspec", "cloudpickle", "PIL", "pybase64",
    "cachetools", "uvloop", "cpuinfo", "fastapi", "prometheus_client", "partial_json_parser",
    "xgrammar", "llguidance", "vllm.v1.executor",
)  # fmt: skip
"""vLLM's heavy dependencies, stubbed whether installed or not, as the parser's import chain
reaches them. Any other package outside vLLM that this venv lacks is stubbed the same way when
first imported; the rest are real where installed (numpy, aiohttp, openai, yaml, ...)."""

REAL = ("pydantic", "pydantic_core")
"""Never stubbed: the config checks this test relies on are pydantic's."""

PRELUDE = """\
import importlib.abc, importlib.machinery, importlib.metadata, os, re, sys, types
STUBBED = tuple(os.environ["VLLM_STUBBED"].split(","))
REAL = set(os.environ["VLLM_REAL"].split(","))
def _attr(self, name):
    if name.startswith("__") and name.endswith("__"):
        raise AttributeError(name)
    return _stub(name)
def _same(self, *args, **kwargs):
    return self
def _any_schema(cls, source, handler):
    from pydantic_core import core_schema
    return core_schema.any_schema()
class _StubType(type):
    __getattr__ = _attr
    def __getitem__(cls, item): return cls
    def __or__(cls, other): return cls
    __ror__ = __or__
    def __iter__(cls): return iter(())
    def __len__(cls): return 0
_OPERATORS = ("add radd sub rsub mul rmul truediv rtruediv floordiv mod pow and rand or ror "
              "xor neg pos invert lshift rshift getitem call enter").split()
def _stub(name):
    namespace = {f"__{op}__": _same for op in _OPERATORS}
    namespace.update(
        __module__="stub", __qualname__=name, __init__=lambda self, *a, **k: None,
        __init_subclass__=classmethod(lambda cls, **k: None), __getattr__=_attr,
        __get_pydantic_core_schema__=classmethod(_any_schema),
        __bool__=lambda self: False, __iter__=lambda self: iter(()), __len__=lambda self: 0,
        __exit__=lambda self, *a: False, __index__=lambda self: 0, __int__=lambda self: 0,
        __float__=lambda self: 0.0, __str__=lambda self: name, __repr__=lambda self: name,
        __hash__=lambda self: hash(name), __eq__=lambda self, other: str(self) == str(other),
        __lt__=lambda self, other: False, __gt__=lambda self, other: False)
    return _StubType(name, (), namespace)
class _StubModule(types.ModuleType):
    def __getattr__(self, name):
        if name.startswith("__") and name.endswith("__"):
            raise AttributeError(name)
        value = _stub(self.__name__ + "." + name)
        setattr(self, name, value)
        return value
MISSING = set()
def _from_vllm():
    # vLLM's own code is the importer: the standard library's optional imports (_winapi)
    # must still fail as they would anywhere.
    frame = sys._getframe(2)
    while frame is not None and frame.f_globals.get("__name__", "").startswith("importlib"):
        frame = frame.f_back
    return frame is not None and frame.f_globals.get("__name__", "").startswith("vllm")
class _Stubs(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    def find_spec(self, name, path, target=None):
        top = name.partition(".")[0]
        if any(name == s or name.startswith(s + ".") for s in STUBBED) or top in MISSING:
            return importlib.machinery.ModuleSpec(name, self, is_package=True)
        if "." in name or top in REAL or top == "vllm" or not _from_vllm():
            return None
        others = [f for f in sys.meta_path if f is not self]
        if any(f.find_spec(name, path, target) is not None for f in others):
            return None
        MISSING.add(top)  # not installed in this venv either (urllib3 in a fresh one): inert
        return importlib.machinery.ModuleSpec(name, self, is_package=True)
    def create_module(self, spec):
        module = _StubModule(spec.name)
        module.__path__ = []
        return module
    def exec_module(self, module):
        pass
sys.meta_path.insert(0, _Stubs())
sys.modules["regex"] = re
_version = importlib.metadata.version
def _stub_version(name):
    if name.replace("-", "_") in STUBBED or name.replace("-", "_") in MISSING:
        return "2.10.0"
    return _version(name)
importlib.metadata.version = _stub_version
"""
"""Inert stand-ins for the modules in :data:`STUBBED` (and ``regex`` as ``re``): classes
whose attributes, calls, operators and subscripts give more of the same, falsy (so every
"is this accelerator available" probe says no), typed as ``Any`` for pydantic."""

REAL_MARKER = "REAL_VLLM "
EPILOGUE = f"""
import dataclasses as _dc, typing as _typing
from vllm.config.speculative import SpeculativeConfig as _Spec, SpeculativeMethod as _Methods
from vllm.engine.arg_utils import AsyncEngineArgs as _Async
from vllm.entrypoints.common.cli_args import make_arg_parser as _make_arg_parser
from vllm.utils.argparse_utils import FlexibleArgumentParser as _Flexible
def _real(**fields):
    print({REAL_MARKER!r} + json.dumps(fields, default=str), flush=True)
def _literals(hint):
    args = _typing.get_args(hint)
    return [a for x in args for a in _literals(x)] if args else [hint]
_real(fields=sorted(f.name for f in _dc.fields(_Spec)), methods=sorted(set(_literals(_Methods))))
_Spec.__post_init__ = lambda self: None  # loads the draft's HF config: needs torch and files
for _index, _text in enumerate(sys.argv[1:]):
    _top = _Flexible(prog="vllm")
    _subparsers = _top.add_subparsers(required=False, dest="subparser")
    _make_arg_parser(_subparsers.add_parser("serve", usage="vllm serve [model_tag] [options]"))
    _err = io.StringIO()
    try:
        with contextlib.redirect_stderr(_err):
            _args = _top.parse_args(json.loads(_text))
    except SystemExit as _exit:
        _real(index=_index, exit=_exit.code, error=_err.getvalue()[-600:])
        continue
    _asked = None
    try:
        _engine = _Async.from_cli_args(_args)
        _asked = dict(_engine.speculative_config or {{}}) or None
        _spec = _engine.create_speculative_config(None, None)
    except Exception as _exc:
        _real(index=_index, exit=None, asked=_asked, error=type(_exc).__name__ + ": " + str(_exc))
        continue
    _real(index=_index, exit=None, asked=_asked, built=_spec is not None,
          method=getattr(_spec, "method", None),
          tokens=getattr(_spec, "num_speculative_tokens", None))
"""
"""After the preflight script: vLLM's own ``serve`` subparser (built as
``ServeSubcommand.subparser_init`` builds it: ``make_arg_parser`` on the ``serve`` subparser of
a ``FlexibleArgumentParser``; importing ``vllm.entrypoints.cli.serve`` itself would pull in the
whole API server, whose request models need a real torch), its engine arguments and its
``SpeculativeConfig`` (``__post_init__`` aside), per argv."""


# --------------------------------------------------------------------------------------------
# The source from the registry
# --------------------------------------------------------------------------------------------


def fetch_source(root: Path) -> str:
    """The sdist's ``vllm/**/*.py`` under ``root/vllm``, fetched from the simple index and
    checked against the index's sha256; returns that sha256. Run in the machine's own
    network (a test worker's private one has no route out)."""
    page = urllib.request.urlopen(INDEX, timeout=30).read().decode()
    found = re.search(r'href="([^"#]*/' + re.escape(SDIST) + r')#sha256=([0-9a-f]{64})"', page)
    if found is None:
        raise RuntimeError(f"{INDEX} lists no {SDIST}")
    url, expected = found.groups()
    digest = hashlib.sha256()
    with tempfile.TemporaryDirectory(dir=root) as scratch:
        archive = Path(scratch) / SDIST
        with urllib.request.urlopen(url, timeout=120) as response, archive.open("wb") as out:
            while chunk := response.read(1 << 20):
                digest.update(chunk)
                out.write(chunk)
        if digest.hexdigest() != expected:
            raise RuntimeError(f"{SDIST}: sha256 {digest.hexdigest()}, the index says {expected}")
        prefix = f"vllm-{VERSION}/"
        with tarfile.open(archive) as tar:
            members = []
            for member in tar.getmembers():
                inner = member.name.removeprefix(prefix)
                if member.isfile() and inner.startswith("vllm/") and inner.endswith(".py"):
                    member.name = inner
                    members.append(member)
            tar.extractall(Path(scratch) / "src", members=members, filter="data")
        shutil.rmtree(root / "vllm", ignore_errors=True)
        (Path(scratch) / "src" / "vllm").rename(root / "vllm")
    return expected


@contextlib.contextmanager
def _locked(root: Path) -> Iterator[None]:
    with (root / ".lock").open("w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # two workers never fetch into one cache at once
        yield


@pytest.fixture(scope="module")
def vllm_source() -> Path:
    """The directory to put on ``sys.path`` for ``import vllm`` (0.33.0's own source)."""
    CACHE.mkdir(parents=True, exist_ok=True)
    with _locked(CACHE):
        if not (CACHE / STAMP).exists():
            argv, fds = host_network_argv(
                [sys.executable, "-c",
                 "import sys; from pathlib import Path; "
                 "from tests.integration.test_vllm_real_parser import fetch_source; "
                 "print(fetch_source(Path(sys.argv[1])))", str(CACHE)]
            )  # fmt: skip
            done = subprocess.run(
                argv, cwd=REPO, pass_fds=fds, capture_output=True, text=True, timeout=600
            )
            if done.returncode != 0:
                last = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
                if "URLError" in done.stderr or "timed out" in done.stderr:
                    pytest.skip(f"the package registry is unreachable ({INDEX}): {last}")
                raise AssertionError(f"fetching {SDIST} failed: {done.stderr[-2000:]}")
            (CACHE / STAMP).write_text(done.stdout.strip() + "\n")
    return CACHE


# --------------------------------------------------------------------------------------------
# The argvs the orchestrator renders
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Rendered:
    """One trial's argv as the preflight asks the host's vLLM, and the JSON its knobs meant."""

    sweep: str
    config: Mapping[str, Any]
    env_prefix: tuple[str, ...]
    argv: tuple[str, ...]
    meant: dict[str, Any] | None


def _meant(sweep: Sweep, config: Mapping[str, Any]) -> dict[str, Any] | None:
    keys = {
        mapping.json_key: config[name]
        for name, mapping in sweep.server.knobs.items()
        if mapping.json_key is not None and config.get(name) is not None
    }
    return keys or None


def render(sweep: Sweep, recipe_of: Any = ServerRecipe.of) -> list[Rendered]:
    """Every distinct argv of ``sweep``'s plan, by the orchestrator's own code."""
    vllm = engines.get("vllm")
    out: dict[tuple[str, ...], Rendered] = {}
    for trial in plan_sweep(sweep).trials:
        host = next(h for h in sweep.hosts if h.name == trial.host)
        invocation = recipe_of(sweep, host).invocation(trial.config)
        command = vllm.parse_command(sweep.server.exec_start or (), invocation, None)
        assert command is not None, invocation.argv
        env_prefix = command.prefix[:-1]  # the host's interpreter is this one here
        out.setdefault(
            (*env_prefix, *command.argv),
            Rendered(
                sweep.name, trial.config, env_prefix, command.argv, _meant(sweep, trial.config)
            ),
        )
    return list(out.values())


def _sim_hosts() -> list[dict[str, Any]]:
    return [
        {"name": f"sim-{n}", "address": f"127.0.0.{10 + n}", "port": 2222, "user": "root",
         "identity_file": "/k", "known_hosts": "/kh", "base_url": f"http://127.0.0.{10 + n}:30000"}
        for n in (1, 2)
    ]  # fmt: skip


BUDGET = {**fault_sweeps.DFLASH_8, "max_seqs": 1024}
"""8192 batched tokens - 1024 sequences x 8 drafts = 0: ``VllmConfig`` refuses it at startup,
but vLLM's parser, engine arguments and ``SpeculativeConfig`` take it (so the preflight does
not find it, on a real host or on the simulated one)."""


def vllm_sweeps() -> list[Sweep]:
    """The repository's vLLM sweep, the simulator's, and the fault tests' (on the
    simulator's ``vllm serve`` command line, as their hosts' units run it)."""
    shipped = REPO / "sweeps" / "kimi-k26-dflash-vllm.yaml"
    sim = render_vllm_sweep(_sim_hosts())
    fault = dict(sim, name="vllm-fault-tests", configs=[
        fault_sweeps.DFLASH_4, fault_sweeps.DFLASH_8, fault_sweeps.EAGLE3_4,
        *({**fault_sweeps.DFLASH_4, "tokens": t} for t in (2, 3, 5, 6, 7)),
        BUDGET,
    ])  # fmt: skip
    fault["server"] = dict(sim["server"], knobs=fault_sweeps.KNOBS)
    return [
        parse_sweep(shipped.read_text(), str(shipped)),
        parse_sweep(yaml.safe_dump(sim, sort_keys=False), "sim-vllm.yaml"),
        parse_sweep(yaml.safe_dump(fault, sort_keys=False), "vllm-fault-tests.yaml"),
    ]


# --------------------------------------------------------------------------------------------
# Asking vLLM
# --------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Answers:
    preflight: list[Any]
    real: list[dict[str, Any]]
    facts: dict[str, Any]


def ask_vllm(source: Path, env_prefix: tuple[str, ...], argvs: list[tuple[str, ...]]) -> Answers:
    """The preflight's script and then :data:`EPILOGUE`, in one process of the real vLLM."""
    command = batch_command((*env_prefix, sys.executable), argvs)
    script = command.index("-c") + 1
    command[script] = PRELUDE + command[script] + EPILOGUE
    environ = dict(
        os.environ, PYTHONPATH=str(source),
        VLLM_STUBBED=",".join(STUBBED), VLLM_REAL=",".join(REAL),
        VLLM_TARGET_DEVICE="cpu", VLLM_CONFIGURE_LOGGING="0", VLLM_NO_USAGE_STATS="1",
    )  # fmt: skip
    done = subprocess.run(
        command, capture_output=True, text=True, timeout=180, env=environ, cwd=source
    )
    assert done.returncode == 0, done.stderr[-4000:]
    preflight = read_answers(done.stdout, done.stderr, len(argvs))
    assert isinstance(preflight, list), (preflight, done.stderr[-4000:])
    lines = [json.loads(x[len(REAL_MARKER) :]) for x in done.stdout.splitlines()
             if x.startswith(REAL_MARKER)]  # fmt: skip
    assert MARKER in done.stdout and len(lines) == len(argvs) + 1, done.stderr[-4000:]
    return Answers(preflight, lines[1:], lines[0])


# --------------------------------------------------------------------------------------------
# The tests
# --------------------------------------------------------------------------------------------

TYPO = "num_speculative_token"


def _typod_recipe(sweep: Sweep, host: Any) -> ServerRecipe:
    """The sweep's recipe with the ``tokens`` knob's key misspelt, as a sweep file might."""
    recipe = ServerRecipe.of(sweep, host)
    knobs = dict(recipe.knobs)
    knobs["tokens"] = knobs["tokens"].model_copy(update={"json_key": TYPO})
    return dataclasses.replace(recipe, knobs=knobs)


def render_schedules(sweep: Sweep) -> list[Rendered]:
    """The sweep's representative schedule (what the preflight asks) and a three-band one of
    its configs, each rendered with its overlay as a schedule trial runs it."""
    vllm = engines.get("vllm")
    host = sweep.hosts[0]
    recipe = ServerRecipe.of(sweep, host)
    configs = [c for c in expand_configs(sweep) if c]
    forms = [probe_schedule(vllm, configs, recipe.knobs)]
    same = [c for c in configs if c.get("method") == configs[0].get("method")]
    if len(same) >= 3:
        bands = [ScheduleBand(1, same[-1]), ScheduleBand(4, same[1]), ScheduleBand(32, same[0])]
        forms.append(vllm_schedule(bands, recipe.knobs))  # type: ignore[arg-type]
    out = []
    for form in forms:
        if not isinstance(form, NativeSchedule):
            continue
        invocation = recipe.invocation(form.config, overlay=form.overlay)
        command = vllm.parse_command(sweep.server.exec_start or (), invocation, None)
        assert command is not None, invocation.argv
        meant = {
            **(_meant(sweep, form.config) or {}),
            **form.overlay.json.get("--speculative-config", {}),
        }
        out.append(Rendered(sweep.name, form.config, command.prefix[:-1], command.argv, meant))
    return out


@dataclasses.dataclass(frozen=True)
class Asked:
    rendered: list[Rendered]
    typod: list[Rendered]
    schedules: list[Rendered]
    answers: dict[tuple[str, ...], tuple[Any, dict[str, Any], dict[str, Any]]]
    """Each argv's (preflight verdict, vLLM's own answer, what vLLM's source says)."""


@pytest.fixture(scope="module")
def asked(vllm_source: Path) -> Asked:
    """Every argv of the vLLM sweeps and two typo'd ones, asked of vLLM: one process per
    environment (two in all), since each imports vLLM (about 5 s)."""
    sweeps = vllm_sweeps()
    rendered = [r for sweep in sweeps for r in render(sweep)]
    typod = [r for r in render(sweeps[0], _typod_recipe) if r.meant][:2]
    schedules = [r for sweep in sweeps for r in render_schedules(sweep)]
    groups: dict[tuple[str, ...], list[Rendered]] = {}
    for one in [*rendered, *typod, *schedules]:
        groups.setdefault(one.env_prefix, []).append(one)
    answers = {}
    for prefix, group in groups.items():
        got = ask_vllm(vllm_source, prefix, [r.argv for r in group])
        for one, verdict, real in zip(group, got.preflight, got.real, strict=True):
            answers[(*one.env_prefix, *one.argv)] = (verdict, real, got.facts)
    return Asked(rendered, typod, schedules, answers)


def test_every_rendered_vllm_argv_parses_under_vllms_own_parser(asked: Asked) -> None:
    assert {r.sweep for r in asked.rendered} == {"kimi-k26-dflash-vllm", "sim-vllm-quick",
                                                 "vllm-fault-tests"}  # fmt: skip
    checked = 0
    for one in asked.rendered:
        verdict, real, source = asked.answers[(*one.env_prefix, *one.argv)]
        fields, methods = set(source["fields"]), set(source["methods"])
        assert "num_speculative_tokens" in fields and "dflash" in methods  # read, not empty
        assert methods == set(facts.METHODS), "facts.METHODS drifted from vLLM's Literal"
        assert fields == set(facts.SPECULATIVE_KEYS), "facts.SPECULATIVE_KEYS drifted"
        where = f"{one.sweep} {dict(one.config)}: {' '.join(one.argv)}"
        assert real["exit"] is None, (where, real)  # argparse took it: no exit 2
        assert "error" not in real, (where, real)  # engine args and SpeculativeConfig took it
        assert verdict.ok is True, (where, verdict)
        assert real["asked"] == one.meant, (where, real)
        assert verdict.speculative == (one.meant or {}), (where, verdict)
        if one.meant is None:
            assert real["built"] is False, where
            continue
        assert set(one.meant) <= fields, where
        assert one.meant["method"] in methods, where
        assert real["built"] is True and real["method"] == one.meant["method"], real
        assert real["tokens"] == one.meant["num_speculative_tokens"], real
        checked += 1
    # every speculative config of the three sweeps reached a real SpeculativeConfig
    assert checked == len([r for r in asked.rendered if r.meant]) >= 9 + 4 + 9
    assert any(one.config == BUDGET for one in asked.rendered)  # parsed: refused only later


def test_every_rendered_schedule_builds_a_real_speculative_config(asked: Asked) -> None:
    """A schedule trial's argv (its overlay's num_speculative_tokens_per_batch_size inside
    --speculative-config) parses under vLLM's own parser and builds a real SpeculativeConfig,
    and the preflight's script says ok for it."""
    assert len(asked.schedules) >= 3
    for one in asked.schedules:
        verdict, real, _source = asked.answers[(*one.env_prefix, *one.argv)]
        where = f"{one.sweep} {dict(one.config)}: {' '.join(one.argv)}"
        assert real["exit"] is None and "error" not in real, (where, real)
        assert verdict.ok is True, (where, verdict)
        assert real["asked"] == one.meant, (where, real)
        assert one.meant is not None and "num_speculative_tokens_per_batch_size" in one.meant
        assert real["built"] is True and real["tokens"] == one.meant["num_speculative_tokens"]


def test_a_typod_key_is_refused_by_validate_and_by_vllm(asked: Asked) -> None:
    shipped = REPO / "sweeps" / "kimi-k26-dflash-vllm.yaml"
    text = shipped.read_text()
    typo = text.replace("json_key: num_speculative_tokens", f"json_key: {TYPO}")
    assert typo != text
    with pytest.raises(SweepFileError) as refused:
        parse_sweep(typo, "typo.yaml")
    assert f"'{TYPO}' is not a key of --speculative-config" in str(refused.value)

    # The argv that mapping would render (the valid sweep's recipe with the typo'd key):
    # argparse takes any JSON; vLLM's SpeculativeConfig refuses the key, as does the
    # preflight's script (from the real dataclass's fields).
    assert len(asked.typod) == 2
    for one in asked.typod:
        assert f'"{TYPO}"' in one.argv[-1], one.argv
        verdict, real, _source = asked.answers[(*one.env_prefix, *one.argv)]
        assert real["exit"] is None, real
        assert real["error"].startswith("ValidationError: 1 validation error for "
                                        "SpeculativeConfig"), real  # fmt: skip
        assert f"\n{TYPO}\n  Unexpected keyword argument" in real["error"], real
        assert verdict.ok is False and verdict.cause == "invalid-config", verdict
        assert f"{TYPO}: Extra inputs are not permitted" in (verdict.error or ""), verdict
