"""Coverage and width of candidate NC-ECE intervals on the same bootstrap replicates (binary, estimated channels).

Setting: the binary miscalibrated simulation of tests/unit/calibration/test_inference.py (n = 3,000, three
annotators, Dawid–Skene channels refitted in every replicate). `calibration_test` is run unchanged; its call to
`basic_interval` is intercepted to record (θ̂, bootstrap replicates), and every candidate is computed from the same
record, so the comparison is paired.

Seeds (TUNING, disjoint from the test seeds, which use data seeds 100–599, 5000–5399, 9000–9399 and bootstrap
seeds 0–399): data seeds 700000 + r, bootstrap seeds 800000 + r.

Candidates (θ̂ plug-in, θ*_b bootstrap replicates, q_p their p-quantile, s their s.d., z = Φ⁻¹(0.975)):
- basic:      [2θ̂ − q_.975, 2θ̂ − q_.025]  (Davison & Hinkley 1997, eq. 5.6; what ships today)
- percentile: [q_.025, q_.975]             (Efron 1979)
- bc_normal:  θ̂ − (mean θ* − θ̂) ± z·s       (bias-corrected normal, Davison & Hinkley §5.2)
- normal:     θ̂ ± z·s                       (no bias correction; the shape of the asymptotic-normal interval of
              Sun, Chaudhari, Barnett & Dobriban 2024, with the bootstrap s.d. standing in for their plug-in s.e.)
- bc_half:    θ̂ − (mean θ* − θ̂)/2 ± z·s     (half the bootstrap bias correction)
Studentised bootstrap and BCa need nested bootstraps / a jackknife over items with channel refits: NOT run here.

Usage: nice -n 10 python benchmarks/bench_interval_coverage.py [n_runs] [n_boot]
"""

from __future__ import annotations

import sys
import time

import numpy as np
from scipy.stats import norm

from noisycal_platform.calibration import inference
from tests.unit.calibration.test_inference import _population_nc_ece, _sim

Z = norm.ppf(0.975)


def candidates(est: float, r: np.ndarray) -> dict[str, tuple[float, float]]:
    r = r[np.isfinite(r)]
    lo_q, hi_q = np.quantile(r, [0.025, 0.975])
    sd = r.std(ddof=1)
    bias = r.mean() - est
    return {
        "basic": (max(2 * est - hi_q, 0.0), max(2 * est - lo_q, 0.0)),
        "percentile": (lo_q, hi_q),
        "bc_normal": (max(est - bias - Z * sd, 0.0), est - bias + Z * sd),
        "bc_half": (max(est - bias / 2 - Z * sd, 0.0), est - bias / 2 + Z * sd),
        "normal": (max(est - Z * sd, 0.0), est + Z * sd),
    }


def main(n_runs: int = 60, n_boot: int = 300) -> None:
    truth = _population_nc_ece()
    recorded: list[tuple[float, np.ndarray]] = []
    original = inference.basic_interval

    def spy(estimate, replicates, level=0.95):
        recorded.append((float(estimate), np.asarray(replicates, float).copy()))
        return original(estimate, replicates, level)

    inference.basic_interval = spy
    t0 = time.perf_counter()
    try:
        for r in range(n_runs):
            inference.calibration_test(*_sim(3000, 700000 + r, True), n_boot=n_boot, seed=800000 + r)
    finally:
        inference.basic_interval = original
    elapsed = time.perf_counter() - t0
    rows = [candidates(e, rep) for e, rep in recorded]
    sds = np.array([rep[np.isfinite(rep)].std(ddof=1) for _, rep in recorded])
    ests = np.array([e for e, _ in recorded])
    print(f"truth {truth:.5f}; runs {n_runs}, n_boot {n_boot}; {elapsed:.0f} s (shared, loaded CPU)")
    print(f"plug-in: mean {ests.mean():.5f} (bias {ests.mean() - truth:+.5f}), sd over runs {ests.std(ddof=1):.5f}; "
          f"mean bootstrap sd {sds.mean():.5f}")
    base_w = np.mean([row["basic"][1] - row["basic"][0] for row in rows])
    print("| candidate | coverage | MC s.e. | mean width | width / basic |")
    print("|---|---|---|---|---|")
    for name in rows[0]:
        cov = np.array([row[name][0] <= truth <= row[name][1] for row in rows], float)
        w = np.mean([row[name][1] - row[name][0] for row in rows])
        se = np.sqrt(cov.mean() * (1 - cov.mean()) / cov.size)
        print(f"| {name} | {cov.mean():.3f} | {se:.3f} | {w:.5f} | {w / base_w:.3f} |")


if __name__ == "__main__":
    args = [int(x) for x in sys.argv[1:3]]
    main(*args)
