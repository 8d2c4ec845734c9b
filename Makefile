# replay: one command surface. `make help` lists the targets.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
EXP ?= quick

.DEFAULT_GOAL := help
.PHONY: help setup run test check bench sweep figures test-vllm test-llamacpp clean

help: ## list the targets
	@grep -E '^[a-zA-Z_-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  %-15s %s\n", $$1, $$2}'

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -m pip install -q -e '.[test,dev]'
	touch $(STAMP)

setup: $(STAMP) ## create .venv and install the project (editable) with test and dev tools

run: $(STAMP) ## the main job on the embedded default: the quick sweep on the simulator, then its report
	$(BIN)/replay sweep experiments/quick.toml --force  # seconds to rerun; never stale after an edit
	rm -rf results/quick/replaced-*  # what --force set aside: make again in seconds, not piled up
	$(BIN)/replay report results/quick

test: $(STAMP) ## run the test suite (unit + loopback integration; real-engine tiers are separate)
	$(BIN)/python -m pytest -q

check: $(STAMP) ## lint (ruff) and type check (mypy)
	$(BIN)/ruff check replay tests benchmarks
	$(BIN)/ruff format --check replay tests benchmarks
	$(BIN)/mypy replay

bench: $(STAMP) ## benchmarks that print side-by-side ratios into results/bench.json
	$(BIN)/python -m benchmarks

# replay beside AIPerf (docs/driver.md): AIPerf in its own environment, built once and kept by a
# stamp; a large download, so not part of `make bench` or CI.
AIPERF_VENV := .venv-aiperf
AIPERF_STAMP := $(AIPERF_VENV)/.installed
.PHONY: bench-peers

$(AIPERF_STAMP):
	test -x $(AIPERF_VENV)/bin/python || $(PYTHON) -m venv $(AIPERF_VENV)
	$(AIPERF_VENV)/bin/python -m pip install -q --upgrade pip
	$(AIPERF_VENV)/bin/python -m pip install -q aiperf==0.13.0
	touch $(AIPERF_STAMP)

bench-peers: $(STAMP) $(AIPERF_STAMP) ## replay vs AIPerf 0.13 on one zero-latency server: CPU/request, rate, lateness -> results/bench-peers.json
	BENCH_PEERS_AIPERF_VENV=$(AIPERF_VENV) $(BIN)/python -m benchmarks.bench_peers

sweep: $(STAMP) ## run experiments/$(EXP).toml (EXP=name), resuming finished points
	$(BIN)/replay sweep experiments/$(EXP).toml

figures: $(STAMP) ## render the report and figures of results/$(EXP)
	$(BIN)/replay report results/$(EXP)

# Headless Chromium renders report.html in tests/test_report_html.py (skipped locally without it,
# failed under CI=true): Debian's package, installed once.
.PHONY: setup-chromium
setup-chromium: ## install Debian's chromium (headless check of report.html); needs root or sudo
	command -v chromium >/dev/null || { SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -q && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -q chromium; }

clean: ## remove caches (keeps .venv and results)
	rm -rf .pytest_cache .ruff_cache .mypy_cache .hypothesis

# Real vLLM on CPU (docs/vllm-cpu.md): its own environment, built once and kept by a stamp.
VLLM_VENV := .venv-vllm
VLLM_STAMP := $(VLLM_VENV)/.installed
.PHONY: setup-vllm

$(VLLM_STAMP): scripts/setup-vllm-cpu.sh
	PYTHON=$(PYTHON) bash scripts/setup-vllm-cpu.sh $(VLLM_VENV)

setup-vllm: $(VLLM_STAMP) ## create .venv-vllm: vLLM 0.32 for CPU plus this project (used by test-vllm)

test-vllm: $(STAMP) $(VLLM_STAMP) weka-traces ## real vLLM on CPU: exact forcing, multi-agent replay, WEKA trace, capacity sweep
	$(BIN)/python -m pytest -q -m vllm tests/real

