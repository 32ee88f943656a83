"""The audit workflow on the synthetic demo generations: the stratified sample meets its quotas exactly and
shows no scores or verdicts; agreement equals κ and p_o worked out by hand; disagreements wait for the joint
decision and are counted; the consensus is read back by the audit-label reader."""

import json

import numpy as np
import polars as pl
import pytest

from noisycal_platform.correctness import audit_workflow as aw
from noisycal_platform.correctness import pipeline as cp
from noisycal_platform.correctness.criteria import exact_match

KEY = ["dataset", "model", "case_id"]


def _em(gen: pl.DataFrame) -> pl.DataFrame:
    acc = [
        exact_match(a, c, r, multi_label=m).accepted
        for a, c, r, m in gen.select("answer", "candidate_labels", "reference_labels", "multi_label").iter_rows()
    ]
    return gen.with_columns(pl.Series("em", acc))


def test_sample_quotas_exact_and_blind(demo_frames):
    gen = demo_frames["gen"]
    s = aw.draw_audit_sample(gen, per_stratum=25, seed=0)
    n_groups = gen.select("dataset", "model").n_unique()
    assert s.height == 50 * n_groups and s.select(KEY).n_unique() == s.height
    assert s.columns == aw.AUDIT_SAMPLE_COLUMNS  # no UE score, no criterion verdict, no EM stratum
    assert s["position"].to_list() == list(range(s.height))
    joined = _em(gen).join(s.select(KEY), on=KEY, how="semi")
    counts = joined.group_by("dataset", "model", "em").len()
    assert counts.height == 2 * n_groups and (counts["len"] == 25).all()
    # shown shuffled: the first 50 rows are not one group's block
    assert s.head(50).select("dataset", "model").n_unique() > 1
    again = aw.draw_audit_sample(gen, per_stratum=25, seed=0)
    assert again.equals(s)
    assert not aw.draw_audit_sample(gen, per_stratum=25, seed=1).select(KEY).equals(s.select(KEY))
    back = aw.read_audit_sample(_write(demo_frames["home"] / "s.csv", aw.sample_csv_text(s)))
    assert back.select(KEY).equals(s.select(KEY))
    assert back["candidate_labels"].to_list() == [json.loads(x) for x in s["candidate_labels"]]


def _write(path, text):
    path.write_text(text, encoding="utf-8")
    return path


def test_too_small_stratum_is_a_clear_error(demo_frames):
    gen = demo_frames["gen"]
    smallest = _em(gen).group_by("dataset", "model", "em").len()["len"].min()
    with pytest.raises(ValueError, match=f"per-stratum {smallest + 1}"):
        aw.draw_audit_sample(gen, per_stratum=smallest + 1, seed=0)


def _annotations(sample: pl.DataFrame, truth: dict, flip: set) -> list[dict]:
    out = []
    for ds, m, c in sample.select(KEY).iter_rows():
        ok = truth[(ds, m, c)]
        for who in ("ann_a", "ann_b"):
            v = (not ok) if (who == "ann_b" and (ds, m, c) in flip) else ok
            out.append({"dataset": ds, "model": m, "case_id": c, "annotator_id": who, "human_correct": v,
                        "error_category": None if v else "extra/wrong", "source": "test"})
    return out


def test_agreement_disagreements_and_consensus(demo_frames, tmp_path):
    gen = demo_frames["gen"]
    sample = aw.draw_audit_sample(gen, per_stratum=25, seed=0)
    truth = {tuple(k): v for k, v in ((tuple(x[:3]), x[3]) for x in _em(gen).select(*KEY, "em").iter_rows())}
    keys = sample.select(KEY).rows()
    flip = set(keys[::37])  # ann_b disagrees on these
    ann = _annotations(sample, truth, flip)
    decided = {k: (truth[k], None if truth[k] else "missing/partial") for k in sorted(flip)[:2]}
    res = aw.audit_agreement(sample, ann, decided, gen, n_boot=200, seed=0)
    assert res.agreement.schema == pl.Schema(aw.AGREEMENT_SCHEMA)
    row = res.agreement.filter(pl.col("scope") == "all").row(0, named=True)
    a = np.array([truth[k] for k in keys], dtype=float)
    b = np.array([(not truth[k]) if k in flip else truth[k] for k in keys], dtype=float)
    n = a.size
    p_o = np.mean(a == b)
    p_e = a.mean() * b.mean() + (1 - a.mean()) * (1 - b.mean())  # Cohen (1960), by hand
    assert row["n_items"] == n and row["n_agree"] == n - len(flip)
    assert row["raw_agreement"] == pytest.approx(p_o, rel=1e-12)
    assert row["kappa"] == pytest.approx((p_o - p_e) / (1 - p_e), rel=1e-9)
    assert row["raw_agreement_lo"] <= p_o <= row["raw_agreement_hi"]
    assert row["kappa_lo"] <= row["kappa"] <= row["kappa_hi"]
    assert row["n_disagreements"] == len(flip) and row["n_joint"] == 2 and row["n_undecided"] == len(flip) - 2
    assert res.agreement.filter(pl.col("scope_kind") == "group").height == gen.select("dataset", "model").n_unique()
    # disagreements list every differing item; the consensus leaves the undecided ones out
    assert set(res.disagreements.select(KEY).rows()) == flip
    assert res.consensus.height == n - (len(flip) - 2)
    joint = res.consensus.filter(pl.col("decision") == "joint")
    assert set(joint.select(KEY).rows()) == set(decided)
    assert joint.sort(KEY)["human_correct"].to_list() == [decided[k][0] for k in sorted(decided)]
    # the consensus file is what raw/audit_labels reads; its EM strata are the sampler's
    audit_dir = tmp_path / "audit"
    audit_dir.mkdir()
    _write(audit_dir / "consensus.csv", aw.consensus_csv_text(res.consensus))
    labels = cp.raw_audit_labels(audit_dir, gen)
    assert labels.height == res.consensus.height
    em_ok = {k: v for k, v in truth.items()}
    assert all((s == "EM-accepted") == em_ok[(d, m, c)] for d, m, c, s in labels.select(*KEY, "em_stratum").iter_rows())


