"""Debian's ``/usr/bin/chromium`` driven by playwright (never ``playwright install``: it downloads a browser).

Shared by the tests that need a real browser (the audio readers, the playground) and by
``benchmarks/playground_ttfa.py``. Missing Chromium or playwright skips a test on a laptop and
fails it in CI (``CI`` or ``TURBOTTS_REQUIRE_CHROMIUM=1``, which ``.ci/run`` sets).
"""

from __future__ import annotations

import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, NoReturn

import pytest

from tests.required_tools import is_required

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--autoplay-policy=no-user-gesture-required",
    "--host-resolver-rules=MAP * ~NOTFOUND , EXCLUDE 127.0.0.1",  # nothing but loopback
]


@contextmanager
def chromium_browser() -> Iterator[Any]:
    """A headless Chromium (playwright ``Browser``), closed on exit; skips or fails when it is missing."""
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        missing_browser("playwright is not installed (pip install -e '.[dev]')")
    if not CHROMIUM.exists() and shutil.which("chromium") is None:
        missing_browser("Debian's chromium is not installed (apt-get install -y chromium)")
    executable = str(CHROMIUM) if CHROMIUM.exists() else str(shutil.which("chromium"))
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=CHROMIUM_ARGS)
        try:
            yield browser
        finally:
            browser.close()


def missing_browser(reason: str) -> NoReturn:
    if is_required("CHROMIUM"):
        pytest.fail(f"{reason}: CI must run the browser tests (.ci/run installs chromium)")
    pytest.skip(reason)
