"""Test files in decreasing order of their measured cost, so that pytest-xdist starts the longest files first.

``make test`` runs ``--dist loadfile --no-loadscope-reorder``: each file goes whole to one worker, in the order
collected. xdist's own order (files with more tests first) put the long files with few tests (the guarantee tier,
the browser and service tests) at the end, where one worker ran them while the other sat idle. Handing out the
longest jobs first is the longest-processing-time rule (Graham 1969, "Bounds on multiprocessing timing
anomalies", SIAM J. Appl. Math. 17(2)): its finish time is at most 4/3 − 1/(3m) of the best possible on m workers.

The costs are seconds per file from a JUnit XML report of a suite run (``tests/file_costs.json``; refresh with
``python -m tests._file_order <report.xml>``). A file missing there (a new one) counts as 0 and runs last; the
order within a file is never changed.
"""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TypeVar

COSTS_PATH = Path(__file__).with_name("file_costs.json")

T = TypeVar("T")


def file_of(nodeid: str) -> str:
    """The test file of a pytest node id (``tests/a/test_b.py::test_c[x]`` → ``tests/a/test_b.py``)."""
    return nodeid.split("::", 1)[0]


def load_costs(path: Path = COSTS_PATH) -> dict[str, float]:
    """``{file: seconds}`` from ``path``; empty when it does not exist."""
    if not path.exists():
        return {}
    return {str(k): float(v) for k, v in json.loads(path.read_text())["seconds"].items()}


def longest_files_first(items: Sequence[T], nodeids: Sequence[str], costs: Mapping[str, float]) -> list[T]:
    """``items`` regrouped by file, the files by decreasing cost (ties and unknown files in their first
    appearance order), each file's items in their original order."""
    first_seen: dict[str, int] = {}
    for nodeid in nodeids:
        first_seen.setdefault(file_of(nodeid), len(first_seen))
    order = sorted(first_seen, key=lambda f: (-costs.get(f, 0.0), first_seen[f]))
    rank = {f: i for i, f in enumerate(order)}
    keyed = sorted(range(len(items)), key=lambda i: (rank[file_of(nodeids[i])], i))
    return [items[i] for i in keyed]


def costs_from_junit(report: Path) -> dict[str, float]:
    """Seconds per test file from a JUnit XML report (each test case's setup + call + teardown time, pytest's
    default ``junit_duration_report = total``), summed by the file its ``classname`` names."""
    totals: dict[str, float] = {}
    for case in ET.parse(report).getroot().iter("testcase"):
        classname = case.get("classname", "")
        parts = classname.split(".")
        # classname is the dotted module path, plus the class for tests in a class: keep the test_* module part
        cut = next((i for i, p in enumerate(parts) if p.startswith("test_")), len(parts) - 1)
        path = "/".join(parts[: cut + 1]) + ".py"
        totals[path] = totals.get(path, 0.0) + float(case.get("time", "0") or 0.0)
    return totals


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: python -m tests._file_order <junit-report.xml>", file=sys.stderr)
        return 2
    seconds = costs_from_junit(Path(argv[0]))
    payload = {
        "about": "seconds per test file in one suite run (JUnit XML, setup + call + teardown); tests/_file_order.py",
        "seconds": {k: round(v, 1) for k, v in sorted(seconds.items(), key=lambda kv: -kv[1])},
    }
    COSTS_PATH.write_text(json.dumps(payload, indent=1) + "\n")
    print(f"{COSTS_PATH}: {len(seconds)} files, {sum(seconds.values()):.0f} s in all")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
