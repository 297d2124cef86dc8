# Common commands. `make demo` and `make test` are the two README commands.
PYTHON ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed

.PHONY: setup demo demo-s3 test docs docs-serve bench-s3 bench-latency bench-freshness lint typecheck unit browser azurite bench dev clean

# Create the virtualenv and install the project with its dev tools (re-run when pyproject changes).
# uv installs them: from its cache it links the files into the virtualenv instead of unpacking
# every wheel again (pyspark's alone is 400 MB of jars): a fresh clone's set-up took 23 s with
# it against 54 s with pip from pip's cache, and minutes when the disk is slow.
# setuptools' editable install prints an informational banner (a warning whose text starts
# "Editable installation") on every install of a flat layout; nothing in it asks for action.
UV_VERSION := 0.13.9
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet uv==$(UV_VERSION)
	PYTHONWARNINGS="ignore:Editable installation" $(BIN)/uv pip install --quiet \
		--python $(BIN)/python -e ".[dev]"
	$(BIN)/python -c "from cdf_platform.spark.runtime.session import require_java; require_java()"
	touch $(STAMP)

setup: $(STAMP)

demo: setup
	$(BIN)/cdf-platform demo

# The same story with the lake in a local S3 server (moto) instead of a folder.
demo-s3: setup
	$(BIN)/cdf-platform demo --local-s3

lint: setup
	$(BIN)/ruff check cdf_platform cdf_platform_tests cdf_platform_testkit bench examples conftest.py
	$(BIN)/ruff format --check cdf_platform cdf_platform_tests cdf_platform_testkit bench examples conftest.py
	$(BIN)/lint-imports

typecheck: setup
	$(BIN)/mypy

# The documentation site (docs/ and the code's docstrings) in .site/; any warning fails it.
docs: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict --quiet

docs-serve: setup
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs serve --strict

# The UI test drives Debian's Chromium; install it when we can (root), else the test says why
# it is skipped.
browser:
	@command -v chromium >/dev/null 2>&1 || { [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null \
		&& (apt-get update -qq && apt-get install -y -qq chromium >/dev/null) ; } \
		|| echo "chromium not installed: the browser test will be skipped"

# Azurite, Microsoft's Azure Storage emulator (npm), for the ADLS tests: pinned, installed into
# .tools/ (not the system). 3.35.0 is the newest release whose engines accept Node 20; later
# ones require Node 21+.
AZURITE_VERSION := 3.35.0
TOOLS := .tools
AZURITE_STAMP := $(TOOLS)/.azurite-$(AZURITE_VERSION)

$(AZURITE_STAMP):
	npm install --prefix $(TOOLS) --save-exact --no-audit --no-fund --loglevel=error \
		azurite@$(AZURITE_VERSION)
	touch $(AZURITE_STAMP)

azurite: $(AZURITE_STAMP)

# Two test processes, each taking whole test files (a file's module fixtures start once), in
# the order collected: the longest first (`long`), not xdist's default of the files with the
# most tests first. The files marked `heavy` (they start servers or Spark processes of their
# own) run in lanes (cdf_platform_testkit/fixtures.py): with one process left to the in-process
# files, one lane here, all of them one after another on the other process. A third process
# (two lanes) was no faster on 2 cores: docs/testing.md has the figures.
unit: setup browser azurite
	$(BIN)/pytest -n 2 --dist loadfile --no-loadscope-reorder

test: lint typecheck docs unit

bench: setup
	$(BIN)/python -m bench.run

# Scenario (d) on a local S3 server (moto) beside local disk.
bench-s3: setup
	$(BIN)/python -m bench.object_store

# Launch -> RUN_SUCCESS of Dagster runs: local Spark, Spark Connect, the JVM-free no-op.
bench-latency: setup
	$(BIN)/python -m bench.latency

# Bronze commit -> silver applied, in the deployment of deploy/ (PostgreSQL, daemon, run queue).
bench-freshness: setup
	$(BIN)/python -m bench.freshness

# The Dagster UI on the demo's instance and lake (run `make demo` first).
dev: setup
	DAGSTER_HOME=$(CURDIR)/.demo/dagster_home CDF_LAKE_ROOT=$(CURDIR)/.demo/lake \
		$(BIN)/dagster dev -w workspace.demo.yaml -h 127.0.0.1 -p 3000

clean:
	rm -rf lake .demo .dagster_home spark-warehouse $(TOOLS)
