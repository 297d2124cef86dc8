"""Figures of the code's layout, read from the source tree with `ast`: how many ways there are to
carry out a run, where MERGE text is written, where the fallback policy is applied, module
globals assigned at run time, long functions, the largest module, the largest package folder,
the storage modules, module names two packages use, where the source kind is tested outside the
run package, module-level mutable state (`bench.layout_state`), where a process is started,
and imports between the tests, the test kit, the benchmarks and the demo.

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

from bench.layout_state import FIGURE_NAME as STATE_FIGURE_NAME
from bench.layout_state import state_items

RESULTS_DIR = Path(__file__).parent / "results"
# A function longer than this many lines of code (its docstring left out) is counted as long.
LONG_FUNCTION_LINES = 80
# The test and benchmark trees, and the test kit where it exists.
TEST_TREES = ("cdf_platform_tests", "bench", "cdf_platform_testkit")
# A package folder holding more modules than this is counted as crowded.
CROWDED_FOLDER_MODULES = 12
# A module whose file name holds one of these is a storage module.
STORAGE_WORDS = ("storage", "store", "location", "object_store")
# Attributes of a layout that tell the source kind or delete mode apart.
LAYOUT_KIND_ATTRIBUTES = frozenset({"soft", "events"})


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


def _package_folders(root: Path) -> dict[str, list[Path]]:
    """Each package folder of cdf_platform and the modules (not `__init__.py`) directly in it."""
    folders: dict[str, list[Path]] = {}
    for init in sorted((root / "cdf_platform").rglob("__init__.py")):
        folder = init.parent
        folders[str(folder.relative_to(root))] = sorted(
            p for p in folder.glob("*.py") if p.name != "__init__.py"
        )
    return folders


def _folder_figures(root: Path) -> list[Figure]:
    largest = Figure("the largest package folder (modules directly in it, `__init__.py` left out)")
    crowded = Figure(f"package folders of more than {CROWDED_FOLDER_MODULES} modules")
    storage = Figure(
        "storage modules (file name holding " + ", ".join(f"`{w}`" for w in STORAGE_WORDS) + ")"
    )
    twice = Figure(
        "module file names used in two top-level packages of cdf_platform (`__init__` left out; "
        "a module directly in cdf_platform/ counts as the package `cdf_platform`)"
    )
    folders = _package_folders(root)
    count, name = max((len(modules), folder) for folder, modules in folders.items())
    largest.items.append(f"{name}/ ({count})")
    crowded.items.extend(
        f"{folder}/ ({len(modules)})"
        for folder, modules in folders.items()
        if len(modules) > CROWDED_FOLDER_MODULES
    )
    homes: dict[str, set[str]] = {}
    for modules in folders.values():
        for path in modules:
            relative = path.relative_to(root)
            if any(word in path.stem for word in STORAGE_WORDS):
                storage.items.append(str(relative))
            top = relative.parts[1] if len(relative.parts) > 2 else "cdf_platform"
            homes.setdefault(path.stem, set()).add(top)
    twice.items.extend(
        f"{stem} ({', '.join(sorted(tops))})"
        for stem, tops in sorted(homes.items())
        if len(tops) > 1
    )
    return [largest, crowded, storage, twice]


def _last_name(node: ast.expr) -> str:
    """The name `node` ends in: `x` for `x`, `layout` for `self.layout`, else ''."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _tests_source_kind(node: ast.AST) -> str | None:
    """What `node` reads to tell the source kind apart, or None."""
    if isinstance(node, ast.Attribute) and isinstance(node.ctx, ast.Load):
        if node.attr == "snapshot_source":
            return "snapshot_source"
        if node.attr in LAYOUT_KIND_ATTRIBUTES and "layout" in _last_name(node.value).lower():
            return f"{_last_name(node.value)}.{node.attr}"
    if (
        isinstance(node, ast.Compare)
        and _last_name(node.left) == "tombstones"
        and len(node.ops) == 1
        and isinstance(node.ops[0], ast.Is | ast.IsNot)
        and isinstance(node.comparators[0], ast.Constant)
        and node.comparators[0].value is None
    ):
        return (
            "tombstones is not None" if isinstance(node.ops[0], ast.IsNot) else "tombstones is None"
        )
    return None


