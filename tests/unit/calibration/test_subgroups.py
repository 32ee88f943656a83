"""Subgroup NC-ECE with Holm's correction: Holm against its closed form, too-small subgroups listed and not
computed, and a simulation with known truth: a miscalibrated subgroup is flagged, a calibrated one rarely."""

import numpy as np
import polars as pl
import pytest

from noisycal_platform.calibration import estimate_channels
from noisycal_platform.calibration.subgroups import (
    SUBGROUP_ESTIMATOR,
    binary_subgroup_rows,
    holm,
    holm_min_p,
    subgroup_rows,
)
from noisycal_platform.calibration.tables import annotation_matrix
from noisycal_platform.calibration.weights import aggregation_weights

FPR = np.array([0.10, 0.05, 0.15])
FNR = np.array([0.15, 0.10, 0.05])


def test_holm_equals_the_step_down_by_hand():
    # sorted 0.01, 0.03, 0.04, 0.5 with m = 4: 4·0.01, 3·0.03, max(0.09, 2·0.04), max(0.09, 0.5)
    np.testing.assert_allclose(holm([0.01, 0.04, 0.03, 0.5]), [0.04, 0.09, 0.09, 0.5], rtol=1e-12)
    assert holm([0.6, 0.7]).tolist() == [1.0, 1.0]  # capped at 1 (exact: min(1, ·))
    assert holm([]).size == 0


def test_holm_min_p_is_bonferroni_on_the_smallest():
    # family rejected after Holm iff min(1, m·min p) < α: by hand for m = 2, 3 and with NaN (not run) left out
    assert holm_min_p([0.03, 0.2]) == pytest.approx(0.06, rel=1e-12)
    assert holm_min_p([0.2, 0.01, 0.5]) == pytest.approx(0.03, rel=1e-12)
    assert holm_min_p([0.02, float("nan")]) == pytest.approx(0.02, rel=1e-12)
    assert holm_min_p([0.7, 0.6]) == 1.0
    assert np.isnan(holm_min_p([float("nan")]))


def test_too_small_subgroups_are_listed_not_computed():
    calls = []

    def evaluate(mask):
        calls.append(int(mask.sum()))
        return [{"kind": "binary", "p_value": 0.01, "n_items": int(mask.sum())}]

    annotated = np.ones(10, bool)
    groups = [("site", "A", np.arange(10) < 7), ("site", "B", np.arange(10) >= 7)]
    rows = subgroup_rows(groups, annotated, evaluate, ("binary",), min_items=5)
    assert calls == [7]
    assert [(r["subgroup_value"], r["status"], r["n_items"]) for r in rows] == [("A", "ok", 7), ("B", "too_small", 3)]
    assert rows[0]["estimator"] == SUBGROUP_ESTIMATOR and rows[0]["p_value_holm"] == pytest.approx(0.01)
    assert "flagged" not in rows[1] and "p_value_holm" not in rows[1]


def _replicate(seed: int, n_per_group: int = 600, shift: float = 0.12):
    """Two sites: 'good' with P(Y=1 | s) = s, 'bad' with P(Y=1 | s) = clip(s + shift); three annotators with
    class-conditional noise (FPR, FNR), every item labelled by all."""
    rng = np.random.default_rng(seed)
    n = 2 * n_per_group
    s = rng.uniform(0.05, 0.95, n)
    bad = np.arange(n) >= n_per_group
    y = rng.random(n) < np.where(bad, np.clip(s + shift, 0, 1), s)
    u = rng.random((n, 3))
    labels = np.where(y[:, None], u >= FNR, u < FPR).astype(np.int8)
    ids = [f"i{i:05d}" for i in range(n)]
    ann = pl.DataFrame({"item_id": np.repeat(ids, 3), "annotator_id": ["a", "b", "c"] * n, "label": labels.ravel()})
    preds = pl.DataFrame({
        "item_id": ids, "score": s,
        "subgroups": [[{"column": "site", "value": "bad" if b else "good"}] for b in bad],
    })
    return ann, preds


def _flags(seed: int, n_boot: int) -> dict[str, bool]:
    ann, preds = _replicate(seed)
    matrix = annotation_matrix(ann, preds.select("item_id", "score"))
    fit = estimate_channels(matrix.values, scores=matrix.scores, seed=seed)  # the whole version's channels
    w = aggregation_weights(fit.channels, fit.prevalence)
    rows = binary_subgroup_rows(matrix, preds, fit.channels, w, n_bootstrap=n_boot, seed=seed, min_items=200)
    return {r["subgroup_value"]: r["flagged"] for r in rows}


def _assert_flag_rates(flags, first_seed: int, n_rep: int, n_boot: int, z: float) -> None:
    """The bad site is flagged in at least 90% of the replicates, the good one in at most 5% plus ``z`` binomial
    standard errors at 5% (Holm only lowers the calibrated site's rejection rate)."""
    runs = [flags(first_seed + r, n_boot) for r in range(n_rep)]
    assert np.mean([f["bad"] for f in runs]) >= 0.9
    assert np.mean([f["good"] for f in runs]) <= 0.05 + z * np.sqrt(0.05 * 0.95 / n_rep)


