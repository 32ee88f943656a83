"""Calibration report: self-contained HTML (reliability diagrams as base64 PNG) and a markdown summary.

Pure functions of the pipeline frames (see `pipeline`); matplotlib is imported lazily and used through
`matplotlib.figure.Figure` (no pyplot global state).
"""

from __future__ import annotations

import html
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from noisycal_platform import report_html

from .inference import CalibrationTest
from .multiclass import corrected_onehot, naive_onehot
from .nc_ece import bin_index
from .recalibration import naive_targets
from .recalibration_tables import holdout_mask, recalibrators_from_table
from .tables import AnnotationMatrix, _as_channel_table, nc_ece_calibration_test

__all__ = [
    "BINARY_SUMMARY",
    "MULTICLASS_SUMMARY",
    "SummaryLayout",
    "binary_channel_lines",
    "calibration_summary_markdown",
    "calibration_verdict",
    "confusion_channel_lines",
    "recommended_recalibrator",
    "render_calibration_report",
    "render_multiclass_report",
    "subgroup_section",
]


# the report kit's formatters (one rule for every report; names kept for the code below)
_fmt = report_html.fmt
_html_table = report_html.html_table
_png = report_html.figure_png
#: The diagrams are plain ``<img>`` elements: a light frame, as the kit draws ``img.plot``.
_EXTRA_CSS = "img{border:1px solid #eee;margin:4px}"


def _bin_curve(p: np.ndarray, y: np.ndarray, n_bins: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    keep = ~np.isnan(y)
    b = bin_index(p[keep], n_bins)
    n = np.bincount(b, minlength=n_bins)
    sp = np.bincount(b, weights=p[keep], minlength=n_bins)
    sy = np.bincount(b, weights=y[keep], minlength=n_bins)
    nz = n > 0
    return sp[nz] / n[nz], sy[nz] / n[nz], n[nz]


def _reliability_figure(
    panels: list[tuple[str, list[tuple[str, np.ndarray, np.ndarray, str]]]], band: pl.DataFrame | None = None
) -> str:
    """Reliability panels, one per (title, curves); curve = (label, mean prediction, mean label, style).

    ``band`` (first panel): per bin, the 2.5–97.5% range of the mean corrected label that a calibrated predictor
    shows under the same channels and missingness (`CalibrationTest.bins` null_low / null_high), shaded over the
    bin, with the bin's item count written under it.
    """
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5.0 * len(panels), 4.6))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    for i, (ax, (title, curves)) in enumerate(zip(axes, panels, strict=True)):
        if band is not None and i == 0 and band.height:
            n_bins = int(band["n_bins"][0])
            lo, hi = band["null_low"].to_numpy(), band["null_high"].to_numpy()
            left = band["bin"].to_numpy() / n_bins
            ax.bar(
                left,
                hi - lo,
                bottom=lo,
                width=1 / n_bins,
                align="edge",
                color="tab:green",
                alpha=0.18,
                label="calibrated predictor, same channels (95%)",
            )
            for x, n in zip(left, band["n"].to_list(), strict=True):
                ax.text(x + 0.5 / n_bins, -0.085, str(n), ha="center", fontsize=6, color="0.35")
        ax.plot([0, 1], [0, 1], color="0.6", lw=1, ls="--", label="perfect calibration")
        for label, x, y, style in curves:
            ax.plot(x, y, style, label=label, ms=4, lw=1.2)
        ax.set_xlim(0, 1)
        ax.set_ylim(-0.1, 1.1)
        ax.set_xlabel("mean predicted probability (bin)")
        ax.set_ylabel("mean label (bin)")
        ax.set_title(title, fontsize=10)
        ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    return _png(fig)


