"""`pipeline` has one function per calibration asset, and each returns what its table function returns."""

import inspect

import numpy as np
import polars as pl
import pytest

from noisycal_platform.calibration import pipeline
from noisycal_platform.calibration.diagnostics import assumption_checks
from noisycal_platform.calibration.tables import annotation_matrix, channel_estimates_table, nc_ece_report_table

from .test_tables import _frames

ASSETS = ("channel_estimates", "nc_ece_report", "recalibrators", "recalibration_report")


def test_one_function_per_asset():
    for name in ASSETS:
        fn = getattr(pipeline, name)
        assert inspect.isfunction(fn) and fn.__module__ == pipeline.__name__
        assert "Hanada and Futami 2026" in fn.__doc__


def test_facade_equals_the_table_functions():
    ann, pred, ref, *_ = _frames(n=1200)
    ch = pipeline.channel_estimates(ann, pred, n_check_replicates=40)
    m = annotation_matrix(ann, pred)
    direct = channel_estimates_table(m)
    assert ch.select(direct.columns).equals(direct)
    checks = assumption_checks(m.values, m.scores, n_replicates=40)
    assert ch["independence_p_value"][0] == pytest.approx(checks.independence_p_value, rel=1e-9)
    assert set(pipeline.ASSUMPTION_COLUMNS) <= set(ch.columns)
    rep = pipeline.nc_ece_report(ann, pred, ch, n_bootstrap=60)
    assert rep.equals(nc_ece_report_table(m, ch, n_bootstrap=60))
    rec = pipeline.recalibrators(ann, pred, ch)
    out = pipeline.recalibration_report(ann, pred, ch, rec, ref)
    assert out["regime"].unique().to_list() == ["split"]
    assert isinstance(out, pl.DataFrame) and np.isfinite(out["nc_ece"].to_numpy()).all()
