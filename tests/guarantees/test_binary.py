"""Binary calibration test (channels estimated by Dawid–Skene and refitted in every replicate): interval coverage,
size and power, against the targets of issue 23 (coverage ≥ 94%, size ≤ 6%; power ≥ 95% as the slow test).

Rule (tests/guarantees/_runs.py): with R runs and target c, the coverage test passes when at least
t = ⌈R·(c − sqrt(c(1 − c)/R))⌉ runs cover (one binomial s.e. of Monte-Carlo slack); a size test passes when at
most t = ⌊R·(a + sqrt(a(1 − a)/R))⌋ runs reject. Seeds 23_000_000+ (coverage, power) and 23_010_000+ (size):
disjoint from the unit tests' (100–599, 5000–5399, 9000–9399), the interval benchmark's tuning seeds
(700000–700299, 800000–800299) and bench_size_power.py's (24_000_000+).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tests.guarantees import _runs

pytestmark = pytest.mark.guarantee  # the guarantee tier (issue 23 item 3): in the default suite

R_COVERAGE = 250
R_SIZE = 250


@functools.cache
def _miscalibrated() -> np.ndarray:
    return _runs.run_many(_runs.binary_miscalibrated, range(23_000_000, 23_000_000 + R_COVERAGE))


@functools.cache
def _calibrated() -> np.ndarray:
    return _runs.run_many(_runs.binary_calibrated, range(23_010_000, 23_010_000 + R_SIZE))


def test_interval_coverage_at_least_94_percent():
    """The debiased normal interval (`debiased_normal_interval`, chosen on tuning seeds: benchmarks/intervals.md; the
    basic interval it replaced covered 220 of these 250 runs). n = 3,000, P(Y=1 | s) = min(s^0.8 + 0.03, 1),
    population NC-ECE 0.09992; R = 250, n_boot = 200. Threshold t = ⌈250·(0.94 − sqrt(0.94·0.06/250))⌉ = 232 covering
    runs (92.8%). Power against a regression to 90%: P(Binom(250, 0.90) ≥ 232) = 0.081 ≤ 0.1 (fails with probability
    0.919). Pass probability: 0.826 at exactly 94%, 0.953 at the nominal 95%."""
    m = _miscalibrated()
    truth = _runs.binary_truth()
    covered = int(np.sum((m[:, 0] <= truth) & (truth <= m[:, 1])))
    assert covered >= _runs.coverage_threshold(R_COVERAGE, 0.94) == 232, f"{covered} of {R_COVERAGE} covered"


def test_power_at_least_95_percent():
    """The same 250 miscalibrated runs: the test rejects H0 in at least t = ⌈250·(0.95 − sqrt(0.95·0.05/250))⌉ =
    235 (94%). A regression to 90% power passes with P(Binom(250, 0.90) ≥ 235) = 0.018; at 95% it passes with
    probability 0.811, at 99% with 1.000."""
    rejected = int(_miscalibrated()[:, 2].sum())
    assert rejected >= _runs.coverage_threshold(R_COVERAGE, 0.95) == 235, f"{rejected} of {R_COVERAGE} rejected"


def test_size_at_most_6_percent():
    """n = 3,000, calibrated, R = 250, n_boot = 200: at most t = ⌊250·(0.06 + sqrt(0.06·0.94/250))⌋ = 18 rejections
    at α = .05 (7.2%). A regression to 10% size passes with P(Binom(250, 0.10) ≤ 18) = 0.081 ≤ 0.1; at exactly 6%
    it passes with probability 0.826, at the nominal 5% with 0.953."""
    rejected = int(np.sum(_calibrated()[:, 0] < _runs.CHECK_ALPHA))
    assert rejected <= _runs.size_threshold(R_SIZE, 0.06) == 18, f"{rejected} of {R_SIZE} rejected"