def calibration_verdict(nc_row: dict[str, Any], limit: float | None) -> str:
    """Plain-language verdict on the NC-ECE row against the clinic's limit: "above the limit" when the interval's
    lower end exceeds it, "within the limit" when its upper end does not, else "not enough evidence"."""
    value, lo, hi = nc_row.get("value"), nc_row.get("ci_low"), nc_row.get("ci_high")
    if limit is None:
        return "no NC-ECE limit is set (settings.json nc_ece_limit)"
    if lo is None or hi is None:
        return f"no interval stored; the plug-in NC-ECE {_fmt(value)} is compared with the limit {_fmt(limit)}"
    kind = report_html.ci_verdict(value, lo, hi, limit)  # the one verdict rule, shared with the index page
    if kind == "above":
        return (
            f"above the limit: NC-ECE is at least {_fmt(lo)} (95% interval {_fmt(lo)}–{_fmt(hi)}), "
            f"more than the limit {_fmt(limit)}"
        )
    if kind == "within":
        return f"within the limit: NC-ECE is at most {_fmt(hi)} (95% interval), below the limit {_fmt(limit)}"
    return (
        f"not enough evidence: the 95% interval {_fmt(lo)}–{_fmt(hi)} contains the limit {_fmt(limit)}; "
        "more annotated items would narrow it"
    )


def recommended_recalibrator(recalibration_report: pl.DataFrame | None) -> str:
    """The corrected recalibrator with the lowest held-out error (reference ECE where references exist, else
    NC-ECE), if it beats the base scores; plain language, with the sample regime that scored it."""
    if recalibration_report is None or not recalibration_report.height:
        return "no recalibrator was evaluated"
    col = "ece" if recalibration_report["ece"].null_count() < recalibration_report.height else "nc_ece"
    regime = str(recalibration_report["regime"][0]) if "regime" in recalibration_report.columns else "reuse"
    base = recalibration_report.filter(pl.col("name") == "base")[col]
    cands = recalibration_report.filter(pl.col("corrected").fill_null(False)).sort(col, nulls_last=True)
    where = f"held-out {col}, regime {regime}" + (
        ": channels and maps fitted on the other half"
        if regime == "split"
        else ": channels also fitted on the held-out items"
    )
    if not cands.height or (base.len() and base[0] is not None and cands[col][0] >= base[0]):
        return f"keep the scores as they are: no corrected recalibrator beats them ({where})"
    best = cands.row(0, named=True)
    return (
        f"{best['name']}: {col} {_fmt(best[col])} against {_fmt(base[0] if base.len() else None)} for the "
        f"scores as they are ({where})"
    )


_CHANNEL_COLUMNS = [
    "annotator_id", "fpr", "fnr", "gap", "weight", "n_labels", "method", "converged", "prevalence", "min_gap"
]
_ESTIMATOR_COLUMNS = [
    "estimator", "annotator_id", "value", "ci_low", "ci_high", "n_items", "n_excluded", "min_items_per_bin"
]


def _recalibration_figure(
    s: np.ndarray, target: np.ndarray, tname: str, ev: np.ndarray, recalibrators: pl.DataFrame, n_bins: int
) -> str:
    """Diagram 2 of `render_calibration_report`: on the held-out items ``ev``, the base scores and every
    fitted recalibrator against ``target``, one panel for the corrected fits and one for the naive ones."""
    base = ("base (not recalibrated)", *_bin_curve(s[ev], target[ev], n_bins)[:2], "k.:")
    panels = []
    for corrected in (True, False):
        curves2 = [base]
        for (name, r), style in zip(
            ((k, v) for k, v in recalibrators_from_table(recalibrators).items() if v.corrected == corrected),
            ("o-", "s-", "^-", "v-", "x-"),
            strict=False,
        ):
            curves2.append((name, *_bin_curve(r.predict(s[ev]), target[ev], n_bins)[:2], style))
        kind = "corrected (noise-corrected labels)" if corrected else "naive (noisy labels as truth)"
        panels.append((f"{kind}\nheld-out items vs {tname}", curves2))
    return _reliability_figure(panels)


