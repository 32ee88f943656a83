"""Benchmark: NC-ECE on 10,000,000 scores × 3 annotators, library vs DuckDB's plain SQL query.

Run by hand (once, niced):  nice -n 10 .venv/bin/python benchmarks/bench_nc_ece.py [--quick] [--rows-json F]
Data: s ~ Beta(2, 3), η = s^0.8 + 0.03, fpr = (.10, .05, .25),
fnr = (.20, .10, .15), IV weights, 15 bins. Annotations are int8 (n, 3) (the fast path; -1 = missing) and
also float64 with NaN (the general path). The peer is one DuckDB query over an in-memory table
(s DOUBLE, a1..a3 TINYINT), parameters bound as DOUBLE; loading the table is not timed. Prints wall and
CPU seconds (median and min over repeats) and the ratio. The bandwidth floor: one numpy reduction over the
same bytes (the scores as float64, the int8 annotations read as int64 words), the least any one-thread pass
over the inputs can cost (ours runs on up to two threads above 2^20 items, like the DuckDB query).
``bench_rows`` returns the two comparisons of ``make bench`` (results_table rows): DuckDB / ours (goal ≥ 10×)
and ours / floor (goal ≤ 4×); ``--quick`` is 1,000,000 items.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from results_table import add_rows_arg, row, write_rows

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


def bandwidth_floor(s: np.ndarray, a8: np.ndarray) -> float:
    """One reduction over every input byte: the scores summed as float64, the annotations' bytes as int64 words."""
    b = np.ascontiguousarray(a8).reshape(-1).view(np.uint8)
    m = b.size // 8 * 8
    return float(np.add.reduce(s)) + float(np.add.reduce(b[:m].view(np.int64))) + float(b[m:].sum())


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None, help="items (default 10,000,000; --quick 1,000,000)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--quick", action="store_true", help="1,000,000 items (a smoke run; rows labelled quick)")
    add_rows_arg(ap)
    return ap


def measure(args: argparse.Namespace) -> dict:
    """Times ours (int8 and float64), the DuckDB query and the bandwidth floor; prints as it goes."""
    if args.n is None:
        args.n = 1_000_000 if args.quick else 10_000_000
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
    fwall, fcpu = [], []
    for _ in range(args.repeats):
        w0, c0 = time.perf_counter(), time.process_time()
        bandwidth_floor(s, a8)
        fwall.append(time.perf_counter() - w0)
        fcpu.append(time.process_time() - c0)
    fw = _stats(fwall)
    fc = _stats(fcpu)
    print(
        f"bandwidth floor (one reduction over the same {(s.nbytes + a8.nbytes) / 1e6:.0f} MB): wall median "
        f"{fw[0]:.4f} s (min {fw[1]:.4f}), cpu median {fc[0]:.4f} s; ours / floor {ow[0] / fw[0]:.2f}x wall, "
        f"{oc[0] / fc[0]:.2f}x cpu (target <= 4x)"
    )
    print(f"ratio duckdb / ours (cpu median): {_stats(dcpu)[0] / oc[0]:.2f}x")
    return {"n": args.n, "ours_s": ow[0], "duckdb_s": dw[0], "floor_s": fw[0], "value": res.value,
            "ours_cpu_s": oc[0], "duckdb_cpu_s": _stats(dcpu)[0], "floor_cpu_s": fc[0],
            "duckdb_diff": abs(duck - res.value), "float64_diff": abs(resf.value - res.value)}


def rows(m: dict, quick: bool = False) -> list[dict]:
    what = f"NC-ECE {m['n']:,} × 3, int8 annotations, known channels, IV weights (median wall)"
    return [
        row("nc_ece", what, m["ours_s"], "s", peer="DuckDB GROUP BY, same formula (2 threads)",
            peer_value=m["duckdb_s"], goal=("ratio", ">=", 10.0), quick=quick,
            note=f"|NC-ECE ours - DuckDB| {m['duckdb_diff']:.1e}; int8 vs float64 path {m['float64_diff']:.1e}; "
                 f"CPU seconds (median) ours {m['ours_cpu_s']:.3f}, DuckDB {m['duckdb_cpu_s']:.3f} "
                 f"({m['duckdb_cpu_s'] / m['ours_cpu_s']:.1f}×)"),
        row("nc_ece", what, m["ours_s"], "s", peer="bandwidth floor (one numpy reduction, same bytes)",
            peer_value=m["floor_s"], ratio_of="ours/peer", goal=("ratio", "<=", 4.0), quick=quick,
            note=f"ours on up to 2 threads (as DuckDB), the floor on one; CPU seconds (median) ours "
                 f"{m['ours_cpu_s']:.3f}, floor {m['floor_cpu_s']:.3f} ({m['ours_cpu_s'] / m['floor_cpu_s']:.1f}×)"),
    ]


def bench_rows(argv: list[str] | None = None) -> list[dict]:
    """The comparison rows of ``make bench`` (runs the benchmark; ``argv`` as on the command line)."""
    args = _parser().parse_args(argv)
    return rows(measure(args), args.quick)


def main() -> None:
    args = _parser().parse_args()
    write_rows(args.rows_json, rows(measure(args), args.quick))


if __name__ == "__main__":
    main()
