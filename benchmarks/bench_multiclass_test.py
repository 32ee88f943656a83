"""Benchmark: `calibration_test_multiclass` (n_boot bootstrap + n_boot null replicates, multi-class Dawid–Skene
refit in every one) on 100,000 items × 3 annotators × 7 classes, against a plain per-replicate loop on the items.

Run by hand (once, niced, two cores):
    nice -n 10 .venv/bin/python benchmarks/bench_multiclass_test.py
Data: the asymmetric confusion matrices of `bench_multiclass.confusions`, 10% of the annotations missing at
random, an overconfident predictor (logits with a +1 boost on the true class, tempered by 1.5). The plain loop:
per bootstrap replicate, resample the items; per null replicate, draw Y_i ~ Categorical(p_i) and each present
annotation from its confusion row; then `estimate_confusion` on the (n, 3) rows warm-started at the point
estimate (one start) and `nc_ece_multiclass` with its "iv" weights. ``--loop-reps`` pairs are timed and
extrapolated linearly to n_boot pairs (stated in the output).
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from bench_multiclass import C, K, confusions, draw

from noisycal_platform.calibration.multiclass import (
    calibration_test_multiclass,
    class_weights,
    estimate_confusion,
    nc_ece_multiclass,
)


def _predictor(rng: np.random.Generator, y: np.ndarray) -> np.ndarray:
    g = rng.normal(0, 1.3, size=(y.size, C))
    g[np.arange(y.size), y] += 1.0
    p = np.exp(1.5 * g - (1.5 * g).max(axis=1, keepdims=True))
    return p / p.sum(axis=1, keepdims=True)


def _plain_replicate(p, a, point, kind: str, rng: np.random.Generator, null: bool) -> float:
    """One replicate the direct way: new item table, refit, NC-ECE."""
    if null:
        y = np.minimum((rng.random((len(p), 1)) > np.cumsum(p, axis=1)).sum(axis=1), C - 1)
        cum = np.cumsum(point.confusion, axis=2)  # (K, C, C)
        answers = (rng.random((K, len(p), 1)) > cum[:, y, :]).sum(axis=2).T.astype(float)
        a_r, p_r = np.where(np.isnan(a), np.nan, np.minimum(answers, C - 1)), p
    else:
        idx = rng.integers(0, len(p), len(p))
        a_r, p_r = a[idx], p[idx]
    fit = estimate_confusion(a_r, C, n_starts=1, init=(point.prevalence, point.confusion))
    w = class_weights(fit.confusion, fit.prevalence, "iv")
    return nc_ece_multiclass(p_r, a_r, fit, kind=kind, weights=w).value


def main() -> None:
    ap = argparse.ArgumentParser()
    for flag, default in (("--n", 100_000), ("--n-boot", 1000), ("--loop-reps", 5)):  # integer options
        ap.add_argument(flag, type=int, default=default)
    args = ap.parse_args()
    rng = np.random.default_rng(7)
    a, y = draw(rng, args.n, confusions(), missing=0.1)
    p = _predictor(rng, y)
    print(f"data: {args.n:,} items x {K} annotators x {C} classes, 10% missing; n_boot = {args.n_boot} (+ null)")
    t0 = time.perf_counter()
    point = estimate_confusion(a, C)
    print(f"point estimate (estimate_confusion, 10 starts): {time.perf_counter() - t0:.2f} s")
    for kind in ("top_label", "classwise"):
        t0, c0 = time.perf_counter(), time.process_time()
        res = calibration_test_multiclass(p, a, kind=kind, n_boot=args.n_boot, seed=1)
        wall, cpu = time.perf_counter() - t0, time.process_time() - c0
        print(
            f"calibration_test_multiclass {kind}: wall {wall:.2f} s, cpu {cpu:.2f} s (point fit included); "
            f"nc_ece {res.nc_ece:.4f} "
            f"debiased {res.nc_ece_debiased:.4f} CI [{res.ci_low:.4f}, {res.ci_high:.4f}] p {res.p_value:.4f} "
            f"null_q95 {res.null_q95:.4f} unidentified {res.n_unidentified_boot}+{res.n_unidentified_null}"
        )
        loop_rng = np.random.default_rng(2)
        t0, c0 = time.perf_counter(), time.process_time()
        for _ in range(args.loop_reps):  # the plain loop being measured
            _plain_replicate(p, a, point, kind, loop_rng, null=False)
            _plain_replicate(p, a, point, kind, loop_rng, null=True)
        per_wall = (time.perf_counter() - t0) / args.loop_reps
        per_cpu = (time.process_time() - c0) / args.loop_reps
        print(
            f"  plain loop {kind}: wall {per_wall:.3f} s, cpu {per_cpu:.3f} s per (bootstrap + null) pair over "
            f"{args.loop_reps} pairs; extrapolated to {args.n_boot} pairs: wall {per_wall * args.n_boot:.1f} s, "
            f"cpu {per_cpu * args.n_boot:.1f} s; ratio plain loop / ours: wall {per_wall * args.n_boot / wall:.1f}x, "
            f"cpu {per_cpu * args.n_boot / cpu:.1f}x"
        )


if __name__ == "__main__":
    main()
