"""Calibration assets against a warehouse in tmp_path: what the warehouse holds equals the library's answer
on the same inputs, the SQL mart equals the numpy bins, recalibrators round-trip through their JSON export."""

import json

import dagster as dg
import duckdb
import numpy as np
import polars as pl
import pytest

from definitions import build_definitions
from noisycal_platform.calibration import Recalibrator, nc_ece
from noisycal_platform.calibration import pipeline as cal
from noisycal_platform.calibration.demo_data import write_demo_calibration_inputs
from orchestration.runner import instance_for
from tests.asset_chains import CALIBRATION_CHAIN

CAL_KEYS = [*CALIBRATION_CHAIN, "reports/calibration"]


@pytest.fixture(scope="module")
def built(tmp_path_factory):
    home = tmp_path_factory.mktemp("cal") / "home"
    write_demo_calibration_inputs(home, seed=0)
    defs = build_definitions(home)
    instance = instance_for(home)
    instance.add_dynamic_partitions("model_versions", ["v1"])
    result = dg.materialize(
        [*defs.assets, *defs.asset_checks],
        selection=[dg.AssetKey(k.split("/")) for k in CAL_KEYS],
        partition_key="v1",
        instance=instance,
        resources=defs.resources,
        raise_on_error=False,
    )
    return home, result


def _checks_with_limit(home, limit):
    """Re-materialise calibration/nc_ece_report with settings.json nc_ece_limit = limit; check name → passed."""
    (home / "settings.json").write_text(json.dumps({"nc_ece_limit": limit}))
    try:
        defs = build_definitions(home)
        result = dg.materialize(
            [*defs.assets, *defs.asset_checks],
            selection=[dg.AssetKey(["calibration", "nc_ece_report"])],
            partition_key="v1",
            instance=instance_for(home),
            resources=defs.resources,
            raise_on_error=False,
        )
        return {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    finally:
        (home / "settings.json").unlink()


def _sql(home, query):
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(query).pl()


def test_every_calibration_asset_materialised(built):
    _, result = built
    assert result.success
    checks = {e.check_name: e.passed for e in result.get_asset_check_evaluations()}
    assert {"annotations_contract", "predictions_contract", "em_converged", "channel_gap_not_zero"} <= set(checks)
    assert checks["annotations_contract"] and checks["predictions_contract"]
    assert checks["em_converged"] and checks["channel_gap_not_zero"]


def test_warehouse_nc_ece_equals_library_on_the_same_inputs(built):
    home, _ = built
    ann, preds = _sql(home, "select * from raw.annotations"), _sql(home, "select * from raw.predictions")
    channels = _sql(home, "select * from calibration.channel_estimates").drop("model_version")
    matrix = cal.annotation_matrix(ann, preds.select("item_id", "score"))
    table = cal.channels_from_table(channels)
    chans, weights = table.for_matrix(matrix)
    expected = nc_ece(matrix.scores, matrix.values, chans, weights=weights, n_bins=15)
    stored = _sql(home, "select value from calibration.nc_ece_report where estimator = 'nc_ece'")["value"][0]
    assert stored == pytest.approx(expected.value, rel=1e-9, abs=1e-12)
    sql_bins = _sql(home, "select * from calibration.nc_ece_by_bin order by bin")
    assert sql_bins["bin"].to_list() == expected.bins["bin"].to_list()
    np.testing.assert_allclose(sql_bins["residual"].to_numpy(), expected.bins["residual"].to_numpy(), atol=1e-9)


def test_warehouse_interval_and_test_equal_calibration_test(built):
    """The stored interval, debiased value and p-value are `calibration_test` on the same inputs (one path)."""
    from noisycal_platform.calibration.tables import nc_ece_calibration_test

    home, result = built
    ann, preds = _sql(home, "select * from raw.annotations"), _sql(home, "select * from raw.predictions")
    channels = _sql(home, "select * from calibration.channel_estimates").drop("model_version")
    stored = _sql(home, "select * from calibration.nc_ece_report where estimator = 'nc_ece'").row(0, named=True)
    matrix = cal.annotation_matrix(ann, preds.select("item_id", "score"))
    settings = {"n_bins": 15, "n_bootstrap": int(stored["n_bootstrap"]), "ci_level": 0.95, "seed": int(stored["seed"])}
    test = nc_ece_calibration_test(matrix, channels, settings)
    for column, value in [
        ("value_debiased", test.nc_ece_debiased),
        ("ci_low", test.ci_low),
        ("ci_high", test.ci_high),
        ("p_value", test.p_value),
        ("null_q95", test.null_q95),
    ]:
        assert stored[column] == pytest.approx(value, rel=1e-9, abs=1e-12), column
    assert stored["channels_refit"] is True
    checks = {e.check_name: e for e in result.get_asset_check_evaluations()}
    for name in ("calibration_test_not_rejected", "annotators_conditionally_independent", "channels_score_invariant"):
        assert checks[name].severity == dg.AssetCheckSeverity.WARN
        assert "p_value" in checks[name].metadata


def test_recalibrators_exported_as_json_and_round_trip(built):
    home, _ = built
    table = _sql(home, "select * from calibration.recalibrators where status = 'ok'")
    assert table.height >= 3
    probe = np.linspace(0, 1, 11)
    for row in table.iter_rows(named=True):
        exported = json.loads((home / "exports" / "recalibrators" / "v1" / f"{row['name']}.json").read_text())
        from_json = Recalibrator.from_dict(exported)
        from_table = Recalibrator.from_dict(json.loads(row["params_json"]))
        np.testing.assert_array_equal(from_json.predict(probe), from_table.predict(probe))
        assert np.all((from_json.predict(probe) >= 0) & (from_json.predict(probe) <= 1))


def test_report_written_and_indexed(built):
    home, _ = built
    report = home / "reports" / "calibration" / "v1.html"
    assert report.is_file() and "<img" in report.read_text()
    assert "calibration/v1.html" in (home / "reports" / "index.html").read_text()
    rows = _sql(home, "select * from reports.calibration")
    assert rows["scope"].to_list() == ["v1"]


def test_nc_ece_limit_is_a_failing_check_when_exceeded(built, tmp_path):
    home, _ = built
    checks = _checks_with_limit(home, 0.0)
    assert checks["nc_ece_within_limit"] is False
    assert pl.read_csv(home / "references" / "labels.csv").height > 0


def test_nc_ece_limit_below_the_plugin_but_inside_the_interval_passes(built):
    """The check fails only on evidence (ci_low > limit): a limit between ci_low and the plug-in value passes."""
    home, _ = built
    row = _sql(home, "select value, ci_low from calibration.nc_ece_report where estimator = 'nc_ece'").row(0)
    value, ci_low = row
    assert ci_low < value  # the demo's interval leaves room between its lower end and the plug-in
    assert _checks_with_limit(home, (ci_low + value) / 2)["nc_ece_within_limit"] is True
