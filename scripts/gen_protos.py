"""Regenerate the committed corral.v1 stubs from proto/.

Run with the pinned grpcio-tools (see pyproject.toml). With --check, the
stubs are generated into a temporary directory and compared with the committed
ones; a difference exits non-zero, so stale stubs never reach main.
"""

from __future__ import annotations

import argparse
import filecmp
import pathlib
import sys
import tempfile

import grpc_tools
from grpc_tools import protoc

ROOT = pathlib.Path(__file__).resolve().parent.parent
PROTO_ROOT = ROOT / "proto"
OUT_ROOT = ROOT / "client"
PROTO_FILES = ["corral/v1/corral.proto"]
GENERATED = ["corral_pb2.py", "corral_pb2.pyi", "corral_pb2_grpc.py"]


def generate(out_root: pathlib.Path) -> None:
    well_known = pathlib.Path(grpc_tools.__file__).parent / "_proto"
    (out_root / "corral" / "v1").mkdir(parents=True, exist_ok=True)
    args = [
        "grpc_tools.protoc",
        f"-I{PROTO_ROOT}",
        f"-I{well_known}",
        f"--python_out={out_root}",
        f"--pyi_out={out_root}",
        f"--grpc_python_out={out_root}",
        *PROTO_FILES,
    ]
    if protoc.main(args) != 0:
        raise SystemExit("protoc failed")


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--check", action="store_true", help="fail if committed stubs are stale")
    options = parser.parse_args()
    if not options.check:
        generate(OUT_ROOT)
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        generate(pathlib.Path(tmp))
        stale = [
            name
            for name in GENERATED
            if not filecmp.cmp(
                pathlib.Path(tmp) / "corral" / "v1" / name,
                OUT_ROOT / "corral" / "v1" / name,
                shallow=False,
            )
        ]
    if stale:
        print(f"generated stubs are stale: {', '.join(stale)}; run scripts/gen_protos.py", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
