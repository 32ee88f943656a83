"""Shared fixtures: a fresh ``$NOISYCAL_HOME`` per test, and quiet Dagster logs."""

import logging

import pytest

from noisycal_platform.paths import HomeLayout


@pytest.fixture(autouse=True)
def _quiet_dagster():
    logging.getLogger("dagster").setLevel(logging.WARNING)


@pytest.fixture(autouse=True)
def _no_inbox_settle_time(monkeypatch):
    # tests drop complete files and tick at once; the settle-time tests set their own value
    monkeypatch.setenv("NOISYCAL_INBOX_SETTLE_SECONDS", "0")


@pytest.fixture
def layout(tmp_path) -> HomeLayout:
    return HomeLayout.at(tmp_path / "home").ensure()
