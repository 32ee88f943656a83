"""Subgroup flags after Holm (binary), and the two assumption checks' size (WARN at α = .05), against the targets
of issue 23: false-flag rate ≤ 6% for a calibrated subgroup, size ≤ 6% for each check; the miscalibrated
subgroup flagged in ≥ 90% (the slow test's bound).

Rule as in test_binary.py (one binomial s.e. of slack). Seeds 23_050_000+ (subgroups), 23_060_000+ (checks):
disjoint from the unit tests' (700–799, 1000–1299) and the benchmark's (24_000_000+).
"""

from __future__ import annotations

import functools

import numpy as np
import pytest

from tests.guarantees import _runs

pytestmark = pytest.mark.guarantee  # the guarantee tier (issue 23 item 3): in the default suite

R_SUBGROUPS = 250
R_CHECKS = 250

@functools.cache
def _subgroups() -> np.ndarray:
    return _runs.run_many(_runs.subgroup_flags, range(23_050_000, 23_050_000 + R_SUBGROUPS))


@functools.cache
def _checks() -> np.ndarray:
    return _runs.run_many(_runs.checks_clean, range(23_060_000, 23_060_000 + R_CHECKS))


def test_calibrated_subgroup_false_flag_rate_at_most_6_percent():
    """Two sites of 600 items, Holm over the two, the good site's flag. R = 250: at most
    t = ⌊250·(0.06 + sqrt(0.06·0.94/250))⌋ = 18 false alarms (7.2%). A regression to 10% passes
    with P(Binom(250, 0.10) ≤ 18) = 0.081 ≤ 0.1; pass probability 0.826 at exactly 6%, 0.953 at the nominal 5%."""
    flagged = int(_subgroups()[:, 0].sum())
    assert flagged <= _runs.size_threshold(R_SUBGROUPS, 0.06) == 18, f"{flagged} of {R_SUBGROUPS} flagged"


def test_miscalibrated_subgroup_flagged_in_at_least_90_percent():
    """The same runs: the bad site is flagged in at least t = ⌈250·(0.90 − sqrt(0.9·0.1/250))⌉ = 221 (88.4%).
    A regression to 85% passes with P(Binom(250, 0.85) ≥ 221) = 0.075; at 90% it passes with probability 0.83."""
    flagged = int(_subgroups()[:, 1].sum())
    assert flagged >= _runs.coverage_threshold(R_SUBGROUPS, 0.90) == 221, f"{flagged} of {R_SUBGROUPS} flagged"


def test_independence_check_size_at_most_6_percent():
    """n = 5,000, 100 replicates. R = 250: at most t = ⌊250·(0.06 + sqrt(0.06·0.94/250))⌋ = 18 false alarms
    (7.2%). A regression to 10% passes with P(Binom(250, 0.10) ≤ 18) = 0.081 ≤ 0.1; pass probability 0.826 at
    exactly 6%, 0.953 at the nominal 5%."""
    warned = int(np.sum(_checks()[:, 0] < _runs.CHECK_ALPHA))
    assert warned <= _runs.size_threshold(R_CHECKS, 0.06) == 18, f"{warned} of {R_CHECKS} warned"


def test_score_invariance_check_size_at_most_6_percent():
    """n = 5,000, 100 replicates. R = 250: at most t = ⌊250·(0.06 + sqrt(0.06·0.94/250))⌋ = 18 false alarms
    (7.2%). A regression to 10% passes with P(Binom(250, 0.10) ≤ 18) = 0.081 ≤ 0.1; pass probability 0.826 at
    exactly 6%, 0.953 at the nominal 5%."""
    warned = int(np.sum(_checks()[:, 1] < _runs.CHECK_ALPHA))
    assert warned <= _runs.size_threshold(R_CHECKS, 0.06) == 18, f"{warned} of {R_CHECKS} warned"