def render_calibration_report(
    matrix: AnnotationMatrix,
    channel_table: pl.DataFrame,
    nc_ece_report: pl.DataFrame,
    recalibrators: pl.DataFrame | None = None,
    recalibration_report: pl.DataFrame | None = None,
    references: pl.DataFrame | None = None,
    model_version: str = "",
    n_bins: int = 15,
    nc_ece_limit: float | None = None,
    predictions: pl.DataFrame | None = None,
    min_items: int | None = None,
) -> str:
    """Self-contained HTML: verdict, channel table, NC-ECE vs naive ECEs, reliability diagrams, recalibration,
    and (``predictions`` with items.csv subgroups) one row and one reliability diagram per subgroup.

    Verdict: `calibration_verdict` against ``nc_ece_limit`` and `recommended_recalibrator`. Reliability diagram 1
    (all scored items): per bin, mean corrected label (NC), soft vote (naive) and the reference label where
    ``references`` is given, over the band a calibrated predictor fills under the same channels (from
    `calibration_test` with the stored bootstrap size and seed), with bin counts. Diagram 2 (held-out items,
    `holdout_mask`): every fitted recalibrator, against reference labels when available, else corrected labels.
    """
    if matrix.scores is None:
        raise ValueError("matrix has no scores; build it with predictions")
    from .nc_ece import corrected_labels

    ct = _as_channel_table(channel_table)
    chans, w = ct.for_matrix(matrix)
    s = matrix.scores
    ytil = corrected_labels(matrix.values, chans, w)
    soft = naive_targets(matrix.values, "soft_vote")
    ref = None
    if references is not None and references.height:
        lut = dict(zip(references["item_id"].cast(pl.Utf8).to_list(), references["label"].to_list(), strict=True))
        ref = np.array([lut.get(i, np.nan) for i in matrix.item_ids], dtype=float)
    curves = [
        ("noise-corrected label (NC)", *_bin_curve(s, ytil, n_bins)[:2], "o-"),
        ("soft vote (naive)", *_bin_curve(s, soft, n_bins)[:2], "s--"),
    ]
    if ref is not None:
        curves.append(("reference label", *_bin_curve(s, ref, n_bins)[:2], "^:"))
    nc_rows = nc_ece_report.filter(pl.col("estimator") == "nc_ece")
    nc_row = nc_rows.row(0, named=True) if nc_rows.height else {}
    test: CalibrationTest | None = None
    if int(nc_row.get("n_bootstrap") or 0) > 0:
        stored = {"n_bins": n_bins, "n_bootstrap": int(nc_row["n_bootstrap"]),
                  "ci_level": float(nc_row.get("ci_level") or 0.95), "seed": int(nc_row.get("seed") or 0)}
        test = nc_ece_calibration_test(matrix, ct, stored)
    band = test.bins.with_columns(pl.lit(n_bins).alias("n_bins")) if test is not None else None
    fig1 = _reliability_figure([(f"model {model_version}: reliability ({n_bins} bins)", curves)], band)
    fig2 = ""
    if recalibrators is not None and recalibrators.height:
        target = ref if ref is not None else ytil
        tname = "reference label" if ref is not None else "corrected label"
        fig2 = _recalibration_figure(s, target, tname, holdout_mask(matrix.item_ids), recalibrators, n_bins)
    parts = [
        "<h2>Verdict</h2>",
        f"<p><b>Calibration against the clinic's limit:</b> {html.escape(calibration_verdict(nc_row, nc_ece_limit))}."
        "</p>",
        _test_sentence(nc_row),
        f"<p><b>Recommended recalibrator:</b> {html.escape(recommended_recalibrator(recalibration_report))}.</p>",
        f"<p class='note'>{len(matrix.item_ids)} scored items, {len(matrix.annotator_ids)} annotators; "
        f"{matrix.n_scored_unannotated} scored items without annotation (excluded), "
        f"{matrix.n_annotated_unscored} annotated items without score (ignored). Bins: bin = "
        f"min(floor(s·{n_bins}), {n_bins - 1}). NC-ECE = Σ_k |Σ_(i∈k)(Ỹ_i − s_i)| / N with "
        "Ỹ_i = Σ_j w_j (A_ij − a_j)/δ_j renormalised "
        "over the annotators present (Hanada &amp; Futami, Noisy-Label Calibration with Multiple Unreliable "
        "Labels, §3).</p>",
        "<h2>Annotator channels</h2>",
        _html_table(channel_table, _CHANNEL_COLUMNS),
        "<h2>Calibration error: noise-corrected vs naive</h2>",
        _html_table(nc_ece_report, _ESTIMATOR_COLUMNS),
        "<p class='note'>Naive ECEs treat noisy labels as truth and are biased (Hanada and Futami 2026 §2.2). "
        "For NC-ECE, value is the plug-in estimate, value_debiased removes most of its upward bias (Kumar, Liang "
        "&amp; Ma "
        "2019), and the interval is centred at value_debiased with the bootstrap spread of that estimate, whose "
        "replicates re-estimate the channels; naive rows use a percentile bootstrap over items.</p>",
        f"<img alt='reliability diagram' src='{fig1}'>",
        "<p class='note'>Shaded: per bin, where the mean corrected label of a calibrated predictor falls 95% of "
        "the time with these scores, channels and missingness; numbers under the bins are item counts.</p>",
    ]
    if test is not None:
        parts += [
            "<h3>Bins</h3>",
            _html_table(test.bins, ["bin", "n", "mean_score", "mean_corrected_label", "null_low", "null_high"]),
        ]
    if fig2:
        parts.append(f"<img alt='recalibration reliability diagram' src='{fig2}'>")
    if recalibration_report is not None and recalibration_report.height:
        regime = str(recalibration_report["regime"][0]) if "regime" in recalibration_report.columns else "reuse"
        parts += [
            "<h2>Recalibration (held-out items)</h2>",
            f"<p class='note'>Sample regime: <b>{html.escape(regime)}</b> — "
            + (
                "channels, weights and recalibrators were fitted on one half of the items and scored on the other "
                "(Hanada and Futami 2026 §E.5)."
                if regime == "split"
                else "the fit half could not identify the channels alone, "
                "so the held-out items were scored with channels fitted on all items (§C.3)."
            )
            + "</p>",
            _html_table(recalibration_report),
        ]
    if recalibrators is not None:
        refused = recalibrators.filter(pl.col("status") != "ok")
        if refused.height:
            parts += ["<h3>Refused fits</h3>", _html_table(refused, ["name", "status", "message"])]
    if predictions is not None:

        def curve(col: str, val: str) -> tuple[np.ndarray, np.ndarray]:
            m = _mask_of(matrix.item_ids, predictions, col, val)
            return _bin_curve(s[m], ytil[m], n_bins)[:2]

        parts += subgroup_section(nc_ece_report, curve, n_bins, min_items)
    return report_html.page(f"Calibration report — model {model_version}", parts, extra_css=_EXTRA_CSS)


