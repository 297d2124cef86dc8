"""Module-level mutable state in a package, read from its source with `ast`: the figure
`bench.layout` reports as "module-level mutable state".

It counts what a process keeps between calls outside any object a caller holds:

- a module-level name (the module's body, and the bodies of its `if`, `try` and `with` blocks)
  bound to a mutable container (a dict, list or set display or comprehension, or a call of
  one of `MUTABLE_CALLS`) that a function of the package mutates: an item assigned or
  deleted, an augmented assignment, or a call of one of `MUTATING_METHODS`. The name is
  followed as itself in its own module (where the function binds no local of that name), as
  `module.NAME` where another module imports its module, and under the name another module
  imports it as. A container nothing mutates (a table of constants) is not state;
- a function or method under `functools.lru_cache` or `functools.cache` (a cache kept for the
  process's life);
- `os.environ` written in a function: an item assigned or deleted, a call of one of
  `ENVIRON_WRITES`, or `os.putenv`/`os.unsetenv`.

Each item names its place (`path:line`), so a reader can check it.

Example:
    >>> from pathlib import Path
    >>> state_items(Path("."))  # doctest: +SKIP
    []
"""

from __future__ import annotations

import ast
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

PACKAGE = "cdf_platform"
# Calls that build a mutable container.
MUTABLE_CALLS = frozenset(
    {
        "dict",
        "list",
        "set",
        "defaultdict",
        "OrderedDict",
        "deque",
        "WeakKeyDictionary",
        "WeakValueDictionary",
        "WeakSet",
    }
)
# Methods that change the container they are called on.
MUTATING_METHODS = frozenset(
    {
        "append",
        "appendleft",
        "extend",
        "extendleft",
        "insert",
        "update",
        "setdefault",
        "pop",
        "popleft",
        "popitem",
        "clear",
        "add",
        "discard",
        "remove",
        "sort",
        "reverse",
        "difference_update",
        "intersection_update",
        "symmetric_difference_update",
        "__setitem__",
        "__delitem__",
    }
)
# Decorators that keep a function's results for the process's life.
CACHE_DECORATORS = frozenset({"lru_cache", "cache"})
# Methods of `os.environ` that change the process's environment.
ENVIRON_WRITES = frozenset(
    {"update", "pop", "popitem", "setdefault", "clear", "__setitem__", "__delitem__"}
)
# Functions of `os` that change the process's environment.
PROCESS_ENV_WRITES = frozenset({"putenv", "unsetenv"})

FIGURE_NAME = (
    "module-level mutable state (a module-level dict, list or set display or comprehension, or "
    + "/".join(f"`{name}()`" for name in sorted(MUTABLE_CALLS))
    + " call, that a function of cdf_platform mutates: an item assigned or deleted, an "
    "augmented assignment, or a call of "
    + "/".join(f"`{name}`" for name in sorted(MUTATING_METHODS))
    + "; functions and methods under `functools.lru_cache`/`functools.cache`; `os.environ` "
    "written in a function: an item assigned or deleted, "
    + "/".join(f"`{name}`" for name in sorted(ENVIRON_WRITES))
    + ", `os.putenv`/`os.unsetenv`)"
)

_Function = ast.FunctionDef | ast.AsyncFunctionDef
_Scope = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef | ast.Lambda


@dataclass(frozen=True)
class _Module:
    """One module of the package: its file (relative to the root), dotted name and tree."""

    path: str
    name: str
    tree: ast.Module


def _package_modules(root: Path) -> list[_Module]:
    modules = []
    for file in sorted((root / PACKAGE).rglob("*.py")):
        relative = file.relative_to(root)
        parts = relative.with_suffix("").parts
        if parts[-1] == "__init__":
            parts = parts[:-1]
        modules.append(_Module(str(relative), ".".join(parts), ast.parse(file.read_text())))
    return modules


