"""Fixtures for the web board tests: one daemon and one browser per module (see board_support)."""

from __future__ import annotations

import pathlib
from collections.abc import Iterator

import pytest

from tests.support.browser import CHROMIUM_FLAGS, chromium_path
from tests.web.board_support import WebDaemon, start_web_daemon, stop_web_daemon


@pytest.fixture(scope="module")
def web_daemon(tmp_path_factory: pytest.TempPathFactory) -> Iterator[WebDaemon]:
    daemon = start_web_daemon(tmp_path_factory.mktemp("web") / "state")
    try:
        yield daemon
    finally:
        stop_web_daemon(daemon)


@pytest.fixture(scope="module")
def browser():
    from playwright.sync_api import sync_playwright

    with sync_playwright() as playwright:
        executable = chromium_path()
        if executable is None and not pathlib.Path(playwright.chromium.executable_path).exists():
            pytest.fail("no Chromium on PATH nor Playwright's: run `make browser` (or set CORRAL_CHROMIUM)")
        # Playwright gives each launch a fresh user-data directory of its own.
        launched = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_FLAGS, headless=True)
        try:
            yield launched
        finally:
            launched.close()
