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

# Two workers. A file whose tests share a module fixture (a Flower deployment, a Dask
# cluster, a comparison) runs on one worker, so the fixture starts once; every other test
# goes to whichever worker is free (tests/conftest.py marks the groups).
test: $(STAMP_TEST)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup

lint: $(STAMP_TEST)
	$(BIN)/ruff check src tests benchmarks

bench: $(STAMP_TEST)
	$(BIN)/python benchmarks/bench_exact.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache
