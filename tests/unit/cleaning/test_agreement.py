"""Agreement: α and κ against the krippendorff package, scikit-learn and hand computations; bootstrap CIs."""

import krippendorff
import numpy as np
import polars as pl
import pytest
from sklearn.metrics import cohen_kappa_score

from noisycal_platform.cleaning.agreement import (
    agreement_band,
    agreement_stats,
    alpha_bootstrap,
    cohen_kappa,
    kappa_bootstrap,
    krippendorff_alpha,
    percentile_ci,
    reliability_matrix,
)
from noisycal_platform.cleaning.protocol import answers_from_records, effective_answers
from noisycal_platform.metrics import bootstrap_counts
from tests.unit.cleaning._answers import answer_record, stamp

NAN = np.nan


def test_kappa_hand_computed_and_sklearn():
    a = [1, 1, 1, 0, 0, 0, 0, 0, 1, 0]
    b = [1, 1, 0, 0, 0, 0, 0, 1, 1, 0]
    # p_o = 8/10, p_e = .4*.4 + .6*.6 = .52, kappa = (.8-.52)/(1-.52) = 7/12
    assert cohen_kappa(a, b) == pytest.approx(7 / 12, abs=1e-12)
    rng = np.random.default_rng(0)
    for _ in range(10):
        x = rng.integers(0, 2, 50)
        y = np.where(rng.random(50) < 0.7, x, 1 - x)
        assert cohen_kappa(x, y) == pytest.approx(cohen_kappa_score(x, y), abs=1e-12)


def test_alpha_hand_computed_and_package():
    m = np.array([[1, 1, NAN, 0], [1, 0, 1, 0], [NAN, 1, 1, 0]])
    # units: (1,1) (1,0,1) (1,1) (0,0,0): n=10, n1=6, n0=4; sum 2*n0u*n1u/(m_u-1) = 2*1*2/2 = 2
    # alpha = 1 - (n-1) * 2 / (2 * n0 * n1) = 1 - 9*2/48 = 0.625
    assert krippendorff_alpha(m) == pytest.approx(0.625, abs=1e-12)
    rng = np.random.default_rng(1)
    for _ in range(10):
        truth = rng.integers(0, 2, 40)
        mat = np.where(rng.random((4, 40)) < 0.8, truth, 1 - truth).astype(float)
        mat[rng.random((4, 40)) < 0.3] = NAN
        ref = krippendorff.alpha(reliability_data=mat, level_of_measurement="nominal")
        assert krippendorff_alpha(mat) == pytest.approx(ref, abs=1e-12)


def test_alpha_and_kappa_undefined_cases():
    assert np.isnan(krippendorff_alpha(np.array([[1, 1, 1], [1, 1, NAN]])))
    assert np.isnan(cohen_kappa([1, 1], [1, 1]))
    assert np.isnan(cohen_kappa([], []))


def test_bootstrap_replicates_equal_package_values():
    rng = np.random.default_rng(2)
    truth = rng.integers(0, 2, 30)
    mat = np.where(rng.random((3, 30)) < 0.8, truth, 1 - truth).astype(float)
    mat[rng.random((3, 30)) < 0.2] = NAN
    mat = mat[:, np.isfinite(mat).any(axis=0)]
    reps = alpha_bootstrap(mat, 15, np.random.default_rng(9))
    w = bootstrap_counts(mat.shape[1], 15, np.random.default_rng(9)).astype(int)
    for b in range(15):
        resampled = np.repeat(mat, w[b], axis=1)
        ref = krippendorff.alpha(reliability_data=resampled, level_of_measurement="nominal")
        assert reps[b] == pytest.approx(ref, abs=1e-10)
    x, y = truth, np.where(rng.random(30) < 0.75, truth, 1 - truth)
    kr = kappa_bootstrap(x, y, 15, np.random.default_rng(4))
    w = bootstrap_counts(30, 15, np.random.default_rng(4))
    for b in range(15):
        assert kr[b] == pytest.approx(cohen_kappa_score(x, y, sample_weight=w[b]), abs=1e-10)