def _test_sentence(nc_row: dict[str, Any]) -> str:
    if nc_row.get("p_value") is None:
        return ""
    verdict = "not consistent" if nc_row["p_value"] < 0.05 else "consistent"
    shown = report_html.fmt_p(nc_row["p_value"])
    p_text = html.escape(f"p {shown}" if shown.startswith("<") else f"p = {shown}")
    return (
        f"<p><b>Calibration test:</b> a calibrated predictor scored by these annotators would show an NC-ECE of "
        f"at most {_fmt(nc_row['null_q95'])} in 95% of samples; this model shows {_fmt(nc_row['value'])} "
        f"(debiased {_fmt(nc_row['value_debiased'])}), {verdict} with calibration ({p_text})."
        "</p>"
    )


def binary_channel_lines(channel_table: pl.DataFrame) -> list[str]:
    """Markdown table of binary channels: fpr, fnr, gap and weight per annotator."""
    lines = ["| annotator | fpr | fnr | gap | weight |", "|---|---|---|---|---|"]
    for r in channel_table.iter_rows(named=True):
        lines.append(
            f"| {r['annotator_id']} | {r['fpr']:.4f} | {r['fnr']:.4f} | {r['gap']:.4f} | {r['weight']:.3f} |"
        )
    return lines


def confusion_channel_lines(channel_table: pl.DataFrame) -> list[str]:
    """Markdown table of confusion matrices (the long channel table): one gap per annotator."""
    lines = ["| annotator | gap (smallest singular value) |", "|---|---|"]
    for r in channel_table.unique("annotator_id", maintain_order=True).iter_rows(named=True):
        lines.append(f"| {r['annotator_id']} | {r['gap']:.4f} |")
    return lines


