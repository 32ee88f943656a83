"""The report kit: number formats checked against strings written out by hand, tables, figures without pyplot."""

from __future__ import annotations

import base64
import re
import subprocess
import sys
from pathlib import Path

import polars as pl
import pytest

from noisycal_platform import report_html as rh

ROOT = Path(__file__).parents[2]


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (1124250.0, "1,124,250"),  # a count stored as a float reads as an integer
        (1500, "1,500"),
        (0.0, "0"),
        (None, "—"),
        (float("nan"), "—"),
    ],
)
def test_counts_are_integers(value, expected):
    assert rh.fmt_count(value) == expected


def test_mean_count_keeps_its_fraction():
    assert rh.fmt_count(12.5) == "12.5"


def test_numpy_scalars_format_like_python_numbers():
    import numpy as np

    assert rh.fmt_count(np.int64(1124250)) == "1,124,250"
    assert rh.fmt(np.float32(0.5)) == "0.500" and rh.fmt(np.float64("nan")) == "—"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (0.07083302378691372, "0.0708"),  # three significant digits
        (0.5, "0.500"),
        (0.123456, "0.123"),
        (12.3456, "12.3"),
        (999.96, "1000"),  # rounds up across a decade, still three digits
        (12345.6, "12,346"),
        (0.00012345, "0.000123"),
        (0.0000123, "1.23e-05"),
        (-0.0451, "-0.0451"),
        (float("inf"), "∞"),
        (7, "7"),
        (True, "yes"),
        ("a<b", "a<b"),  # plain text; the table escapes
    ],
)
def test_fmt_three_significant_digits(value, expected):
    assert rh.fmt(value) == expected


@pytest.mark.parametrize(
    ("p", "expected"),
    [(0.0, "< 0.001"), (0.0004, "< 0.001"), (0.001, "0.001"), (0.0049, "0.005"), (0.012, "0.01"),
     (0.049, "0.05"), (0.5, "0.50"), (1.0, "1.00")],
)
def test_p_values_have_a_floor(p, expected):
    assert rh.fmt_p(p) == expected


def test_p_value_outside_unit_interval_is_an_error():
    with pytest.raises(ValueError, match="p-value"):
        rh.fmt_p(1.5)


def test_interval_rounded_to_its_width():
    # width 0.038 -> two significant digits of the width -> three decimals for all three numbers
    assert rh.fmt_ci(0.07083, 0.05207, 0.09012) == "0.071 (95% CI 0.052–0.090)"
    # width 3.1 -> one decimal
    assert rh.fmt_ci(12.345, 10.9, 14.0, level=0.9) == "12.3 (90% CI 10.9–14.0)"
    assert rh.fmt_ci(0.5, None, None) == "0.500"
    # width 0.013 -> three decimals; negative bounds get a minus sign, not a hyphen that reads as the dash
    assert rh.fmt_ci(-0.004, -0.011, 0.002) == "−0.004 (95% CI −0.011–0.002)"


def test_share_and_verdict():
    assert rh.fmt_share(12, 1500) == "12 of 1,500 (0.800%)"
    assert rh.ci_verdict(0.03, 0.02, 0.04, limit=0.05) == "within"
    assert rh.ci_verdict(0.08, 0.06, 0.1, limit=0.05) == "above"
    assert rh.ci_verdict(0.05, 0.03, 0.07, limit=0.05) == "not enough evidence"
    assert rh.ci_verdict(None, None, None, limit=0.05) == "not enough evidence"


def test_table_formats_by_column_and_says_what_fills_an_empty_one():
    df = pl.DataFrame({"dataset": ["d<1>"], "n_total": [1124250.0], "ece": [0.07083302378691372],
                       "p_value": [0.0002], "ok": [True]})
    out = rh.html_table(df)
    cells = re.findall(r"<td class='[^']*'>([^<]*)</td>", out)
    assert cells == ["d&lt;1&gt;", "1,124,250", "0.0708", "&lt; 0.001", "yes"]
    empty = rh.html_table(df.head(0), empty="answers from the confirmation tool fill it.")
    assert "<table" not in empty and "answers from the confirmation tool fill it." in empty


def test_figure_renders_a_png():
    fig = rh.figure(figsize=(2, 1.5))
    ax = fig.subplots()
    ax.plot([0, 1], [0, 1])
    uri = rh.figure_png(fig)
    assert uri.startswith("data:image/png;base64,")
    assert base64.b64decode(uri.split(",", 1)[1])[:8] == b"\x89PNG\r\n\x1a\n"
    assert rh.figure_png(fig) == uri  # no timestamp or software tag: same figure, same bytes


def test_page_is_self_contained():
    out = rh.page("T & t", "<p>x</p>", created="2026-12-01T00:00:00+00:00")
    assert out.startswith("<!doctype html>") and "<title>T &amp; t</title>" in out
    assert "Built 2026-12-01 00:00:00 UTC." in out
    assert not re.search(r"(src|href)=['\"](https?:|//)", out)


