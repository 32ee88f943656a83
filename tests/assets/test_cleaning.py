"""Cleaning assets on a small demo dataset with a tiny encoder: the whole chain, the web-tool export, the
cleaned file lists, and bad images excluded by name (not fatal)."""

import json

import duckdb
import polars as pl
import pytest

from noisycal_platform.cleaning.demo_data import write_demo_cleaning_dataset
from noisycal_platform.demo import write_demo_cleaning_scores, write_demo_confirmations
from orchestration.runner import instance_for
from tests.asset_chains import CLEANING_RANKING_CHAIN
from tests.assets._run import materialize, sql

DATASET = "digits_small"
TINY = {
    "encoder_overrides": {"epochs": 1, "depth": 1, "batch_size": 64},
    "near_duplicate_top_k": 200,
    "queue_max_per_type": 80,
    "n_bootstrap_cleaning": 50,
}
CHAIN = [*CLEANING_RANKING_CHAIN, "cleaning/ranking_vs_truth"]
AFTER_CONFIRMATION = [
    "raw/confirmations",
    "cleaning/confirmed_issues",
    "cleaning/annotation_sessions",
    "cleaning/cleaned_file_list",
    "cleaning/label_error_prevalence",
    "cleaning/agreement",
    "cleaning/ranking_quality",
    "cleaning/annotation_speedup",
    "cleaning/stopping_sensitivity",
    "cleaning/expert_lay_differences",
    "cleaning/expert_lay_tests",
    "cleaning/cleaning_impact",
    "reports/cleaning",
]


def _materialize(home, names, partition=DATASET):
    return materialize(home, names, partition)


@pytest.fixture(scope="module")
def home(tmp_path_factory):
    home = tmp_path_factory.mktemp("clean") / "home"
    (home).mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps(TINY))
    write_demo_cleaning_dataset(
        home,
        name=DATASET,
        seed=0,
        n_digits=240,
        n_irrelevant=6,
        n_duplicate_pairs=6,
        n_duplicate_triples=1,
        n_flipped=6,
    )
    write_demo_cleaning_scores(home, DATASET, "v1", seed=0)
    instance_for(home).add_dynamic_partitions("datasets", [DATASET])
    first = _materialize(home, CHAIN)
    assert first.success, [e.message for e in first.all_events if e.is_step_failure]
    write_demo_confirmations(home, DATASET, seed=0)
    second = _materialize(home, AFTER_CONFIRMATION)
    assert second.success, [e.message for e in second.all_events if e.is_step_failure]
    return home


def test_queue_exported_for_the_web_tool(home):
    queue = pl.read_parquet(home / "exports" / "confirmation_queue" / f"{DATASET}.parquet")
    meta = json.loads((home / "exports" / "confirmation_queue" / f"{DATASET}.meta.json").read_text())
    assert set(queue["issue_type"].unique()) == {"irrelevant", "near_duplicate", "label_error"}
    assert meta["stopping_count"] == 58 and meta["dataset"] == DATASET
    assert (home / "datasets" / DATASET).resolve() == __import__("pathlib").Path(meta["dataset_root"])
    # the queue is in ranking order per issue type
    for _, part in queue.group_by("issue_type"):
        assert part["position"].to_list() == sorted(part["position"].to_list())


def test_answers_ingested_and_confirmed(home):
    answers = sql(home, "select * from raw.confirmations")
    files = {p.stem for p in (home / "inbox" / "confirmations").glob("*.jsonl")}
    assert set(answers["annotator_id"].unique()) == files
    assert answers["answer_id"].n_unique() == answers.height  # exactly once per answer
    confirmed = sql(home, "select * from cleaning.confirmed_issues")
    assert confirmed.filter(pl.col("unanimous")).height > 0
    assert (confirmed["n_yes"] <= confirmed["n_annotators"]).all()


def test_cleaned_file_lists_exported(home):
    images = sql(home, "select file_name from raw.images")
    for rule in ("unanimous", "majority"):
        exported = pl.read_csv(home / "exports" / "cleaned_file_lists" / f"{DATASET}_{rule}.csv")
        assert exported.columns == ["file_name"]
        assert 0 < exported.height <= images.height
        assert set(exported["file_name"]) <= set(images["file_name"])
    n_major = pl.read_csv(home / "exports" / "cleaned_file_lists" / f"{DATASET}_majority.csv").height
    n_unan = pl.read_csv(home / "exports" / "cleaned_file_lists" / f"{DATASET}_unanimous.csv").height
    assert n_major <= n_unan  # majority confirms a superset of what unanimity confirms


