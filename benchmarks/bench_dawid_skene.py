"""Benchmark: Dawid–Skene channel estimation, ours vs crowd-kit `DawidSkene`, 1,000,000 items × 5 annotators.

Run by hand (once, niced):  nice -n 10 .venv/bin/python benchmarks/bench_dawid_skene.py
Data: fpr = (.05, .10, .15, .08, .20), fnr = (.12, .06, .10, .18, .09),
prevalence .35, seed 3, dense binary labels. Ours takes the wide n×K array (its input format), crowd-kit the
long task/worker/label DataFrame (its input format); building either input is not timed. Prints wall and CPU
seconds, the speed-up, the largest estimate differences and the peak RSS. ``bench_rows`` returns the rows of
``make bench`` (results_table): crowd-kit / ours with 10 starts (goal ≥ 200×) and the largest estimate difference
(goal ≤ 1e-4); ``--quick`` is 200,000 items.
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings

import numpy as np
from results_table import add_rows_arg, row, write_rows

from noisycal_platform.calibration import estimate_channels

FPR = np.array([0.05, 0.10, 0.15, 0.08, 0.20])
FNR = np.array([0.12, 0.06, 0.10, 0.18, 0.09])


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None, help="items (default 1,000,000; --quick 200,000)")
    ap.add_argument("--seed", type=int, default=3)
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--quick", action="store_true", help="200,000 items (a smoke run; rows labelled quick)")
    add_rows_arg(ap)
    return ap


def measure(args: argparse.Namespace) -> dict:
    """Times ours (10 starts, 1 start) and crowd-kit on the same labels; prints as it goes."""
    if args.n is None:
        args.n = 200_000 if args.quick else 1_000_000
    rng = np.random.default_rng(args.seed)
    y = rng.random(args.n) < 0.35
    u = rng.random((args.n, 5))
    a = np.where(y[:, None], u >= FNR, u < FPR).astype(np.float64)
    print(f"data: {args.n:,} items x 5 annotators, dense binary; true prevalence {y.mean():.5f}")

    ours = []
    for _ in range(args.repeats):
        fit, wall, cpu = _timed(lambda: estimate_channels(a, method="dawid_skene", n_starts=10, seed=0))
        ours.append((wall, cpu))
    _, wall1, cpu1 = _timed(lambda: estimate_channels(a, method="dawid_skene", n_starts=1, seed=0))
    w_med = float(np.median([w for w, _ in ours]))
    c_med = float(np.median([c for _, c in ours]))
    print(
        f"ours  (10 starts): wall median {w_med:.4f} s (min {min(w for w, _ in ours):.4f}), "
        f"cpu median {c_med:.4f} s; "
        f"iterations {fit.diagnostics['n_iter']}, patterns {fit.diagnostics['n_patterns']}, "
        f"converged {fit.converged}"
    )
    print(f"ours  (1 start)  : wall {wall1:.4f} s, cpu {cpu1:.4f} s")
    print(
        f"ours  fpr {np.round(fit.fpr, 4).tolist()} fnr {np.round(fit.fnr, 4).tolist()} "
        f"prevalence {fit.prevalence:.5f}"
    )
    out = {"n": args.n, "ours_s": w_med, "ours_1start_s": wall1, "ours_cpu_s": c_med}
    if args.skip_peer:
        return out
    import pandas as pd
    from crowdkit.aggregation import DawidSkene

    long = pd.DataFrame(
        {
            "task": np.repeat(np.arange(args.n), 5),
            "worker": np.tile(np.arange(5), args.n),
            "label": a.ravel().astype(np.int64),
        }
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer, pwall, pcpu = _timed(lambda: DawidSkene(n_iter=100, tol=1e-7).fit(long))
    e = peer.errors_
    pfpr = np.array([e.loc[(j, 1), 0] for j in range(5)])
    pfnr = np.array([e.loc[(j, 0), 1] for j in range(5)])
    pprev = float(peer.priors_[1])
    print(
        f"crowd-kit DawidSkene(n_iter=100, tol=1e-7): wall {pwall:.3f} s, cpu {pcpu:.3f} s, "
        f"iterations {len(peer.loss_history_)}"
    )
    print(
        f"max |diff| fpr {np.abs(fit.fpr - pfpr).max():.2e}, fnr {np.abs(fit.fnr - pfnr).max():.2e}, "
        f"prevalence {abs(fit.prevalence - pprev):.2e}  (target <= 1e-3)"
    )
    print(
        f"speed-up (crowd-kit / ours, 10 starts): wall {pwall / w_med:.1f}x, cpu {pcpu / c_med:.1f}x "
        "(target >= 50x)"
    )
    print(f"speed-up (crowd-kit / ours, 1 start)  : wall {pwall / wall1:.1f}x, cpu {pcpu / cpu1:.1f}x")
    print(
        f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB "
        "(process, incl. crowd-kit)"
    )
    diff = max(np.abs(fit.fpr - pfpr).max(), np.abs(fit.fnr - pfnr).max(), abs(fit.prevalence - pprev))
    return {**out, "peer_s": pwall, "peer_cpu_s": pcpu, "max_diff": float(diff)}


def rows(m: dict, quick: bool = False) -> list[dict]:
    what = f"Dawid–Skene binary {m['n']:,} × 5, 10 starts (wall)"
    if "peer_s" not in m:
        return [row("dawid_skene", what, m["ours_s"], "s", quick=quick, note="peer skipped")]
    return [
        row("dawid_skene", what, m["ours_s"], "s", peer="crowd-kit DawidSkene (n_iter 100, tol 1e-7)",
            peer_value=m["peer_s"], goal=("ratio", ">=", 200.0), quick=quick,
            note=f"1 start: {m['ours_1start_s']:.3f} s; CPU seconds ours {m['ours_cpu_s']:.3f}, crowd-kit "
                 f"{m['peer_cpu_s']:.1f} ({m['peer_cpu_s'] / m['ours_cpu_s']:.0f}×)"),
        row("dawid_skene", f"Dawid–Skene binary {m['n']:,} × 5: max |estimate difference| vs crowd-kit",
            m["max_diff"], "", peer="crowd-kit DawidSkene", goal=("ours", "<=", 1e-4), quick=quick,
            note="fpr, fnr and prevalence"),
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
