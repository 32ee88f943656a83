"""Pipeline tables: long→wide, channel table, SQL parity of the per-bin table, NC-ECE report."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from noisycal_platform.calibration import Channel, NotIdentifiableError, binned_ece
from noisycal_platform.calibration.tables import (
    annotation_matrix,
    channel_estimates_table,
    channels_from_table,
    nc_ece_bins_table,
    nc_ece_report_table,
)

FPR, FNR = (0.1, 0.05, 0.2), (0.15, 0.1, 0.05)


def _frames(n=1500, seed=0, k=3):
    rng = np.random.default_rng(seed)
    s = rng.random(n)
    y = rng.random(n) < np.clip(1.3 * s - 0.15, 0, 1)
    ids = [f"it{i:05d}" for i in range(n)]
    rows = []
    for j in range(k):
        lab = np.where(y, rng.random(n) >= FNR[j], rng.random(n) < FPR[j]).astype(int)
        keep = rng.random(n) < 0.85
        rows += [(ids[i], f"r{j}", int(lab[i])) for i in np.flatnonzero(keep)]
    ann = pl.DataFrame(
        rows, schema={"item_id": pl.Utf8, "annotator_id": pl.Utf8, "label": pl.Int8}, orient="row"
    )
    ann = ann.vstack(
        pl.DataFrame({"item_id": ["unscored"], "annotator_id": ["r0"], "label": [1]}, schema=ann.schema)
    )
    pred = pl.DataFrame({"item_id": ids[::-1], "score": s[::-1]})
    ref = pl.DataFrame({"item_id": ids, "label": y.astype(np.int8)})
    return ann, pred, ref, s, y


def test_annotation_matrix_long_to_wide():
    ann, pred, _, s, _ = _frames(n=200)
    m = annotation_matrix(ann, pred)
    assert m.item_ids == tuple(sorted(pred["item_id"]))
    assert m.annotator_ids == ("r0", "r1", "r2")
    np.testing.assert_array_equal(m.scores, s)  # rows sorted by item id (= original order here)
    assert m.n_annotated_unscored == 1
    assert m.n_scored_unannotated == int(np.isnan(m.values).all(axis=1).sum())
    first = ann.filter((pl.col("item_id") == "it00007") & (pl.col("annotator_id") == "r1"))
    expect = float(first["label"][0]) if first.height else np.nan
    np.testing.assert_equal(m.values[7, 1], expect)
    assert m.n_labels.sum() == ann.height - 1


def test_annotation_matrix_rejects_duplicates_and_bad_labels():
    ann = pl.DataFrame({"item_id": ["a", "a"], "annotator_id": ["r", "r"], "label": [0, 1]})
    with pytest.raises(ValueError, match="duplicate"):
        annotation_matrix(ann)
    with pytest.raises(ValueError, match="label"):
        annotation_matrix(pl.DataFrame({"item_id": ["a"], "annotator_id": ["r"], "label": [2]}))
    with pytest.raises(ValueError, match="missing column"):
        annotation_matrix(pl.DataFrame({"item_id": ["a"], "label": [1]}))


def test_channel_table_schema_and_round_trip():
    ann, pred, *_ = _frames()
    m = annotation_matrix(ann, pred)
    ct = channel_estimates_table(m)
    for col in ("annotator_id", "fpr", "fnr", "gap", "weight", "converged", "min_gap", "min_items_per_bin"):
        assert col in ct.columns
    assert ct["weight"].sum() == pytest.approx(1.0)
    np.testing.assert_allclose(ct["gap"], 1 - ct["fpr"] - ct["fnr"])
    np.testing.assert_allclose(ct["fpr"], FPR, atol=0.04)
    back = channels_from_table(ct)
    chans, w = back.for_matrix(m)
    assert chans[0] == Channel(ct["fpr"][0], ct["fnr"][0])
    np.testing.assert_allclose(w, ct["weight"])
    known = channel_estimates_table(m, known={f"r{j}": Channel(FPR[j], FNR[j]) for j in range(3)})
    assert known["method"][0] == "known"
    np.testing.assert_allclose(known["fpr"], FPR)


def test_two_annotators_without_scores_raise():
    ann, *_ = _frames(k=2)
    with pytest.raises(NotIdentifiableError):
        channel_estimates_table(annotation_matrix(ann))


def test_bins_table_equals_sql_on_long_tables():
    duckdb = pytest.importorskip("duckdb")
    ann, pred, *_ = _frames()
    m = annotation_matrix(ann, pred)
    ct = channel_estimates_table(m)
    bins = nc_ece_bins_table(m, ct)
    con = duckdb.connect()
    con.register("annotations", ann.to_arrow())
    con.register("predictions", pred.to_arrow())
    con.register("channels", ct.select("annotator_id", "fpr", "gap", "weight").to_arrow())
    sql = con.execute(
        """
        WITH y AS (
          SELECT a.item_id, sum(c.weight * (a.label - c.fpr) / c.gap) / sum(c.weight) AS ytilde
          FROM annotations a JOIN channels c USING (annotator_id) GROUP BY a.item_id HAVING sum(c.weight) > 0)
        SELECT least(floor(p.score * ?::DOUBLE), ? - 1)::BIGINT AS bin, count(*) AS n,
               avg(p.score) AS mean_score, avg(y.ytilde) AS mean_corrected_label
        FROM predictions p JOIN y USING (item_id) GROUP BY bin ORDER BY bin
        """,
        [15, 15],
    ).pl()
    assert bins["bin"].to_list() == sql["bin"].to_list()
    assert bins["n"].to_list() == sql["n"].to_list()
    np.testing.assert_allclose(bins["mean_score"], sql["mean_score"], atol=1e-9)
    np.testing.assert_allclose(bins["mean_corrected_label"], sql["mean_corrected_label"], atol=1e-9)


def test_nc_ece_report_rows_and_bootstrap():
    ann, pred, *_ = _frames()
    m = annotation_matrix(ann, pred)
    ct = channel_estimates_table(m)
    rep = nc_ece_report_table(m, ct, n_bootstrap=200, seed=3)
    assert (
        rep["estimator"].to_list()
        == ["nc_ece", "naive_majority_vote", "naive_soft_vote"] + ["naive_annotator"] * 3
    )
    # naive single-annotator ECE by hand
    j = 1
    keep = ~np.isnan(m.values[:, j])
    expect = binned_ece(m.scores[keep], m.values[keep, j], 15)
    assert rep.filter(pl.col("annotator_id") == "r1")["value"][0] == pytest.approx(expect, rel=1e-9, abs=1e-12)
    nc = rep.row(0, named=True)
    assert nc["ci_low"] <= nc["value"] <= nc["ci_high"]
    assert rep.equals(nc_ece_report_table(m, ct, n_bootstrap=200, seed=3))  # seeded


def test_two_annotators_with_scores_use_score_groups():
    ann, pred, *_ = _frames(n=4000, k=2)
    ct = channel_estimates_table(annotation_matrix(ann, pred))
    assert ct["method"][0] == "score_group_em"
    np.testing.assert_allclose(ct["fpr"], FPR[:2], atol=0.05)
    np.testing.assert_allclose(ct["fnr"], FNR[:2], atol=0.05)
