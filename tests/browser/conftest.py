"""Real-browser tests: Debian's Chromium (/usr/bin/chromium) driven by the Python ``playwright`` package.

Install once, as root: ``apt-get update && apt-get install -y chromium``. The tests try that command
themselves when the browser is missing and they run as root; they skip (with the reason) only when the
browser cannot be installed. Playwright's own browser download (``playwright install``) is never used.
"""

from __future__ import annotations

import importlib.util
import os
import shutil
import subprocess
import sys
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

CHROMIUM = "/usr/bin/chromium"
INSTALL = "apt-get update && apt-get install -y chromium"
LAUNCH_ARGS = [
    "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run", "--disable-background-networking",
    "--disable-component-update", "--disable-sync", "--disable-dev-shm-usage",
]

if "confirm_fixture" not in sys.modules:
    _spec = importlib.util.spec_from_file_location(
        "confirm_fixture", Path(__file__).parents[1] / "webapp" / "_fixture.py")
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["confirm_fixture"] = _mod
    _spec.loader.exec_module(_mod)


def _chromium_works() -> str | None:
    """None when /usr/bin/chromium runs, else why not."""
    if not Path(CHROMIUM).exists():
        return f"{CHROMIUM} not found"
    try:
        out = subprocess.run([CHROMIUM, "--version"], capture_output=True, text=True, timeout=60)
    except (OSError, subprocess.TimeoutExpired) as err:
        return f"{CHROMIUM} --version failed: {err}"
    return None if out.returncode == 0 and "Chromium" in out.stdout else f"{CHROMIUM} --version: {out.stderr}"


@pytest.fixture(scope="session")
def chromium() -> str:
    """Path of a working Chromium; installs it with apt-get when missing (root only), else skips."""
    why = _chromium_works()
    if why is not None:
        if os.geteuid() != 0 or shutil.which("apt-get") is None:
            pytest.skip(f"{why}; cannot install it here (needs root and apt-get): run `{INSTALL}`")
        res = subprocess.run(["bash", "-c", f"DEBIAN_FRONTEND=noninteractive {INSTALL}"], capture_output=True,
                             text=True, timeout=900)
        why = _chromium_works()
        if why is not None:
            pytest.skip(f"Chromium could not be installed with `{INSTALL}` (exit {res.returncode}): "
                        f"{(res.stderr or res.stdout)[-400:]}")
    if importlib.util.find_spec("playwright") is None:
        pytest.skip("the Python package 'playwright' is missing (pip install -e '.[dev]')")
    return CHROMIUM


@pytest.fixture(scope="session")
def artifacts_dir() -> Path:
    d = Path(os.environ.get("NOISYCAL_TEST_ARTIFACTS") or Path(__file__).with_name("artifacts"))
    d.mkdir(parents=True, exist_ok=True)
    return d


@contextmanager
def serving(home: Path) -> Iterator[str]:
    """The confirmation tool served from ``home`` on a free local port; yields its base URL."""
    from confirm_fixture import free_port, start_server, stop_server

    port = free_port()
    proc = start_server(home, port)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        stop_server(proc)


@pytest.fixture(scope="module")
def browser(chromium: str):
    """One headless Chromium per test module."""
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        b = p.chromium.launch(executable_path=chromium, headless=True, args=LAUNCH_ARGS)
        try:
            yield b
        finally:
            b.close()


def navigate_by(page, action: Callable[[], None]) -> None:
    """Run ``action`` (a key press, a click) and wait until the page it submits to has loaded."""
    with page.expect_navigation():
        action()
    page.wait_for_load_state("load")
