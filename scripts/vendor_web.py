"""Fetch the web board's two vendored scripts from the npm registry, or check them.

The board draws its graph with cytoscape and lays it out with cytoscape-dagre
(dagre bundled), both MIT. This script downloads the pinned versions' tarballs
from registry.npmjs.org, checks each against the registry's sha512 integrity,
writes the minified UMD file and the package's license beside it under
server/corrald/web/static/vendor/, and records every file's sha256 in
SHA256SUMS there. With --check (run by `make test`) it only compares the
committed files with SHA256SUMS, offline, and exits non-zero on any difference.
"""

from __future__ import annotations

import argparse
import base64
import hashlib
import io
import json
import pathlib
import sys
import tarfile
import urllib.request

ROOT = pathlib.Path(__file__).resolve().parent.parent
VENDOR = ROOT / "server" / "corrald" / "web" / "static" / "vendor"
SUMS = VENDOR / "SHA256SUMS"
REGISTRY = "https://registry.npmjs.org"
# package, version, file in its tarball, name written here
PINNED = (
    ("cytoscape", "3.35.0", "package/dist/cytoscape.min.js", "cytoscape.min.js"),
    ("cytoscape-dagre", "4.0.1", "package/dist/cytoscape-dagre.min.js", "cytoscape-dagre.min.js"),
)


def _get(url: str) -> bytes:
    with urllib.request.urlopen(url, timeout=60) as response:  # noqa: S310 (a fixed https registry)
        return response.read()


def fetch() -> None:
    VENDOR.mkdir(parents=True, exist_ok=True)
    for package, version, member, name in PINNED:
        meta = json.loads(_get(f"{REGISTRY}/{package}/{version}"))
        tarball = _get(meta["dist"]["tarball"])
        algorithm, _, expected = meta["dist"]["integrity"].partition("-")
        if algorithm != "sha512" or base64.b64encode(hashlib.sha512(tarball).digest()).decode() != expected:
            raise SystemExit(f"{package}@{version}: the tarball does not match the registry's integrity")
        with tarfile.open(fileobj=io.BytesIO(tarball)) as archive:
            script = archive.extractfile(member)
            license_file = archive.extractfile("package/LICENSE")
            if script is None or license_file is None:
                raise SystemExit(f"{package}@{version}: {member} or package/LICENSE missing")
            (VENDOR / name).write_bytes(script.read())
            (VENDOR / f"{package}.LICENSE").write_bytes(license_file.read())
        print(f"vendored {package}@{version} -> {name}")
    lines = [f"{_sha256(path)}  {path.name}" for path in sorted(VENDOR.iterdir()) if path.name != SUMS.name]
    versions = [f"# {package}@{version}" for package, version, _, _ in PINNED]
    SUMS.write_text("\n".join(versions + lines) + "\n")


def _sha256(path: pathlib.Path) -> str:
    return hashlib.sha256(path.read_bytes()).hexdigest()


def check() -> int:
    if not SUMS.exists():
        print(f"{SUMS} is missing: run scripts/vendor_web.py", file=sys.stderr)
        return 1
    wrong = []
    listed = set()
    for line in SUMS.read_text().splitlines():
        if not line or line.startswith("#"):
            continue
        digest, _, name = line.partition("  ")
        listed.add(name)
        path = VENDOR / name
        if not path.exists() or _sha256(path) != digest:
            wrong.append(name)
    unlisted = [p.name for p in VENDOR.iterdir() if p.name not in listed and p.name != SUMS.name]
    for name in wrong:
        print(f"vendored file {name} does not match SHA256SUMS", file=sys.stderr)
    for name in unlisted:
        print(f"vendored file {name} is not in SHA256SUMS", file=sys.stderr)
    return 1 if wrong or unlisted else 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="only compare the committed files with SHA256SUMS")
    if parser.parse_args().check:
        return check()
    fetch()
    return check()


if __name__ == "__main__":
    sys.exit(main())
