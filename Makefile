# Two commands for a fresh machine: `make run` (the main job) and `make test` (ruff, mypy, the docs
# site built with strict link checking, pytest).
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed-dev
RUN_STAMP := $(VENV)/.installed
# setuptools' notes on editable installs (UserWarnings of the build backend) are not the user's.
QUIET_BUILD := PYTHONWARNINGS=ignore::UserWarning

.PHONY: run test lint bench clean

$(VENV)/bin/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip

$(RUN_STAMP): pyproject.toml | $(VENV)/bin/python
	$(QUIET_BUILD) $(BIN)/pip install --quiet -e .
	touch $@

$(STAMP): pyproject.toml | $(VENV)/bin/python
	$(QUIET_BUILD) $(BIN)/pip install --quiet -e '.[dev]'
	touch $@ $(RUN_STAMP)

run: $(RUN_STAMP)
	$(BIN)/dynosim tune experiments/quickstart.yaml --name quickstart-$$(date +%Y%m%d-%H%M%S)

test: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(BIN)/mypy
	$(BIN)/mkdocs build --strict --quiet
	$(BIN)/pytest -q -n 2

bench: $(RUN_STAMP)
	$(BIN)/python benchmarks/sim_speed.py

clean:
	rm -rf $(VENV) runs
