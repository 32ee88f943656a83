"""UE formulas on hand-computed logits (Kang et al. 2025; Ma et al. 2025; Farquhar et al. 2024): closed forms,
the shift behaviour, the worked toy examples for Semantic Entropy."""

from fractions import Fraction

import numpy as np
import pytest

from noisycal_platform.correctness.ue import (
    answer_entropy,
    answer_keys,
    cluster_by_entailment,
    logtoku,
    logtoku_token_values,
    self_certainty,
    semantic_entropy_discrete,
    semantic_entropy_weighted,
)


def _kl_uniform_reference(z):
    """KL(U || softmax(z)) written straight from the definition, over the full vocabulary."""
    z = np.asarray(z, dtype=float)
    p = np.exp(z - z.max())
    p /= p.sum()
    v = z.size
    return float(np.sum((1 / v) * np.log((1 / v) / p)))


def _stats(z):
    z = np.asarray(z, dtype=float)
    return float(np.log(np.sum(np.exp(z)))), float(z.mean())


def test_self_certainty_matches_definition_and_is_shift_invariant():
    tokens = [[2.0, 0.0, 0.0, 0.0], [1.0, 1.0, 1.0, 1.0], [5.0, -1.0, 0.5, 0.0]]
    want = -np.mean([_kl_uniform_reference(z) for z in tokens])
    lse, mean = zip(*(_stats(z) for z in tokens), strict=True)
    got = self_certainty([lse], [mean], [4])
    assert got[0] == pytest.approx(want, abs=1e-12)
    # the uniform token contributes exactly 0: KL(U||U) = 0
    assert self_certainty([[lse[1]]], [[mean[1]]], [4])[0] == pytest.approx(0.0, abs=1e-12)
    for c in (-7.0, 3.0, 100.0):
        lse_c, mean_c = zip(*(_stats(np.asarray(z) + c) for z in tokens), strict=True)
        assert self_certainty([lse_c], [mean_c], [4])[0] == pytest.approx(want, abs=1e-9)


def test_self_certainty_several_answers_and_validation():
    a = [[2.0, 0.0, 0.0, 0.0]]
    b = [[0.0, 0.0, 3.0, 0.0], [1.0, 0.0, 0.0, 0.0]]
    lse = [[_stats(z)[0] for z in a], [_stats(z)[0] for z in b]]
    mean = [[_stats(z)[1] for z in a], [_stats(z)[1] for z in b]]
    got = self_certainty(lse, mean, [4, 4])
    assert got[0] == pytest.approx(-_kl_uniform_reference(a[0]))
    assert got[1] == pytest.approx(-np.mean([_kl_uniform_reference(z) for z in b]))
    with pytest.raises(ValueError, match="vocab_size"):
        self_certainty(lse, mean, [4])
    with pytest.raises(ValueError, match="empty"):
        self_certainty([[]], [[]], [4])


def _digamma_diff(a: int, b: int) -> Fraction:
    """psi(b+1) - psi(a+1) for integers b > a >= 0: sum_{k=a+1}^{b} 1/k."""
    return sum((Fraction(1, k) for k in range(a + 1, b + 1)), Fraction(0))


def test_logtoku_token_value_closed_form_and_not_shift_invariant():
    # alpha = (3, 1): EU = 2/6, AU = (3/4)(psi5 - psi4) + (1/4)(psi5 - psi2) = 3/16 + 13/48 = 11/24
    au = Fraction(3, 4) * _digamma_diff(3, 4) + Fraction(1, 4) * _digamma_diff(1, 4)
    assert au == Fraction(11, 24)
    want = float(au * Fraction(2, 6))
    assert logtoku_token_values(np.array([[3.0, 1.0, -2.0]]))[0] == pytest.approx(want, rel=1e-12)
    # +1 to every logit: alpha = (4, 2): EU = 2/8, AU = (4/6)(psi7 - psi5) + (2/6)(psi7 - psi3) = 101/180
    au2 = Fraction(4, 6) * _digamma_diff(4, 6) + Fraction(2, 6) * _digamma_diff(2, 6)
    assert au2 == Fraction(101, 180)
    shifted = logtoku_token_values(np.array([[4.0, 2.0, -1.0]]))[0]
    assert shifted == pytest.approx(float(au2 * Fraction(2, 8)), rel=1e-12)
    assert shifted != pytest.approx(want, rel=1e-3)


