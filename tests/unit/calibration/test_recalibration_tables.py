"""Recalibrator tables: stable split, JSON export, held-out clean-target report."""

from __future__ import annotations

import json

import numpy as np
import polars as pl
import pytest

from noisycal_platform.calibration import Recalibrator, binned_ece
from noisycal_platform.calibration.recalibration_tables import (
    holdout_mask,
    recalibration_report_table,
    recalibrator_exports,
    recalibrators_table,
)
from noisycal_platform.calibration.tables import annotation_matrix, channel_estimates_table

from .test_tables import _frames


def test_recalibrators_and_report():
    ann, pred, ref, _, y = _frames(n=3000)
    m = annotation_matrix(ann, pred)
    ct = channel_estimates_table(m)
    rt = recalibrators_table(m, ct)
    assert rt["name"].to_list() == [
        "platt_corrected",
        "platt_naive",
        "temperature_corrected",
        "temperature_naive",
        "histogram_corrected",
        "histogram_naive",
    ]
    ev = holdout_mask(m.item_ids)
    assert rt.filter(pl.col("status") == "ok")["n_fit"].max() <= int((~ev).sum())
    ex = recalibrator_exports(rt)
    r = Recalibrator.from_dict(json.loads(json.dumps(ex["histogram_corrected"])))
    rep = recalibration_report_table(m, rt, ct, ref)
    base = rep.filter(pl.col("name") == "base").row(0, named=True)
    # base ECE against the reference labels on the held-out items, by hand
    assert base["ece"] == pytest.approx(binned_ece(m.scores[ev], y[ev].astype(float), 15), rel=1e-9, abs=1e-12)
    hist = rep.filter(pl.col("name") == "histogram_corrected").row(0, named=True)
    assert hist["ece"] == pytest.approx(
        binned_ece(r.predict(m.scores[ev]), y[ev].astype(float), 15), rel=1e-9, abs=1e-12
    )
    assert hist["ece"] < base["ece"]  # the model is miscalibrated; corrected histogram helps
    no_ref = recalibration_report_table(m, rt, ct, None)
    assert no_ref["ece"].null_count() == no_ref.height


def test_holdout_mask_is_stable_and_balanced():
    ids = [f"x{i}" for i in range(4000)]
    mask = holdout_mask(ids)
    np.testing.assert_array_equal(mask[:100], holdout_mask(ids[:100]))
    assert 0.46 < mask.mean() < 0.54
