"""Correctness assets against a warehouse in tmp_path: the audit workflow end to end (sample by the CLI, two
annotators by CSV, correctness/audit_agreement, adjudication) feeding raw/audit_labels and the audit, and the
report saying which criteria ran and which were skipped."""

import json
import shutil

import polars as pl
import pytest

from noisycal_platform.correctness import audit_workflow as aw
from noisycal_platform.correctness.demo_data import write_demo_correctness_inputs
from orchestration.cli import main
from tests.assets._run import materialize, sql

KEY = ["dataset", "model", "case_id"]




@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("corr_assets") / "home"
    write_demo_correctness_inputs(home, seed=0, n_per_group=100)
    shutil.rmtree(home / "correctness" / "audit")  # the labels come from the audit workflow instead
    (home / "settings.json").write_text(json.dumps({"embedding_model_path": "", "n_bootstrap_correctness": 200}))
    assert main(["--home", str(home), "audit", "sample", "--per-stratum", "25", "--seed", "0"]) == 0
    return home


def test_audit_workflow_through_the_assets(home):
    paths = aw.AuditPaths(home)
    sample = aw.read_audit_sample(paths.sample)
    paths.annotation_csvs.mkdir(parents=True)
    keys = sample.select(KEY).rows()
    for who in ("ann_a", "ann_b"):
        rows = ["dataset,model,case_id,annotator_id,human_correct,error_category"]
        for i, (ds, m, c) in enumerate(keys):
            ok = (i % 2 == 0) != (who == "ann_b" and i < 3)  # ann_b differs on the first three items
            rows.append(f"{ds},{m},{c},{who},{int(ok)},{'' if ok else 'extra/wrong'}")
        (paths.annotation_csvs / f"{who}.csv").write_text("\n".join(rows) + "\n")
    res = materialize(home, ["raw/generations", "correctness/audit_agreement"])
    assert res.success
    agree = sql(home, "SELECT * FROM correctness.audit_agreement WHERE scope_kind = 'all'")
    assert agree["n_items"][0] == len(keys) and agree["n_disagreements"][0] == 3 and agree["n_undecided"][0] == 3
    assert pl.read_csv(paths.disagreements).height == 3
    # decide two of the three jointly; the third stays out of human_correct and is counted
    paths.adjudications.mkdir(parents=True)
    dis = pl.read_csv(paths.disagreements).head(2)
    dis.with_columns(pl.lit(1).alias("human_correct"), pl.lit(None, pl.String).alias("error_category")).write_csv(
        paths.adjudications / "joint.csv"
    )
    res = materialize(home, ["correctness/audit_agreement", "raw/audit_labels"])
    assert res.success
    labels = sql(home, "SELECT * FROM raw.audit_labels")
    assert labels.height == len(keys) - 1
    assert labels.filter(pl.col("decision") == "joint").height == 2
    assert sql(home, "SELECT n_undecided FROM correctness.audit_agreement WHERE scope_kind = 'all'").item() == 1


def test_audit_and_report_state_what_ran(home):
    res = materialize(
        home,
        ["correctness/criterion_decisions", "correctness/ue_scores", "correctness/criterion_audit",
         "correctness/ue_sensitivity", "correctness/false_acceptance", "reports/correctness"],
    )
    assert res.success
    audit = sql(home, "SELECT * FROM correctness.criterion_audit WHERE scope_kind = 'all'")
    skipped = dict(audit.filter(pl.col("status") == "skipped").select("criterion", "note").iter_rows())
    assert "bem_model_path" in skipped["bem"] and "judge" in skipped["llm_judge"]
    assert audit["n_comparisons"].unique().to_list() == [2]  # the seed's two comparisons, by default
    html = (home / "reports" / "correctness.html").read_text(encoding="utf-8")
    assert "97.50% intervals" in html and "bem_model_path" in html
