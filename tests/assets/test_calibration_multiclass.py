"""A multi-class model version through the real calibration assets (the demo's digits version: ten classes,
three readers with asymmetric confusion matrices, items.csv with two sites), and the bad inputs of several
classes: each fails its step with file, row and column, and the warehouse keeps what it held."""

import shutil

import numpy as np
import polars as pl
import pytest

from noisycal_platform.calibration import pipeline as cal
from noisycal_platform.calibration.class_tables import class_matrix, confusion_from_table
from noisycal_platform.calibration.demo_data import DIGITS_VERSION, write_demo_multiclass_version
from noisycal_platform.calibration.multiclass import estimate_confusion, nc_ece_multiclass
from noisycal_platform.calibration.multiclass.corrected import MVU
from orchestration.runner import instance_for
from tests.asset_chains import CALIBRATION_CHAIN
from tests.assets._run import materialize, sql

V = DIGITS_VERSION
SETTINGS = '{"inbox_settle_seconds": 0, "n_bootstrap": 50, "n_bootstrap_subgroups": 50}'


def _failure_text(result) -> str:
    return " ".join(
        str(e.event_specific_data.error) for e in result.all_events if e.event_type_value == "STEP_FAILURE"
    )


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    home = tmp_path_factory.mktemp("mc") / "home"
    write_demo_multiclass_version(home, seed=0)
    (home / "settings.json").write_text(SETTINGS)
    instance = instance_for(home)
    instance.add_dynamic_partitions("model_versions", [V])
    result = materialize(home, ["raw/annotations"], instance=instance)
    assert result.success
    result = materialize(home, [*CALIBRATION_CHAIN, "reports/calibration"], V, instance=instance)
    return home, instance, result


def test_multiclass_version_runs_every_calibration_asset_and_check(built):
    home, _, result = built
    assert result.success, _failure_text(result)
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert checks["annotations_contract"] and checks["predictions_contract"]
    assert checks["em_converged"] and checks["channel_gap_not_zero"]
    preds = sql(home, "select n_classes, count(*) as n from raw.predictions group by 1")
    assert preds.rows() == [(10, 1200)]


