"""Pipeline functions (one per asset): queue, answers, confirmed issues, file lists, prevalence, truth."""

from datetime import UTC, datetime
from itertools import combinations
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import average_precision_score, roc_auc_score

from noisycal_platform.cleaning.pipeline.outcomes import (
    agreement_table,
    cleaning_impact_table,
    expert_lay_table,
    ranking_quality_table,
    sensitivity_table,
    speedup,
)
from noisycal_platform.cleaning.pipeline.protocol_tables import (
    cleaned_file_list,
    confirmation_queue,
    confirmed_issues,
    issue_table,
    label_error_prevalence,
    removed_files,
)
from noisycal_platform.cleaning.pipeline.schemas import ANSWER_SCHEMA, CONFIRMED_SCHEMA, QUEUE_SCHEMA
from noisycal_platform.cleaning.protocol import answers_from_records
from noisycal_platform.cleaning.ranking_quality import ranking_truth_table
from noisycal_platform.cleaning.simulate import Rater, Truth, simulate_answers
from tests.unit.cleaning._answers import answer_record, stamp

T0 = datetime(2026, 2, 1, 10, tzinfo=UTC)

N = 12
FILES = pl.DataFrame(
    {"file_name": [f"im{i:02d}.png" for i in range(N)], "label": [str(i % 3) for i in range(N)]}
)


def ranking(order):
    return SimpleNamespace(order=np.asarray(order), scores=np.linspace(0, 1, len(order)))


def pairs(ps):
    return SimpleNamespace(pairs=np.asarray(ps), scores=np.linspace(0, 1, len(ps)))


def rec(aid, ann, it, a, ans, pos, t, b=None, role="expert", undoes=None):
    return answer_record(aid, ann, a, ans, pos, stamp(t, T0), role=role, dataset="ds", issue_type=it, item_id_2=b,
                         undoes=undoes)


def test_confirmation_queue_schema_and_order():
    files = FILES.with_columns(
        pl.Series("file_name", [f"z{i:02d}" if i == 5 else f"a{i:02d}" for i in range(N)])
    )
    q = confirmation_queue("ds", ranking([3, 1, 0]), pairs([[0, 5], [2, 4]]), ranking([7, 8]), files)
    assert q.schema == pl.Schema(QUEUE_SCHEMA)
    irr = q.filter(pl.col("issue_type") == "irrelevant")
    assert irr["item_id"].to_list() == ["a03", "a01", "a00"] and irr["position"].to_list() == [0, 1, 2]
    assert irr["label"].null_count() == 3
    le = q.filter(pl.col("issue_type") == "label_error")
    assert le["label"].to_list() == ["1", "2"]
    nd = q.filter(pl.col("issue_type") == "near_duplicate")
    assert nd.rows()[0][3:5] == ("a00", "z05")  # stored sorted
    short = confirmation_queue("ds", ranking(range(N)), None, None, files, max_per_type=4)
    assert short.height == 4
    with pytest.raises(ValueError, match="out of range"):
        confirmation_queue("ds", ranking([0, N]), None, None, files)
    with pytest.raises(ValueError, match="pairs"):
        confirmation_queue("ds", None, pairs([[1, 1]]), None, files)


def test_answers_from_records_validation():
    good = rec("a", "e1", "near_duplicate", "im05.png", "yes", 0, 1, b="im01.png")
    df = answers_from_records([good, dict(good)], source_file="e1.jsonl")
    assert df.height == 1 and df.schema == pl.Schema(ANSWER_SCHEMA)
    assert df.row(0, named=True)["item_id"] == "im01.png" and df["source_file"][0] == "e1.jsonl"
    bad = [
        ({**good, "answer": "maybe"}, "answer"),
        ({**good, "role": "admin"}, "role"),
        ({**good, "item_id_2": None}, "item_id_2"),
        ({**good, "issue_type": "irrelevant"}, "item_id_2"),
        ({**good, "answer": "undo"}, "undoes"),
        ({**good, "undoes": "x"}, "undoes"),
        ({**good, "timestamp": "2026-02-01T10:00:00"}, "UTC offset"),
        ({**good, "position": -1}, "position"),
        ({**good, "issue_type": "blurry"}, "issue_type"),
    ]
    for r, msg in bad:
        with pytest.raises(ValueError, match=msg):
            answers_from_records([r])
    with pytest.raises(ValueError, match="different content"):
        answers_from_records([good, {**good, "answer": "no"}])


