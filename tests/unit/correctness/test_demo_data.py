"""Demo inputs are shaped like Rethinking Correctness 2026 §2.4/§3.1 and reproducible."""

import json

import polars as pl

from noisycal_platform.correctness.demo_data import DEMO_TASKS, write_demo_correctness_inputs


def test_demo_shape(demo_frames):
    gen, audit = demo_frames["gen"], demo_frames["audit"]
    sizes = sorted(len(t["labels"]) for t in DEMO_TASKS.values())
    assert sizes == [4, 5, 6]
    assert sum(not t["multi_label"] for t in DEMO_TASKS.values()) == 1
    assert gen.group_by("dataset", "model").len().height == 9
    assert audit.height == 450 and gen.height > audit.height
    per = audit.group_by("dataset", "model", "em_stratum").len()
    assert per.height == 18 and per["len"].to_list() == [25] * 18
    assert set(audit["decision"].unique()) <= {"independent", "joint"}
    assert gen["parse_error"].is_not_null().sum() > 0  # malformed outputs are present and kept
    # human labels cover all three error categories
    assert set(audit["error_category"].drop_nulls().unique()) == {
        "missing/partial",
        "extra/wrong",
        "invalid/uncertain",
    }


def test_demo_em_strata_agree_with_exact_match(demo_frames):
    em = demo_frames["decisions"].filter(pl.col("criterion") == "exact_match")
    j = demo_frames["audit"].join(em, on=["dataset", "model", "case_id"])
    assert ((j["em_stratum"] == "EM-accepted") == j["accepted"]).all()


def test_demo_is_reproducible(tmp_path):
    a = write_demo_correctness_inputs(tmp_path / "a", seed=3, n_per_group=24, n_audit_per_stratum=3)
    b = write_demo_correctness_inputs(tmp_path / "b", seed=3, n_per_group=24, n_audit_per_stratum=3)
    for pa, pb in zip(a["generations"] + a["audit"], b["generations"] + b["audit"], strict=True):
        assert pa.read_bytes() == pb.read_bytes()
    first = json.loads(a["generations"][0].read_text(encoding="utf-8").splitlines()[0])
    assert len(first["sample_answers"]) == len(first["sample_token_logliks"]) == 10
