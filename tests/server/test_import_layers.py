"""The daemon's import layers (server/DESIGN.md, "Layers"): no module imports a layer
above its own, and no two modules import each other, directly or round a loop.
The checker itself (tests/support/layers.py) is proven here to find each kind of fault.
"""

from __future__ import annotations

import ast
import pathlib
import textwrap

import pytest

from tests.support.layers import Layer, check_layers, module_names

pytestmark = pytest.mark.timeout(60)

SERVER_ROOT = pathlib.Path(__file__).resolve().parents[2] / "server" / "corrald"


# The one copy of server/DESIGN.md's table, lowest layer first.
SERVER_LAYERS = (
    Layer(
        "foundation",
        ("__init__", "errors", "config", "clock", "cpu", "failpoints", "looplag", "model", "statedir", "txn"),
    ),
    Layer("rules", ("validate", "leasepaths"), ("foundation",)),
    Layer("store", ("store",), ("foundation", "rules")),
    Layer("overload", ("overload",), ("foundation",)),
    Layer("engine", ("writer", "readers", "stream", "delivery"), ("foundation", "rules", "store", "overload")),
    Layer(
        "board",
        (
            "board",
            "board_reads",
            "board_artifacts",
            "answers",
            "credentials",
            "stats",
            "wake",
            "requestids",
            "reconcile",
        ),
        ("foundation", "rules", "store", "engine"),
    ),
    Layer("service", ("service",), ("foundation", "rules", "overload", "engine", "board")),
    Layer("web", ("web",), ("foundation", "board", "service")),
    Layer(
        "daemon",
        ("daemon", "connections", "listen", "reaper", "metrics", "activity", "cli", "__main__"),
        ("foundation", "store", "overload", "board", "service", "web"),
    ),
)


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
            strays += [
                f"{name}: {m}"
                for m in imported
                if m.split(".")[0] == "corral" and not (m == "corral.v1" or m.startswith("corral.v1."))
            ]
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
    root = make_package(
        tmp_path,
        {
            "base.py": """
            def late():
                from .top import thing
                return thing
        """,
            "top.py": "from . import base\nthing = base\n",
        },
    )
    assert check_layers(root, TWO_LAYERS) == ["base (low) imports top (high)", "import cycle: base <-> top"]


def test_an_upward_import_under_type_checking_in_a_subpackage_is_found(tmp_path):
    root = make_package(
        tmp_path,
        {
            "sub/__init__.py": "",
            "sub/leaf.py": """
            from typing import TYPE_CHECKING
            if TYPE_CHECKING:
                from ..top import Thing
        """,
            "top.py": "class Thing: ...\n",
        },
    )
    assert check_layers(root, TWO_LAYERS) == ["sub.leaf (low) imports top (high)"]


def test_a_cycle_within_a_layer_is_found(tmp_path):
    root = make_package(
        tmp_path,
        {
            "base.py": "import pkg.sub.leaf\n",
            "sub/__init__.py": "",
            "sub/leaf.py": "def f():\n    from pkg import base\n",
        },
    )
    assert check_layers(root, TWO_LAYERS) == ["import cycle: base <-> sub.leaf"]


def test_a_module_in_no_layer_and_a_table_that_points_up_are_found(tmp_path):
    root = make_package(tmp_path, {"base.py": "", "stray.py": "from .base import *\n"})
    upside_down = (Layer("low", ("__init__", "base"), ("high",)), Layer("high", ("top",)))
    assert check_layers(root, upside_down) == [
        "layer 'low' may import 'high', which is not a layer below it",
        "stray is in no layer",
    ]


def test_imports_from_outside_the_package_and_of_the_package_itself_are_ignored(tmp_path):
    root = make_package(tmp_path, {"base.py": "import os\nimport pkg\nfrom collections import deque\n"})
    assert check_layers(root, TWO_LAYERS) == []


def test_a_daemon_without_the_web_board_imports_neither_aiohttp_nor_the_sdk() -> None:
    """Both cost every daemon start (aiohttp about 150 ms, the SDK about 85), and a daemon
    started without --web needs neither: the generated corral.v1 is all it takes of corral."""
    import subprocess
    import sys

    probe = (
        "import sys, corrald.cli, corrald.daemon; "
        "print(sorted({m.split('.')[0] for m in sys.modules if m.startswith('aiohttp')} "
        "| {m for m in sys.modules if m.startswith('corral.') and not m.startswith('corral.v1')}))"
    )
    loaded = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=True, timeout=60)
    assert loaded.stdout.strip() == "[]", loaded.stdout
