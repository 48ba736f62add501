"""The vendored scripts are the ones scripts/vendor_web.py fetched: their sha256 sums match
SHA256SUMS, and a changed byte is caught."""

from __future__ import annotations

import importlib.util
import pathlib
import shutil

import pytest

pytestmark = pytest.mark.timeout(30)

SCRIPT = pathlib.Path(__file__).resolve().parents[2] / "scripts" / "vendor_web.py"


def _vendoring(vendor: pathlib.Path | None = None):
    spec = importlib.util.spec_from_file_location("vendor_web", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    if vendor is not None:
        module.VENDOR, module.SUMS = vendor, vendor / "SHA256SUMS"
    return module


def test_the_vendored_files_match_their_recorded_sums():
    vendoring = _vendoring()
    assert vendoring.check() == 0
    names = {line.split("  ")[1] for line in vendoring.SUMS.read_text().splitlines() if not line.startswith("#")}
    assert names == {"cytoscape.min.js", "cytoscape.LICENSE", "cytoscape-dagre.min.js", "cytoscape-dagre.LICENSE"}
    assert (
        "MIT" in (vendoring.VENDOR / "cytoscape.LICENSE").read_text().upper()
        or "PERMISSION" in (vendoring.VENDOR / "cytoscape.LICENSE").read_text().upper()
    )


def test_a_changed_or_unlisted_file_fails_the_check(tmp_path, capsys):
    copy = tmp_path / "vendor"
    shutil.copytree(_vendoring().VENDOR, copy)
    with (copy / "cytoscape.min.js").open("ab") as script:
        script.write(b"/* changed */")
    (copy / "extra.js").write_text("")
    assert _vendoring(copy).check() == 1
    errors = capsys.readouterr().err
    assert "cytoscape.min.js does not match" in errors and "extra.js is not in SHA256SUMS" in errors
