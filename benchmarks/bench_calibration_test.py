"""Benchmark: `calibration_test` (n_boot = 1000 bootstrap + 1000 null replicates, Dawid–Skene refit in every one, and
a second, score-group EM refit of every bootstrap replicate for the debiased value) on 100,000 items × 3 annotators,
against a plain loop that refits and recomputes NC-ECE per replicate on the items.

Run by hand (once, niced, two cores):
    OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 nice -n 10 .venv/bin/python benchmarks/bench_calibration_test.py
Data: s ~ Beta(2, 3), η = min(s^0.8 + 0.03, 1), fpr = (.10, .05, .25), fnr = (.20, .10, .15), 10% of the
annotations missing at random. The plain loop, per bootstrap replicate: resample the items, `dawid_skene` on the
(n, 3) rows (n_starts = 1), `nc_ece`; per null replicate: draw Y ~ Bernoulli(s) and each present annotation from
its channel, the same refit and NC-ECE. It runs ``--loop-reps`` replicates of each kind and is extrapolated
linearly to 2 × n_boot (stated in the output). Prints wall seconds and the ratio.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from noisycal_platform.calibration import aggregation_weights, dawid_skene, nc_ece
from noisycal_platform.calibration.inference import calibration_test

FPR = np.array([0.10, 0.05, 0.25])
FNR = np.array([0.20, 0.10, 0.15])


def _data(n: int, seed: int) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    s = rng.beta(2, 3, n)
    y = rng.random(n) < np.minimum(s**0.8 + 0.03, 1.0)
    a = (rng.random((n, 3)) < np.where(y[:, None], 1 - FNR, FPR)).astype(float)
    a[rng.random((n, 3)) < 0.1] = np.nan
    return s, a


def _loop_replicate(s: np.ndarray, a: np.ndarray, rng: np.random.Generator, fit, null: bool) -> float:
    n = s.size
    if null:
        y = rng.random(n) < s
        draw = (rng.random(a.shape) < np.where(y[:, None], 1 - fit.fnr, fit.fpr)).astype(float)
        a_r, s_r = np.where(np.isnan(a), np.nan, draw), s
    else:
        idx = rng.integers(0, n, n)
        a_r, s_r = a[idx], s[idx]
    f = dawid_skene(a_r, n_starts=1)
    w = aggregation_weights(f.channels, f.prevalence, "iv")
    return nc_ece(s_r, a_r, f.channels, weights=w).value


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=100_000)
    ap.add_argument("--n-boot", type=int, default=1000)
    ap.add_argument("--loop-reps", type=int, default=10)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    s, a = _data(args.n, 0)
    walls = []
    res = None
    for r in range(args.repeats):
        t0 = time.perf_counter()
        res = calibration_test(s, a, n_boot=args.n_boot, seed=r)
        walls.append(time.perf_counter() - t0)
    print(f"data: {args.n:,} items x 3 annotators, 10% missing; n_boot = {args.n_boot} (+ {args.n_boot} null)")
    print(f"calibration_test: wall median {np.median(walls):.2f} s, min {min(walls):.2f} s over {args.repeats}")
    print(
        f"  nc_ece {res.nc_ece:.4f}  debiased {res.nc_ece_debiased:.4f}  CI [{res.ci_low:.4f}, {res.ci_high:.4f}]  "
        f"p {res.p_value:.4f}  null_q95 {res.null_q95:.4f}  unidentified {res.n_unidentified_boot}"
        f"+{res.n_unidentified_null}"
    )
    fit = dawid_skene(a)
    rng = np.random.default_rng(1)
    t0 = time.perf_counter()
    for _ in range(args.loop_reps):  # the plain loop being measured
        _loop_replicate(s, a, rng, fit, null=False)
        _loop_replicate(s, a, rng, fit, null=True)
    per_pair = (time.perf_counter() - t0) / args.loop_reps
    loop_total = per_pair * args.n_boot
    print(
        f"plain loop: {per_pair:.3f} s per (bootstrap + null) replicate pair over {args.loop_reps} pairs, "
        f"extrapolated to {args.n_boot} pairs: {loop_total:.1f} s"
    )
    print(f"ratio plain loop / calibration_test: {loop_total / np.median(walls):.1f}x")


if __name__ == "__main__":
    main()
