"""The HTML report is self-contained, states that demo data is synthetic, highlights reversals and shows the
notes of skipped criteria."""

import re

import polars as pl

from noisycal_platform.correctness import pipeline as cp
from noisycal_platform.correctness.report import render_correctness_report
from tests.unit.correctness._frames import auroc_grid


def test_report_on_demo(demo_frames):
    d, s, a = demo_frames["decisions"], demo_frames["scores"], demo_frames["audit"]
    audit = cp.criterion_audit(d, s, a, n_boot=50)
    sens = cp.ue_sensitivity(d, s)
    fa = cp.false_acceptance(d, a)
    html = render_correctness_report(audit, sens, fa, synthetic=True, created="2026-11-30T00:00:00Z")
    assert html.startswith("<!doctype html>")
    assert "Synthetic demo data" in html
    assert len(re.findall(r'src="data:image/png;base64,', html)) == 2
    assert not re.search(r'src="http', html) and "<script" not in html  # nothing fetched from elsewhere
    assert "skipped: no judge endpoint configured" in html and "not evaluated" in html
    for c in ("exact_match", "rouge_l_0.20", "missing/partial", "extra/wrong", "invalid/uncertain"):
        assert c in html
    real = render_correctness_report(audit, sens, fa, synthetic=False)
    assert "Synthetic demo data" not in real


def test_reversal_cells_highlighted():
    sens = auroc_grid([0.7, 0.5, 0.6, 0.65], n_models=[3] * 4, n_predictions=[10] * 4,
                      spread=[0.2, 0.2, 0.05, 0.05], in_reversal=[True] * 4)
    empty_audit = pl.DataFrame(schema=cp.AUDIT_RESULT_SCHEMA)
    empty_fa = pl.DataFrame(schema=cp.FALSE_ACCEPTANCE_SCHEMA)
    html = render_correctness_report(empty_audit, sens, empty_fa, synthetic=False)
    assert html.count("class='rev") == 4
    assert "Ranking reversals (1)" in html
    assert "0.700 vs 0.600 under f, but 0.500 vs 0.650 under g" in html
