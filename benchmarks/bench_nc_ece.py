"""Benchmark: NC-ECE on 10,000,000 scores × 3 annotators, library vs DuckDB's plain SQL query.

Run by hand (once, niced):  nice -n 10 .venv/bin/python benchmarks/bench_nc_ece.py
Data: s ~ Beta(2, 3), η = s^0.8 + 0.03, fpr = (.10, .05, .25),
fnr = (.20, .10, .15), IV weights, 15 bins. Annotations are int8 (n, 3) (the fast path; -1 = missing) and
also float64 with NaN (the general path). The peer is one DuckDB query over an in-memory table
(s DOUBLE, a1..a3 TINYINT), parameters bound as DOUBLE; loading the table is not timed. Prints wall and
CPU seconds (median and min over repeats) and the ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from noisycal_platform.calibration import Channel, nc_ece

FPR = np.array([0.10, 0.05, 0.25])
FNR = np.array([0.20, 0.10, 0.15])
CH = [Channel(f, b) for f, b in zip(FPR, FNR, strict=True)]
B = 15

SQL = """
SELECT least(floor(s * ?), ? - 1) AS bin, count(*) AS n, sum(s) AS sum_s,
       sum((? * (a1 - ?) / ? + ? * (a2 - ?) / ? + ? * (a3 - ?) / ?)) AS sum_y
FROM t GROUP BY bin
"""


def _stats(xs):
    return float(np.median(xs)), float(min(xs))


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=10_000_000)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=7)
    args = ap.parse_args()
    rng = np.random.default_rng(args.seed)
    s = rng.beta(2, 3, args.n)
    eta = np.clip(s**0.8 + 0.03, 0, 1)
    y = rng.random(args.n) < eta
    a8 = np.where(y[:, None], rng.random((args.n, 3)) >= FNR, rng.random((args.n, 3)) < FPR).astype(np.int8)
    del y, eta
    print(
        f"data: {args.n:,} scores x 3 annotators "
        f"(int8 {a8.nbytes / 1e6:.0f} MB, scores {s.nbytes / 1e6:.0f} MB)"
    )

    def run(arr, reps):
        wall, cpu, res = [], [], None
        for _ in range(reps):
            w0, c0 = time.perf_counter(), time.process_time()
            res = nc_ece(s, arr, CH, weights="iv", n_bins=B)
            wall.append(time.perf_counter() - w0)
            cpu.append(time.process_time() - c0)
        return res, wall, cpu

    res, wall, cpu = run(a8, args.repeats)
    ow = _stats(wall)
    oc = _stats(cpu)
    print(
        f"ours int8    : wall median {ow[0]:.4f} s (min {ow[1]:.4f}), "
        f"cpu median {oc[0]:.4f} s (min {oc[1]:.4f}); "
        f"NC-ECE {res.value:.10f}  (target < 0.15 s)"
    )
    af = a8.astype(np.float64)
    resf, wallf, cpuf = run(af, 3)
    print(
        f"ours float64 : wall median {_stats(wallf)[0]:.4f} s (min {_stats(wallf)[1]:.4f}), cpu median "
        f"{_stats(cpuf)[0]:.4f} s; NC-ECE {resf.value:.10f}"
    )
    del af

    import duckdb
    import pyarrow as pa

    con = duckdb.connect()
    con.execute("PRAGMA threads=2")
    tbl = pa.table({"s": s, "a1": a8[:, 0], "a2": a8[:, 1], "a3": a8[:, 2]})
    con.register("tbl", tbl)
    con.execute("CREATE TABLE t AS SELECT * FROM tbl")
    con.unregister("tbl")
    w = res.weights
    params = [float(B), B]
    for j in range(3):
        params += [float(w[j]), float(FPR[j]), float(1 - FPR[j] - FNR[j])]
    dwall, dcpu, rows = [], [], None
    for _ in range(args.repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        rows = con.execute(SQL, params).fetchall()
        dwall.append(time.perf_counter() - w0)
        dcpu.append(time.process_time() - c0)
    n = sum(r[1] for r in rows)
    duck = sum(abs(r[3] - r[2]) for r in rows) / n
    dw = _stats(dwall)
    print(
        f"duckdb query : wall median {dw[0]:.4f} s (min {dw[1]:.4f}), cpu median {_stats(dcpu)[0]:.4f} s "
        f"(2 threads); NC-ECE {duck:.10f}; |diff| {abs(duck - res.value):.2e}"
    )
    print(
        f"ratio duckdb / ours (wall median): {dw[0] / ow[0]:.2f}x; ours vs 0.15 s target: "
        f"{'PASS' if ow[0] < 0.15 else 'MISS'} (median), {'PASS' if ow[1] < 0.15 else 'MISS'} (min)"
    )


if __name__ == "__main__":
    main()