def test_miscalibrated_subgroup_flagged_after_holm_calibrated_one_rarely():
    _assert_flag_rates(_flags, 1000, n_rep=30, n_boot=150, z=2.0)


@pytest.mark.slow
def test_subgroup_flag_rates_with_many_replicates():
    _assert_flag_rates(_flags, 1000, n_rep=300, n_boot=400, z=2.5)


def test_pipeline_stores_subgroup_rows_and_the_report_flags_the_bad_site():
    from noisycal_platform.calibration import pipeline as cal

    ann, preds = _replicate(7, n_per_group=500, shift=0.2)
    channels = cal.channel_estimates(ann, preds, n_check_replicates=20)
    report = cal.nc_ece_report(ann, preds, channels, n_bootstrap=100, min_items_per_subgroup=200)
    sub = report.filter(pl.col("estimator") == SUBGROUP_ESTIMATOR).sort("subgroup_value")
    assert sub["subgroup_value"].to_list() == ["bad", "good"] and sub["status"].to_list() == ["ok", "ok"]
    assert sub["flagged"].to_list() == [True, False]
    # overall rows first and unchanged by the subgroups: the same as without items.csv
    plain = cal.nc_ece_report(ann, preds.drop("subgroups"), channels, n_bootstrap=100)
    assert report.head(plain.height).equals(plain)
    html, summary = cal.calibration_report(ann, preds, None, channels, report, None, None,
                                           model_version="v", min_items_per_subgroup=200)
    assert "Flagged subgroups:</b> site = bad (binary)" in html and "site = bad — FLAGGED (miscalibrated)" in html
    assert "FLAGGED subgroup: site = bad" in summary
    small = cal.nc_ece_report(ann, preds, channels, n_bootstrap=0, min_items_per_subgroup=600)
    rows = small.filter(pl.col("estimator") == SUBGROUP_ESTIMATOR)
    assert rows["status"].to_list() == ["too_small", "too_small"] and rows["value"].null_count() == 2
    html, _ = cal.calibration_report(ann, preds, None, channels, small, None, None,
                                     min_items_per_subgroup=600)
    assert "Too small (not computed):</b> site = bad (500 items), site = good (500 items)" in html


def _class_replicate(seed: int, n_per_group: int = 500, temper: float = 2.0, n_classes: int = 4):
    """Four classes; Y ~ Categorical(p) for every item (p calibrated); the 'bad' site reports
    softmax(log p / temper) instead (under-confident). Three readers with asymmetric confusion matrices."""
    from scipy.special import softmax

    from noisycal_platform.calibration.class_tables import ClassMatrix
    from noisycal_platform.calibration.demo_data import digits_confusion

    rng = np.random.default_rng(seed)
    n = 2 * n_per_group
    p = softmax(rng.normal(0, 2.0, (n, n_classes)), axis=1)
    y = (rng.random(n)[:, None] > p.cumsum(axis=1)).sum(axis=1).clip(0, n_classes - 1)
    bad = np.arange(n) >= n_per_group
    shown = np.where(bad[:, None], softmax(np.log(p) / temper, axis=1), p)
    t = np.stack([digits_confusion(e, o, n_classes) for e, o in ((0.15, 1), (0.2, 3), (0.1, 2))])
    u = rng.random((n, 3))
    values = np.stack([(u[:, j, None] > t[j][y].cumsum(axis=1)).sum(axis=1).clip(0, n_classes - 1)
                       for j in range(3)], axis=1).astype(float)
    ids = tuple(f"i{i:05d}" for i in range(n))
    cm = ClassMatrix(ids, ("a", "b", "c"), tuple("wxyz"), values, shown, 0, 0)
    preds = pl.DataFrame({"item_id": list(ids),
                          "subgroups": [[{"column": "site", "value": "bad" if b else "good"}] for b in bad]})
    return cm, preds


def _class_flags(seed: int, n_boot: int) -> dict[str, bool]:
    from noisycal_platform.calibration.class_tables import ConfusionTable
    from noisycal_platform.calibration.multiclass import class_weights, estimate_confusion
    from noisycal_platform.calibration.subgroups import class_subgroup_rows

    cm, preds = _class_replicate(seed)
    fit = estimate_confusion(cm.values, n_classes=4, seed=seed)  # the whole version's channels
    ct = ConfusionTable(cm.annotator_ids, cm.classes, fit.confusion, class_weights(fit.confusion, fit.prevalence),
                        fit.prevalence, fit.method, fit.converged)
    rows = class_subgroup_rows(cm, preds, ct, n_bootstrap=n_boot, seed=seed, min_items=200)
    return {r["subgroup_value"]: r["flagged"] for r in rows if r["kind"] == "top_label"}


def test_multiclass_miscalibrated_subgroup_flagged_calibrated_one_rarely():
    _assert_flag_rates(_class_flags, 2000, n_rep=20, n_boot=150, z=2.0)


@pytest.mark.slow
def test_multiclass_subgroup_flag_rates_with_many_replicates():
    _assert_flag_rates(_class_flags, 2000, n_rep=200, n_boot=300, z=2.5)