def test_confirmed_issues_join_and_cleaned_list_chain():
    q = confirmation_queue(
        "ds", ranking([0, 1, 2]), pairs([[3, 4], [4, 5], [6, 7]]), ranking([9, 10]), FILES
    )
    recs, t = [], 0
    for ann in ("e1", "e2"):
        for pos, (a, b) in enumerate(
            [("im03.png", "im04.png"), ("im04.png", "im05.png"), ("im06.png", "im07.png")]
        ):
            recs.append(
                rec(f"{ann}nd{pos}", ann, "near_duplicate", a, "no" if pos == 2 else "yes", pos, t, b=b)
            )
            t += 1
        recs.append(rec(f"{ann}i0", ann, "irrelevant", "im00.png", "yes", 0, t))
        recs.append(rec(f"{ann}l0", ann, "label_error", "im09.png", "yes", 0, t + 1))
        t += 2
    recs.append(rec("old", "e1", "irrelevant", "im11.png", "yes", 7, 59))  # not in the current queue
    recs.append(rec("lay", "l1", "irrelevant", "im01.png", "yes", 1, 58, role="lay"))
    conf = confirmed_issues(answers_from_records(recs), q)
    assert conf.schema == pl.Schema(CONFIRMED_SCHEMA)
    assert conf.height == q.height + 1
    old = conf.filter(pl.col("item_id") == "im11.png").row(0, named=True)
    assert old["position"] is None and old["n_yes"] == 1 and not old["unanimous"]
    unanswered = conf.filter(pl.col("item_id") == "im02.png").row(0, named=True)
    assert unanswered["n_annotators"] == 0 and unanswered["n_panel"] == 2 and not unanswered["majority"]
    assert (
        conf.filter(pl.col("item_id") == "im01.png")["n_yes"][0] == 0
    )  # lay answers not in the expert panel
    rem = removed_files(FILES, conf, "unanimous", seed=0)
    reasons = dict(rem.iter_rows())
    assert reasons.pop("im00.png") == "irrelevant"
    assert len(reasons) == 2 and set(reasons) < {"im03.png", "im04.png", "im05.png"}  # chain keeps one
    assert "im09.png" not in reasons  # label errors are never removed
    kept = cleaned_file_list(FILES, conf, "unanimous", seed=0)
    assert kept.columns == ["file_name"] and kept.height == N - 3
    assert kept["file_name"].to_list() == [
        f for f in FILES["file_name"] if f not in rem["file_name"].to_list()
    ]
    prev = label_error_prevalence(conf, FILES).filter(pl.col("rule") == "unanimous").row(0, named=True)
    assert prev["n_label_errors"] == 1 and prev["prevalence"] == pytest.approx(1 / N)
    table = issue_table(conf, {"ds": N})
    got = {(r["rule"], r["issue_type"]): r["n_issues"] for r in table.iter_rows(named=True)}
    assert (
        got[("unanimous", "near_duplicate")] == 2 and got[("majority", "irrelevant")] == 1
    )  # im11: 1 of 2 is not > half
    with pytest.raises(ValueError, match="rule"):
        cleaned_file_list(FILES, conf, "plurality")


def test_ranking_truth_table_against_brute_force_over_all_pairs():
    ranked = [[0, 1], [2, 3], [0, 5], [4, 7], [1, 9]]
    truth = Truth.from_sets(
        irrelevant=["im02.png", "im08.png"],
        near_duplicates=[("im03.png", "im02.png"), ("im05.png", "im06.png"), ("im00.png", "im01.png")],
        label_errors=["im04.png"],
    )
    out = ranking_truth_table(
        "ds",
        FILES,
        truth,
        irrelevant=ranking([8, 3, 2, 0, 1]),
        near_dups=pairs(ranked),
        label_errors=ranking(list(range(N))[::-1]),
    )
    names = FILES["file_name"].to_list()
    rank_of = {tuple(p): k for k, p in enumerate(ranked)}
    y, s = [], []
    for i, j in combinations(range(N), 2):
        y.append((names[i], names[j]) in truth.near_duplicates)
        s.append(-rank_of.get((i, j), 1000))
    nd = out.filter(pl.col("issue_type") == "near_duplicate").row(0, named=True)
    assert nd["n_total"] == 66 and nd["n_positive"] == 3 and nd["recall_at_k"] == pytest.approx(2 / 3)
    assert nd["auroc"] == pytest.approx(roc_auc_score(y, s))
    assert nd["ap"] == pytest.approx(average_precision_score(y, s))
    irr = out.filter(pl.col("issue_type") == "irrelevant").row(0, named=True)
    yi = [f in truth.irrelevant for f in names]
    si = [-[8, 3, 2, 0, 1].index(i) if i in [8, 3, 2, 0, 1] else -100 for i in range(N)]
    assert irr["auroc"] == pytest.approx(roc_auc_score(yi, si))