def _last_name(node: ast.expr) -> str:
    """The name `node` ends in: `x` for `x`, `cache` for `functools.cache`, else ''."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        return node.attr
    return ""


def _dotted(node: ast.expr) -> str | None:
    """`a.b.c` for a chain of attributes on a name, else None."""
    if isinstance(node, ast.Name):
        return node.id
    if isinstance(node, ast.Attribute):
        base = _dotted(node.value)
        return f"{base}.{node.attr}" if base is not None else None
    return None


def _module_statements(module: ast.Module) -> Iterator[ast.stmt]:
    """The statements run at import: the module's body, with the bodies of its `if`, `try` and
    `with` blocks."""
    pending = list(module.body)
    while pending:
        statement = pending.pop(0)
        yield statement
        if isinstance(statement, ast.If | ast.Try | ast.With):
            for block in ("body", "orelse", "finalbody", "handlers"):
                pending.extend(getattr(statement, block, []))
        if isinstance(statement, ast.ExceptHandler):
            pending.extend(statement.body)


def _is_container(value: ast.expr | None) -> bool:
    if isinstance(value, ast.Dict | ast.List | ast.Set | ast.DictComp | ast.ListComp | ast.SetComp):
        return True
    return isinstance(value, ast.Call) and _last_name(value.func) in MUTABLE_CALLS


def _containers(module: ast.Module) -> dict[str, int]:
    """The module-level names bound to a mutable container, with their lines (`__all__` left
    out: it is read by `import *` and tools, never kept between calls)."""
    found: dict[str, int] = {}
    for statement in _module_statements(module):
        if isinstance(statement, ast.Assign | ast.AnnAssign) and _is_container(statement.value):
            targets = statement.targets if isinstance(statement, ast.Assign) else [statement.target]
            for target in targets:
                if isinstance(target, ast.Name) and target.id != "__all__":
                    found.setdefault(target.id, statement.lineno)
    return found


@dataclass
class _Names:
    """What the names of one module stand for: a container of the package (`containers`), a
    module (`modules`), or `os.environ` and `os`'s environment writers (`environ`, `writers`)."""

    containers: dict[str, tuple[str, str]]
    modules: dict[str, str]
    environ: set[str]
    writers: set[str]


def _names(module: _Module, containers: dict[str, dict[str, int]], known: set[str]) -> _Names:
    names = _Names(
        containers={name: (module.name, name) for name in containers.get(module.name, {})},
        modules={},
        environ=set(),
        writers=set(),
    )
    for node in ast.walk(module.tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:
                    names.modules[alias.asname] = alias.name
                else:
                    top = alias.name.split(".")[0]
                    names.modules[top] = top
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                local = alias.asname or alias.name
                if f"{node.module}.{alias.name}" in known:
                    names.modules[local] = f"{node.module}.{alias.name}"
                elif alias.name in containers.get(node.module, {}):
                    names.containers[local] = (node.module, alias.name)
                elif node.module == "os" and alias.name == "environ":
                    names.environ.add(local)
                elif node.module == "os" and alias.name in PROCESS_ENV_WRITES:
                    names.writers.add(local)
    return names


def _own_nodes(scope: _Scope) -> Iterator[ast.AST]:
    """The nodes of `scope` that are not in a function or class defined inside it."""
    pending: list[ast.AST] = list(ast.iter_child_nodes(scope))
    while pending:
        node = pending.pop()
        yield node
        if not isinstance(node, _Function | ast.ClassDef):
            pending.extend(ast.iter_child_nodes(node))


def _locals(function: _Function) -> set[str]:
    """The names `function` binds locally: its parameters and the names it assigns, imports or
    binds in a loop, `with` or `except`, less those it declares `global` or `nonlocal`."""
    arguments = function.args
    bound = {
        a.arg
        for a in [*arguments.posonlyargs, *arguments.args, *arguments.kwonlyargs]
        + [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    }
    declared: set[str] = set()
    for node in _own_nodes(function):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store | ast.Del):
            bound.add(node.id)
        elif isinstance(node, ast.alias):
            bound.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, _Function | ast.ClassDef | ast.ExceptHandler) and node.name:
            bound.add(node.name)
        elif isinstance(node, ast.Global | ast.Nonlocal):
            declared.update(node.names)
    return bound - declared


def _functions(tree: ast.Module) -> Iterator[tuple[str, _Function, frozenset[str]]]:
    """Every function and method, with its qualified name and the local names of the
    functions it is defined in (which hide a module's names from it too)."""

    def walk(
        node: ast.AST, prefix: str, enclosing: frozenset[str]
    ) -> Iterator[tuple[str, _Function, frozenset[str]]]:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, _Function):
                yield f"{prefix}{child.name}", child, enclosing
                yield from walk(child, f"{prefix}{child.name}.", enclosing | _locals(child))
            elif isinstance(child, ast.ClassDef):
                yield from walk(child, f"{prefix}{child.name}.", enclosing)
            else:
                yield from walk(child, prefix, enclosing)

    yield from walk(tree, "", frozenset())


