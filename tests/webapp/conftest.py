from __future__ import annotations

import importlib.util
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
from starlette.testclient import TestClient

from noisycal_platform.confirm_app import add_annotator, create_app

# The fixture builder is shared with tests/browser; it is loaded once, by path, as ``confirm_fixture``.
if "confirm_fixture" not in sys.modules:
    _spec = importlib.util.spec_from_file_location("confirm_fixture", Path(__file__).with_name("_fixture.py"))
    _mod = importlib.util.module_from_spec(_spec)
    sys.modules["confirm_fixture"] = _mod
    _spec.loader.exec_module(_mod)
fixture_mod = sys.modules["confirm_fixture"]


@pytest.fixture
def fx(tmp_path: Path):
    return fixture_mod.build(tmp_path, stopping_count=3)


@pytest.fixture
def login(fx) -> Iterator[Callable[..., TestClient]]:
    """login(name, role) -> a TestClient with that annotator's session cookie (one app per call, like a
    fresh server process over the same home)."""
    clients: list[TestClient] = []

    def _login(name: str, role: str = "expert", token: str | None = None) -> TestClient:
        if token is None:
            token, _ = add_annotator(fx.home, name, role)
        c = TestClient(create_app(fx.home))
        clients.append(c)
        r = c.get("/login", params={"token": token})
        assert r.status_code == 200, r.text
        c.token = token  # type: ignore[attr-defined]
        return c

    yield _login
    for c in clients:
        c.close()