def test_stored_confusion_matrices_equal_the_library_fit_and_nc_ece_uses_them(built):
    home, _, _ = built
    ann, preds = sql(home, "select * from raw.annotations"), sql(home, "select * from raw.predictions")
    channels = sql(home, "select * from calibration.channel_estimates").drop("model_version")
    assert channels.height == 3 * 10 * 10 and channels["fpr"].null_count() == channels.height
    cm = class_matrix(ann, preds)
    fit = estimate_confusion(cm.values, n_classes=10, seed=0)
    ct = confusion_from_table(channels, cm.classes).for_matrix(cm)
    np.testing.assert_allclose(ct.confusion, fit.confusion, rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose(ct.prevalence, fit.prevalence, rtol=1e-9, atol=1e-12)
    # the gap column is the smallest singular value of each T_j
    svd = np.linalg.svd(fit.confusion, compute_uv=False)[:, -1]
    gaps = channels.group_by("annotator_id").agg(pl.col("gap").first()).sort("annotator_id")["gap"].to_numpy()
    np.testing.assert_allclose(gaps, svd, rtol=1e-9)
    report = sql(home, "select * from calibration.nc_ece_report")
    for kind in ("top_label", "classwise"):
        stored = report.filter((pl.col("estimator") == "nc_ece") & (pl.col("kind") == kind))["value"][0]
        # classwise with the default rule "iv" reports the minimum-variance unbiased targets ("mvu", issue 23)
        weights = MVU if kind == "classwise" else ct.weights
        expected = nc_ece_multiclass(cm.probs, cm.values, ct.confusion, kind=kind, weights=weights).value
        assert stored == pytest.approx(expected, rel=1e-9)


def test_subgroup_rows_one_per_site_and_kind(built):
    home, _, _ = built
    sub = sql(home, "select * from calibration.nc_ece_report where estimator = 'nc_ece_subgroup' order by 1")
    assert sorted(set(zip(sub["subgroup_column"], sub["subgroup_value"], sub["kind"], strict=True))) == [
        ("site", s, k) for s in ("north", "south") for k in ("classwise", "top_label")
    ]
    assert (sub["status"] == "ok").all()
    sizes = dict(zip(sub["subgroup_value"], sub["n_items"], strict=True))
    items = pl.read_csv(home / "models" / V / "items.csv")
    assert sizes == dict(items.group_by("site").len().rows())  # every item is annotated by the three readers


def test_recalibrators_are_exported_as_multiclass_json(built):
    home, _, _ = built
    files = sorted(p.name for p in (home / "exports" / "recalibrators" / V).glob("*.json"))
    assert files == ["histogram_corrected.json", "histogram_naive.json", "temperature_corrected.json",
                     "temperature_naive.json"]
    rep = sql(home, "select name, nc_ece from calibration.recalibration_report")
    assert rep.height == 5 and rep["nc_ece"].null_count() == 0


def test_report_shows_both_kinds_the_confusion_matrices_and_one_diagram_per_site(built):
    home, _, _ = built
    text = (home / "reports" / "calibration" / f"{V}.html").read_text()
    assert "Top-label NC-ECE against the clinic" in text and "Classwise NC-ECE against the clinic" in text
    assert "reader_1 (gap" in text and "Subgroups (items.csv)" in text
    assert "reliability diagram site = north" in text and "reliability diagram site = south" in text
    # the demo's tempered site is flagged after Holm (top-label), the other is not
    assert "site = south — FLAGGED (miscalibrated)" in text and "site = north — FLAGGED" not in text
    flagged = sql(home, "select subgroup_value, kind from calibration.nc_ece_report where flagged")
    assert ("south", "top_label") in flagged.rows() and "north" not in flagged["subgroup_value"].to_list()
    overall = sql(home, "select kind, ci_low, p_value from calibration.nc_ece_report where estimator = 'nc_ece'")
    assert overall["ci_low"].null_count() == 0 and overall["p_value"].null_count() == 0


def _second_version(home, name: str, predictions: str, items: str | None = None):
    folder = home / "models" / name
    folder.mkdir(parents=True)
    (folder / "predictions.csv").write_text(predictions)
    if items is not None:
        (folder / "items.csv").write_text(items)


def _raw_predictions_unchanged_after(home, instance, name: str) -> str:
    before = sql(home, "select * from raw.predictions order by item_id")
    instance.add_dynamic_partitions("model_versions", [name])
    result = materialize(home, ["raw/predictions"], name, instance=instance, checks=False)
    assert not result.success
    after = sql(home, "select * from raw.predictions order by item_id")
    assert after.equals(before)
    shutil.rmtree(home / "models" / name)
    return _failure_text(result)


def test_probabilities_not_summing_to_one_fail_the_version_and_leave_the_warehouse(built):
    home, instance, _ = built
    _second_version(home, "bad_sum", "item_id,p_0,p_1\nx1,0.5,0.5\nx2,0.4,0.5\n")
    text = _raw_predictions_unchanged_after(home, instance, "bad_sum")
    assert "predictions.csv: row 2, column 'p_0..p_1'" in text and "do not sum to 1" in text


def test_missing_probability_column_fails_naming_it(built):
    home, instance, _ = built
    (home / "settings.json").write_text('{"inbox_settle_seconds": 0, "classes": ["0", "1", "2"]}')
    try:
        _second_version(home, "missing_p", "item_id,p_0,p_1\nx1,0.5,0.5\n")
        text = _raw_predictions_unchanged_after(home, instance, "missing_p")
    finally:
        (home / "settings.json").write_text(SETTINGS)
    assert "column 'p_2'" in text and "declared class '2'" in text


def test_items_with_a_duplicate_item_id_fail_the_version_and_leave_the_warehouse(built):
    home, instance, _ = built
    _second_version(home, "dup_items", "item_id,score\nx1,0.5\nx2,0.4\n", "item_id,site\nx1,A\nx2,B\nx1,B\n")
    text = _raw_predictions_unchanged_after(home, instance, "dup_items")
    assert "items.csv: row 3, column 'item_id'" in text and "duplicate" in text


def test_label_outside_the_versions_classes_fails_calibration_with_file_row_column(built):
    """The readers' labels 3..9 are valid classes of the digits version but not of a three-class version on the
    same items: its channel step fails naming the annotation file, row and column; the digits rows stay."""
    home, instance, _ = built
    ids = sql(home, "select item_id from raw.predictions order by item_id")["item_id"].to_list()[:50]
    rows = "".join(f"{i},0.2,0.3,0.5\n" for i in ids)
    _second_version(home, "three", "item_id,p_0,p_1,p_2\n" + rows)
    before = sql(home, "select * from calibration.channel_estimates order by all")
    instance.add_dynamic_partitions("model_versions", ["three"])
    result = materialize(home, ["raw/predictions", "calibration/channel_estimates"], "three", instance=instance,
                         checks=False)
    shutil.rmtree(home / "models" / "three")
    assert not result.success
    text = _failure_text(result)
    assert f"{V}_001.csv: row " in text and "column 'label'" in text and "is not a class of this model version" in text
    assert sql(home, "select * from calibration.channel_estimates order by all").equals(before)


def test_binary_pipeline_function_reports_kind_binary():
    """The binary rows keep their values and gain kind 'binary', n_classes 2 (subgroup columns null)."""
    from noisycal_platform.calibration.tables import NC_ECE_REPORT_SCHEMA

    rng = np.random.default_rng(3)
    n = 400
    s = rng.random(n)
    y = rng.random(n) < s
    ann = pl.DataFrame({
        "item_id": np.repeat([f"i{i}" for i in range(n)], 3),
        "annotator_id": ["a", "b", "c"] * n,
        "label": np.where(rng.random((n, 3)) < 0.1, ~y[:, None], y[:, None]).astype(np.int8).ravel(),
    })
    preds = pl.DataFrame({"item_id": [f"i{i}" for i in range(n)], "score": s})
    ch = cal.channel_estimates(ann, preds, n_check_replicates=20)
    rep = cal.nc_ece_report(ann, preds, ch, n_bootstrap=0)
    assert rep.columns == list(NC_ECE_REPORT_SCHEMA)
    assert set(rep["kind"]) == {"binary"} and set(rep["n_classes"]) == {2}
    assert rep["subgroup_column"].null_count() == rep.height
