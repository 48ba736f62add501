"""The Chromium the web board's tests and bench drive, and how they start it.

The machine's own (`make browser` puts Debian's at /usr/bin/chromium; CORRAL_CHROMIUM
names another), never a downloaded one. None means no such binary: Playwright's
own chromium, on a machine where `playwright install chromium` is how it came.
"""

from __future__ import annotations

import os
import shutil

CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]


def chromium_path() -> str | None:
    for candidate in (os.environ.get("CORRAL_CHROMIUM"), "chromium", "/usr/bin/chromium"):
        if candidate and (found := shutil.which(candidate)):
            return found
    return None
