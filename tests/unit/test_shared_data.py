"""Real data present or loud (issue 23 item 5): a missing shared data set skips outside CI and fails with CI=true."""

from __future__ import annotations

import pytest

from tests import conftest
from tests.shared_data import in_ci, missing_shared_message, needs_shared


class _Item:
    def __init__(self, mark: pytest.MarkDecorator):
        self._marks = [mark.mark]

    def iter_markers(self, name: str):
        return (m for m in self._marks if m.name == name)


@pytest.mark.parametrize(("value", "expected"), [("true", True), ("TRUE", True), ("1", True), ("", False),
                                                 ("false", False), ("0", False)])
def test_ci_is_read_from_the_environment(value, expected):
    assert in_ci({"CI": value}) is expected
    assert in_ci({}) is False


def test_missing_data_skips_with_the_reason_outside_ci(monkeypatch, tmp_path):
    monkeypatch.delenv("CI", raising=False)
    mark = needs_shared(tmp_path / "absent.csv", "the fixture")
    assert mark.name == "skip"
    assert "the fixture not present at" in mark.kwargs["reason"] and "absent.csv" in mark.kwargs["reason"]
    conftest.pytest_runtest_setup(_Item(mark))  # no shared_data mark: setup does not fail


def test_missing_data_fails_the_test_with_ci_true(monkeypatch, tmp_path):
    monkeypatch.setenv("CI", "true")
    mark = needs_shared(tmp_path / "absent.csv", "the fixture")
    assert mark.name == "shared_data"
    message = missing_shared_message([mark.mark])
    assert message is not None and message.startswith("CI=true: the fixture not present at")
    with pytest.raises(pytest.fail.Exception, match="CI=true: the fixture not present"):
        conftest.pytest_runtest_setup(_Item(mark))


@pytest.mark.parametrize("ci", ["true", ""])
def test_present_data_runs_in_and_outside_ci(monkeypatch, tmp_path, ci):
    monkeypatch.setenv("CI", ci)
    (tmp_path / "there.csv").write_text("x\n")
    mark = needs_shared(tmp_path / "there.csv", "the fixture")
    assert mark.name == "shared_data" and missing_shared_message([mark.mark]) is None
    conftest.pytest_runtest_setup(_Item(mark))
