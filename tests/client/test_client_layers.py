"""The SDK's import layers (client/README.md, "Layers"): the asyncio sources and their
generated twins sit on the same plumbing, the public surface on them, the views on the
surface, the demo on the views and the CLI on top; nothing points up and nothing loops.
"""

from __future__ import annotations

import pathlib

import pytest

from tests.support.layers import Layer, check_layers

pytestmark = pytest.mark.timeout(60)

CLIENT_ROOT = pathlib.Path(__file__).resolve().parents[2] / "client" / "corral"

# The one copy of client/README.md's table, lowest layer first.
CLIENT_LAYERS = (
    Layer("wire", ("v1",)),
    Layer("values", ("_types", "_errors"), ("wire",)),
    Layer(
        "plumbing",
        (
            "_convert",
            "_channel",
            "_retry",
            "_launch",
            "_claimbook",
            "_claimstate",
            "_handling",
            "_progress",
            "_primitives",
            "_transport",
            "_opbook",
            "_tracing",
            "_batches",
            "_outputbuffer",
            "_output",
            "_git",
            "_artifacts",
        ),
        ("wire", "values"),
    ),
    Layer(
        "clients",
        (
            "aio",
            "_board",
            "_claim",
            "_claimoutput",
            "_session",
            "_teammate",
            "_lead",
            "_runner",
            "_worktree",
            "_workspace",
        ),
        ("wire", "values", "plumbing"),
    ),
    Layer("surface", ("__init__",), ("values", "clients")),
    Layer("views", ("_dagfile", "_dagadd", "_terminal"), ("values", "surface")),
    Layer("demo", ("demo",), ("values", "surface", "views")),
    Layer("mcp", ("mcp_bridge",), ("values", "plumbing", "clients", "surface", "views")),
    Layer("cli", ("cli", "__main__"), ("surface", "views", "demo", "mcp")),
)


def test_the_sdk_keeps_to_its_layers() -> None:
    assert check_layers(CLIENT_ROOT, CLIENT_LAYERS) == []


def test_the_client_readme_shows_the_same_table() -> None:
    readme = (CLIENT_ROOT.parents[1] / "client" / "README.md").read_text()
    for layer in CLIENT_LAYERS:
        row = f"| {layer.name} | {', '.join(f'`{m}`' for m in layer.modules)} | {', '.join(layer.may_import) or '—'} |"
        assert row in readme, row


def test_the_sdk_never_imports_the_daemon() -> None:
    """`corral` finds the `corrald` executable to launch; it never imports it (house style)."""
    offenders = [
        str(path.relative_to(CLIENT_ROOT))
        for path in CLIENT_ROOT.rglob("*.py")
        if "import corrald" in path.read_text() or "from corrald" in path.read_text()
    ]
    assert offenders == []
