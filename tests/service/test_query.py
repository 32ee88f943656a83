"""The read-only warehouse snapshot and ``noisycal query``: readers of the snapshot never block a writer."""

import csv
import io
import os
import subprocess
import sys
from pathlib import Path

import duckdb
import polars as pl

from orchestration import cli
from resources.snapshot import query, refresh_snapshot, snapshot_path

REPO = Path(__file__).resolve().parents[2]
WRITER = (
    "import sys, duckdb\n"
    "con = duckdb.connect(sys.argv[1])\n"
    "con.execute('insert into raw.t values (3)')\n"
    "con.close()\n"
    "print('WROTE', flush=True)\n"
)


def _warehouse(layout, values):
    with duckdb.connect(str(layout.warehouse)) as con:
        con.execute("create schema if not exists raw")
        con.execute(
            "create or replace table raw.t as select * from (values " + ", ".join(f"({v})" for v in values) + ") v(x)"
        )


def test_a_reader_of_the_snapshot_never_blocks_a_write_and_sees_the_refresh(layout):
    assert refresh_snapshot(layout.home) is None  # no warehouse yet
    _warehouse(layout, [1, 2])
    path = refresh_snapshot(layout.home)
    assert path == snapshot_path(layout.home) and oct(path.stat().st_mode & 0o777) == "0o640"
    notebook = duckdb.connect(str(path), read_only=True)  # a notebook keeps the snapshot open
    try:
        writer = subprocess.run(
            [sys.executable, "-c", WRITER, str(layout.warehouse)],
            capture_output=True,
            text=True,
            timeout=120,
            env=dict(os.environ, PYTHONPATH=str(REPO)),
        )
        assert writer.stdout.strip() == "WROTE", writer.stderr  # the warehouse was free for the writer
        refresh_snapshot(layout.home)  # replaced under the open reader: it keeps its consistent old copy
        assert notebook.execute("select sum(x) from raw.t").fetchone()[0] == 3
    finally:
        notebook.close()
    assert query(layout.home, "select sum(x) as s from raw.t")["s"].to_list() == [6]
    assert not list(path.parent.glob(".*.tmp*"))


def test_noisycal_query_prints_rows_and_reports_bad_sql(layout, capsys):
    _warehouse(layout, [1, 2])
    refresh_snapshot(layout.home)
    assert cli.main(["--home", str(layout.home), "query", "select x from raw.t order by x", "--csv"]) == 0
    out = capsys.readouterr()
    assert pl.read_csv(out.out.encode())["x"].to_list() == [1, 2]
    assert cli.main(["--home", str(layout.home), "query", "select nope from raw.t"]) == 2
    assert "nope" in capsys.readouterr().err


def test_noisycal_query_csv_is_spreadsheet_safe_and_parquet_exact(layout, capsys, tmp_path):
    values = ["=cmd|' /C calc'!A0", "-1.5", "@SUM(1)", "+1.png", "-x", "\ttab", "\rcr", "plain"]
    with duckdb.connect(str(layout.warehouse)) as con:
        con.execute("create schema if not exists raw")
        con.execute('create table raw.h (n integer, "=label" varchar, score double)')
        con.executemany("insert into raw.h values (?, ?, ?)", [(k, v, -1.5 * k) for k, v in enumerate(values)])
    refresh_snapshot(layout.home)
    exact = tmp_path / "exact.parquet"
    sql = "select * from raw.h order by n"
    assert cli.main(["--home", str(layout.home), "query", sql, "--csv", "--parquet", str(exact)]) == 0
    rows = list(csv.reader(io.StringIO(capsys.readouterr().out, newline="")))
    assert rows[0] == ["n", "'=label", "score"]  # a hostile column name too
    # by hand (OWASP): one leading quote where a spreadsheet would run the cell; numbers left alone
    assert [r[1] for r in rows[1:]] == [
        "'=cmd|' /C calc'!A0", "-1.5", "'@SUM(1)", "'+1.png", "'-x", "'\ttab", "'\rcr", "plain"
    ]
    assert [float(r[2]) for r in rows[1:]] == [-1.5 * k for k in range(len(values))] and rows[2][2] == "-1.5"
    back = pl.read_parquet(exact)  # for programs: the exact values
    assert back.columns == ["n", "=label", "score"] and back["=label"].to_list() == values
    assert back["score"].to_list() == [-1.5 * k for k in range(len(values))]
    under_a_file = str(exact / "x.parquet")
    assert cli.main(["--home", str(layout.home), "query", sql, "--parquet", under_a_file]) == 2
    assert "cannot write" in capsys.readouterr().err
