"""SQL models and numpy agree on the same rows: the per-bin NC-ECE table to 1e-9 (one bin rule for both)."""

from datetime import UTC, datetime

import duckdb
import numpy as np
import polars as pl
import pytest

from assets.sql_models import SQL_ROOT, parse_sql_model, run_sql_model
from noisycal_platform.calibration.channels import Channel
from noisycal_platform.calibration.nc_ece import nc_ece

STG = parse_sql_model(SQL_ROOT / "staging" / "stg_annotations.sql")
INDEX = parse_sql_model(SQL_ROOT / "staging" / "stg_annotator_index.sql")
SCORED = parse_sql_model(SQL_ROOT / "staging" / "stg_scored_items.sql")
VERSIONS = parse_sql_model(SQL_ROOT / "staging" / "stg_model_versions.sql")
MART = parse_sql_model(SQL_ROOT / "marts" / "nc_ece_by_bin.sql")


def test_models_parse_with_expected_lineage():
    assert STG.key.path == ["staging", "stg_annotations"] and STG.deps == (("raw", "annotations"),)
    assert MART.key.path == ["calibration", "nc_ece_by_bin"]
    assert INDEX.deps == (("raw", "annotations"),)
    assert SCORED.deps == (
        ("raw", "annotations"),
        ("raw", "predictions"),
        ("staging", "stg_annotator_index"),
        ("staging", "stg_model_versions"),
    )
    assert MART.deps == (
        ("calibration", "channel_estimates"),
        ("staging", "stg_annotator_index"),
        ("staging", "stg_model_versions"),
        ("staging", "stg_scored_items"),
    )
    assert MART.params == {} and SCORED.params == {"n_bins": 15}


def _simulate(rng, n, fpr, fnr, p_missing):
    s = rng.beta(2, 3, n)
    # scores on exact bin edges too, to pin the bin rule min(floor(s*B), B-1)
    s[:16] = np.arange(16) / 15
    y = rng.random(n) < np.clip(s**0.8 + 0.03, 0, 1)
    a = np.where(y[:, None], rng.random((n, 3)) >= fnr, rng.random((n, 3)) < fpr).astype(float)
    a[rng.random((n, 3)) < p_missing] = np.nan
    a[:5] = np.nan  # unannotated items are excluded by both
    return s, a


@pytest.mark.parametrize("seed", [0, 1])
def test_nc_ece_by_bin_equals_numpy(tmp_path, seed):
    rng = np.random.default_rng(seed)
    fpr, fnr = np.array([0.10, 0.05, 0.25]), np.array([0.20, 0.10, 0.15])
    s, a = _simulate(rng, 20_000, fpr, fnr, p_missing=0.3)
    weights = np.array([0.5, 0.3, 0.2])
    channels = [Channel(f, b) for f, b in zip(fpr, fnr, strict=True)]
    expected = nc_ece(s, a, channels, weights=weights, n_bins=15)

    items = [f"i{i}" for i in range(len(s))]
    ann = pl.DataFrame(
        [(items[i], f"r{j}", int(a[i, j])) for i, j in zip(*np.nonzero(~np.isnan(a)), strict=True)],
        schema={"item_id": pl.String, "annotator_id": pl.String, "label": pl.Int8},
        orient="row",
    ).with_columns(pl.lit(None, pl.Datetime("us", "UTC")).alias("timestamp"), pl.lit("b.csv").alias("source_file"))
    now = datetime(2026, 1, 1, tzinfo=UTC)
    preds = pl.DataFrame({"item_id": items, "score": s}).with_columns(
        pl.lit("v2").alias("model_version"), pl.lit(now).alias("registered_at")
    )
    # an older version with other scores must be ignored ("latest" = most recently registered)
    old = preds.with_columns(
        pl.lit("v1").alias("model_version"),
        pl.lit(datetime(2025, 1, 1, tzinfo=UTC)).alias("registered_at"),
        (1 - pl.col("score")).alias("score"),
    )
    ch = pl.DataFrame(
        {
            "model_version": ["v2"] * 3 + ["v1"] * 3,
            "annotator_id": ["r0", "r1", "r2"] * 2,
            "fpr": [*fpr, 0, 0, 0],
            "gap": [*(1 - fpr - fnr), 1, 1, 1],
            "weight": [*weights, 1, 1, 1],
        }
    )
    con = duckdb.connect(str(tmp_path / "w.duckdb"))
    for schema, name, frame in (
        ("raw", "annotations", ann),
        ("raw", "predictions", pl.concat([old, preds])),
        ("calibration", "channel_estimates", ch),
    ):
        con.execute(f"create schema if not exists {schema}")
        con.register("frame", frame.to_arrow())
        con.execute(f"create table {schema}.{name} as select * from frame")
        con.unregister("frame")
    for model in (STG, INDEX, VERSIONS, SCORED):
        run_sql_model(con, model)
    assert run_sql_model(con, MART) == expected.bins.height
    got = con.execute("select * from calibration.nc_ece_by_bin order by bin").pl()
    assert got["model_version"].unique().to_list() == ["v2"]
    assert got["bin"].to_list() == expected.bins["bin"].to_list()
    assert got["n"].to_list() == expected.bins["n"].to_list()
    for col in ("mean_score", "mean_corrected_label", "residual"):
        np.testing.assert_allclose(got[col].to_numpy(), expected.bins[col].to_numpy(), rtol=0, atol=1e-9)
    # and the scalar: sum_k n_k/N |residual_k|
    n = got["n"].to_numpy()
    assert abs(float((n * np.abs(got["residual"].to_numpy())).sum() / n.sum()) - expected.value) < 1e-9
