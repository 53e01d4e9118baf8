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

# Three workers on two cores: a third of the suite's time is spent waiting (processes
# starting, servers waiting out a silent party's stage timeout), which a third worker
# fills. A file whose tests share a module fixture (a Flower deployment, a Dask cluster,
# a comparison) runs on one worker, so the fixture starts once; every other test goes to
# whichever worker is free (tests/conftest.py marks the groups).
TEST_WORKERS ?= 3
test: $(STAMP_TEST)
	$(BIN)/ruff check src tests benchmarks
	$(BIN)/python -m pytest -q -n $(TEST_WORKERS) --dist loadgroup

lint: $(STAMP_TEST)
	$(BIN)/ruff check src tests benchmarks

bench: $(STAMP_TEST)
	$(BIN)/python benchmarks/bench_exact.py

clean:
	rm -rf $(VENV) build src/*.egg-info .pytest_cache .ruff_cache
