"""Run a command with its stdout copied to a file and its stderr written to one, relaying
stdin and stdout, so a test can search all the bytes a bridge wrote over stdio.

    python -m tests.mcp.stdio_tee OUT ERR -- ARGS...   (ARGS run with this Python)
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading


def main() -> int:
    out_path, err_path, separator, *args = sys.argv[1:]
    assert separator == "--", "usage: stdio_tee OUT ERR -- ARGS..."
    with open(err_path, "ab") as err:
        child = subprocess.Popen([sys.executable, *args], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=err)
    assert child.stdin is not None and child.stdout is not None
    child_in, child_out = child.stdin, child.stdout

    def relay_stdin() -> None:
        while chunk := os.read(0, 65536):
            try:
                child_in.write(chunk)
                child_in.flush()
            except BrokenPipeError:
                return
        child_in.close()

    threading.Thread(target=relay_stdin, daemon=True).start()
    with open(out_path, "ab") as out:
        while chunk := os.read(child_out.fileno(), 65536):
            out.write(chunk)
            out.flush()
            os.write(1, chunk)
    return child.wait()


if __name__ == "__main__":
    sys.exit(main())
