# Set-up is part of every target: a fresh clone needs only python3 (3.11+), a C compiler and make.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fbrapids-installed

.PHONY: demo test test-opts lint bench notebooks docs-figures docs-check clean-venv gpu-conformance gpu-check gpu-kernels \
	gpu-pack gpu-rehearse

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# the CPU build of torch first, pinned, so nothing pulls the CUDA wheels
	$(PY) -m pip install --quiet torch==2.13.0
	# a path entry, not an import hook (pyproject's package-dir makes the plain editable install one):
	# run from the folder holding the clone, Python would otherwise import the clone folder itself
	# as an empty namespace package `fbrapids`
	$(PY) -m pip install --quiet -e ".[test]"
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fbrapids demo $(ARGS)

# the suite on TEST_WORKERS processes (pytest-xdist), each test file whole on one of them, so a
# module's fixtures (a cluster, launched ranks) are made once; TEST_WORKERS=0 runs it in this process
TEST_WORKERS ?= 2
TEST_OPTS = -q -n $(TEST_WORKERS) --dist loadfile
test: $(STAMP)
	$(PY) -m pytest $(TEST_OPTS) $(ARGS)

# make test's pytest options alone (scripts/docs_figures.py --run suite runs the suite with them)
test-opts:
	@echo $(TEST_OPTS)

# the linter (ruff) and the type checker (mypy), both configured in pyproject.toml; .ci/run runs it
lint: $(STAMP)
	$(VENV)/bin/ruff check
	$(VENV)/bin/mypy

# execute the notebooks on the embedded default data and save their outputs (figures included)
notebooks: $(STAMP)
	$(PY) scripts/run_notebooks.py $(ARGS)

# every benchmark at its documented size; the README table is filled from their JSON
bench: $(STAMP)
	$(PY) scripts/bench.py $(ARGS)

# every figure in README.md, docs/*.md and the notebooks' prose, from the committed JSON under
# benchmarks/results/ (scripts/docs_figures.py): docs-figures rewrites them, docs-check fails on a
# stale or hand-typed one (tests/project/test_docs_figures.py runs the same check in the suite).
# ARGS="--run demo trial" re-measures the demo's summary and the README's trial figure first.
docs-figures: $(STAMP)
	$(PY) scripts/docs_figures.py $(ARGS)

docs-check: $(STAMP)
	$(PY) scripts/docs_figures.py --check

clean-venv:
	rm -rf $(VENV)

# -- the GPU code without a GPU ---------------------------------------------------------------
# A venv of its own with the pinned RAPIDS 26.10 wheels (cudf pins pandas < 3.1: kept apart from
# $(VENV)); they install and import on a machine with no device.  Made once (the stamp), ~1.5 min.
GPU_VENV ?= .venv-gpu
GPU_PY := $(GPU_VENV)/bin/python
GPU_STAMP := $(GPU_VENV)/.fbrapids-gpu-installed
GPU_PINS := cudf-cu13==26.10.2 pylibcudf-cu13==26.10.2 libcudf-cu13==26.10.2 dask-cudf-cu13==26.10.2 \
	rmm-cu13==26.10.0 librmm-cu13==26.10.0 libkvikio-cu13==26.10.0 nvidia-libnvcomp-cu13==5.3.0.16 \
	dask-cuda==26.10.0 cupy-cuda13x nvidia-nvjitlink "cuda-toolkit[nvrtc,cufile]"

$(GPU_STAMP): pyproject.toml Makefile
	python3 -m venv $(GPU_VENV)
	$(GPU_PY) -m pip install --quiet --upgrade pip
	# one resolve: the RAPIDS pins, torch's CPU build (pinned: never the CUDA wheels), and fbrapids
	# with its serve extra, and pytest (pandas stays where cudf pins it)
	$(GPU_PY) -m pip install --quiet $(GPU_PINS) torch==2.13.0 -e ".[serve]" pytest pytest-timeout
	touch $(GPU_STAMP)

# CI's GPU conformance stage: imports, API resolution, shared-code dtypes, host-only dry runs,
# then the tests that need the real libraries (the resolver's injected errors among them)
gpu-conformance: $(GPU_STAMP)
	FBRAPIDS_BACKEND= $(GPU_PY) scripts/gpu_conformance $(ARGS)
	FBRAPIDS_BACKEND= $(GPU_PY) -m pytest -q -p no:cacheprovider tests/gpu_conformance

# everything that needs a device, in one run (see scripts/gpu_check.py); OUT=dir for the JSON and log.
# It uses the kernel cache .gpu/kernels when there (make gpu-kernels) and ends with a table of the steps
OUT ?= gpu-check-out
gpu-check:
	python3 scripts/gpu_check.py --out $(OUT) $(ARGS)

# the device check's CUDA kernels compiled ahead, with no device, into .gpu/kernels: the plans the
# check's extracting steps build (recorded from their CPU twins) compiled for sm_90 by the NVRTC the
# GPU host's CUDA 13 torch brings (the cache key holds its version: another one misses every entry),
# installed apart under .gpu/nvrtc-*.  GPU_NVRTC=13.x.y for another host
GPU_NVRTC ?= 13.0.88
GPU_NVRTC_DIR := .gpu/nvrtc-$(GPU_NVRTC)
$(GPU_NVRTC_DIR)/.installed:
	$(PY) -m pip install --quiet --no-deps --target $(GPU_NVRTC_DIR) nvidia-cuda-nvrtc==$(GPU_NVRTC)
	touch $@

gpu-kernels: $(STAMP) $(GPU_NVRTC_DIR)/.installed
	FBRAPIDS_NVRTC=$$(ls $(CURDIR)/$(GPU_NVRTC_DIR)/nvidia/cu*/lib/libnvrtc.so.* | head -1) \
		$(PY) scripts/gpu_kernels.py --cache .gpu/kernels $(ARGS)

# the offline set for a GPU host without a package index (docs/gpu.md): .gpu/c0 .. .gpu/cN, pack.json
gpu-pack:
	scripts/gpu_pack.sh .gpu

# the offline install and the check's first pass rehearsed here (device steps stood in for; after
# gpu-pack and gpu-kernels); its report, with the pack's sizes, goes to benchmarks/results/figures/gpu_set.json
gpu-rehearse: $(STAMP)
	PY=$(PY) scripts/gpu_rehearse.sh .gpu
	$(PY) scripts/gpu_set_record.py .gpu
