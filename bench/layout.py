"""Figures of the code's layout, read from the source tree with `ast`: how many ways there are to
carry out a run, where MERGE text is written, where the fallback policy is applied, module
globals assigned at run time, long functions, the largest module, where a process is started,
and imports between the tests, the test kit and the benchmarks.

    python -m bench.layout                 # this tree -> bench/results/layout.md
    python -m bench.layout --root DIR      # another checkout (e.g. `git worktree add DIR REV`)

Each figure lists what it counts, so a reader can check it.
"""

from __future__ import annotations

import argparse
import ast
import subprocess
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

RESULTS_DIR = Path(__file__).parent / "results"
# A function longer than this many lines of code (its docstring left out) is counted as long.
LONG_FUNCTION_LINES = 80
# The test and benchmark trees, and the test kit where it exists.
TEST_TREES = ("cdf_platform_tests", "bench", "cdf_platform_testkit")


@dataclass
class Figure:
    """One counted figure and the items it counts."""

    name: str
    items: list[str] = field(default_factory=list)

    def line(self) -> str:
        listed = "; ".join(self.items) if self.items else "none"
        return f"| {self.name} | {len(self.items)} | {listed} |"


def _modules(root: Path, tree: str) -> Iterator[tuple[str, ast.Module, str]]:
    for path in sorted((root / tree).rglob("*.py")):
        text = path.read_text()
        yield str(path.relative_to(root)), ast.parse(text), text


def _functions(module: ast.Module) -> Iterator[tuple[str, ast.FunctionDef | ast.AsyncFunctionDef]]:
    """Every function and method, with its qualified name."""

    def walk(node: ast.AST, prefix: str) -> Iterator[tuple[str, Any]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.FunctionDef | ast.AsyncFunctionDef):
                yield f"{prefix}{child.name}", child
                yield from walk(child, f"{prefix}{child.name}.")
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.")
            else:
                yield from walk(child, prefix)

    yield from walk(module, "")


def _code_lines(function: ast.FunctionDef | ast.AsyncFunctionDef) -> int:
    body = function.body
    first = body[0]
    if (
        isinstance(first, ast.Expr)
        and isinstance(first.value, ast.Constant)
        and isinstance(first.value.value, str)
    ):
        body = body[1:]
    if not body:
        return 0
    return int(body[-1].end_lineno or 0) - body[0].lineno + 1


def _docstrings(module: ast.Module) -> set[int]:
    """The ids of every docstring node, so that text in them is not counted as code."""
    found: set[int] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.Module | ast.ClassDef | ast.FunctionDef | ast.AsyncFunctionDef):
            body = node.body
            if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                found.add(id(body[0].value))
    return found


def _compares_fail_fast(module: ast.Module) -> bool:
    return any(
        isinstance(side, ast.Attribute) and side.attr == "FAIL_FAST"
        for node in ast.walk(module)
        if isinstance(node, ast.Compare)
        for side in [node.left, *node.comparators]
    )


def _names_a_loss(module: ast.Module) -> bool:
    return any(
        (isinstance(node, ast.Attribute) and node.attr == "LOST")
        or (isinstance(node, ast.Name) and node.id == "REBUILDABLE")
        for node in ast.walk(module)
    )


def _run_entries(root: Path) -> Figure:
    """Public functions, and classes with a `run` method, that the run code offers: the names
    of `cdf_platform/runner.py`, or those `cdf_platform/run/__init__.py` exports."""
    figure = Figure("run entry points")
    single = root / "cdf_platform" / "runner.py"
    package = root / "cdf_platform" / "run"
    if single.exists():
        offered = {n.name: n for n in ast.parse(single.read_text()).body if hasattr(n, "name")}
    else:
        exported = ast.parse((package / "__init__.py").read_text())
        names = {
            alias.name
            for node in exported.body
            if isinstance(node, ast.ImportFrom)
            for alias in node.names
        }
        offered = {}
        for path in package.glob("*.py"):
            for node in ast.parse(path.read_text()).body:
                if getattr(node, "name", None) in names:
                    offered[node.name] = node
    for name, node in sorted(offered.items()):
        if name.startswith("_"):
            continue
        if isinstance(node, ast.FunctionDef):
            figure.items.append(f"{name}()")
        elif isinstance(node, ast.ClassDef) and any(
            isinstance(item, ast.FunctionDef) and item.name == "run" for item in node.body
        ):
            figure.items.append(name)
    return figure


