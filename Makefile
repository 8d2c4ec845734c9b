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
	$(BIN)/replay sweep experiments/quick.toml
	$(BIN)/replay report results/quick

test: $(STAMP) ## run the test suite (unit + loopback integration; real-engine tiers are separate)
	$(BIN)/python -m pytest -q

check: $(STAMP) ## lint (ruff) and type check (mypy)
	$(BIN)/ruff check replay tests benchmarks
	$(BIN)/ruff format --check replay tests benchmarks
	$(BIN)/mypy replay

bench: $(STAMP) ## benchmarks that print side-by-side ratios into results/bench.json
	$(BIN)/python -m benchmarks

sweep: $(STAMP) ## run experiments/$(EXP).toml (EXP=name), resuming finished points
	$(BIN)/replay sweep experiments/$(EXP).toml

figures: $(STAMP) ## render the report and figures of results/$(EXP)
	$(BIN)/replay report results/$(EXP)

clean: ## remove caches (keeps .venv and results)
	rm -rf .pytest_cache .ruff_cache .mypy_cache .hypothesis