def test_kappa_bootstrap_ci_covers_population_kappa():
    # two raters, independent given truth: prevalence pi, sensitivity se, specificity sp
    pi, se, sp, n = 0.3, 0.85, 0.9, 200
    q = pi * se + (1 - pi) * (1 - sp)
    p11 = pi * se**2 + (1 - pi) * (1 - sp) ** 2
    p00 = pi * (1 - se) ** 2 + (1 - pi) * sp**2
    pe = q**2 + (1 - q) ** 2
    kappa_true = (p11 + p00 - pe) / (1 - pe)
    rng = np.random.default_rng(7)
    hits, reps = 0, 60
    for _ in range(reps):
        t = rng.random(n) < pi
        a = np.where(t, rng.random(n) < se, rng.random(n) > sp).astype(float)
        b = np.where(t, rng.random(n) < se, rng.random(n) > sp).astype(float)
        lo, hi = percentile_ci(kappa_bootstrap(a, b, 1000, rng))
        hits += lo <= kappa_true <= hi
    assert hits / reps >= 0.85  # nominal 0.95


def test_bands():
    assert agreement_band(0.41) == "good"
    assert agreement_band(0.4) == "questionable"
    assert agreement_band(0.2) == "questionable"
    assert agreement_band(0.19) == "unacceptable"
    assert agreement_band(-0.3) == "unacceptable"
    assert agreement_band(float("nan")) == "undefined"


def test_agreement_stats_rows_match_peers():
    rng = np.random.default_rng(5)
    truth = rng.integers(0, 2, 25)
    recs, k = [], 0
    for ann in ("e1", "e2", "e3"):
        for i in range(25):
            if ann == "e3" and i > 18:
                continue  # e3 stopped early: missing answers
            ans = truth[i] if rng.random() < 0.85 else 1 - truth[i]
            recs.append(answer_record(f"a{k}", ann, f"f{i:02d}", "yes" if ans else "no", i, stamp(k)))
            k += 1
    eff = effective_answers(answers_from_records(recs))
    out = agreement_stats(eff, n_boot=200, seed=0)
    mat = np.full((3, 25), NAN)
    for r in eff.iter_rows(named=True):
        mat[int(r["annotator_id"][1]) - 1, int(r["item_id"][1:])] = float(r["yes"])
    alpha = out.filter(pl.col("statistic") == "krippendorff_alpha").row(0, named=True)
    assert alpha["value"] == pytest.approx(
        krippendorff.alpha(reliability_data=mat, level_of_measurement="nominal")
    )
    assert alpha["ci_low"] <= alpha["value"] <= alpha["ci_high"]
    kap = out.filter((pl.col("annotator_a") == "e1") & (pl.col("annotator_b") == "e3")).row(0, named=True)
    both = np.isfinite(mat[0]) & np.isfinite(mat[2])
    assert kap["n_items"] == 19
    assert kap["value"] == pytest.approx(cohen_kappa_score(mat[0, both], mat[2, both]))
    assert out.height == 4 and set(out["role_pair"]) == {"all", "expert-expert"}
    assert agreement_stats(eff, n_boot=200, seed=0).equals(out)  # seeded


def test_mixed_panel_adds_alpha_within_roles():
    rng = np.random.default_rng(8)
    truth = rng.integers(0, 2, 20)
    recs, k = [], 0
    for ann, role in (("e1", "expert"), ("e2", "expert"), ("l1", "lay")):
        for i in range(20):
            ans = truth[i] if rng.random() < 0.8 else 1 - truth[i]
            recs.append(answer_record(f"a{k}", ann, f"f{i:02d}", "yes" if ans else "no", i, stamp(k), role=role))
            k += 1
    eff = effective_answers(answers_from_records(recs))
    out = agreement_stats(eff, n_boot=50, seed=0).filter(pl.col("statistic") == "krippendorff_alpha")
    assert sorted(out["role_pair"]) == ["all", "expert"]  # one lay rater: no lay alpha
    mat, names, _ = reliability_matrix(eff)
    expert_rows = [names.index("e1"), names.index("e2")]
    ref = krippendorff.alpha(reliability_data=mat[expert_rows], level_of_measurement="nominal")
    assert out.filter(pl.col("role_pair") == "expert")["value"][0] == pytest.approx(ref)