def test_third_annotator_and_double_labels_are_refused(demo_frames):
    gen = demo_frames["gen"]
    sample = aw.draw_audit_sample(gen, per_stratum=25, seed=0)
    ds, m, c = sample.select(KEY).row(0)
    one = {"dataset": ds, "model": m, "case_id": c, "human_correct": True, "error_category": None, "source": "t"}
    with pytest.raises(ValueError, match="two annotators"):
        aw.audit_agreement(sample, [{**one, "annotator_id": x} for x in "abc"], {}, gen, n_boot=10)
    with pytest.raises(ValueError, match="twice"):
        aw.audit_agreement(sample, [{**one, "annotator_id": "a"}] * 2, {}, gen, n_boot=10)


def test_web_records_undo_and_csv_annotations(tmp_path):
    recs = [
        {"answer_id": "1", "answer": "correct", "case_id": "x"},
        {"answer_id": "2", "answer": "incorrect", "case_id": "y"},
        {"answer_id": "3", "answer": "undo", "undoes": "2"},
        {"answer_id": "4", "answer": "undo", "undoes": "3"},  # restores 2
        {"answer_id": "5", "answer": "undo", "undoes": "1"},
    ]
    assert [r["answer_id"] for r in aw.effective_correctness_answers(recs)] == ["2"]
    d = tmp_path / "ann"
    d.mkdir()
    _write(d / "a.csv", "dataset,model,case_id,annotator_id,human_correct,error_category\nd,m,c1,a,1,\nd,m,c2,a,0,\n")
    with pytest.raises(ValueError, match=r"a\.csv: row 2: field 'error_category'"):
        aw.read_annotation_csvs(d)


def test_run_audit_agreement_writes_disagreements_and_consensus_once(demo_frames, tmp_path):
    gen = demo_frames["gen"]
    home = tmp_path / "home"
    paths = aw.AuditPaths(home)
    assert aw.run_audit_agreement(home, gen) is None  # no sample yet
    sample = aw.draw_audit_sample(gen, per_stratum=25, seed=0)
    paths.sample.parent.mkdir(parents=True)
    _write(paths.sample, aw.sample_csv_text(sample))
    truth = {tuple(x[:3]): x[3] for x in _em(gen).select(*KEY, "em").iter_rows()}
    keys = sample.select(KEY).rows()
    ann = _annotations(sample, truth, {keys[0]})
    paths.annotation_csvs.mkdir(parents=True)
    for who in ("ann_a", "ann_b"):
        lines = ["dataset,model,case_id,annotator_id,human_correct,error_category"]
        lines += [
            f"{a['dataset']},{a['model']},{a['case_id']},{who},{int(a['human_correct'])},{a['error_category'] or ''}"
            for a in ann
            if a["annotator_id"] == who
        ]
        _write(paths.annotation_csvs / f"{who}.csv", "\n".join(lines) + "\n")
    res = aw.run_audit_agreement(home, gen, n_boot=50)
    assert res.consensus.height == len(keys) - 1
    dis = pl.read_csv(paths.disagreements)
    assert dis.height == 1 and dis["case_id"][0] == keys[0][2]
    stamp = paths.consensus.stat().st_mtime_ns
    aw.run_audit_agreement(home, gen, n_boot=50)
    assert paths.consensus.stat().st_mtime_ns == stamp  # unchanged content: not rewritten (no sensor loop)
    # the joint decision, dropped as a filled copy of the disagreements file, completes the consensus
    paths.adjudications.mkdir(parents=True)
    filled = dis.with_columns(pl.lit(1).alias("human_correct"), pl.lit(None, pl.String).alias("error_category"))
    filled.write_csv(paths.adjudications / "joint.csv")
    res = aw.run_audit_agreement(home, gen, n_boot=50)
    assert res.consensus.height == len(keys)
    assert res.consensus.filter(pl.col("decision") == "joint")["human_correct"].to_list() == [True]


def test_empty_stratum_is_named(demo_frames):
    gen = _em(demo_frames["gen"])
    g0 = gen.select("dataset", "model").row(0)
    drop = (pl.col("dataset") == g0[0]) & (pl.col("model") == g0[1]) & pl.col("em")
    with pytest.raises(ValueError, match=f"{g0[0]}/{g0[1]} EM-accepted: 0 predictions"):
        aw.draw_audit_sample(gen.filter(~drop).drop("em"), per_stratum=1, seed=0)
