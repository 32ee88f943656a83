"""A reader holding the warehouse (a notebook's read-only DuckDB connection in another process) delays an
ingestion instead of failing it: the write retries with backoff until the reader lets go."""

import os
import subprocess
import sys
from pathlib import Path

import dagster as dg
import duckdb

from definitions import build_definitions
from orchestration.runner import instance_for, tick

HEADER = "item_id,annotator_id,label\n"
READER = (
    "import sys, time, duckdb\n"
    "con = duckdb.connect(sys.argv[1], read_only=True)\n"
    "print('HOLDING', flush=True)\n"
    "time.sleep(float(sys.argv[2]))\n"
    "con.close()\n"
    "print('RELEASED', time.time(), flush=True)\n"
)


def test_ingestion_waits_for_a_read_only_reader_and_succeeds(layout):
    defs = build_definitions(layout.home)
    (layout.annotation_inbox / "b1.csv").write_text(HEADER + "a,r1,1\n")
    assert all(r["success"] for r in tick(layout.home, defs=defs, automation=False).runs)

    hold = 4.0
    reader = subprocess.Popen(
        [sys.executable, "-c", READER, str(layout.warehouse), str(hold)],
        stdout=subprocess.PIPE,
        text=True,
        env=dict(os.environ, PYTHONPATH=str(Path(__file__).resolve().parents[2])),
    )
    assert reader.stdout.readline().strip() == "HOLDING"
    (layout.annotation_inbox / "b2.csv").write_text(HEADER + "b,r1,0\n")
    report = tick(layout.home, defs=defs, automation=False)
    released = float(reader.stdout.readline().split()[1])
    assert reader.wait(timeout=30) == 0
    assert [r["success"] for r in report.runs] == [True], report.runs
    # the write landed only after the reader let go: it waited and retried instead of failing
    (run,) = report.runs
    event = instance_for(layout.home).get_latest_materialization_event(dg.AssetKey(["raw", "annotations"]))
    assert event.run_id == run["run_id"] and event.timestamp >= released
    with duckdb.connect(str(layout.warehouse), read_only=True) as con:
        assert con.execute("select item_id from raw.annotations order by 1").fetchall() == [("a",), ("b",)]