def _state_figures(root: Path) -> list[Figure]:
    kinds = Figure(
        "places outside cdf_platform/run/ that test the source kind (`X.snapshot_source` "
        "reads, `tombstones is (not) None`, `.soft`/`.events` read on a name holding `layout`)"
    )
    for path, module, _text in _modules(root, "cdf_platform"):
        if not path.startswith("cdf_platform/run/"):
            for node in ast.walk(module):
                if (kind := _tests_source_kind(node)) is not None:
                    kinds.items.append(f"{path}:{node.lineno} {kind}")
    kinds.items.sort(key=_place)
    return [kinds, Figure(STATE_FIGURE_NAME, state_items(root))]


def _place(item: str) -> tuple[str, int]:
    """The file and line an item `path:line ...` names, to list items in reading order."""
    path, line = item.split(" ", 1)[0].rsplit(":", 1)
    return path, int(line)


def _test_figures(root: Path) -> list[Figure]:
    starts = Figure("modules naming `subprocess.Popen` (starting a child process, or its type)")
    bench_imports_tests = Figure("bench modules importing the test package")
    tests_import_bench = Figure("test modules importing bench")
    kit_imports_demo = Figure(
        "test-kit modules (cdf_platform_testkit/) importing cdf_platform.demo"
    )
    helpers_import_demo = Figure(
        "test helpers importing cdf_platform.demo (the modules of cdf_platform_tests/ that hold "
        "no tests: conftest.py and helpers not named test_*.py)"
    )
    trees = ["cdf_platform", *(tree for tree in TEST_TREES if (root / tree).exists())]
    for tree in trees:
        for path, module, _text in _modules(root, tree):
            for node in ast.walk(module):
                if isinstance(node, ast.Attribute) and node.attr == "Popen":
                    starts.items.append(path)
                    break
            names = _imported(module)
            imported = {name.split(".")[0] for name in names}
            if tree == "bench" and "cdf_platform_tests" in imported:
                bench_imports_tests.items.append(path)
            if tree == "cdf_platform_tests" and "bench" in imported:
                tests_import_bench.items.append(path)
            helper = tree == "cdf_platform_tests" and not Path(path).name.startswith("test_")
            demo = sorted(
                {n for n in names if n == "cdf_platform.demo" or n.startswith("cdf_platform.demo.")}
            )
            if demo and tree == "cdf_platform_testkit":
                kit_imports_demo.items.append(f"{path} ({', '.join(demo)})")
            if demo and helper:
                helpers_import_demo.items.append(f"{path} ({', '.join(demo)})")
    return [starts, bench_imports_tests, tests_import_bench, kit_imports_demo, helpers_import_demo]


def _imported(module: ast.Module) -> set[str]:
    """The modules `module` imports, by their dotted names (`from cdf_platform import demo`
    names `cdf_platform.demo`)."""
    names: set[str] = set()
    for node in ast.walk(module):
        if isinstance(node, ast.ImportFrom) and node.module and not node.level:
            names.add(node.module)
            if node.module == "cdf_platform":
                names.update(f"cdf_platform.{alias.name}" for alias in node.names)
        elif isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
    return names


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
    figures = [
        *_product_figures(args.root),
        *_folder_figures(args.root),
        *_state_figures(args.root),
        *_test_figures(args.root),
    ]
    text = "\n".join(
        ["| figure | count | what it counts |", "|---|---|---|", *(f.line() for f in figures)]
    )
    out = RESULTS_DIR / f"{args.stem}.md"
    out.write_text(f"# Layout figures at {_revision(args.root)}\n\n{text}\n")
    print(text)
    print(f"written to {out}")


if __name__ == "__main__":
    main()
