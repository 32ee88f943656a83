"""Tuning run for the assumption checks' scale (issue 23 item 2): how the studentising s.d. is taken.

On TUNING seeds 25_000_000 + r (disjoint from the guarantee tier's 23_000_000–23_069_999, the benchmark's report
seeds 24_000_000–24_089_999 and the unit tests'), simulates the clean design of tests/unit/calibration/
test_diagnostics.py (n = 5,000, calibrated, three independent score-invariant annotators), computes the checks'
unscaled statistics once per data set (`diagnostics.raw_statistics`, 100 replicates) and compares two scales:
- "replicates only": s.d. over the identified replicates (the construction before issue 23);
- "pooled": s.d. over the observed statistic and the replicates together (`diagnostics._pooled_sd`, shipped).
Each under two bootstrap streams: the data's own integer seed (as the tier and the benchmark call the check)
and an unrelated one (seed + 7,777,777). Prints the WARN rate at α = .05 of both checks under each.

Usage: nice -n 10 python benchmarks/tune_assumption_checks.py [n_runs] [first]   (default 500 runs from seed
25_000_000 + first, first = 0; ~4–7 min on 2 busy cores)
"""

from __future__ import annotations

import sys
import time

import numpy as np

from noisycal_platform.calibration.diagnostics import _pooled_sd, raw_statistics
from noisycal_platform.calibration.inference import bootstrap_p_value
from tests.guarantees import _runs
from tests.unit.calibration import test_diagnostics as diag_sim

BASE = 25_000_000
OTHER_STREAM = 7_777_777


def _p_values(raw, pooled: bool) -> tuple[float, float]:
    ok = raw.identified
    ind_star, trend_star = raw.independence_star[ok], raw.trend_star[ok]
    if pooled:
        sd_i, sd_t = _pooled_sd(raw.independence, ind_star), _pooled_sd(raw.trend, trend_star)
    else:
        sd_i, sd_t = ind_star.std(axis=0, ddof=1), trend_star.std(axis=0, ddof=1)
    p_ind = bootstrap_p_value(((raw.independence / sd_i) ** 2).sum(), ((ind_star / sd_i) ** 2).sum(axis=1))
    p_inv = bootstrap_p_value(np.abs(raw.trend / sd_t).max(), np.abs(trend_star / sd_t).max(axis=1))
    return p_ind, p_inv


def one(seed: int) -> tuple[float, ...]:
    """(ind, inv) p-values for (own stream, other stream) × (replicates only, pooled)."""
    a, s = diag_sim._sim(5000, seed)
    out: list[float] = []
    for stream in (seed, seed + OTHER_STREAM):
        raw = raw_statistics(a, s, 4, _runs.DIAG_N_REPLICATES, stream)
        for pooled in (False, True):
            out += _p_values(raw, pooled)
    return tuple(out)


def main(n_runs: int = 500, first: int = 0) -> None:
    t0 = time.perf_counter()
    start = BASE + first
    p = _runs.run_many(one, range(start, start + n_runs))
    print(f"tuning seeds {start}–{start + n_runs - 1}; {time.perf_counter() - t0:.0f} s; WARN rate at α = .05 (count)")
    print("| bootstrap stream | scale | independence | score invariance |")
    print("|---|---|---|---|")
    cases = [(st, sc) for st in ("data's seed", "other") for sc in ("replicates only", "pooled")]
    for c, (stream, scale) in enumerate(cases):
        ind, inv = p[:, 2 * c] < _runs.CHECK_ALPHA, p[:, 2 * c + 1] < _runs.CHECK_ALPHA
        print(f"| {stream} | {scale} | {ind.mean():.3f} ({ind.sum()}) | {inv.mean():.3f} ({inv.sum()}) |")


if __name__ == "__main__":
    main(int(sys.argv[1]) if len(sys.argv) > 1 else 500, int(sys.argv[2]) if len(sys.argv) > 2 else 0)
