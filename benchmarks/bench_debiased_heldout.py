"""The debiased NC-ECE's design (score-group EM channels, DEBIAS_GROUPS = 5) re-measured on seeds it was not chosen
on (issue 23 item 4).

The design was chosen with the unit tests' seeds in view (tests/unit/calibration/test_inference.py: data seeds
100–599 and 5000–5399). Here, on fresh seeds 26,000,000+ (calibrated) and 26,100,000+ (miscalibrated), the same
simulation (s ~ Beta(2, 3), three annotators, Dawid–Skene channels refitted in every replicate): the mean plug-in
and debiased values for a calibrated predictor (n = 500; truth 0), and for a miscalibrated one (n = 3,000,
P(Y=1 | s) = min(s^0.8 + 0.03, 1)) the mean absolute error of each against the population NC-ECE, with the paired
difference and its standard error.

Usage: PYTHONPATH=. nice -n 10 python benchmarks/bench_debiased_heldout.py [n_runs] [n_boot]
"""

from __future__ import annotations

import sys
import time

import numpy as np

from noisycal_platform.calibration import calibration_test
from tests.guarantees import _runs
from tests.unit.calibration import test_inference as bin_sim

N_BOOT = 200


def calibrated(seed: int) -> tuple[float, float]:
    res = calibration_test(*bin_sim._sim(500, seed, False), n_boot=N_BOOT, seed=seed)
    return res.nc_ece, res.nc_ece_debiased


def miscalibrated(seed: int) -> tuple[float, float]:
    res = calibration_test(*bin_sim._sim(3000, seed, True), n_boot=N_BOOT, seed=seed)
    return res.nc_ece, res.nc_ece_debiased


def main(n_runs: int = 200) -> None:
    t0 = time.perf_counter()
    cal = _runs.run_many(calibrated, range(26_000_000, 26_000_000 + n_runs))
    mis = _runs.run_many(miscalibrated, range(26_100_000, 26_100_000 + n_runs))
    truth = _runs.binary_truth()
    print(f"{n_runs} runs per setting, n_boot {N_BOOT}, {time.perf_counter() - t0:.0f} s")
    print(f"calibrated, n = 500 (truth 0): plug-in mean {cal[:, 0].mean():.4f}, debiased mean {cal[:, 1].mean():.4f} "
          f"(ratio {cal[:, 1].mean() / cal[:, 0].mean():.3f})")
    err = np.abs(mis - truth)
    diff = err[:, 1] - err[:, 0]
    se = diff.std(ddof=1) / np.sqrt(n_runs)
    print(f"miscalibrated, n = 3,000 (truth {truth:.5f}): MAE plug-in {err[:, 0].mean():.5f}, debiased "
          f"{err[:, 1].mean():.5f}; paired difference {diff.mean():+.5f} (s.e. {se:.5f})")


if __name__ == "__main__":
    main(*[int(x) for x in sys.argv[1:2]])
