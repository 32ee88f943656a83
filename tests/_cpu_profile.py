"""Per-test wall and CPU seconds, for finding where ``make test`` waits (a pytest plugin, off by default).

    PYTEST_ADDOPTS="-p tests._cpu_profile" make test        # one JSON line per test in $NOISYCAL_TEST_CPU_OUT

Each line: the node id, its xdist worker, wall seconds of setup + call + teardown, the worker's own CPU seconds
(``RUSAGE_SELF``: its threads included) and those of the child processes it reaped meanwhile (``RUSAGE_CHILDREN``).
Processes reaped by someone else are not counted: the guarantee tier's pool runs on a fork server, so its tests
show wall seconds with almost no CPU, while the pool keeps both cores busy.
"""

from __future__ import annotations

import json
import os
import resource
import time

import pytest

OUT = os.environ.get("NOISYCAL_TEST_CPU_OUT", "/tmp/noisycal-test-cpu.jsonl")


def _cpu() -> tuple[float, float]:
    own = resource.getrusage(resource.RUSAGE_SELF)
    children = resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime, children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item: pytest.Item, nextitem: pytest.Item | None):
    wall0, (own0, children0) = time.perf_counter(), _cpu()
    yield
    own1, children1 = _cpu()
    record = {
        "id": item.nodeid,
        "worker": os.environ.get("PYTEST_XDIST_WORKER", ""),
        "wall": round(time.perf_counter() - wall0, 3),
        "self": round(own1 - own0, 3),
        "children": round(children1 - children0, 3),
    }
    with open(OUT, "a") as f:
        f.write(json.dumps(record) + "\n")