@dataclass(frozen=True)
class SummaryLayout:
    """How a label space's markdown summary differs: its channel table (``channel_lines``) and whether each NC-ECE
    line names its kind (top-label / classwise). Chosen by the version object (`versions.*.summary`)."""

    channel_lines: Callable[[pl.DataFrame], list[str]]
    names_kind: bool


BINARY_SUMMARY = SummaryLayout(binary_channel_lines, names_kind=False)
MULTICLASS_SUMMARY = SummaryLayout(confusion_channel_lines, names_kind=True)


def calibration_summary_markdown(
    channel_table: pl.DataFrame,
    nc_ece_report: pl.DataFrame,
    recalibration_report: pl.DataFrame | None = None,
    model_version: str = "",
    *,
    layout: SummaryLayout = BINARY_SUMMARY,
) -> str:
    """Short markdown for Dagster metadata: NC-ECE with CI, naive ECEs, channels, best recalibrator. ``layout``:
    the label space's channel table and kind names (`BINARY_SUMMARY`, `MULTICLASS_SUMMARY`)."""
    lines = [f"**Model {model_version}**" if model_version else "**Calibration**"]
    kind_of = (lambda r: f" {r['kind']}") if layout.names_kind else (lambda r: "")
    for r in nc_ece_report.filter(pl.col("estimator") == "nc_ece").iter_rows(named=True):
        lines.append(f"- NC-ECE{kind_of(r)}: {_fmt(r['value'])} (debiased {_fmt(r['value_debiased'])}, "
                     f"CI {_fmt(r['ci_low'])}–{_fmt(r['ci_high'])}, n={r['n_items']})")
        if r.get("p_value") is not None:
            lines.append(f"- calibration test p = {_fmt(r['p_value'])}")
    for r in nc_ece_report.filter(pl.col("estimator").str.starts_with("naive_")).iter_rows(named=True):
        who = r["annotator_id"] or r["estimator"].removeprefix("naive_")
        lines.append(f"- naive ECE{kind_of(r)} ({who}): {_fmt(r['value'])}")
    for r in nc_ece_report.filter(pl.col("flagged").fill_null(False) if "flagged" in nc_ece_report.columns
                                  else pl.lit(False)).iter_rows(named=True):
        lines.append(f"- FLAGGED subgroup{kind_of(r)}: {r['subgroup_column']} = {r['subgroup_value']} "
                     f"(NC-ECE {_fmt(r['value'])}, Holm p = {_fmt(r['p_value_holm'])})")
    lines += ["", *layout.channel_lines(channel_table)]
    if recalibration_report is not None and recalibration_report.height:
        col = "ece" if recalibration_report["ece"].null_count() < recalibration_report.height else "nc_ece"
        best = recalibration_report.sort(col, nulls_last=True).row(0, named=True)
        lines += ["", f"Best on held-out {col}: **{best['name']}** ({_fmt(best[col])})"]
    return "\n".join(lines)


# ------------------------------------------------------------------------------------ subgroups, several classes
def _subgroup_status(row: dict[str, Any]) -> str:
    if row["status"] == "too_small":
        return "too small: not computed"
    if row.get("flagged"):
        return "FLAGGED: miscalibrated (Holm-adjusted p < 0.05)"
    if row.get("p_value_holm") is None:
        return "no test"
    return "consistent with calibration"


