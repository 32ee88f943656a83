"""HTML report and markdown summary."""

from __future__ import annotations

import base64
import re

import polars as pl

from noisycal_platform.calibration.recalibration_tables import recalibration_report_table, recalibrators_table
from noisycal_platform.calibration.report import calibration_summary_markdown, render_calibration_report
from noisycal_platform.calibration.tables import annotation_matrix, channel_estimates_table, nc_ece_report_table

from .test_tables import _frames


def test_html_is_self_contained_with_png_diagrams_and_tables():
    ann, pred, ref, *_ = _frames(n=600)
    m = annotation_matrix(ann, pred)
    ct = channel_estimates_table(m)
    rep = nc_ece_report_table(m, ct, n_bootstrap=50)
    rt = recalibrators_table(m, ct)
    rr = recalibration_report_table(m, rt, ct, ref)
    html = render_calibration_report(m, ct, rep, rt, rr, ref, model_version="v9")
    assert html.startswith("<!doctype html>") and "model v9" in html
    imgs = re.findall(r"src='data:image/png;base64,([^']+)'", html)
    assert len(imgs) == 2
    assert base64.b64decode(imgs[0])[:8] == b"\x89PNG\r\n\x1a\n"
    assert not re.search(r"(src|href)=['\"]https?:", html)  # nothing fetched from outside
    for a in ("r0", "r1", "r2", "nc_ece", "platt_corrected"):
        assert a in html
    md = calibration_summary_markdown(ct, rep, rr, "v9")
    nc = rep.filter(pl.col("estimator") == "nc_ece")["value"][0]
    assert f"{nc:.4f}" in md and "| r2 |" in md
