# The two commands a newcomer runs (see README):
#   make repro   set up .venv from the lock, then `dvc repro` the default profile on the embedded data
#   make test    set up .venv from the lock, then the default test tier
# Both are idempotent: the venv is rebuilt only when requirements.lock or pyproject.toml change.

VENV    ?= .venv
PY      := $(VENV)/bin/python
STAMP   := $(VENV)/.dynamix-installed
PYTEST_ARGS ?=
SUDO    := $(shell [ "$$(id -u)" = 0 ] || echo sudo)
export DVC_NO_ANALYTICS := 1
export PYTHONHASHSEED := 0
# One instruction set for torch's CPU kernels in every process, so that every machine computes the same
# bits (dynamix/isa.py says why; tests/test_isa.py keeps these equal to its values).
# DYNAMIX_CPU_ISA=native lifts the pin.
export DYNAMIX_CPU_ISA ?= avx2
ifeq ($(DYNAMIX_CPU_ISA),avx2)
export ATEN_CPU_CAPABILITY ?= avx2
export ONEDNN_MAX_CPU_ISA ?= AVX2
export MKL_ENABLE_INSTRUCTIONS ?= AVX2
export MKL_CBWR ?= AVX2
endif
# DVC stages call papermill and dynamix: run them from the venv.
export PATH := $(abspath $(VENV))/bin:$(PATH)

.PHONY: setup protos repro smoke test test-all bench lab browser lock dvc-yaml params-yaml clean-results

setup: $(STAMP) protos

$(STAMP): requirements.lock pyproject.toml
	@test -x $(PY) || python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --disable-pip-version-check -r requirements.lock
	$(PY) -m pip install --quiet --disable-pip-version-check --no-deps --no-build-isolation -e .
	@touch $@

protos: $(STAMP)
	$(PY) -m dynamix.rpc.codegen --if-stale

repro: setup
	$(VENV)/bin/dvc config --local core.analytics false
	$(VENV)/bin/dvc repro

smoke: setup
	$(VENV)/bin/dvc exp run --temp -S profile=smoke

# The default tier on TEST_JOBS pytest processes, each test file whole on one (its module fixtures built
# once), every torch in them on one thread: with torch's default of a thread per core, two processes'
# OpenMP threads spin against each other and the heaviest fixtures ran 3-10x slower than alone.
TEST_JOBS ?= 2
test: export OMP_NUM_THREADS = 1
test: export MKL_NUM_THREADS = 1
test: setup
	$(PY) -m pytest -m "not slow" -q --durations=30 -n $(TEST_JOBS) --dist loadfile $(PYTEST_ARGS)

test-all: setup
	$(PY) -m pytest -q $(PYTEST_ARGS)

bench: setup
	@for b in benchmarks/bench_*.py; do echo "== $$b"; $(PY) $$b || exit 1; done

# JupyterLab rooted at the repository (notebooks/ beside the executed results/notebooks/), opening the
# playground, with the venv's Python as the python3 kernel (registered into .venv).
lab: setup
	$(PY) -m ipykernel install --sys-prefix --name python3 --display-name "Python 3 (ipykernel)" >/dev/null
	$(VENV)/bin/jupyter lab --no-browser --notebook-dir=. --LabApp.default_url=/lab/tree/notebooks/explore.ipynb \
		$$( [ "$$(id -u)" = 0 ] && echo --allow-root )

# Headless Chromium for the browser test (Debian's chromium + chromium-driver), then that test.
browser: setup
	@command -v chromium >/dev/null && command -v chromedriver >/dev/null || { \
		$(SUDO) apt-get update -qq && $(SUDO) apt-get install -y -qq chromium chromium-driver; }
	$(PY) -m pytest -q -m slow tests/test_browser.py $(PYTEST_ARGS)

# dvc.yaml from the stages' table (dynamix/pipeline/stages.py) and the import graph (tools/dvcgen.py):
# after an import or a read setting changes; tests/test_dvc_deps.py fails until it is rerun.
dvc-yaml: $(STAMP)
	$(PY) -m tools.dvcgen

# params.yaml's base sections (above `profiles:`) from the dataclasses of dynamix/config.py, each setting's
# default and doc (tools/paramsgen.py): after a setting is added, documented or given a new default;
# tests/test_config.py fails until it is rerun. The profiles are kept as written.
params-yaml: $(STAMP)
	$(PY) -m tools.paramsgen

lock:
	$(PY) -m pip freeze --exclude-editable | sed '1i # Exact pins for every package in .venv (pip freeze). Regenerate: make lock. Mirrored by environment.yml.' > requirements.lock
	$(PY) tools/lockfile.py
