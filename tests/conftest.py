"""Shared fixtures: a fresh ``$NOISYCAL_HOME`` per test, and quiet Dagster logs; with ``CI=true`` a test whose
shared data set is missing fails (``tests/shared_data.py``)."""

import logging

import pytest

from noisycal_platform.paths import HomeLayout
from orchestration.signals import heed_interrupts
from tests._file_order import load_costs, longest_files_first
from tests.shared_data import missing_shared_message

# a suite started in the background (CI runners, `make test &`) would otherwise pass ignored SIGINT/SIGTERM on
# to the Dask workers and Dagster's log followers of the executor tests (orchestration.signals)
heed_interrupts()


@pytest.fixture(autouse=True)
def _quiet_dagster():
    logging.getLogger("dagster").setLevel(logging.WARNING)


@pytest.fixture(autouse=True, scope="session")
def _no_inbox_settle_time():
    # tests drop complete files and tick at once (module-scoped fixtures too: hence session scope); the
    # settle-time tests pass their own value
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("NOISYCAL_INBOX_SETTLE_SECONDS", "0")
        yield


@pytest.fixture
def layout(tmp_path) -> HomeLayout:
    return HomeLayout.at(tmp_path / "home").ensure()


def pytest_runtest_setup(item: pytest.Item) -> None:
    message = missing_shared_message(item.iter_markers("shared_data"))
    if message is not None:
        pytest.fail(message, pytrace=False)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # longest files first (tests/_file_order.py): `make test` hands whole files to the xdist workers in this order
    items[:] = longest_files_first(items, [item.nodeid for item in items], load_costs())
