"""Import layers: which module of a package may import which, and no cycles.

A package is held to a table of layers, lowest first; `check_layers` lists
every module no layer holds, every import that points up the table and every
import cycle. Every import counts: at module level, inside functions, under
`if TYPE_CHECKING:`. `tests/server/test_import_layers.py` holds the daemon to
server/DESIGN.md's table, `tests/client/test_client_layers.py` the SDK to
client/README.md's.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib


@dataclasses.dataclass(frozen=True)
class Layer:
    name: str
    # Modules by name within the package: "board" is corrald/board.py, "store" is the
    # package corrald/store with every module in it, "__init__" is corrald/__init__.py.
    modules: tuple[str, ...]
    # Layers below this one that its modules may import (and their own layer).
    may_import: tuple[str, ...] = ()


def module_names(root: pathlib.Path) -> dict[str, pathlib.Path]:
    """Every module under the package `root`, by dotted name within it ("store.tasks";
    a package's __init__ by the package's name, the root's as "__init__")."""
    found = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root).with_suffix("").parts)
        if parts[-1] == "__init__" and len(parts) > 1:
            parts.pop()
        found[".".join(parts)] = path
    return found


def _package_of(name: str, path: pathlib.Path) -> list[str]:
    """The package a module's relative imports start from, as parts within the root."""
    if name == "__init__":
        return []
    parts = name.split(".")
    return parts if path.name == "__init__.py" else parts[:-1]


def imports_of(name: str, path: pathlib.Path, package: str, modules: dict[str, pathlib.Path]) -> set[str]:
    """The modules of the package that `name` imports anywhere in its source."""
    targets: set[str] = set()

    def resolve(parts: list[str]) -> None:
        dotted = ".".join(parts) if parts else "__init__"
        if dotted in modules:
            targets.add(dotted)

    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                head, *rest = alias.name.split(".")
                if head == package:
                    resolve(rest)
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = _package_of(name, path)
                if node.level > 1:
                    base = base[: len(base) - (node.level - 1)]
                parts = base + (node.module.split(".") if node.module else [])
            elif node.module and node.module.split(".")[0] == package:
                parts = node.module.split(".")[1:]
            else:
                continue
            for alias in node.names:  # `from . import x` may name a module
                candidate = parts + [alias.name]
                if ".".join(candidate) in modules:
                    resolve(candidate)
                else:
                    resolve(parts)
    targets.discard(name)
    return targets


def layer_of(module: str, layers: tuple[Layer, ...]) -> Layer | None:
    for layer in layers:
        for entry in layer.modules:
            if module == entry or module.startswith(entry + "."):
                return layer
    return None


def _cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """Strongly connected components with more than one module (Tarjan)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for target in sorted(graph.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                found.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def check_layers(root: pathlib.Path, layers: tuple[Layer, ...]) -> list[str]:
    """Everything wrong with the package at `root` against `layers`: modules no layer
    holds, tables that let a layer import one above it, upward imports, cycles."""
    problems = []
    names = [layer.name for layer in layers]
    for position, layer in enumerate(layers):
        for allowed in layer.may_import:
            if allowed not in names[:position]:
                problems.append(f"layer {layer.name!r} may import {allowed!r}, which is not a layer below it")
    modules = module_names(root)
    graph = {name: imports_of(name, path, root.name, modules) for name, path in modules.items()}
    for name in sorted(graph):
        layer = layer_of(name, layers)
        if layer is None:
            problems.append(f"{name} is in no layer")
            continue
        for target in sorted(graph[name]):
            target_layer = layer_of(target, layers)
            if target_layer is None or target_layer is layer:
                continue
            if target_layer.name not in layer.may_import:
                problems.append(f"{name} ({layer.name}) imports {target} ({target_layer.name})")
    problems.extend("import cycle: " + " <-> ".join(cycle) for cycle in _cycles(graph))
    return problems
