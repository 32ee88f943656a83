"""Sensitivity table on a hand-made example: model-equal weighting, spread, reversal detection."""

import polars as pl
import pytest
from sklearn.metrics import roc_auc_score

from noisycal_platform.correctness.sensitivity import ranking_reversals, sensitivity_table
from tests.unit.correctness._frames import auroc_grid


def _frames():
    # one dataset, two models of different size; u1 ranks well under criterion f, u2 under g.
    rows, scores = [], []
    u1 = [0.9, 0.8, 0.2, 0.1, 0.7, 0.3]
    u2 = [0.1, 0.2, 0.9, 0.8, 0.3, 0.6]
    f = [0, 0, 1, 1, 0, 1]  # correct under f: errors have high u1
    g = [1, 1, 0, 0, 1, 0]  # correct under g: errors have high u2
    models = ["small", "small", "small", "small", "big", "big"]
    for i in range(6):
        scores.append({"dataset": "d", "model": models[i], "case_id": f"c{i}", "u1": u1[i], "u2": u2[i]})
        rows.append(
            {"dataset": "d", "model": models[i], "case_id": f"c{i}", "criterion": "f", "accepted": bool(f[i])}
        )
        rows.append(
            {"dataset": "d", "model": models[i], "case_id": f"c{i}", "criterion": "g", "accepted": bool(g[i])}
        )
    return pl.DataFrame(rows), pl.DataFrame(scores), (u1, u2, f, g, models)


def test_models_equally_weighted_and_spread():
    correct, scores, (u1, _u2, f, _g, models) = _frames()
    t = sensitivity_table(correct, scores, ["u1", "u2"])
    small = [i for i, m in enumerate(models) if m == "small"]
    big = [i for i, m in enumerate(models) if m == "big"]

    def auc(u, c, idx):
        return roc_auc_score([1 - c[i] for i in idx], [u[i] for i in idx])

    want = (auc(u1, f, small) + auc(u1, f, big)) / 2
    got = t.filter((pl.col("ue_method") == "u1") & (pl.col("criterion") == "f"))["auroc"][0]
    assert got == pytest.approx(want)
    row = t.filter(pl.col("ue_method") == "u2")
    assert row["spread"][0] == pytest.approx(abs(row["auroc"][0] - row["auroc"][1]))
    assert t["n_models"].to_list() == [2, 2, 2, 2]


def test_reversal_detected():
    correct, scores, _ = _frames()
    t = sensitivity_table(correct, scores, ["u1", "u2"])
    rev = ranking_reversals(t)
    assert rev.height == 1
    r = rev.row(0, named=True)
    assert (r["ue_method_a"], r["ue_method_b"], r["criterion_1"], r["criterion_2"]) == ("u1", "u2", "f", "g")
    assert (r["auroc_a_1"] - r["auroc_b_1"]) * (r["auroc_a_2"] - r["auroc_b_2"]) < 0
    assert t["in_reversal"].all()


def test_no_reversal_when_orders_agree():
    t = auroc_grid([0.7, 0.6, 0.5, 0.55])
    assert ranking_reversals(t).height == 0


def test_missing_columns_raise():
    correct, scores, _ = _frames()
    with pytest.raises(ValueError, match="u3"):
        sensitivity_table(correct, scores, ["u3"])