def test_statistics_and_report(home):
    assert sql(home, "select * from cleaning.agreement").height > 0
    impact = sql(home, "select * from cleaning.cleaning_impact")
    assert set(impact["metric"].unique()) >= {"auroc", "ap", "auprg"}
    truth = sql(home, "select * from cleaning.ranking_vs_truth")
    assert set(truth["ranking"].unique()) == {"dino", "baseline"}
    report = (home / "reports" / "cleaning.html").read_text()
    assert DATASET in report and "data:image/" in report
    # every simulated rater walked each ranking until the stopping rule or the end of the candidates
    sessions = sql(home, "select * from cleaning.annotation_sessions")
    answered = sql(home, f"select distinct annotator_id, issue_type from raw.confirmations where dataset = '{DATASET}'")
    assert sessions.height == answered.height > 0
    assert set(sessions["ended_by"].to_list()) <= {"stopping_rule", "end_of_candidates"}
    assert (sessions["answered"] <= sessions["candidates"]).all()
    assert "How each review session ended" in report


def _broken_dataset(home, extra_rows=""):
    from PIL import Image

    root = home / "datasets" / "broken"
    root.mkdir(parents=True)
    for i in range(4):
        Image.new("RGB", (16, 16), (i * 40, 10, 10)).save(root / f"ok_{i}.png")
    (root / "corrupt.png").write_bytes(b"\x89PNG\r\n\x1a\nnot really a png")
    (root / "labels.csv").write_text(
        "file_name,label\nok_0.png,a\nok_1.png,b\nok_2.png,a\nok_3.png,b\ncorrupt.png,a\nmissing.png,b\n" + extra_rows
    )
    instance_for(home).add_dynamic_partitions("datasets", ["broken"])


def test_bad_images_are_excluded_by_name_not_fatal(tmp_path):
    home = tmp_path / "home"
    _broken_dataset(home)
    result = _materialize(home, ["raw/images"], partition="broken")
    assert result.success
    images = sql(home, "select file_name from raw.images order by file_name")["file_name"].to_list()
    assert images == ["ok_0.png", "ok_1.png", "ok_2.png", "ok_3.png"]
    mat = result.asset_materializations_for_node("raw__images")[0]
    assert mat.metadata["excluded"].value == 2
    assert "corrupt.png" in mat.metadata["excluded_files"].value
    assert "missing.png" in mat.metadata["excluded_files"].value


def test_path_leaving_the_root_is_a_clear_error_and_writes_nothing(tmp_path):
    home = tmp_path / "home"
    _broken_dataset(home, extra_rows="../escape.png,a\n")
    result = _materialize(home, ["raw/images"], partition="broken")
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure).event_specific_data.error
    while failure.cause is not None:
        failure = failure.cause
    assert "row 7" in failure.message and "file_name" in failure.message and "../escape.png" in failure.message
    warehouse = home / "warehouse.duckdb"
    if warehouse.exists():  # nothing was written for the failed partition
        with duckdb.connect(str(warehouse), read_only=True) as con:
            n = con.execute("select count(*) from information_schema.tables where table_name = 'images'").fetchone()
            assert n[0] == 0


def test_a_dataset_without_scores_or_answers_coexists_with_one_that_has_them(home):
    """A second partition with neither cleaning scores, confirmations nor a truth.json materialises beside the
    first (same tables, same columns: no column-set mismatch), and the first partition's rows stay as they were."""
    other = "digits_bare"
    write_demo_cleaning_dataset(
        home, name=other, seed=1, n_digits=60, n_irrelevant=2, n_duplicate_pairs=2, n_duplicate_triples=0, n_flipped=2
    )
    (home / "datasets" / other / "truth.json").unlink()  # and no known truth either
    before = sql(home, f"select * from cleaning.cleaning_impact where dataset = '{DATASET}' order by rule, metric")
    instance_for(home).add_dynamic_partitions("datasets", [other])
    result = _materialize(home, [*CHAIN, *AFTER_CONFIRMATION[1:-1]], partition=other)
    assert result.success, [e.message for e in result.all_events if e.is_step_failure]
    impact = sql(home, "select * from cleaning.cleaning_impact")
    assert set(impact["dataset"].unique()) == {DATASET}  # the bare dataset has no scores: no rows, no failure
    assert impact.filter(pl.col("dataset") == DATASET).sort("rule", "metric").equals(before)
    speedup = sql(home, "select * from cleaning.annotation_speedup")
    assert set(speedup["dataset"].unique()) == {DATASET}  # no answers for the bare dataset yet
    assert set(sql(home, "select dataset from cleaning.ranking_vs_truth")["dataset"]) == {DATASET}
    queue = sql(home, "select dataset, count(*) as n from cleaning.confirmation_queue group by dataset")
    assert set(queue["dataset"]) == {DATASET, other}
