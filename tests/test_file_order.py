"""The suite's file order for pytest-xdist (tests/_file_order.py): longest files first, each file's tests kept
together and in their own order; costs read from a JUnit XML report."""

from __future__ import annotations

import json

from tests import _file_order


def test_files_by_decreasing_cost_tests_in_their_own_order():
    nodeids = [
        "tests/a/test_x.py::t1",
        "tests/a/test_x.py::t2",
        "tests/test_y.py::t1",
        "tests/b/test_z.py::C::t1[p0]",
        "tests/b/test_z.py::C::t1[p1]",
        "tests/test_new.py::t1",
        "tests/a/test_x.py::t3",
    ]
    costs = {"tests/a/test_x.py": 5.0, "tests/test_y.py": 90.0, "tests/b/test_z.py": 30.0}
    items = list(range(len(nodeids)))  # stand-ins for pytest items
    got = _file_order.longest_files_first(items, nodeids, costs)
    assert [nodeids[i] for i in got] == [
        "tests/test_y.py::t1",
        "tests/b/test_z.py::C::t1[p0]",
        "tests/b/test_z.py::C::t1[p1]",
        "tests/a/test_x.py::t1",
        "tests/a/test_x.py::t2",
        "tests/a/test_x.py::t3",
        "tests/test_new.py::t1",  # unknown cost: last
    ]


def test_without_costs_the_collection_order_is_kept():
    nodeids = ["tests/test_b.py::t", "tests/test_a.py::t", "tests/test_b.py::u"]
    assert _file_order.longest_files_first(nodeids, nodeids, {}) == [
        "tests/test_b.py::t",
        "tests/test_b.py::u",
        "tests/test_a.py::t",
    ]


def test_costs_summed_by_file_from_a_junit_report(tmp_path):
    report = tmp_path / "junit.xml"
    report.write_text(
        '<?xml version="1.0" encoding="utf-8"?><testsuites><testsuite name="pytest">'
        '<testcase classname="tests.unit.test_a" name="t1" time="1.25"/>'
        '<testcase classname="tests.unit.test_a" name="t2" time="2.5"/>'
        '<testcase classname="tests.unit.test_a.TestGroup" name="t3" time="0.25"/>'
        '<testcase classname="tests.test_b" name="t1" time="7"><skipped message="x"/></testcase>'
        "</testsuite></testsuites>"
    )
    assert _file_order.costs_from_junit(report) == {"tests/unit/test_a.py": 4.0, "tests/test_b.py": 7.0}


def test_the_committed_costs_name_existing_test_files():
    costs = _file_order.load_costs()
    root = _file_order.COSTS_PATH.parents[1]
    assert costs, "tests/file_costs.json is missing or empty"
    missing = [f for f in costs if not (root / f).is_file()]
    assert not missing, f"tests/file_costs.json names files that do not exist (refresh it): {missing}"
    assert json.loads(_file_order.COSTS_PATH.read_text())["about"]