def test_end_to_end_perfect_raters_recover_truth():
    files = pl.DataFrame({"file_name": [f"p{i:03d}" for i in range(80)], "label": ["0"] * 80})
    truth = Truth.from_sets(
        irrelevant=["p001", "p004"],
        near_duplicates=[("p010", "p011"), ("p011", "p012")],
        label_errors=["p020"],
    )
    q = confirmation_queue(
        "ds",
        ranking(range(80)),
        pairs([[10, 11], [11, 12], [0, 1], [30, 31]]),
        ranking([20, *range(21, 80)]),
        files,
    )
    raters = [Rater(f"e{i}", "expert", 1.0, 1.0) for i in range(3)] + [Rater("l0", "lay", 1.0, 1.0)]
    recs = simulate_answers(
        q.with_columns(pl.lit("ds").alias("dataset")), truth, raters, seed=0, undo_rate=0.1
    )
    answers = answers_from_records(recs)
    conf = confirmed_issues(answers, q)
    found = conf.filter(pl.col("unanimous"))
    assert set(found.filter(pl.col("issue_type") == "irrelevant")["item_id"]) == {"p001", "p004"}
    assert found.filter(pl.col("issue_type") == "near_duplicate").height == 2
    kept = cleaned_file_list(files, conf, "unanimous", seed=1)["file_name"].to_list()
    assert kept.count("p010") + kept.count("p011") + kept.count("p012") == 1
    assert "p020" in kept and "p001" not in kept
    ag = agreement_table(answers, n_boot=50)
    assert (ag.filter(pl.col("statistic") == "cohen_kappa")["value"] == 1.0).all()
    rq = ranking_quality_table(conf)
    assert rq.filter(pl.col("issue_type") == "irrelevant")["n_positive"][0] == 2
    sp = speedup(answers, {"ds": 80})
    assert sp.filter(pl.col("dataset") == "ds").height == 3
    preds = files.select("file_name").with_columns(
        target=pl.Series(np.arange(80) % 2), score=pl.Series(np.linspace(0, 1, 80))
    )
    imp = cleaning_impact_table(
        preds, files, pl.DataFrame({"file_name": kept}), dataset="ds", model_version="v1", n_boot=50
    )
    assert imp["n_after"][0] == len(kept) and imp.columns[:3] == ["dataset", "model_version", "rule"]
    with pytest.raises(ValueError, match="not in dataset"):
        cleaning_impact_table(
            preds.with_columns(pl.lit("x").alias("file_name")), files, files, dataset="ds", model_version="v1"
        )
    diffs, tests = expert_lay_table(answers)
    assert diffs.height == 3 * (3 * 2 * 1) and tests.height == 3  # 3 issue types x (ref, other expert, lay)
    assert sensitivity_table(answers).height == 3 * 2 * 20


def test_queue_from_real_ranking_types():
    from noisycal_platform.cleaning.rankings.types import PairRanking, Ranking

    order = np.array([4, 0, 1, 2, 3, *range(5, N)])
    r = Ranking(order=order, scores=np.linspace(0, 1, N)[np.argsort(order)])
    pr = PairRanking(pairs=np.array([[0, 3], [1, 2]]), scores=np.array([0.01, 0.02]))
    q = confirmation_queue("ds", r, pr, r, FILES)
    assert q.filter(pl.col("issue_type") == "irrelevant")["item_id"][0] == "im04.png"
    assert q.filter(pl.col("issue_type") == "near_duplicate").height == 2


def test_other_datasets_are_ignored():
    q = confirmation_queue("ds", ranking([0, 1]), None, None, FILES)
    recs = [
        rec("a", "e1", "irrelevant", "im00.png", "yes", 0, 1),
        {**rec("b", "e1", "irrelevant", "im05.png", "yes", 0, 2), "dataset": "other"},
    ]
    conf = confirmed_issues(answers_from_records(recs), q)
    assert conf["dataset"].unique().to_list() == ["ds"] and conf.height == 2
    sp = speedup(answers_from_records(recs), {"ds": N})
    assert sp.filter(pl.col("dataset") == "other").height == 0
