"""Ranking quality (Gröger et al. 2023 Table 3) and speed-up (Table 4)."""

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from noisycal_platform.cleaning.ranking_quality import (
    ranked_list_metrics,
    ranking_quality_vs_answers,
    speedup_table,
)
from noisycal_platform.metrics import auprg


def test_ranked_list_equals_sklearn_without_tail():
    rng = np.random.default_rng(0)
    y = (rng.random(80) < np.linspace(0.6, 0.05, 80)).astype(int)
    score = -np.arange(80)  # earlier = more suspicious
    res = ranked_list_metrics(y)
    assert res["auroc"] == pytest.approx(roc_auc_score(y, score))
    assert res["ap"] == pytest.approx(average_precision_score(y, score))
    assert res["auprg"] == pytest.approx(auprg(y, score))
    assert res["recall_at_k"] == 1.0


def test_unranked_tail_is_one_tie_group():
    y = np.array([1, 0, 1, 0, 0])
    pos_out, neg_out = 2, 30
    full_y = np.r_[y, np.ones(pos_out), np.zeros(neg_out)]
    full_s = np.r_[-np.arange(5), np.full(pos_out + neg_out, -10)]
    res = ranked_list_metrics(y, pos_out, neg_out)
    assert res["auroc"] == pytest.approx(roc_auc_score(full_y, full_s))
    assert res["ap"] == pytest.approx(average_precision_score(full_y, full_s))
    assert res["recall_at_k"] == pytest.approx(2 / 4)
    with pytest.raises(ValueError):
        ranked_list_metrics([0, 2])


def test_quality_vs_unanimous_uses_items_seen_by_all():
    confirmed = pl.DataFrame(
        {
            "dataset": ["d"] * 7,
            "issue_type": ["irrelevant"] * 7,
            "position": [0, 1, 2, 3, 4, 5, None],
            "seen_by_all": [True, True, True, False, True, True, True],
            "unanimous": [True, False, True, False, False, False, True],
        }
    )
    out = ranking_quality_vs_answers(confirmed).row(0, named=True)
    y = [1, 0, 1, 0, 0]  # positions 0,1,2,4,5 (3 not seen by all; null position = not in queue)
    s = [0, -1, -2, -4, -5]
    assert out["n_items"] == 5 and out["n_positive"] == 2 and out["positive_rate"] == pytest.approx(0.4)
    assert out["auroc"] == pytest.approx(roc_auc_score(y, s))
    assert out["ap"] == pytest.approx(average_precision_score(y, s))


def _effective(counts: dict[str, list[int]], issue_type: str) -> pl.DataFrame:
    rows = []
    for ds, per in counts.items():
        for a, c in enumerate(per):
            for i in range(c):
                rows.append(
                    dict(
                        dataset=ds,
                        issue_type=issue_type,
                        annotator_id=f"e{a}",
                        item_id=f"f{i}",
                        item_id_2=f"g{i}" if issue_type == "near_duplicate" else None,
                    )
                )
    return pl.DataFrame(rows)


def test_speedup_reproduces_seed_table4_averages():
    # Gröger et al. 2023 Table 4, irrelevant samples: sizes and factors -> micro 14.0, macro 14.8
    sizes = {"MED-NODE": 170, "PH2": 200, "DDI": 656, "Derm7pt": 2022, "PAD-UFES-20": 2298, "SD-128": 5619}
    factors = {"MED-NODE": 1.9, "PH2": 2.6, "DDI": 6.1, "Derm7pt": 36.8, "PAD-UFES-20": 8.2, "SD-128": 32.9}
    counts = {ds: [round(sizes[ds] / factors[ds])] * 3 for ds in sizes}
    out = speedup_table(_effective(counts, "irrelevant"), sizes)
    per = dict(zip(out["dataset"], out["speed_up"], strict=True))
    for ds in sizes:
        assert per[ds] == pytest.approx(factors[ds], abs=0.05)
    assert per["micro-average"] == pytest.approx(14.0, abs=0.1)
    assert per["macro-average"] == pytest.approx(14.8, abs=0.1)


def test_speedup_pairs_and_mean_over_annotators():
    out = speedup_table(_effective({"d": [10, 20, 30]}, "near_duplicate"), {"d": 100})
    row = out.filter(pl.col("dataset") == "d").row(0, named=True)
    assert row["n_total"] == 4950 and row["n_annotated_mean"] == 20 and row["n_annotated_union"] == 30
    assert row["speed_up"] == pytest.approx(4950 / 20)
    with pytest.raises(ValueError, match="n_items"):
        speedup_table(_effective({"d": [1]}, "irrelevant"), {})


def test_quality_by_annotator_matches_sklearn():
    from noisycal_platform.cleaning.ranking_quality import ranking_quality_by_annotator

    eff = pl.DataFrame(
        {
            "dataset": ["d"] * 7,
            "issue_type": ["irrelevant"] * 7,
            "annotator_id": ["e1"] * 4 + ["l1"] * 3,
            "role": ["expert"] * 4 + ["lay"] * 3,
            "position": [3, 0, 1, 2, 0, 1, 2],
            "yes": [True, True, False, False, False, True, False],
        }
    )
    out = ranking_quality_by_annotator(eff).sort("annotator_id")
    e1 = out.row(0, named=True)
    y = [1, 0, 0, 1]  # e1 answers by position 0, 1, 2, 3
    assert e1["role"] == "expert" and e1["n_items"] == 4
    assert e1["auroc"] == pytest.approx(roc_auc_score(y, [0, -1, -2, -3]))
    assert e1["ap"] == pytest.approx(average_precision_score(y, [0, -1, -2, -3]))
    # l1: y = (0, 1, 0) by position; the yes beats one of the two no's -> AUROC 1/2
    assert out.row(1, named=True)["auroc"] == pytest.approx(0.5)
