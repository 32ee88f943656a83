"""Pipeline functions on the synthetic demo: skipped criteria are visible, audit numbers equal the direct
metrics
(sklearn AUROC, balanced accuracy), false acceptance and sensitivity agree with independent computations."""

import json
import warnings

import numpy as np
import polars as pl
import pytest
from sklearn.metrics import balanced_accuracy_score, roc_auc_score

from noisycal_platform.correctness import pipeline as cp
from noisycal_platform.correctness.criteria import Decision

KEY = ["dataset", "model", "case_id"]


def test_decisions_schema_and_skips(demo_frames):
    d = demo_frames["decisions"]
    assert d.schema == pl.Schema(cp.DECISIONS_SCHEMA)
    crits = set(d["criterion"].unique())
    assert {"exact_match", "rouge_l_0.20", "rouge_l_0.30", "rouge_l_0.40"} <= crits
    skipped = d.filter(pl.col("skipped")).group_by("criterion").agg(pl.col("reason").first())
    notes = dict(skipped.iter_rows())
    assert set(notes) == {"bem", "embedding_similarity_0.50", "nli", "llm_judge"}
    assert "no substitute" in notes["bem"]
    assert all(n.startswith("skipped: ") for n in notes.values())
    assert d.filter(pl.col("skipped"))["accepted"].null_count() == d.filter(pl.col("skipped")).height
    # malformed outputs are kept: rejected and invalid under every active criterion
    bad = d.filter(~pl.col("parseable") & ~pl.col("skipped"))
    assert bad.height > 0 and not bad["accepted"].any() and bad["invalid"].all()


def test_ue_scores_schema(demo_frames):
    s = demo_frames["scores"]
    assert s.schema == pl.Schema(cp.UE_SCORES_SCHEMA)
    for m in ("self_certainty", "logtoku", "answer_entropy"):
        assert s[m].is_finite().all()
    # no NLI model: semantic entropy is not passed off under its name; answer entropy is what is reported
    assert s["semantic_entropy"].is_nan().all() and s["semantic_entropy_discrete"].is_nan().all()
    assert (s["se_clustering"] == cp.NO_NLI_CLUSTERING).all()


def test_criterion_audit_point_estimates_equal_direct_metrics(demo_frames):
    d, s, a = demo_frames["decisions"], demo_frames["scores"], demo_frames["audit"]
    pairs = [(c, "exact_match") for c in ("rouge_l_0.20", "rouge_l_0.30", "rouge_l_0.40")]
    res = cp.criterion_audit(d, s, a, n_boot=200, seed=1, comparisons=pairs)
    assert res.schema == pl.Schema(cp.AUDIT_RESULT_SCHEMA)
    finite = [m for m in cp.UE_METHODS if s[m].is_finite().all()]
    assert finite == ["self_certainty", "logtoku", "answer_entropy"]
    items = a.join(d.filter(~pl.col("skipped")), on=KEY).join(s, on=KEY)
    for crit in ("exact_match", "rouge_l_0.30"):
        part = items.filter(pl.col("criterion") == crit)
        groups = part.partition_by("dataset", "model")
        h = np.mean([balanced_accuracy_score(gp["human_correct"], gp["accepted"]) for gp in groups])
        diffs = []
        for gp in groups:
            for m in finite:
                u = gp[m].to_numpy()
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    try:
                        af = roc_auc_score(~gp["accepted"].to_numpy(), u)
                    except ValueError:
                        continue
                diffs.append(abs(af - roc_auc_score(~gp["human_correct"].to_numpy(), u)))
        row = res.filter((pl.col("scope") == "all") & (pl.col("criterion") == crit)).row(0, named=True)
        assert row["h_f"] == pytest.approx(h, abs=1e-12)
        assert row["d_f"] == pytest.approx(np.mean(diffs), abs=1e-12)
        assert row["f_f"] == pytest.approx(1 - np.mean(diffs), abs=1e-12)
        assert row["h_f_lo"] <= row["h_f"] <= row["h_f_hi"]
        hc, acc = part["human_correct"].to_numpy(), part["accepted"].to_numpy()
        assert row["false_rejects"] == int(np.sum(hc & ~acc)) and row["false_accepts"] == int(
            np.sum(~hc & acc)
        )
    ref = res.filter((pl.col("scope") == "all") & (pl.col("criterion") == "exact_match")).row(0, named=True)
    assert ref["delta_d"] is None and ref["n_em_stratum_mismatch"] == 0
    other = res.filter((pl.col("scope") == "all") & (pl.col("criterion") == "rouge_l_0.30")).row(
        0, named=True
    )
    assert other["delta_d"] == pytest.approx(other["d_f"] - ref["d_f"]) and other["reference"] == "exact_match"
    assert other["n_comparisons"] == 3 and other["ci_level_adj"] == pytest.approx(1 - 0.05 / 3)
    assert other["delta_d_lo_adj"] <= other["delta_d_lo"] <= other["delta_d_hi"] <= other["delta_d_hi_adj"]
    assert set(res["scope_kind"]) == {"all", "dataset", "group"}
    assert res.filter(pl.col("status") == "skipped").height == 4


