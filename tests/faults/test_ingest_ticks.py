"""Two ``noisycal tick`` processes started at once on the same inbox: exactly-once still holds (every batch once
in raw.annotations, ledger == table). Slow: each process loads the Dagster code location (tens of seconds on a
shared 2-core machine). SIGKILL at every ingestion step is tested at library level in test_ingest_crash.py."""

from __future__ import annotations

import os
import subprocess
import sys
from collections import Counter
from pathlib import Path

import duckdb
import pytest

from noisycal_platform.ingest import FAULT_ENV, ledger_entries

ROOT = Path(__file__).resolve().parents[2]
HEADER = "item_id,annotator_id,label\n"
pytestmark = [pytest.mark.slow, pytest.mark.timeout(1200)]


def _tick(home: Path, fault: str | None = None) -> subprocess.Popen:
    env = {**os.environ, "PYTHONPATH": str(ROOT), "NOISYCAL_INBOX_SETTLE_SECONDS": "0", "OMP_NUM_THREADS": "1"}
    env.pop(FAULT_ENV, None)
    if fault:
        env[FAULT_ENV] = fault
    return subprocess.Popen([sys.executable, "-m", "orchestration.cli", "--home", str(home), "tick"], env=env,
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, cwd=ROOT)


def _stored(home: Path) -> list[tuple]:
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        return con.execute("select item_id, annotator_id, label, batch_sha256 from raw.annotations").fetchall()


def _drop(layout, n: int) -> set[tuple]:
    expected = set()
    for k in range(n):
        (layout.annotation_inbox / f"b{k:02d}.csv").write_text(HEADER + f"i{k},r{k % 3},{k % 2}\n")
        expected.add((f"i{k}", f"r{k % 3}", k % 2))
    return expected


def _assert_exactly_once(layout, expected: set[tuple]) -> None:
    rows = _stored(layout.home)
    assert len(rows) == len({r[:3] for r in rows}) and {r[:3] for r in rows} == expected
    ledger = {h: e["rows"] for h, e in ledger_entries(layout).items() if e["status"] == "accepted"}
    assert dict(Counter(r[3] for r in rows)) == ledger
    assert list(layout.annotation_inbox.iterdir()) == []


def test_two_ticks_at_once_are_exactly_once(layout, tmp_path):
    expected = _drop(layout, 8)
    procs = [_tick(layout.home) for _ in range(2)]
    outs = [p.communicate(timeout=900)[0].decode(errors="replace") for p in procs]
    for k, out in enumerate(outs):
        (tmp_path / f"tick{k}.log").write_text(out)
    # ingestion itself is serialised by its lock: at least one tick ingests, and none ingests twice
    assert any(p.returncode == 0 for p in procs), outs[0][-3000:]
    last = _tick(layout.home)  # a later tick settles whatever run the other one skipped
    assert last.wait(timeout=900) == 0
    _assert_exactly_once(layout, expected)
