# Common commands. `make demo` and `make test` are the two README commands.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo test lint typecheck unit bench dev clean

# Create the virtualenv and install the project with its dev tools (re-run when pyproject changes).
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	$(BIN)/pip install --quiet -e ".[dev]"
	$(BIN)/python -c "from cdf_platform.engine.session import require_java; require_java()"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/cdf-platform demo

lint: setup
	$(BIN)/ruff check cdf_platform cdf_platform_tests bench
	$(BIN)/ruff format --check cdf_platform cdf_platform_tests bench

typecheck: setup
	$(BIN)/mypy

unit: setup
	$(BIN)/pytest

test: lint typecheck unit

bench: setup
	$(BIN)/python -m bench.run

dev: setup
	DAGSTER_HOME=$${DAGSTER_HOME:-$(CURDIR)/.dagster_home} $(BIN)/dagster dev -w workspace.yaml

clean:
	rm -rf lake .dagster_home spark-warehouse