def test_criterion_audit_is_seeded(demo_frames):
    d, s, a = demo_frames["decisions"], demo_frames["scores"], demo_frames["audit"]
    r1 = cp.criterion_audit(d, s, a, n_boot=100, seed=3)
    r2 = cp.criterion_audit(d, s, a, n_boot=100, seed=3)
    assert r1.equals(r2)
    with pytest.raises(ValueError, match="comparison"):
        cp.criterion_audit(d, s, a, n_boot=10, comparisons=[("nope", "exact_match")])


def test_false_acceptance_matches_direct_count(demo_frames):
    d, a = demo_frames["decisions"], demo_frames["audit"]
    fa = cp.false_acceptance(d, a)
    assert fa.schema == pl.Schema(cp.FALSE_ACCEPTANCE_SCHEMA)
    em = fa.filter(pl.col("criterion") == "exact_match")
    assert (em["n_accepted"] == 0).all()  # by construction of the demo, EM accepts no human-incorrect answer
    j = a.join(d.filter(pl.col("criterion") == "rouge_l_0.20"), on=KEY)
    cat = j.filter(pl.col("error_category") == "invalid/uncertain")
    rates = cat.group_by("dataset", "model").agg(pl.col("accepted").mean())["accepted"]
    row = fa.filter(
        (pl.col("criterion") == "rouge_l_0.20") & (pl.col("error_category") == "invalid/uncertain")
    )
    assert row["rate"][0] == pytest.approx(rates.mean())
    assert row["n_accepted"][0] == cat["accepted"].sum() and row["n_groups"][0] == rates.len()


def test_ue_sensitivity_uses_parseable_predictions(demo_frames):
    d, s = demo_frames["decisions"], demo_frames["scores"]
    sens = cp.ue_sensitivity(d, s, criteria=["exact_match", "rouge_l_0.20"])
    assert set(sens["criterion"]) == {"exact_match", "rouge_l_0.20"}
    parse_ok = d.filter((pl.col("criterion") == "exact_match") & pl.col("parseable"))
    j = parse_ok.join(s, on=KEY).filter(pl.col("dataset") == "mcmed")
    want = np.mean(
        [roc_auc_score(~g["accepted"].to_numpy(), g["logtoku"].to_numpy()) for g in j.partition_by("model")]
    )
    got = sens.filter(
        (pl.col("dataset") == "mcmed")
        & (pl.col("ue_method") == "logtoku")
        & (pl.col("criterion") == "exact_match")
    )
    assert got["auroc"][0] == pytest.approx(want) and got["n_predictions"][0] == j.height
    with pytest.raises(ValueError, match="not active"):
        cp.ue_sensitivity(d, s, criteria=["llm_judge"])


class _ScriptedJudge:
    """Judge stand-in: accepts everything it is asked about except answers containing 'or', where it either
    accepts the first label (the seed's acceptance bias) or replies malformed."""

    name = "llm_judge"

    def __init__(self):
        self.seen = []

    def complete(self, messages):
        self.seen.append(messages)
        answer = messages[-1]["content"].rsplit("Model answer: ", 1)[-1]
        labels = json.loads(messages[-1]["content"].split("Candidate labels: ", 1)[1].split("\n", 1)[0])
        if " or " in answer.lower():
            return (
                "Sure! It is " + labels[0]
                if len(self.seen) % 2
                else json.dumps({"labels": [labels[0]], "invalid": False, "contradiction": False})
            )
        return json.dumps(
            {
                "labels": [lab for lab in labels if lab.lower() in answer.lower()],
                "invalid": False,
                "contradiction": False,
            }
        )