def subgroup_section(
    nc_ece_report: pl.DataFrame, curve: Any, n_bins: int, min_items: int | None = None
) -> list[str]:
    """HTML for the subgroup rows (estimator "nc_ece_subgroup"): one table row per subgroup and kind (NC-ECE,
    interval, p-value, Holm-adjusted p-value, verdict; too-small subgroups listed as such) and one reliability
    diagram per computed subgroup, ``curve(column, value)`` → (mean prediction, mean corrected label) per bin;
    flagged subgroups are named in the diagram's title."""
    rows = nc_ece_report.filter(pl.col("estimator") == "nc_ece_subgroup") if "kind" in nc_ece_report.columns else None
    if rows is None or rows.height == 0:
        return []
    rows = rows.with_columns(
        pl.Series("verdict", [_subgroup_status(r) for r in rows.iter_rows(named=True)], dtype=pl.String)
    )
    flagged = rows.filter(pl.col("flagged").fill_null(False))
    small = rows.filter(pl.col("status") == "too_small").unique(["subgroup_column", "subgroup_value"],
                                                               maintain_order=True)
    parts = [
        "<h2>Subgroups (items.csv)</h2>",
        "<p><b>Flagged subgroups:</b> "
        + (html.escape(", ".join(f"{r['subgroup_column']} = {r['subgroup_value']} ({r['kind']})"
                                 for r in flagged.iter_rows(named=True))) or "none")
        + ".</p>",
        _html_table(rows, ["subgroup_column", "subgroup_value", "kind", "n_items", "value", "value_debiased",
                           "ci_low", "ci_high", "p_value", "p_value_holm", "verdict"]),
        "<p class='note'>Each subgroup's NC-ECE and calibration test use the whole version's annotator channels, "
        "held fixed (channels are annotator properties; the noise model takes them to be the same for every "
        "item), so a subgroup's interval does not carry the error of those channel estimates. "
        "Holm's step-down correction runs across all subgroups of one kind; a subgroup is flagged when its "
        "adjusted p-value is below 0.05."
        + (f" Subgroups with fewer than {min_items} annotated items are listed, not computed." if min_items else "")
        + "</p>",
    ]
    if small.height:
        parts.append("<p><b>Too small (not computed):</b> " + html.escape(", ".join(
            f"{r['subgroup_column']} = {r['subgroup_value']} ({r['n_items']} items)"
            for r in small.iter_rows(named=True))) + ".</p>")
    ok = rows.filter(pl.col("status") == "ok").unique(["subgroup_column", "subgroup_value"], maintain_order=True)
    for r in ok.iter_rows(named=True):
        col, val = r["subgroup_column"], r["subgroup_value"]
        x, y = curve(col, val)
        bad = flagged.filter((pl.col("subgroup_column") == col) & (pl.col("subgroup_value") == val)).height > 0
        title = f"{col} = {val}" + (" — FLAGGED (miscalibrated)" if bad else "") + f" ({n_bins} bins)"
        fig = _reliability_figure([(title, [("noise-corrected label (NC)", x, y, "o-")])])
        parts += [f"<h3>{html.escape(title)}</h3>",
                  f"<img alt='reliability diagram {html.escape(col)} = {html.escape(val)}' src='{fig}'>"]
    return parts


def _mask_of(item_ids: tuple[str, ...], predictions: pl.DataFrame, column: str, value: str) -> np.ndarray:
    from .subgroups import subgroup_masks

    for col, val, mask in subgroup_masks(item_ids, predictions):
        if (col, val) == (column, value):
            return mask
    return np.zeros(len(item_ids), bool)


