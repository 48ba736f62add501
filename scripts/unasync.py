"""Write the sync SDK modules from their asyncio sources.

The SDK's control flow is written once, in `client/corral/aio/_*.py`; each
sync twin `client/corral/_*.py` is that source with the substitutions below
applied, word by word. Where the two worlds truly differ, the source calls a
primitive of `corral._primitives` whose sync twin has the same name without
its `Async` / `async_` prefix.

    python scripts/unasync.py           # regenerate
    python scripts/unasync.py --check   # exit 1, with a diff, if any is stale
"""

from __future__ import annotations

import argparse
import difflib
import re
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
SOURCE_DIR = ROOT / "client" / "corral" / "aio"
TARGET_DIR = ROOT / "client" / "corral"
MODULES = (
    "_board.py",
    "_claim.py",
    "_claimoutput.py",
    "_lead.py",
    "_runner.py",
    "_session.py",
    "_teammate.py",
    "_workspace.py",
)

# Applied in order to the whole text, docstrings included (so `async with x:`
# in a docstring reads `with x:` in the sync module).
SUBSTITUTIONS: tuple[tuple[str, str], ...] = (
    (r"\basync def\b", "def"),
    (r"\basync with\b", "with"),
    (r"\basync for\b", "for"),
    (r"\bawait ", ""),
    (r"\b__aenter__\b", "__enter__"),
    (r"\b__aexit__\b", "__exit__"),
    (r"\baclosing\b", "closing"),
    (r"\baclose\b", "close"),
    (r"\basynccontextmanager\b", "contextmanager"),
    # Sync generators are spelled with all three parameters.
    (r"\bAsyncGenerator\[([^\[\]]+), None\]", r"Generator[\1, None, None]"),
    # AsyncIterator, AsyncHandler, AsyncLock, ... and async_retrying, ...
    (r"\bAsync([A-Z]\w*)", r"\1"),
    (r"\basync_([a-z]\w*)", r"\1"),
    (r"^import grpc\.aio$", "import grpc"),
    (r"\bgrpc\.aio\.Channel\b", "grpc.Channel"),
    (r"\bopen_aio_channel\b", "open_channel"),
    (r"\bcorral\.aio\._", "corral._"),
    # `async for x in xs: yield x` has no `yield from`; a sync generator does.
    (r"^( *)for (\w+) in (.+):\n +yield \2$", r"\1yield from \3"),
)

HEADER = (
    "# Generated from client/corral/aio/{name} by scripts/unasync.py: do not edit.\n"
    "# Change the asyncio source and run `make unasync`.\n"
)


def unasync(text: str, name: str) -> str:
    """The sync twin of the asyncio module `name` whose source is `text`."""
    for pattern, replacement in SUBSTITUTIONS:
        text = re.sub(pattern, replacement, text, flags=re.MULTILINE)
    return tidy(HEADER.format(name=name) + text, TARGET_DIR / name)


def tidy(text: str, path: Path) -> str:
    """Re-sort imports and re-format with ruff, under the project's settings.

    The renames move imports (`corral.aio._board` becomes `corral._board`) and
    shorten lines (`async def` loses six characters), so the raw output is
    valid but not what `ruff check` and `ruff format --check` expect.
    """
    stdin = ["--stdin-filename", str(path), "-"]
    for command in (["check", "--select", "I", "--fix-only", "--quiet"], ["format", "--quiet"]):
        done = subprocess.run(
            [sys.executable, "-m", "ruff", *command, *stdin],
            input=text,
            capture_output=True,
            text=True,
            cwd=ROOT,
            check=False,
        )
        if done.returncode != 0:
            raise SystemExit(f"ruff {command[0]} failed on {path.name}: {done.stderr.strip()}")
        text = done.stdout
    return text


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--check", action="store_true", help="fail if a sync module is stale")
    args = parser.parse_args(argv)
    stale = []
    for name in MODULES:
        source, target = SOURCE_DIR / name, TARGET_DIR / name
        wanted = unasync(source.read_text(encoding="utf-8"), name)
        current = target.read_text(encoding="utf-8") if target.exists() else ""
        if current == wanted:
            continue
        if args.check:
            stale.append(target)
            rel = target.relative_to(ROOT)
            sys.stdout.writelines(
                difflib.unified_diff(
                    current.splitlines(keepends=True),
                    wanted.splitlines(keepends=True),
                    f"{rel} (committed)",
                    f"{rel} (from {source.relative_to(ROOT)})",
                )
            )
        else:
            target.write_text(wanted, encoding="utf-8")
            print(f"wrote {target.relative_to(ROOT)}")
    if stale:
        print(
            f"{len(stale)} generated module(s) stale: run `make unasync`",
            file=sys.stderr,
        )
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
