"""Size at α = .05 and power of every test and check that ships (issue 23 item 2), with coverage of the intervals
beside them, replicate counts and Monte-Carlo standard errors.

Runs the shipped functions unchanged, one simulated data set per call, through the runners of the guarantee tier
(tests/guarantees/_runs.py: the designs of the unit tests) and, for multi-class, with the confusion matrices
ESTIMATED and refitted in every replicate (the tier holds them fixed to stay fast).

Seeds (REPORT seeds, disjoint from the tier's 23_000_000–23_069_999, the unit tests' and the interval benchmark's
tuning seeds 700000–800299): 24_000_000 + block·10_000 + r.

Usage: nice -n 10 python benchmarks/bench_size_power.py [scale] [sections]   (scale 1.0: the replicate counts
below; sections: comma-separated among binary, multiclass, subgroups, checks; default all. A section's seeds do
not depend on which other sections run.)
Output: a markdown table on stdout (benchmarks/size_power.md holds the committed run).
"""

from __future__ import annotations

import sys
import time

import numpy as np

from noisycal_platform.calibration.subgroups import holm_min_p
from tests.guarantees import _runs
from tests.unit.calibration import test_subgroups as sub_sim

ALPHA = _runs.CHECK_ALPHA
BASE = 24_000_000


def class_subgroup_flags(seed: int) -> tuple[float, float]:
    """Four classes, two sites of 500 items ('bad' under-confident), Holm over the two, top-label: (good, bad)."""
    flags = sub_sim._class_flags(seed, _runs.SUBGROUP_N_BOOT)
    return float(flags["good"]), float(flags["bad"])


def _min_p_warned(p: np.ndarray) -> np.ndarray:
    """The shipped min-p WARN rule on each row's (top-label p, classwise p): Holm-adjusted smallest p < α."""
    return np.array([holm_min_p(row) < ALPHA for row in p])


def _seeds(block: int, n: int) -> range:
    return range(BASE + block * 10_000, BASE + block * 10_000 + n)


def _rate(x: np.ndarray) -> tuple[float, float]:
    m = float(np.mean(x))
    return m, float(np.sqrt(m * (1 - m) / x.size))


SECTIONS = ("binary", "multiclass", "subgroups", "checks")


def main(scale: float = 1.0, sections: tuple[str, ...] = SECTIONS) -> None:
    unknown = set(sections) - set(SECTIONS)
    if unknown:
        raise SystemExit(f"unknown sections {sorted(unknown)}; choose among {', '.join(SECTIONS)}")

    def n(base: int) -> int:
        return max(10, round(base * scale))

    rows: list[tuple[str, str, str, int, float, float]] = []
    t_all = time.perf_counter()
    timings: dict[str, float] = {}

    def run(name, fn, block, count):
        t0 = time.perf_counter()
        out = _runs.run_many(fn, _seeds(block, count))
        timings[name] = time.perf_counter() - t0
        print(f"{name}: {count} runs, {timings[name]:.0f} s", file=sys.stderr, flush=True)
        return out

    def add(estimator, quantity, setting, x):
        rows.append((estimator, quantity, setting, x.size, *_rate(np.asarray(x, float))))

    # binary calibration test (channels estimated by Dawid–Skene, refitted in every replicate)
    if "binary" in sections:
        cal = run("binary calibrated", _runs.binary_calibrated, 0, n(200))
        add("binary test", "size", "n=3000 calibrated, est. channels, n_boot=200", cal[:, 0] < ALPHA)
        mis = run("binary miscalibrated", _runs.binary_miscalibrated, 1, n(200))
        truth = _runs.binary_truth()
        add("binary test", "power", "n=3000, η=min(s^0.8+0.03,1), est. channels", mis[:, 2])
        add("binary interval", "coverage", "same runs (target ≥ 0.94)",
            (mis[:, 0] <= truth) & (truth <= mis[:, 1]))

    # multi-class, confusion matrices estimated and refitted; both kinds on each data set
    if "multiclass" in sections:
        mcal = run("multiclass calibrated (est.)", _runs.multiclass_calibrated_estimated, 2, n(80))
        add("top-label test", "size", "C=5, K=3, n=1500 calibrated, est. confusions, n_boot=100", mcal[:, 2] < ALPHA)
        add("classwise test", "size", "same runs", mcal[:, 5] < ALPHA)
        add("min-p WARN check (top-label, classwise), Holm", "size", "same runs", _min_p_warned(mcal[:, [2, 5]]))
        add("min p < α, uncorrected (the former rule, not shipped)", "size", "same runs",
            np.minimum(mcal[:, 2], mcal[:, 5]) < ALPHA)
        mmis = run("multiclass miscalibrated (est.)", _runs.multiclass_miscalibrated_estimated, 3, n(60))
        add("top-label test", "power", "n=3000, p ∝ p_true^1.5, est. confusions", mmis[:, 2] < ALPHA)
        add("classwise test", "power", "same runs", mmis[:, 5] < ALPHA)
        add("min-p WARN check (top-label, classwise), Holm", "power", "same runs", _min_p_warned(mmis[:, [2, 5]]))
        for kind, c in (("top_label", 0), ("classwise", 3)):
            tr = _runs.multiclass_truth(kind)
            add(f"{kind.replace('_', '-')} interval", "coverage", "same runs (target ≥ 0.93)",
                (mmis[:, c] <= tr) & (tr <= mmis[:, c + 1]))

    # subgroups after Holm
    if "subgroups" in sections:
        sub = run("subgroups binary", _runs.subgroup_flags, 4, n(200))
        add("subgroup flag after Holm (binary)", "size", "calibrated site of 2×600, n_boot=150", sub[:, 0])
        add("subgroup flag after Holm (binary)", "power", "site shifted +0.12, same runs", sub[:, 1])
        csub = run("subgroups multi-class", class_subgroup_flags, 5, n(60))
        add("subgroup flag after Holm (top-label)", "size", "C=4, calibrated site of 2×500, n_boot=150", csub[:, 0])
        add("subgroup flag after Holm (top-label)", "power", "under-confident site (T=2), same runs", csub[:, 1])

    # assumption checks
    if "checks" in sections:
        clean = run("checks clean", _runs.checks_clean, 6, n(200))
        add("independence check", "size", "n=5000 calibrated, 100 replicates", clean[:, 0] < ALPHA)
        add("score-invariance check", "size", "same runs", clean[:, 1] < ALPHA)
        copy = run("checks copy", _runs.checks_copy, 7, n(50))
        add("independence check", "power", "annotator 1 copies 0 on 30% of items", copy[:, 0] < ALPHA)
        score = run("checks score", _runs.checks_score, 8, n(50))
        add("score-invariance check", "power", "annotator 1's FPR 0.05→0.30 with s", score[:, 1] < ALPHA)

    total = time.perf_counter() - t_all
    print(f"seeds {BASE}+; workers {_runs.workers()}; total {total:.0f} s")
    print("| estimator / check | quantity | setting | R | rate | MC s.e. |")
    print("|---|---|---|---|---|---|")
    for est, q, setting, r, m, se in rows:
        print(f"| {est} | {q} | {setting} | {r} | {m:.3f} | {se:.3f} |")
    print()
    print("| block | wall s |")
    print("|---|---|")
    for k, v in timings.items():
        print(f"| {k} | {v:.0f} |")


if __name__ == "__main__":
    main(float(sys.argv[1]) if len(sys.argv) > 1 else 1.0,
         tuple(sys.argv[2].split(",")) if len(sys.argv) > 2 else SECTIONS)
