PYTHON ?= python3.11
VENV := .venv
BIN := $(VENV)/bin
STAMP_RUN := $(VENV)/.installed-run
STAMP_TEST := $(VENV)/.installed-test

.PHONY: run test lint bench clean

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(STAMP_RUN): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[plot]'
	touch $@

$(STAMP_TEST): pyproject.toml | $(BIN)/python
	$(BIN)/python -m pip install --quiet -e '.[test,plot]'
	touch $@ $(STAMP_RUN)

run: $(STAMP_RUN)
	$(BIN)/fedustat compare

# Two workers, each test file on one worker (a file's module fixtures, such as a Flower
# deployment, then start once).
test: $(STAMP_TEST)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -q -n 2 --dist loadfile

lint: $(STAMP_TEST)
	$(BIN)/ruff check src tests benchmarks

bench: $(STAMP_TEST)
	$(BIN)/python benchmarks/bench_exact.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache
