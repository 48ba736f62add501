"""The daemon's import layers (server/DESIGN.md, "Layers"): no module imports a layer
above its own, and no two modules import each other, directly or round a loop.

Every import counts: at module level, inside functions, under `if TYPE_CHECKING:`.
`check_layers` takes a package root and a layer table, so another package (the
SDK) can be held to a table of its own the same way.
"""

from __future__ import annotations

import ast
import dataclasses
import pathlib
import textwrap

import pytest

pytestmark = pytest.mark.timeout(60)

SERVER_ROOT = pathlib.Path(__file__).resolve().parents[2] / "server" / "corrald"


@dataclasses.dataclass(frozen=True)
class Layer:
    name: str
    # Modules by name within the package: "board" is corrald/board.py, "store" is the
    # package corrald/store with every module in it, "__init__" is corrald/__init__.py.
    modules: tuple[str, ...]
    # Layers below this one that its modules may import (and their own layer).
    may_import: tuple[str, ...] = ()


# The one copy of server/DESIGN.md's table, lowest layer first.
SERVER_LAYERS = (
    Layer("foundation", ("__init__", "errors", "config", "clock", "failpoints", "model", "statedir")),
    Layer("rules", ("validate",), ("foundation",)),
    Layer("store", ("store",), ("foundation", "rules")),
    Layer("overload", ("overload",), ("foundation",)),
    Layer("engine", ("writer", "readers", "stream", "delivery"), ("foundation", "rules", "store", "overload")),
    Layer("board", ("board", "wake"), ("foundation", "rules", "store", "engine")),
    Layer("service", ("service",), ("foundation", "rules", "overload", "engine", "board")),
    Layer("daemon", ("daemon", "listen", "reaper", "metrics", "cli", "__main__"),
          ("foundation", "overload", "board", "service")),
)


# ---------------------------------------------------------------- the checker


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


# ---------------------------------------------------------------- the daemon


def test_the_daemon_keeps_to_its_layers():
    assert check_layers(SERVER_ROOT, SERVER_LAYERS) == []


def test_the_daemon_takes_only_the_wire_types_from_the_sdk_package():
    """`corrald` may import `corral.v1` and nothing else from `corral` (house style)."""
    strays = []
    for name, path in module_names(SERVER_ROOT).items():
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ImportFrom) and not node.level:
                imported = [node.module or ""]
            elif isinstance(node, ast.Import):
                imported = [alias.name for alias in node.names]
            else:
                continue
            strays += [f"{name}: {m}" for m in imported if m.split(".")[0] == "corral" and
                       not (m == "corral.v1" or m.startswith("corral.v1."))]
    assert strays == []


def test_the_design_page_shows_the_same_table():
    design = (SERVER_ROOT.parents[1] / "server" / "DESIGN.md").read_text()
    for layer in SERVER_LAYERS:
        row = f"| {layer.name} | {', '.join(f'`{m}`' for m in layer.modules)} | {', '.join(layer.may_import) or '—'} |"
        assert row in design, row


# ---------------------------------------------------------------- the checker can fail


def make_package(tmp_path: pathlib.Path, files: dict[str, str]) -> pathlib.Path:
    root = tmp_path / "pkg"
    for relative, source in {"__init__.py": "", **files}.items():
        path = root / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(source))
    return root


TWO_LAYERS = (Layer("low", ("__init__", "base", "sub")), Layer("high", ("top",), ("low",)))


def test_an_import_inside_a_function_that_points_up_is_found(tmp_path):
    root = make_package(tmp_path, {
        "base.py": """
            def late():
                from .top import thing
                return thing
        """,
        "top.py": "from . import base\nthing = base\n",
    })
    assert check_layers(root, TWO_LAYERS) == ["base (low) imports top (high)", "import cycle: base <-> top"]


def test_an_upward_import_under_type_checking_in_a_subpackage_is_found(tmp_path):
    root = make_package(tmp_path, {
        "sub/__init__.py": "",
        "sub/leaf.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from ..top import Thing
        """,
        "top.py": "class Thing: ...\n",
    })
    assert check_layers(root, TWO_LAYERS) == ["sub.leaf (low) imports top (high)"]


def test_a_cycle_within_a_layer_is_found(tmp_path):
    root = make_package(tmp_path, {
        "base.py": "import pkg.sub.leaf\n",
        "sub/__init__.py": "",
        "sub/leaf.py": "def f():\n    from pkg import base\n",
    })
    assert check_layers(root, TWO_LAYERS) == ["import cycle: base <-> sub.leaf"]


def test_a_module_in_no_layer_and_a_table_that_points_up_are_found(tmp_path):
    root = make_package(tmp_path, {"base.py": "", "stray.py": "from .base import *\n"})
    upside_down = (Layer("low", ("__init__", "base"), ("high",)), Layer("high", ("top",)))
    assert check_layers(root, upside_down) == [
        "layer 'low' may import 'high', which is not a layer below it", "stray is in no layer"]


def test_imports_from_outside_the_package_and_of_the_package_itself_are_ignored(tmp_path):
    root = make_package(tmp_path, {"base.py": "import os\nimport pkg\nfrom collections import deque\n"})
    assert check_layers(root, TWO_LAYERS) == []
