# Set-up is part of every target: a fresh clone needs only python3 (3.11+), a C compiler and make.
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.fbrapids-installed

.PHONY: demo test bench notebooks clean-venv

$(STAMP): pyproject.toml
	python3 -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	# the CPU build of torch first, pinned, so nothing pulls the CUDA wheels
	$(PY) -m pip install --quiet torch==2.13.0
	# a path entry (compat), not an import hook: run from the folder holding the clone, Python would
	# otherwise import the clone folder itself as an empty namespace package `fbrapids`
	$(PY) -m pip install --quiet -e ".[test]" --config-settings editable_mode=compat
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/fbrapids demo $(ARGS)

test: $(STAMP)
	$(PY) -m pytest -q $(ARGS)

# execute the notebooks on the embedded default data and save their outputs (figures included)
notebooks: $(STAMP)
	$(PY) scripts/run_notebooks.py $(ARGS)

# every benchmark at its documented size; the README table is filled from their JSON
bench: $(STAMP)
	$(PY) scripts/bench.py $(ARGS)

clean-venv:
	rm -rf $(VENV)
