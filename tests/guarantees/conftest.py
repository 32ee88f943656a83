"""The guarantee tier (issue 23 item 3): every test here carries the ``guarantee`` mark and runs in the default
suite (``make test``)."""

import pytest


def pytest_collection_modifyitems(items):
    for item in items:
        if "tests/guarantees/" in item.nodeid.replace("\\", "/"):
            item.add_marker(pytest.mark.guarantee)
