"""Optional wall and CPU seconds of named parts of the cleaning stage, for benchmarks that drive the platform
from outside (``benchmarks/bench_ham10000_platform.py``): when the environment variable ``NOISYCAL_PROFILE``
names a file, each :func:`part` appends one JSON line ``{"part", "wall_s", "cpu_s", "pid", "end"}`` to it
(``cpu_s``: user + system seconds of the whole process over the part, all threads). Unset, it costs nothing.
"""

from __future__ import annotations

import json
import os
import resource
import time
from collections.abc import Iterator
from contextlib import contextmanager

__all__ = ["PROFILE_ENV", "part"]

PROFILE_ENV = "NOISYCAL_PROFILE"


def _cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


@contextmanager
def part(name: str) -> Iterator[None]:
    """Time the block as the part ``name`` when ``NOISYCAL_PROFILE`` is set (a no-op otherwise)."""
    path = os.environ.get(PROFILE_ENV)
    if not path:
        yield
        return
    t, c = time.perf_counter(), _cpu()
    yield
    line = {"part": name, "wall_s": time.perf_counter() - t, "cpu_s": _cpu() - c, "pid": os.getpid(),
            "end": time.time()}
    with open(path, "a", encoding="utf-8") as f:
        f.write(json.dumps(line) + "\n")