def test_no_global_backend_switch():
    """Rendering figures leaves matplotlib's backend as the process chose it and never loads pyplot."""
    code = (
        "import sys, matplotlib\n"
        "from noisycal_platform import report_html as rh\n"
        "from noisycal_platform.correctness import report as cr\n"
        "fig = rh.figure(); fig.subplots().plot([0, 1]); rh.figure_png(fig)\n"
        "assert matplotlib.rcParams['backend'] == 'svg', matplotlib.rcParams['backend']\n"
        "assert 'matplotlib.pyplot' not in sys.modules\n"
    )
    env = {"MPLBACKEND": "svg", "PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}
    res = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, timeout=120)
    assert res.returncode == 0, res.stderr
    for mod in ("report_html.py", "cleaning/report.py", "calibration/report.py", "correctness/report.py"):
        text = (ROOT / "noisycal_platform" / mod).read_text()
        assert "matplotlib.use(" not in text and "pyplot" not in text.replace("no pyplot", ""), mod


# ------------------------------------------------------------------------------------------------ index page
def test_calibration_verdicts_against_the_limit():
    from noisycal_platform import report_index as ri

    rep = pl.DataFrame({
        "model_version": ["a", "b", "c", "a"],
        "estimator": ["nc_ece", "nc_ece", "nc_ece", "naive_soft_vote"],
        "value": [0.03, 0.2, 0.09, 0.5],
        "ci_low": [0.02, 0.15, 0.05, 0.4],
        "ci_high": [0.04, 0.25, 0.13, 0.6],
    })
    v = ri.calibration_verdicts(rep, limit=0.1)
    assert v["model_version"].to_list() == ["a", "b", "c"]  # the naive row is not a verdict
    assert v["verdict"].to_list() == ["within", "above", "not enough evidence"]
    lines = ri.calibration_verdict_lines(v, 0.1)
    assert lines[0] == "model a: within the limit 0.1 (NC-ECE 0.030 (95% CI 0.020–0.040))"


def test_the_verdict_quotes_the_estimate_its_interval_is_centred_on():
    """The interval is centred at the debiased NC-ECE (inference.debiased_normal_interval), so the sentence quotes
    value_debiased, not the plug-in value that may lie above the interval."""
    from noisycal_platform import report_index as ri

    rep = pl.DataFrame({"model_version": ["v2"], "estimator": ["nc_ece"], "value": [0.0504],
                        "value_debiased": [0.0243], "ci_low": [0.0018], "ci_high": [0.0472]})
    v = ri.calibration_verdicts(rep, limit=0.1)
    assert v["nc_ece"].to_list() == [0.0243]
    # three decimals: two significant digits of the interval's width 0.045 (GUM §7.2.6)
    expected = "model v2: within the limit 0.1 (NC-ECE 0.024 (95% CI 0.002–0.047))"
    assert ri.calibration_verdict_lines(v, 0.1)[0] == expected


def test_multiclass_version_gets_one_verdict_per_kind_and_subgroups_stay_off_the_overview():
    from noisycal_platform import report_index as ri

    rep = pl.DataFrame({
        "model_version": ["d", "d", "d", "v"],
        "estimator": ["nc_ece"] * 4,
        "kind": ["top_label", "classwise", "top_label", "binary"],
        "subgroup_value": [None, None, "south", None],
        "value": [0.11, 0.02, 0.21, 0.05],
        "ci_low": [0.10, 0.01, 0.18, 0.01],
        "ci_high": [0.12, 0.03, 0.24, 0.07],
    })
    v = ri.calibration_verdicts(rep, limit=0.05)
    assert v.select("model_version", "kind").rows() == [("d", "top-label"), ("d", "classwise"), ("v", "")]
    assert v["verdict"].to_list() == ["above", "within", "not enough evidence"]
    lines = ri.calibration_verdict_lines(v, 0.05)
    assert lines[0].startswith("model d (top-label): above the limit 0.05")
    assert lines[2].startswith("model v: not enough evidence")
    html = ri.render_calibration_overview(v, [], limit=0.05)
    assert html.count("href='calibration/d.html'") == 2 and "(classwise)" in html


def test_index_shows_verdict_freshness_missing_and_unbuilt_stages(tmp_path):
    from noisycal_platform import report_index as ri

    st = ri.StageStatus(report="calibration", title="Calibration", verdict=["model a: within"],
                        built="2026-12-01T10:00:00+00:00", newest_input="2026-12-01T10:05:00+00:00",
                        links=[("a", "calibration/a.html")], missing=[("v9", "the latest run failed: bad <file>")],
                        missing_kind="model version")
    ri.write_status(tmp_path, st)
    (tmp_path / ri.STATUS_FOLDER / "broken.json").write_text("{not json")  # skipped, never fatal
    statuses = ri.read_statuses(tmp_path)
    assert statuses == [st]
    page = ri.render_index(statuses, home="/h", other_files=["calibration/a.html", "extra.html"])
    assert "built 2026-12-01 10:00:00 UTC; newest input 2026-12-01 10:05:00 UTC" in page
    assert "a rebuild is due" in page  # an input newer than the build
    assert "<b>v9</b>: the latest run failed: bad &lt;file&gt;" in page and "(1 model version)" in page
    # a stage without a status says so
    assert "Data cleaning" in page and "Not built yet: it is built once a dataset" in page
    assert "href='extra.html'" in page and page.count("href='calibration/a.html'") == 1