def _product_figures(root: Path) -> list[Figure]:
    merges = Figure("MERGE text builders (code literals holding `MERGE INTO`)")
    fallback = Figure(
        "modules comparing with `FallbackMode.FAIL_FAST` that name a lost window or a "
        "rebuildable problem (`LOST`, `REBUILDABLE`)"
    )
    globals_ = Figure("module globals assigned at run time (`global` statements)")
    long = Figure(f"functions over {LONG_FUNCTION_LINES} lines of code (docstring left out)")
    largest = Figure("the largest module (lines)")
    sizes: list[tuple[int, str]] = []
    for path, module, text in _modules(root, "cdf_platform"):
        sizes.append((len(text.splitlines()), path))
        docstrings = _docstrings(module)
        for node in ast.walk(module):
            literal = isinstance(node, ast.Constant) and id(node) not in docstrings
            if literal and isinstance(node.value, str) and "MERGE INTO" in node.value:
                merges.items.append(f"{path}:{node.lineno}")
            if isinstance(node, ast.Global):
                globals_.items.extend(f"{path}: {name}" for name in node.names)
        for name, function in _functions(module):
            if _code_lines(function) > LONG_FUNCTION_LINES:
                long.items.append(f"{path}::{name} ({_code_lines(function)})")
        if _compares_fail_fast(module) and _names_a_loss(module):
            fallback.items.append(path)
    lines, path = max(sizes)
    largest.items.append(f"{path} ({lines})")
    return [_run_entries(root), merges, fallback, globals_, long, largest]


def _test_figures(root: Path) -> list[Figure]:
    starts = Figure("modules naming `subprocess.Popen` (starting a child process, or its type)")
    bench_imports_tests = Figure("bench modules importing the test package")
    tests_import_bench = Figure("test modules importing bench")
    trees = ["cdf_platform", *(tree for tree in TEST_TREES if (root / tree).exists())]
    for tree in trees:
        for path, module, _text in _modules(root, tree):
            for node in ast.walk(module):
                if isinstance(node, ast.Attribute) and node.attr == "Popen":
                    starts.items.append(path)
                    break
            imported = {
                node.module.split(".")[0]
                for node in ast.walk(module)
                if isinstance(node, ast.ImportFrom) and node.module
            } | {
                alias.name.split(".")[0]
                for node in ast.walk(module)
                if isinstance(node, ast.Import)
                for alias in node.names
            }
            if tree == "bench" and "cdf_platform_tests" in imported:
                bench_imports_tests.items.append(path)
            if tree == "cdf_platform_tests" and "bench" in imported:
                tests_import_bench.items.append(path)
    return [starts, bench_imports_tests, tests_import_bench]


def _revision(root: Path) -> str:
    """The commit `root` is checked out at (with `+` when its files differ from it)."""
    head = subprocess.run(
        ["git", "-C", str(root), "rev-parse", "--short", "HEAD"], capture_output=True, text=True
    ).stdout.strip()
    changed = subprocess.run(
        [
            "git",
            "-C",
            str(root),
            "status",
            "--porcelain",
            "--untracked-files=no",
            "--",
            ".",
            ":!bench/results",
        ],
        capture_output=True,
        text=True,
    ).stdout.strip()
    return f"{head}+" if changed else head or str(root)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--root", type=Path, default=Path.cwd(), help="the checkout to read")
    parser.add_argument("--stem", default="layout", help="bench/results/<stem>.md")
    args = parser.parse_args()
    figures = [*_product_figures(args.root), *_test_figures(args.root)]
    text = "\n".join(
        ["| figure | count | what it counts |", "|---|---|---|", *(f.line() for f in figures)]
    )
    out = RESULTS_DIR / f"{args.stem}.md"
    out.write_text(f"# Layout figures at {_revision(args.root)}\n\n{text}\n")
    print(text)
    print(f"written to {out}")


if __name__ == "__main__":
    main()
