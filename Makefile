# OrchRM — the verbs the README names. Every target sets up .venv on first use.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= $(shell command -v python3.11 || command -v python3)
TORCH_VERSION ?= 2.13.0
EXTRAS ?= dev
# telemetry off, no downloads: the one list the CLI, the tests and the benchmarks also apply
include orchrm/offline.env
export $(shell sed -n 's/^\([A-Z_][A-Z0-9_]*\)=.*/\1/p' orchrm/offline.env)

.PHONY: install demo test test-fast bench lint clean help

help:  ## list the verbs
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install: $(VENV)/.installed  ## create .venv and install orchrm (CPU PyTorch unless a GPU is present)

$(VENV)/.installed: pyproject.toml scripts/install_torch.sh
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "OrchRM needs Python >= 3.11; set PYTHON=/path/to/python3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@bash scripts/install_torch.sh $(PY) $(TORCH_VERSION) $(VENV)/torch-constraint.txt
	$(PY) -m pip install --quiet -c $(VENV)/torch-constraint.txt -e ".[$(EXTRAS)]"
	@touch $@

demo: install  ## run the pipeline on the embedded defaults and print what it did
	$(VENV)/bin/orchrm demo --config configs/default.yaml

test: install  ## run the test suite (offline, CPU)
	$(PY) -m pytest -q

test-fast: install  ## the tests not marked slow
	$(PY) -m pytest -q -m "not slow"

bench: EXTRAS = dev,bench
bench: install  ## run the benchmarks; results land in benchmarks/results/
	$(PY) -m pip install --quiet -c $(VENV)/torch-constraint.txt -e ".[dev,bench]"
	$(PY) benchmarks/run_all.py

lint: install  ## ruff
	$(VENV)/bin/ruff check orchrm tests benchmarks

clean:  ## remove the venv and local run data
	rm -rf $(VENV) .orchrm .pytest_cache