def test_judge_path_in_pipeline(demo_frames):
    gen = demo_frames["gen"].head(120)
    judge = _ScriptedJudge()
    d = cp.criterion_decisions(gen, cp.CriteriaConfig(embedding_model_path=None, judge=judge))
    j = d.filter(pl.col("criterion") == "llm_judge")
    assert j.height == 120 and not j["skipped"].any()
    # the judge never sees the reference labels or the reasoning
    for msgs in judge.seen:
        assert "Synthetic reasoning" not in json.dumps(msgs)
    malformed = j.filter(pl.col("reason").str.contains("malformed"))
    assert malformed.height > 0 and not malformed["accepted"].any() and malformed["invalid"].all()
    assert not j.filter(~pl.col("parseable"))["accepted"].any()


def test_judge_failure_is_never_an_acceptance(demo_frames):
    class Broken:
        name = "llm_judge"

        def complete(self, messages):
            raise ConnectionError("endpoint down")

    d = cp.criterion_decisions(
        demo_frames["gen"].head(10), cp.CriteriaConfig(embedding_model_path=None, judge=Broken())
    )
    j = d.filter(pl.col("criterion") == "llm_judge")
    assert not j["accepted"].any() and j["reason"].str.contains("judge").all()


def test_decision_is_a_value():
    assert Decision(True, False, "x") == Decision(True, False, "x")


def test_criterion_audit_restricted_comparisons(demo_frames):
    d, s, a = demo_frames["decisions"], demo_frames["scores"], demo_frames["audit"]
    pairs = [("rouge_l_0.20", "exact_match"), ("rouge_l_0.40", "rouge_l_0.20")]
    res = cp.criterion_audit(d, s, a, n_boot=50, comparisons=pairs)
    allrows = res.filter((pl.col("scope") == "all") & (pl.col("status") == "ok"))
    with_delta = set(allrows.filter(pl.col("delta_d").is_not_null())["criterion"])
    assert with_delta == {"rouge_l_0.20", "rouge_l_0.40"}
    assert allrows["n_comparisons"].unique().to_list() == [2]
    assert allrows["ci_level_adj"][0] == pytest.approx(0.975)  # the seed's two comparisons: 97.5% intervals
    r40 = allrows.filter(pl.col("criterion") == "rouge_l_0.40").row(0, named=True)
    r20 = allrows.filter(pl.col("criterion") == "rouge_l_0.20").row(0, named=True)
    assert r40["reference"] == "rouge_l_0.20" and r40["delta_h"] == pytest.approx(r40["h_f"] - r20["h_f"])
    with pytest.raises(ValueError, match="comparison"):
        cp.criterion_audit(d, s, a, n_boot=10, comparisons=[("exact_match", "exact_match")])


def test_seed_comparisons_with_skipped_criteria_are_reported_not_computed(demo_frames):
    d, s, a = demo_frames["decisions"], demo_frames["scores"], demo_frames["audit"]
    res = cp.criterion_audit(d, s, a, n_boot=20)  # default: bem − EM and llm_judge − EM, both skipped here
    allrows = res.filter(pl.col("scope") == "all")
    assert allrows["n_comparisons"].unique().to_list() == [2]
    assert allrows["ci_level_adj"].unique().to_list() == [pytest.approx(0.975)]
    assert allrows["delta_d"].drop_nulls().len() == 0
    ok = allrows.filter(pl.col("status") == "ok").row(0, named=True)
    assert "bem − exact_match" in ok["note"] and "llm_judge − exact_match" in ok["note"]
    assert "semantic_entropy" in ok["note"]  # left out: not computed without an NLI model


def test_criteria_summary_counts_by_hand():
    decisions = pl.DataFrame(
        {
            "criterion": ["rouge_l_0.30", "exact_match", "exact_match", "exact_match", "rouge_l_0.30"],
            "accepted": [True, True, False, False, None],
            "skipped": [False, False, False, False, False],
            "reason": ["a", "b", "c", "d", "e"],
        }
    ).vstack(pl.DataFrame({"criterion": ["bem"], "accepted": [None], "skipped": [True], "reason": ["no model"]},
                          schema={"criterion": pl.String, "accepted": pl.Boolean, "skipped": pl.Boolean,
                                  "reason": pl.String}))
    got = cp.criteria_summary(decisions)
    assert got["criterion"].to_list() == ["bem", "exact_match", "rouge_l_0.30"]
    assert got["skipped"].to_list() == [True, False, False]
    # exact_match accepts 1 of 3; rouge accepts its one decided row (a null decision is not counted)
    assert got["acceptance_rate"].to_list()[1:] == [pytest.approx(1 / 3, rel=1e-12), 1.0]
    assert got["acceptance_rate"][0] is None and got["note"].to_list() == ["no model", "b", "a"]
