"""Headless Chromium for the browser tests: Debian's `chromium` driven by Playwright, with nothing fetched from outside."""

from __future__ import annotations

import shutil
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass, field
from typing import Iterator
from urllib.parse import urlsplit

import pytest

FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync")
LOOPBACK = {"localhost", "127.0.0.1", "::1", "[::1]"}


def chromium_path() -> str:
    """The system Chromium; without one the test fails with the way to install it (a skip would pass unseen)."""
    found = shutil.which("chromium") or shutil.which("chromium-browser")
    if found is None:
        pytest.fail("Chromium is not installed: `infra/bootstrap.sh test` installs it (Debian: apt-get install chromium).")
    return found


def is_local(url: str) -> bool:
    """A file, data or blob address, or one on the loopback interface."""
    parts = urlsplit(url)
    return parts.scheme in ("file", "data", "blob", "about") or (parts.hostname or "") in LOOPBACK


@dataclass
class Offline:
    """A page that may load local addresses only; every other request is aborted and kept in `blocked`."""

    page: object
    blocked: list[str] = field(default_factory=list)


@contextmanager
def offline_page(width: int = 1400, height: int = 1000) -> Iterator[Offline]:
    """A fresh Chromium (own profile folder) whose page has no network beyond loopback."""
    from playwright.sync_api import sync_playwright

    executable = chromium_path()
    with tempfile.TemporaryDirectory(prefix="chromium-profile-") as profile, sync_playwright() as pw:
        context = pw.chromium.launch_persistent_context(
            profile, executable_path=executable, headless=True, args=list(FLAGS),
            viewport={"width": width, "height": height})
        try:
            page = context.pages[0] if context.pages else context.new_page()
            found = Offline(page)

            def guard(route) -> None:
                if is_local(route.request.url):
                    route.continue_()
                else:
                    found.blocked.append(route.request.url)
                    route.abort("internetdisconnected")

            context.route("**/*", guard)
            yield found
        finally:
            context.close()
