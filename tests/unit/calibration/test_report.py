"""HTML report and markdown summary."""

from __future__ import annotations

import base64
import re

import polars as pl

from noisycal_platform.calibration.recalibration_tables import recalibration_report_table, recalibrators_table
from noisycal_platform.calibration.report import (
    calibration_summary_markdown,
    calibration_verdict,
    recommended_recalibrator,
    render_calibration_report,
)
from noisycal_platform.calibration.tables import annotation_matrix, channel_estimates_table, nc_ece_report_table

from .test_tables import _frames


def test_verdict_follows_the_interval_against_the_limit():
    row = {"value": 0.08, "ci_low": 0.06, "ci_high": 0.11}
    assert calibration_verdict(row, 0.05).startswith("above the limit")
    assert calibration_verdict(row, 0.12).startswith("within the limit")
    assert calibration_verdict(row, 0.09).startswith("not enough evidence")
    assert "no NC-ECE limit" in calibration_verdict(row, None)


def test_recommended_recalibrator_beats_the_base_or_keeps_the_scores():
    rep = pl.DataFrame(
        {
            "name": ["base", "platt_corrected", "histogram_corrected", "platt_naive"],
            "corrected": [None, True, True, False],
            "nc_ece": [0.08, 0.05, 0.03, 0.01],
            "ece": [None, None, None, None],
            "regime": ["split"] * 4,
        },
        schema_overrides={"ece": pl.Float64},
    )
    assert recommended_recalibrator(rep).startswith("histogram_corrected")  # naive fits are never recommended
    worse = rep.with_columns(pl.when(pl.col("name") == "base").then(0.001).otherwise(pl.col("nc_ece")).alias("nc_ece"))
    assert recommended_recalibrator(worse).startswith("keep the scores")


def test_html_is_self_contained_with_png_diagrams_and_tables():
    ann, pred, ref, *_ = _frames(n=600)
    m = annotation_matrix(ann, pred)
    ct = channel_estimates_table(m)
    rep = nc_ece_report_table(m, ct, n_bootstrap=50)
    rt = recalibrators_table(m, ct)
    rr = recalibration_report_table(m, rt, ct, ref)
    html = render_calibration_report(m, ct, rep, rt, rr, ref, model_version="v9", nc_ece_limit=0.5)
    assert html.startswith("<!doctype html>") and "model v9" in html
    imgs = re.findall(r"src='data:image/png;base64,([^']+)'", html)
    assert len(imgs) == 2
    assert base64.b64decode(imgs[0])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r"(src|href)=['\"]https?:", html)  # nothing fetched from outside
    for a in ("r0", "r1", "r2", "nc_ece", "platt_corrected"):
        assert a in html
    nc_row = rep.filter(pl.col("estimator") == "nc_ece").row(0, named=True)
    assert nc_row["ci_high"] < 0.5 and "within the limit" in html  # interval entirely below the limit
    assert "Sample regime: <b>split</b>" in html and "Recommended recalibrator" in html
    assert "null_low" in html  # the per-bin band a calibrated predictor fills is tabulated
    md = calibration_summary_markdown(ct, rep, rr, "v9")
    nc = rep.filter(pl.col("estimator") == "nc_ece")["value"][0]
    assert f"{nc:.4f}" in md and "| r2 |" in md