def _mutated(node: ast.AST) -> list[ast.expr]:
    """The expressions `node` changes in place: a subscript's container, an augmented
    assignment's target, the receiver of a mutating method."""
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Delete):
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        found = [t.value for t in targets if isinstance(t, ast.Subscript)]
        if isinstance(node, ast.AugAssign) and not isinstance(node.target, ast.Subscript):
            found.append(node.target)
        return found
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr in MUTATING_METHODS
    ):
        return [node.func.value]
    return []


def _is_cache(decorator: ast.expr) -> bool:
    target = decorator.func if isinstance(decorator, ast.Call) else decorator
    return _last_name(target) in CACHE_DECORATORS


def _container_of(
    expression: ast.expr,
    names: _Names,
    hidden: set[str] | frozenset[str],
    containers: dict[str, dict[str, int]],
) -> tuple[str, str] | None:
    """The package's container `expression` names (module, name), or None."""
    if isinstance(expression, ast.Name):
        if expression.id in hidden:
            return None
        return names.containers.get(expression.id)
    dotted = _dotted(expression)
    if dotted is None or "." not in dotted:
        return None
    head, _, rest = dotted.partition(".")
    if head in hidden or head not in names.modules:
        return None
    module, _, name = f"{names.modules[head]}.{rest}".rpartition(".")
    return (module, name) if name in containers.get(module, {}) else None


def _is_environ(expression: ast.expr, names: _Names, hidden: set[str] | frozenset[str]) -> bool:
    if isinstance(expression, ast.Name):
        return expression.id in names.environ and expression.id not in hidden
    dotted = _dotted(expression)
    if dotted is None:
        return False
    head, _, rest = dotted.partition(".")
    return head not in hidden and names.modules.get(head) == "os" and rest == "environ"


def _writes_environ(node: ast.AST, names: _Names, hidden: set[str] | frozenset[str]) -> bool:
    """Whether `node` changes the process's environment."""
    if isinstance(node, ast.Assign | ast.AnnAssign | ast.AugAssign | ast.Delete):
        targets = node.targets if isinstance(node, ast.Assign | ast.Delete) else [node.target]
        return any(
            isinstance(t, ast.Subscript) and _is_environ(t.value, names, hidden) for t in targets
        )
    if not isinstance(node, ast.Call):
        return False
    function = node.func
    if (
        isinstance(function, ast.Attribute)
        and function.attr in ENVIRON_WRITES
        and _is_environ(function.value, names, hidden)
    ):
        return True
    if isinstance(function, ast.Name):
        return function.id in names.writers and function.id not in hidden
    dotted = _dotted(function)
    if dotted is None:
        return False
    head, _, rest = dotted.partition(".")
    return head not in hidden and names.modules.get(head) == "os" and rest in PROCESS_ENV_WRITES


def state_items(root: Path) -> list[str]:
    """The module-level mutable state of the package under `root` (see the module docstring),
    in reading order."""
    modules = _package_modules(root)
    containers = {module.name: _containers(module.tree) for module in modules}
    by_name = {module.name: module for module in modules}
    known = set(by_name)
    mutated_in: dict[tuple[str, str], set[str]] = {}
    items: list[str] = []
    for module in modules:
        names = _names(module, containers, known)
        for qualname, function, enclosing in _functions(module.tree):
            hidden = enclosing | _locals(function)
            if any(_is_cache(decorator) for decorator in function.decorator_list):
                items.append(f"{module.path}:{function.lineno} {qualname}() cached")
            for node in _own_nodes(function):
                for expression in _mutated(node):
                    found = _container_of(expression, names, hidden, containers)
                    if found is not None:
                        where = (
                            qualname if found[0] == module.name else f"{module.path}::{qualname}"
                        )
                        mutated_in.setdefault(found, set()).add(where)
                if _writes_environ(node, names, hidden):
                    line = getattr(node, "lineno", function.lineno)
                    items.append(f"{module.path}:{line} os.environ written in {qualname}()")
    for (module_name, name), functions in mutated_in.items():
        module = by_name[module_name]
        line = containers[module_name][name]
        items.append(f"{module.path}:{line} {name} (mutated in {', '.join(sorted(functions))})")
    return sorted(items, key=_place)


def _place(item: str) -> tuple[str, int]:
    """The file and line an item `path:line ...` names, to list items in reading order."""
    path, line = item.split(" ", 1)[0].rsplit(":", 1)
    return path, int(line)
