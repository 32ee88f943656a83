"""The power claims in the guarantee tests' docstrings, recomputed from the binomial distribution (scipy), so a
change of R or of a threshold that breaks "a regression fails with power ≥ 0.9" fails here."""

import pytest
from scipy.stats import binom

from tests.guarantees import _runs

pytestmark = pytest.mark.guarantee  # the guarantee tier (issue 23 item 3): in the default suite

# (R, threshold, kind, regressed rate): coverage-like (pass when ≥ t) or size-like (pass when ≤ t)
CLAIMS = [
    (250, 232, "coverage", 0.90),  # binary coverage ≥ 94%
    (250, 235, "coverage", 0.90),  # binary power ≥ 95%
    (500, 460, "coverage", 0.90),  # multi-class coverage ≥ 93%
    (250, 221, "coverage", 0.85),  # bad subgroup flagged ≥ 90%
    (250, 18, "size", 0.10),  # every size ≤ 6%
]


@pytest.mark.parametrize(("n_rep", "t", "kind", "regressed"), CLAIMS)
def test_a_regression_fails_with_power_at_least_0_9(n_rep, t, kind, regressed):
    passes = binom.sf(t - 1, n_rep, regressed) if kind == "coverage" else binom.cdf(t, n_rep, regressed)
    assert passes <= 0.1
    helper = _runs.pass_probability_coverage if kind == "coverage" else _runs.pass_probability_size
    assert helper(n_rep, t, regressed) == pytest.approx(passes, rel=1e-12)


def test_thresholds_follow_the_one_standard_error_rule():
    assert _runs.coverage_threshold(250, 0.94) == 232  # 250·(0.94 − 0.01502) = 231.25
    assert _runs.coverage_threshold(500, 0.93) == 460  # 500·(0.93 − 0.01141) = 459.29
    assert _runs.size_threshold(250, 0.06) == 18  # 250·(0.06 + 0.01502) = 18.75