def render_multiclass_report(
    cm: Any,
    ct: Any,
    channel_table: pl.DataFrame,
    nc_ece_report: pl.DataFrame,
    predictions: pl.DataFrame,
    recalibration_report: pl.DataFrame | None = None,
    model_version: str = "",
    n_bins: int = 15,
    nc_ece_limit: float | None = None,
    min_items: int | None = None,
) -> str:
    """Self-contained HTML for a multi-class version: the verdict for top-label and classwise NC-ECE (each with
    its interval and test), the confusion matrices, NC-ECE beside the naive ECEs, the top-label reliability
    diagram (confidence max_c p_c against the corrected indicator of the predicted class) and the subgroups."""
    ct = ct.for_matrix(cm)
    y = corrected_onehot(cm.values, ct.confusion, weights=ct.weights)
    soft = naive_onehot(cm.values, len(cm.classes), "soft_vote")
    rows = np.arange(len(cm.item_ids))
    pred = cm.probs.argmax(axis=1)
    conf = cm.probs[rows, pred]

    def top_curve(mask: np.ndarray, target: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        return _bin_curve(conf[mask], target[rows, pred][mask], n_bins)[:2]

    everyone = np.ones(len(rows), bool)
    fig = _reliability_figure([(
        f"model {model_version}: top-label reliability ({n_bins} bins)",
        [("noise-corrected label (NC)", *top_curve(everyone, y), "o-"),
         ("soft vote (naive)", *top_curve(everyone, soft), "s--")],
    )])
    overall = nc_ece_report.filter(pl.col("estimator") == "nc_ece")
    parts = [
        "<h2>Verdict</h2>",
    ]
    for r in overall.iter_rows(named=True):
        label = "Top-label" if r["kind"] == "top_label" else "Classwise"
        parts.append(f"<p><b>{label} NC-ECE against the clinic's limit:</b> "
                     f"{html.escape(calibration_verdict(r, nc_ece_limit))}.</p>")
        parts.append(_test_sentence(r).replace("<b>Calibration test:</b>", f"<b>{label} calibration test:</b>"))
    parts += [
        f"<p class='note'>{len(cm.item_ids)} scored items, {len(cm.annotator_ids)} annotators, classes "
        f"{html.escape(', '.join(cm.classes))}; {cm.n_scored_unannotated} scored items without annotation "
        "(excluded). Corrected one-hot labels Ỹ = T_j^{-T} e_(A_j) (backward correction, Patrini et al. 2017) "
        "combined over annotators with per-class inverse-variance weights; top-label NC-ECE bins the confidence "
        "max_c p_c against Ỹ of the predicted class (Guo et al. 2017), classwise NC-ECE averages one binned "
        "NC-ECE per class (Kull et al. 2019); Hanada and Futami 2026 §3 per class.</p>",
        "<h2>Calibration error: noise-corrected vs naive</h2>",
        _html_table(nc_ece_report.filter(pl.col("estimator") != "nc_ece_subgroup"),
                    ["estimator", "kind", "annotator_id", "value", "value_debiased", "ci_low", "ci_high",
                     "p_value", "n_items", "min_items_per_bin"]),
        f"<img alt='top-label reliability diagram' src='{fig}'>",
        "<h2>Annotator confusion matrices</h2>",
        "<p class='note'>T_j[y, a] = P(annotator j answers a | true class y), multi-class Dawid–Skene; gap = "
        "smallest singular value of T_j.</p>",
    ]
    for j, a in enumerate(ct.annotator_ids):
        t = pl.DataFrame({"true class": list(cm.classes),
                          **{f"→ {c}": ct.confusion[j, :, k] for k, c in enumerate(cm.classes)}})
        gap = channel_table.filter(pl.col("annotator_id") == a)["gap"][0]
        parts += [f"<h3>{html.escape(a)} (gap {_fmt(gap)})</h3>", _html_table(t)]
    parts += subgroup_section(
        nc_ece_report,
        lambda col, val: top_curve(_mask_of(cm.item_ids, predictions, col, val), y),
        n_bins,
        min_items,
    )
    if recalibration_report is not None and recalibration_report.height:
        parts += ["<h2>Recalibration (held-out items, top-label)</h2>",
                  _html_table(recalibration_report, ["name", "method", "corrected", "n_eval", "nc_ece",
                                                     "naive_soft_vote_ece", "regime"])]
    title = f"Calibration report — model {model_version} ({len(cm.classes)} classes)"
    return report_html.page(title, parts, extra_css=_EXTRA_CSS)