# Real llama.cpp server on CPU (docs/llamacpp.md): the xllamacpp wheel (an embedded llama-server)
# plus gguf and tokenizers for the tiny model, installed into .venv as the `llamacpp` extra.
LLAMACPP_STAMP := $(VENV)/.installed-llamacpp
LLAMA_CPP_PY := 0.3.36
LLAMA_BUILD := build/llama-server
LLAMA_SERVER := $(LLAMA_BUILD)/bin/llama-server
.PHONY: setup-llamacpp llama-server

$(LLAMACPP_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e '.[llamacpp]'
	touch $(LLAMACPP_STAMP)

setup-llamacpp: $(LLAMACPP_STAMP) ## install the llamacpp extra into .venv (xllamacpp CPU wheel, gguf, tokenizers)

test-llamacpp: $(LLAMACPP_STAMP) weka-traces ## real llama.cpp on CPU: RAM tier vs model, multi-agent replay, --cache-ram sweep
	$(BIN)/python -m pytest -q -m llamacpp tests/real -p no:cacheprovider

llama-server: $(LLAMA_SERVER) ## build llama-server (~5 min, 2 cores) from the pinned PyPI sdist llama_cpp_python

$(LLAMA_SERVER):
	mkdir -p $(LLAMA_BUILD)
	command -v cmake >/dev/null && command -v ninja >/dev/null || $(BIN)/python -m pip install -q cmake ninja
	test -f $(LLAMA_BUILD)/llama_cpp_python-$(LLAMA_CPP_PY).tar.gz || $(BIN)/python -m pip download \
		-q --no-deps --no-binary :all: llama_cpp_python==$(LLAMA_CPP_PY) -d $(LLAMA_BUILD)
	tar -xzf $(LLAMA_BUILD)/llama_cpp_python-$(LLAMA_CPP_PY).tar.gz -C $(LLAMA_BUILD)
	PATH="$(CURDIR)/$(BIN):$$PATH" cmake -S $(LLAMA_BUILD)/llama_cpp_python-$(LLAMA_CPP_PY)/vendor/llama.cpp \
		-B $(LLAMA_BUILD)/cmake -G Ninja -DCMAKE_BUILD_TYPE=Release -DGGML_NATIVE=ON \
		-DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF -DLLAMA_OPENSSL=OFF -DBUILD_SHARED_LIBS=OFF
	PATH="$(CURDIR)/$(BIN):$$PATH" ninja -C $(LLAMA_BUILD)/cmake -j2 llama-server
	mkdir -p $(LLAMA_BUILD)/bin && cp $(LLAMA_BUILD)/cmake/bin/llama-server $(LLAMA_SERVER)
	@echo "built $(LLAMA_SERVER): set server_bin = \"$(LLAMA_SERVER)\" in an experiment's [engine]"

# The suite on the newer Pythons that pyproject's requires-python (>= 3.11) admits: one venv per
# version (.venv-py3.12, ...), dependencies from PyPI (their newest releases, not .venv's). The
# interpreter is `pythonX.Y` on PATH, else pyenv's newest X.Y.* (installed but not selected); a
# version found neither way is reported as skipped, and the run fails if none ran.
OTHER_PYTHONS ?= 3.12 3.13
.PHONY: test-pythons

test-pythons: ## the test suite again on Python 3.12 and 3.13 (.venv-py3.12, .venv-py3.13)
	@ran=0; for v in $(OTHER_PYTHONS); do \
	  py=python$$v; venv=.venv-py$$v; \
	  if ! $$py -c 'import sys' >/dev/null 2>&1; then \
	    py=$$(ls -d "$$(pyenv root 2>/dev/null || echo /nonexistent)"/versions/$$v.*/bin/python$$v 2>/dev/null | sort -V | tail -1); \
	    if [ -z "$$py" ]; then echo "test-pythons: python$$v not found: skipped"; continue; fi; \
	  fi; \
	  if [ ! $$venv/.installed -nt pyproject.toml ]; then \
	    rm -rf $$venv && $$py -m venv $$venv && $$venv/bin/python -m pip install -q --upgrade pip \
	      && $$venv/bin/python -m pip install -q -e '.[test]' && touch $$venv/.installed || exit 1; \
	  fi; \
	  echo "test-pythons: $$($$venv/bin/python -V)"; \
	  $$venv/bin/python -m pytest -q || exit 1; ran=$$((ran + 1)); \
	done; test $$ran -gt 0 || { echo "test-pythons: no Python of $(OTHER_PYTHONS) found"; exit 1; }

# Sweeps on Ray (docs/cluster.md): the `ray` extra installed into .venv, then the `ray` tier (a
# local Ray with two slots and a simulated two-node cluster, with their memory kept small).
RAY_STAMP := $(VENV)/.installed-ray
.PHONY: setup-ray test-ray

$(RAY_STAMP): $(STAMP) pyproject.toml
	$(BIN)/python -m pip install -q -e '.[ray]'
	touch $(RAY_STAMP)

setup-ray: $(RAY_STAMP) ## install the ray extra into .venv (replay sweep --ray)

test-ray: $(RAY_STAMP) ## sweeps on Ray: local two slots, simulated two-node cluster, a node killed
	$(BIN)/python -m pytest -q -m ray tests/ray -p no:cacheprovider

# Engine contracts (docs/engines.md): the adapters checked against the released sources of the
# pinned vLLM, SGLang and LMCache wheels, fetched once without dependencies into
# REPLAY_WHEEL_CACHE (default ~/.cache/replay/wheels) and read with ast, never imported.
.PHONY: test-contracts

test-contracts: $(STAMP) ## adapters vs the pinned vLLM/SGLang/LMCache sources: flags, metrics, forcing
	$(BIN)/python -m pytest -q -m contracts tests/contracts -p no:cacheprovider

# GPU engines (docs/engines.md): one environment per engine at the adapters' pinned versions, with
# this project installed into it (--no-deps); the experiment files name .venv-gpu-ENGINE/bin/python.
ENGINE ?=
.PHONY: setup-gpu gpu-check

setup-gpu: $(STAMP) ## build .venv-gpu-$(ENGINE) (ENGINE=vllm|sglang|lmcache): pinned engine + replay
	PYTHON=$(PYTHON) REPLAY_PYTHON=$(BIN)/python bash scripts/setup-gpu.sh "$(ENGINE)" .venv-gpu-$(ENGINE)

gpu-check: $(STAMP) ## one GPU, <= 10 min: vLLM, vLLM+LMCache, SGLang+HiCache forcing and counters
	$(BIN)/python scripts/gpu_check.py

# Two real WEKA Claude Code traces scaled 1/64 for the real-engine tiers and experiments/weka-*.toml,
# made from ../shared (the traces are not copied into the repository; docs/trace.md, "Scaling").
# Elsewhere: make weka-traces WEKA=DIR (the folder holding trace_0291.json).
WEKA ?= ../shared/traces/weka
SCALED := .cache/traces
# made again when the code that makes them changes (a stale trace would test the old importer)
WEKA_CODE := replay/trace/importers/weka.py replay/trace/scale.py
.PHONY: weka-traces weka-found

weka-traces: $(SCALED)/weka-pair-k64.jsonl.gz $(SCALED)/weka-0277-k64.jsonl.gz ## scale two WEKA traces from ../shared (WEKA=DIR) 1/64 into .cache/traces

weka-found:
	@test -f $(WEKA)/trace_0291.json || { echo "make: no WEKA traces in $(WEKA): give WEKA=DIR, the folder holding trace_0291.json (docs/trace.md)" >&2; exit 1; }

$(SCALED)/weka-pair-k64.jsonl.gz: $(STAMP) $(WEKA_CODE) | weka-found
	mkdir -p $(SCALED)
	$(BIN)/replay trace import --from weka $(WEKA)/trace_0291.json $(WEKA)/trace_0485.json \
		-o $(SCALED)/weka-pair.jsonl.gz --vocab-size 8192
	$(BIN)/replay trace scale $(SCALED)/weka-pair.jsonl.gz --tokens 1/64 -o $@

$(SCALED)/weka-0277-k64.jsonl.gz: $(STAMP) $(WEKA_CODE) | weka-found
	mkdir -p $(SCALED)
	$(BIN)/replay trace import --from weka $(WEKA)/trace_0277.json \
		-o $(SCALED)/weka-0277.jsonl.gz --vocab-size 8192
	$(BIN)/replay trace scale $(SCALED)/weka-0277.jsonl.gz --tokens 1/64 -o $@
