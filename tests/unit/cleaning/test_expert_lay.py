"""Expert vs lay (Gröger et al. 2023 §4.5): differences of κ, the one-sided paired sign test (the seed's test, which
relies solely on the signs) and the mean sign-flip permutation test kept beside it."""

import itertools

import numpy as np
import pytest
from sklearn.metrics import cohen_kappa_score

from noisycal_platform.cleaning.expert_lay import expert_lay_differences, expert_lay_tests, sign_flip_test, sign_test
from noisycal_platform.cleaning.protocol import answers_from_records, effective_answers
from tests.unit.cleaning._answers import answer_record, stamp


def test_exact_p_values_known_cases():
    # all n differences positive: only the identity flip reaches the observed mean -> p = 2^-n
    p, exact = sign_flip_test(np.array([0.1, 0.3, 0.2, 0.05, 0.4]))
    assert exact and p == pytest.approx(1 / 32)
    # d = (1, 1, 1, -1), observed sum 2. A sign vector s gives s·d = 2·(#signs agreeing with d) − 4,
    # so s·d >= 2 needs >= 3 of 4 agreeing: C(4,3) + C(4,4) = 5 of 16 vectors -> p = 5/16.
    d = np.array([1.0, 1.0, 1.0, -1.0])
    brute = np.mean([np.dot(s, d) >= d.sum() - 1e-12 for s in itertools.product([-1, 1], repeat=4)])
    assert sign_flip_test(d)[0] == pytest.approx(brute)
    assert brute == pytest.approx(5 / 16)


def _sign_permutation_p(d):
    """Brute force: the statistic #{s·d > 0} over all 2^m sign vectors s of the m non-zero differences."""
    d = np.asarray(d, float)
    d = d[d != 0]
    obs = int((d > 0).sum())
    counts = [int((np.array(s) * d > 0).sum()) for s in itertools.product([-1, 1], repeat=d.size)]
    return float(np.mean(np.array(counts) >= obs))


def test_sign_test_uses_only_the_signs():
    # five positive differences: only the identity flip has 5 positives -> 2^-5
    assert sign_test([0.1, 0.3, 0.2, 0.05, 0.4]) == pytest.approx(1 / 32, rel=1e-12)
    # three positives, one negative: P(Bin(4, 1/2) >= 3) = (C(4,3) + C(4,4)) / 16 = 5/16, whatever the sizes
    assert sign_test([1.0, 1.0, 1.0, -1.0]) == pytest.approx(5 / 16, rel=1e-12)
    assert sign_test([0.01, 0.01, 0.01, -5.0]) == pytest.approx(5 / 16, rel=1e-12)
    # ... where the mean test weighs the sizes: T = mean(d) < 0 is reached by the 8 flips with +5 and, of the 8
    # with -5, only the identity -> 9/16
    assert sign_flip_test(np.array([0.01, 0.01, 0.01, -5.0]))[0] == pytest.approx(9 / 16, rel=1e-12)
    # zeros carry no sign: (0.2, 0, 0.3) is the sign test of two positives, 1/4
    assert sign_test([0.2, 0.0, 0.3]) == pytest.approx(1 / 4, rel=1e-12)
    assert np.isnan(sign_test([0.0, np.nan])) and np.isnan(sign_test([]))
    rng = np.random.default_rng(2)
    for _ in range(5):
        d = np.round(rng.normal(0.1, 1.0, 9), 1)
        assert sign_test(d) == pytest.approx(_sign_permutation_p(d), rel=1e-12)


def test_sign_test_null_p_values_are_not_anti_conservative():
    rng = np.random.default_rng(6)
    ps = np.array([sign_test(rng.normal(size=12)) for _ in range(400)])
    assert np.mean(ps <= 0.05) <= 0.05 + 0.025


def test_monte_carlo_close_to_exact_and_seeded():
    rng = np.random.default_rng(0)
    d = rng.normal(0.2, 1.0, 12)
    exact, _ = sign_flip_test(d)
    mc, is_exact = sign_flip_test(d, exact_max=0, n_perm=20_000, seed=1)
    assert not is_exact and mc == pytest.approx(exact, abs=0.015)
    assert sign_flip_test(d, exact_max=0, n_perm=2000, seed=5) == sign_flip_test(
        d, exact_max=0, n_perm=2000, seed=5
    )


def test_null_p_values_are_not_anti_conservative():
    rng = np.random.default_rng(4)
    ps = np.array([sign_flip_test(rng.normal(size=10))[0] for _ in range(300)])
    assert np.mean(ps <= 0.05) <= 0.05 + 0.03


def _records():
    rng = np.random.default_rng(3)
    truth = rng.integers(0, 2, 40)
    raters = {"e1": ("expert", 0.95), "e2": ("expert", 0.9), "l1": ("lay", 0.7), "l2": ("lay", 0.65)}
    recs, k = [], 0
    answers = {}
    for ann, (role, acc) in raters.items():
        a = np.where(rng.random(40) < acc, truth, 1 - truth)
        answers[ann] = a
        for i in range(40):
            answer = "yes" if a[i] else "no"
            recs.append(answer_record(f"a{k}", ann, f"f{i:02d}", answer, i, stamp(3600 + k), role=role,
                                      issue_type="label_error"))
            k += 1
    return recs, answers


def test_differences_use_reference_expert_pairs():
    recs, ans = _records()
    diffs = expert_lay_differences(effective_answers(answers_from_records(recs)))
    assert diffs.height == 2 * 1 * 2  # reference e1/e2 x other expert x 2 lay
    row = diffs.filter((diffs["reference"] == "e1") & (diffs["lay"] == "l2")).row(0, named=True)
    expect = cohen_kappa_score(ans["e1"], ans["e2"]) - cohen_kappa_score(ans["e1"], ans["l2"])
    assert row["difference"] == pytest.approx(expect)
    tests = expert_lay_tests(diffs).row(0, named=True)
    assert tests["n_differences"] == 4 and tests["mean_flip_exact"]
    assert tests["p_value_mean_flip"] == pytest.approx(sign_flip_test(diffs["difference"].to_numpy())[0])
    assert tests["p_value"] == pytest.approx(_sign_permutation_p(diffs["difference"].to_numpy()), rel=1e-12)


def test_tests_by_reference_expert():
    recs, _ = _records()
    diffs = expert_lay_differences(effective_answers(answers_from_records(recs)))
    per_ref = expert_lay_tests(diffs, by_reference=True)
    assert sorted(per_ref["reference"]) == ["e1", "e2"]
    for r in per_ref.iter_rows(named=True):
        d = diffs.filter(diffs["reference"] == r["reference"])["difference"].to_numpy()
        assert r["n_differences"] == 2
        assert r["p_value_mean_flip"] == pytest.approx(sign_flip_test(d)[0])
        assert r["p_value"] == pytest.approx(_sign_permutation_p(d), rel=1e-12)
