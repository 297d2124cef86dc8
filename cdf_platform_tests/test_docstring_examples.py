"""The examples in the package's docstrings run as written: every `>>>` example of every module
is executed by doctest, except those marked `# doctest: +SKIP` (they need a lake, a Spark
session or a run context), so an example that can run is kept true."""

from __future__ import annotations

import doctest
import importlib
import pkgutil

import pytest

import cdf_platform

MODULES = sorted(
    info.name
    for info in pkgutil.walk_packages(cdf_platform.__path__, prefix="cdf_platform.")
    # The demo's modules start servers or Spark on import of their entry points.
    if not info.name.startswith("cdf_platform.demo")
)


@pytest.mark.parametrize("name", ["cdf_platform", *MODULES])
def test_docstring_examples_run_as_written(name: str) -> None:
    module = importlib.import_module(name)
    finder = doctest.DocTestFinder(exclude_empty=True)
    runner = doctest.DocTestRunner(optionflags=doctest.ELLIPSIS | doctest.NORMALIZE_WHITESPACE)
    for test in finder.find(module, name):
        runner.run(test)
    results = runner.summarize(verbose=False)
    assert results.failed == 0, f"{results.failed} docstring example(s) of {name} failed"
