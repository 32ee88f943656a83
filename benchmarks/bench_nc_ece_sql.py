"""NC-ECE per-bin table at 10,000,000 items × 3 annotators: the SQL mart (dbt_like_sql/marts/nc_ece_by_bin.sql, over
the staged answer patterns, as in the warehouse) against the library (numpy, wide int8 matrix).

Prints wall times (median of --repeat runs) and the ratio SQL / library; checks the two tables agree to 1e-9.
Peer in the same run: DuckDB's plain per-bin query over a *wide* table (the notes' ~0.15 s figure).

    python benchmarks/bench_nc_ece_sql.py [--n 10000000] [--repeat 3] [--quick] [--rows-json F]

``--rows-json`` also writes the rows of ``make bench`` (results_table; no goal: the mart is the warehouse's
path, reported beside the library); ``--quick`` is 1,000,000 items.
"""

import argparse
import statistics
import time
from datetime import UTC, datetime

import duckdb
import numpy as np
import polars as pl
from results_table import add_rows_arg, row, write_rows

from assets.sql_models import SQL_ROOT, parse_sql_model, run_sql_model
from noisycal_platform.calibration import Channel, nc_ece

FPR, FNR, WEIGHTS = np.array([0.10, 0.05, 0.25]), np.array([0.20, 0.10, 0.15]), np.array([0.5, 0.3, 0.2])


def _timed(fn, repeat):
    times, out = [], None
    for _ in range(repeat):
        t = time.perf_counter()
        out = fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times), min(times), out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None, help="items (default 10,000,000; --quick 1,000,000)")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--quick", action="store_true", help="1,000,000 items (a smoke run; rows labelled quick)")
    add_rows_arg(ap)
    args = ap.parse_args()
    if args.n is None:
        args.n = 1_000_000 if args.quick else 10_000_000
    rng = np.random.default_rng(0)
    n = args.n
    s = rng.beta(2, 3, n)
    y = rng.random(n) < np.clip(s**0.8 + 0.03, 0, 1)
    a = np.where(y[:, None], rng.random((n, 3)) >= FNR, rng.random((n, 3)) < FPR).astype(np.int8)
    channels = [Channel(f, b) for f, b in zip(FPR, FNR, strict=True)]

    lib_med, lib_min, res = _timed(lambda: nc_ece(s, a, channels, weights=WEIGHTS, n_bins=15), args.repeat)

    con = duckdb.connect()
    con.execute("SET threads = 2")
    ids = np.arange(n, dtype=np.int64)
    preds = pl.DataFrame({"item_id": ids, "score": s}).with_columns(
        pl.lit("v1").alias("model_version"), pl.lit(datetime(2026, 1, 1, tzinfo=UTC)).alias("registered_at")
    )
    long = pl.DataFrame(
        {
            "item_id": np.repeat(ids, 3),
            "annotator_id": np.tile(np.array(["r0", "r1", "r2"]), n),
            "label": a.reshape(-1),
            "timestamp": None,
            "source_file": "bench",
        }
    )
    ch = pl.DataFrame(
        {
            "model_version": ["v1"] * 3,
            "annotator_id": ["r0", "r1", "r2"],
            "fpr": FPR,
            "gap": 1 - FPR - FNR,
            "weight": WEIGHTS,
        }
    )
    for schema, name, frame in (
        ("raw", "predictions", preds),
        ("raw", "annotations", long),
        ("calibration", "channel_estimates", ch),
    ):
        con.execute(f"create schema if not exists {schema}")
        con.register("f", frame.to_arrow())
        con.execute(f"create table {schema}.{name} as select * from f")
        con.unregister("f")
    staging = [
        parse_sql_model(SQL_ROOT / "staging" / f"{name}.sql")
        for name in ("stg_annotations", "stg_annotator_index", "stg_model_versions", "stg_scored_items")
    ]
    mart = parse_sql_model(SQL_ROOT / "marts" / "nc_ece_by_bin.sql")
    stg_med, _, _ = _timed(lambda: [run_sql_model(con, m) for m in staging], 1)
    sql_med, sql_min, _ = _timed(lambda: run_sql_model(con, mart), args.repeat)
    got = con.execute("select * from calibration.nc_ece_by_bin order by bin").pl()
    err = float(np.max(np.abs(got["residual"].to_numpy() - res.bins["residual"].to_numpy())))

    # peer: the plain per-bin query over a wide table with DOUBLE parameters
    wide = pl.DataFrame({"s": s, "a1": a[:, 0], "a2": a[:, 1], "a3": a[:, 2]})
    con.register("w", wide.to_arrow())
    con.execute("create table wide as select * from w")
    w = WEIGHTS / WEIGHTS.sum()
    q = (
        "select least(floor(s * 15.0), 14)::bigint as b, count(*) n, "
        "sum(? * (a1 - ?) / ? + ? * (a2 - ?) / ? + ? * (a3 - ?) / ? - s) as r from wide group by b"
    )
    params = [
        w[0],
        FPR[0],
        1 - FPR[0] - FNR[0],
        w[1],
        FPR[1],
        1 - FPR[1] - FNR[1],
        w[2],
        FPR[2],
        1 - FPR[2] - FNR[2],
    ]
    peer_med, peer_min, _ = _timed(lambda: con.execute(q, params).fetchall(), args.repeat)

    print(f"NC-ECE per-bin table, n = {n:,} items × 3 annotators, 15 bins (median of {args.repeat}, min in brackets)")
    print(f"  library (numpy, wide int8 matrix):           {lib_med:8.3f} s [{lib_min:.3f}]")
    print(
        f"  SQL mart nc_ece_by_bin (staged patterns):    {sql_med:8.3f} s [{sql_min:.3f}]"
        f"   ratio SQL/library = {sql_med / lib_med:.1f}x  (staging model: {stg_med:.2f} s)"
    )
    print(
        f"  peer: DuckDB plain query on a wide table:    {peer_med:8.3f} s [{peer_min:.3f}]"
        f"   ratio peer/library = {peer_med / lib_med:.1f}x"
    )
    print(f"  max |residual_sql - residual_lib| = {err:.2e}   NC-ECE = {res.value:.10f}")
    what = f"NC-ECE per-bin table {n:,} × 3 (library, numpy, median wall)"
    write_rows(args.rows_json, [
        row("nc_ece_sql", what, lib_med, "s", peer="SQL mart nc_ece_by_bin over staged patterns (DuckDB)",
            peer_value=sql_med, quick=args.quick, note=f"max |residual diff| {err:.1e}"),
    ])


if __name__ == "__main__":
    main()