def test_logtoku_worked_example_from_notes():
    # by hand from the evidential form (Ma et al. 2025, arXiv 2502.00290):
    # logits [30.98, 30.49, 12, 5, -3] -> AU 0.685, EU 0.0315, AU*EU 0.0216
    v = logtoku_token_values(np.array([[30.98, 30.49, 12, 5, -3]]))[0]
    assert v == pytest.approx(0.0216, abs=5e-5)


def test_logtoku_relu_and_nan():
    # negative logits are clipped to 0 evidence; all-non-positive top-K -> alpha0 = 0 -> nan
    assert np.isnan(logtoku_token_values(np.array([[-1.0, -2.0]]))[0])
    v = logtoku_token_values(np.array([[2.0, -5.0]]))[0]  # alpha = (2, 0): AU = -(1)(psi3 - psi3) = 0
    assert v == pytest.approx(0.0, abs=1e-15)


def test_logtoku_mean_of_25_largest():
    rng = np.random.default_rng(1)
    long = rng.uniform(1, 30, size=(40, 3))
    short = rng.uniform(1, 30, size=(7, 3))
    vals_long = np.sort(logtoku_token_values(long))[::-1]
    vals_short = logtoku_token_values(short)
    got = logtoku([long, short])
    assert got[0] == pytest.approx(vals_long[:25].mean(), rel=1e-12)
    assert got[1] == pytest.approx(vals_short.mean(), rel=1e-12)
    assert logtoku([long], top_n=3)[0] == pytest.approx(vals_long[:3].mean(), rel=1e-12)


def test_answer_entropy_uses_em_canonical_keys():
    samples = [["A", "a.", "B", "none", "A, B", "b and a"], ["A", "A", "A"]]
    keys = answer_keys(samples, [["A", "B"], ["A", "B"]])
    h = answer_entropy(keys)
    p = np.array([2, 1, 1, 2]) / 6
    assert h[0] == pytest.approx(-np.sum(p * np.log(p)))
    assert h[1] == pytest.approx(0.0, abs=1e-15)


def test_unmappable_answers_are_keyed_by_text():
    keys = answer_keys([["maybe A", "Maybe A!", "A"]], [["A", "B"]])
    assert keys[0][0] == keys[0][1] != keys[0][2]


def test_semantic_entropy_toy_values_from_notes():
    # discrete and likelihood-weighted SE by hand (Farquhar et al., Nature 2024):
    # p = [0.6, 0.6, 0.6, 0.3, 0.1], clusters {0,1,2,3},{4}
    clusters = [[0, 0, 0, 0, 1]]
    lls = [[[np.log(0.6)], [np.log(0.6)], [np.log(0.6)], [np.log(0.3)], [np.log(0.1)]]]
    m = np.array([21 / 22, 1 / 22])
    assert semantic_entropy_weighted(clusters, lls)[0] == pytest.approx(-np.sum(m * np.log(m)), rel=1e-12)
    assert semantic_entropy_weighted(clusters, lls)[0] == pytest.approx(0.1849, abs=1e-4)
    assert semantic_entropy_discrete(clusters)[0] == pytest.approx(0.5004, abs=1e-4)


def test_weighted_se_uses_mean_token_loglik():
    # two samples, different lengths, same mean log-lik -> equal weights -> entropy log 2
    lls = [[[-1.0, -1.0, -1.0], [-1.0]]]
    assert semantic_entropy_weighted([[0, 1]], lls)[0] == pytest.approx(np.log(2))


def test_cluster_by_entailment_is_bidirectional():
    table = {("a", "b"): True, ("b", "a"): True, ("a", "c"): True, ("c", "a"): False}
    ids = cluster_by_entailment(["a", "b", "c", "a"], lambda x, y: table.get((x, y), False))
    assert ids == [0, 0, 1, 0]
