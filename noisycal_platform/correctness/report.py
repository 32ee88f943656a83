"""Self-contained HTML report of the correctness-criteria audit (Rethinking Correctness 2026 Fig. 2, Table 1, Fig. 3).

Sections: two-axis plot H_f vs F_f per task; audit table with bootstrap CIs and directional errors; AUROC per
dataset x UE method x criterion with ranking reversals highlighted; false acceptance by error category.
Page shell and stylesheet come from the report kit (``report_html.page``); plots are embedded as base64 PNG,
drawn with ``report_html.figure`` (no pyplot, no global backend).
"""

from __future__ import annotations

from datetime import UTC, datetime
from html import escape

import polars as pl

from noisycal_platform import report_html
from noisycal_platform.correctness.audit import ERROR_CATEGORIES
from noisycal_platform.correctness.sensitivity import ranking_reversals

__all__ = ["correctness_status_line", "render_correctness_report"]

#: What this report adds to the kit's stylesheet: reversal cells, the best value, skipped-criterion notes.
_EXTRA_CSS = """
.rev{background:#ffe7a8} .best{font-weight:bold}
.skip{background:#f8d7da;border:1px solid #e4a1a8;padding:0.4em 1em;margin:0.4em 0}
"""


# the report kit's formatters and figure embedding (one rule for every report)
_f = report_html.fmt_fixed
_png = report_html.figure_png


def _two_axis_plot(audit: pl.DataFrame) -> str:
    from matplotlib import colormaps

    per_task = audit.filter((pl.col("scope_kind") == "dataset") & (pl.col("status") == "ok"))
    tasks = sorted(per_task["scope"].unique().to_list())
    if not tasks:
        return ""
    crits = sorted(per_task["criterion"].unique().to_list())
    cmap = colormaps["tab10"]
    fig = report_html.figure(figsize=(4.2 * len(tasks), 4.0))
    axes = fig.subplots(1, len(tasks), squeeze=False)
    for ax, task in zip(axes[0], tasks, strict=True):
        part = per_task.filter(pl.col("scope") == task)
        for i, c in enumerate(crits):
            r = part.filter(pl.col("criterion") == c)
            if r.height == 0:
                continue
            row = r.row(0, named=True)
            ax.errorbar(
                row["h_f"],
                row["f_f"],
                xerr=[[row["h_f"] - row["h_f_lo"]], [row["h_f_hi"] - row["h_f"]]],
                yerr=[[row["f_f"] - row["f_f_lo"]], [row["f_f_hi"] - row["f_f"]]],
                fmt="o",
                color=cmap(i % 10),
                label=c,
                capsize=2,
            )
        ax.set_title(task)
        ax.set_xlabel("H_f (human validation consistency)")
        ax.set_ylabel("F_f = 1 - D_f (UE fidelity)")
        ax.grid(alpha=0.3)
    axes[0][0].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    uri = _png(fig, dpi=110)
    return f'<img alt="H_f vs F_f per task" src="{uri}">'


def _fa_plot(fa: pl.DataFrame) -> str:
    import numpy as np

    if fa.height == 0:
        return ""
    crits = sorted(fa["criterion"].unique().to_list())
    fig = report_html.figure(figsize=(max(6.0, 1.1 * len(crits) + 2), 3.6))
    ax = fig.subplots()
    width = 0.8 / len(ERROR_CATEGORIES)
    x = np.arange(len(crits))
    for j, cat in enumerate(ERROR_CATEGORIES):
        look = {
            r["criterion"]: r["rate"]
            for r in fa.filter(pl.col("error_category") == cat).iter_rows(named=True)
        }
        vals = [look.get(c) if look.get(c) is not None else np.nan for c in crits]
        ax.bar(x + (j - 1) * width, vals, width, label=cat)
    ax.set_xticks(x, crits, rotation=30, ha="right", fontsize=8)
    ax.set_ylabel("false-acceptance rate (equal-group mean)")
    ax.set_ylim(0, 1.12)
    ax.legend(fontsize=8, ncols=3, loc="upper center")
    ax.grid(axis="y", alpha=0.3)
    fig.tight_layout()
    uri = _png(fig, dpi=110)
    return f'<img alt="false acceptance by category" src="{uri}">'


def _audit_table(audit: pl.DataFrame) -> str:
    rows = audit.filter((pl.col("scope_kind") == "all") & (pl.col("status") == "ok"))
    if rows.height == 0:
        return "<p>No active criteria.</p>"
    head = (
        "<tr><th class=l>criterion</th><th>H_f [95% CI]</th><th>D_f [95% CI]</th><th>F_f</th>"
        "<th>compared with</th><th>ΔD_f [95%]</th><th>ΔD_f [Bonferroni]</th><th>ΔH_f [95%]</th>"
        "<th>false rejects</th><th>false accepts</th></tr>"
    )
    body = []
    for r in rows.iter_rows(named=True):

        def ci(p, lo, hi):
            return "–" if p is None else f"{p:.3f} [{lo:.3f}, {hi:.3f}]"

        body.append(
            f"<tr><td class=l>{escape(r['criterion'])}</td><td>{ci(r['h_f'], r['h_f_lo'], r['h_f_hi'])}</td>"
            f"<td>{ci(r['d_f'], r['d_f_lo'], r['d_f_hi'])}</td><td>{_f(r['f_f'])}</td>"
            f"<td class=l>{escape(r['reference'] or '–')}</td>"
            f"<td>{ci(r['delta_d'], r['delta_d_lo'], r['delta_d_hi'])}</td>"
            f"<td>{ci(r['delta_d'], r['delta_d_lo_adj'], r['delta_d_hi_adj'])}</td>"
            f"<td>{ci(r['delta_h'], r['delta_h_lo'], r['delta_h_hi'])}</td>"
            f"<td>{r['false_rejects']}/{r['n_human_correct']}</td>"
            f"<td>{r['false_accepts']}/{r['n_human_incorrect']}</td></tr>"
        )
    r0 = rows.row(0, named=True)
    pairs = [f"{r['criterion']} − {r['reference']}" for r in rows.iter_rows(named=True) if r["reference"]]
    note = (
        f"<p class=note>{r0['n_items']} audited predictions in {r0['n_groups']} dataset–model groups; "
        f"{r0['n_boot']:,} paired stratified bootstrap replicates (EM quotas fixed per group, the same "
        f"resample for every criterion and UE method). Differences: {escape(', '.join(pairs) or 'none')}. "
        f"Bonferroni adjustment over the {r0['n_comparisons']} planned comparisons: "
        f"{100 * r0['ci_level']:.0f}% → {100 * r0['ci_level_adj']:.2f}% intervals. Audit rows whose "
        f"EM stratum disagrees with our exact match: {r0['n_em_stratum_mismatch']}. The intervals describe "
        "resampling stability within this audit, not population uncertainty.</p>"
    )
    if r0["note"]:
        note += f"<p class=note>{escape(r0['note'])}</p>"
    return f"<table>{head}{''.join(body)}</table>{note}"


def _criteria_table(audit: pl.DataFrame) -> str:
    """Per criterion: whether it ran, the local model (path, sha256) it used, or why it was skipped."""
    rows = audit.filter(pl.col("scope_kind") == "all").unique("criterion", keep="first").sort("criterion")
    if rows.height == 0:
        return ""
    body = []
    for r in rows.iter_rows(named=True):
        ran = r["status"] == "ok"
        model = escape(r["criterion_model"]) if r["criterion_model"] else "–"
        sha = f"<code>{escape(r['criterion_model_sha256'])}</code>" if r["criterion_model_sha256"] else "–"
        why = "" if ran else escape(r["note"] or "")
        body.append(
            f"<tr><td class=l>{escape(r['criterion'])}</td><td class=l>{'ran' if ran else 'skipped'}</td>"
            f"<td class=l>{model}</td><td class=l>{sha}</td><td class=l>{why}</td></tr>"
        )
    head = (
        "<tr><th class=l>criterion</th><th class=l>status</th><th class=l>model path</th>"
        "<th class=l>model sha256</th><th class=l>why skipped</th></tr>"
    )
    return f"<h2>Criteria</h2><table>{head}{''.join(body)}</table>"


def _auroc_table(sens: pl.DataFrame) -> str:
    if sens.height == 0:
        return "<p>No sensitivity results.</p>"
    crits = sorted(sens["criterion"].unique().to_list())
    rev = ranking_reversals(sens)
    flagged = {(r["dataset"], r["ue_method_a"], r["criterion_1"]) for r in rev.iter_rows(named=True)}
    flagged |= {(r["dataset"], r["ue_method_a"], r["criterion_2"]) for r in rev.iter_rows(named=True)}
    flagged |= {(r["dataset"], r["ue_method_b"], r["criterion_1"]) for r in rev.iter_rows(named=True)}
    flagged |= {(r["dataset"], r["ue_method_b"], r["criterion_2"]) for r in rev.iter_rows(named=True)}
    best = (
        sens.filter(pl.col("auroc").is_not_null())
        .sort("auroc", descending=True)
        .group_by("dataset", "criterion", maintain_order=True)
        .first()
    )
    best_set = {(r["dataset"], r["ue_method"], r["criterion"]) for r in best.iter_rows(named=True)}
    head = (
        "<tr><th class=l>dataset</th><th class=l>UE method</th>"
        + "".join(f"<th>{escape(c)}</th>" for c in crits)
        + "<th>spread</th></tr>"
    )
    body = []
    for (ds, m), part in sens.group_by("dataset", "ue_method", maintain_order=True):
        look = {r["criterion"]: r["auroc"] for r in part.iter_rows(named=True)}
        cells = []
        for c in crits:
            cls = [k for k, on in (("rev", (ds, m, c) in flagged), ("best", (ds, m, c) in best_set)) if on]
            cells.append(f"<td class='{' '.join(cls)}'>{_f(look.get(c))}</td>")
        body.append(
            f"<tr><td class=l>{escape(ds)}</td><td class=l>{escape(m)}</td>{''.join(cells)}"
            f"<td>{_f(part['spread'][0])}</td></tr>"
        )
    rev_html = ""
    if rev.height:
        items = "".join(
            f"<li>{escape(r['dataset'])}: {escape(r['ue_method_a'])} vs {escape(r['ue_method_b'])} — "
            f"{_f(r['auroc_a_1'])} vs {_f(r['auroc_b_1'])} under {escape(r['criterion_1'])}, but "
            f"{_f(r['auroc_a_2'])} vs {_f(r['auroc_b_2'])} under {escape(r['criterion_2'])}</li>"
            for r in rev.head(30).iter_rows(named=True)
        )
        more = f"<p class=note>…and {rev.height - 30} more.</p>" if rev.height > 30 else ""
        rev_html = f"<h3>Ranking reversals ({rev.height})</h3><ul>{items}</ul>{more}"
    else:
        rev_html = "<p>No ranking reversals between UE methods across criteria.</p>"
    return (
        f"<table>{head}{''.join(body)}</table><p class=note>Error-detection AUROC (incorrect = positive) on "
        "the full parseable prediction set, the models of each dataset equally weighted. Highlighted cells "
        "take part in a ranking reversal; bold = best UE method for that dataset and criterion. A higher "
        "AUROC under one criterion does not mean closer agreement with human-referenced performance.</p>"
        + rev_html
    )


def _fa_table(fa: pl.DataFrame) -> str:
    if fa.height == 0:
        return "<p>No audited errors.</p>"
    crits = sorted(fa["criterion"].unique().to_list())
    head = (
        "<tr><th class=l>criterion</th>"
        + "".join(f"<th>{escape(c)}</th>" for c in ERROR_CATEGORIES)
        + "</tr>"
    )
    body = []
    for c in crits:
        look = {r["error_category"]: r for r in fa.filter(pl.col("criterion") == c).iter_rows(named=True)}
        cells = []
        for cat in ERROR_CATEGORIES:
            r = look.get(cat)
            cells.append(
                "<td>–</td>"
                if r is None or r["rate"] is None
                else f"<td>{100 * r['rate']:.1f}% ({r['n_accepted']}/{r['n_errors']}, "
                f"{r['n_groups']} groups)</td>"
            )
        body.append(f"<tr><td class=l>{escape(c)}</td>{''.join(cells)}</tr>")
    return (
        f"<table>{head}{''.join(body)}</table><p class=note>Rate = accepted share of human-identified errors "
        "of that category, averaged with equal weight over the dataset–model groups containing at least one "
        "such error; pooled counts in brackets.</p>"
    )


def correctness_status_line(criterion_audit: pl.DataFrame, *, synthetic: bool) -> str:
    """One plain sentence for the index page: how many criteria were audited against human labels."""
    ok = criterion_audit.filter(pl.col("status") == "ok") if "status" in criterion_audit.columns else None
    n_ok = ok["criterion"].n_unique() if ok is not None and ok.height else 0
    return f"{n_ok} criteria audited against human labels" + (" (synthetic demo data)" if synthetic else "")


def render_correctness_report(
    criterion_audit: pl.DataFrame,
    ue_sensitivity: pl.DataFrame,
    false_acceptance: pl.DataFrame,
    *,
    synthetic: bool,
    title: str = "Correctness-criteria audit for uncertainty evaluation",
    created: str | None = None,
) -> str:
    """Render the report as one self-contained HTML string (plots as base64 PNG)."""
    created = created or datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    banner = (
        (
            "<div class=banner><b>Synthetic demo data.</b> Every prediction, score and audit label in this "
            "report was generated by <code>noisycal_platform.correctness.demo_data</code>; nothing is real "
            "patient data or real model output.</div>"
        )
        if synthetic
        else ""
    )
    skipped = criterion_audit.filter(pl.col("status") == "skipped")
    skip_html = "".join(
        f"<div class=skip>Criterion <b>{escape(r['criterion'])}</b> not evaluated — "
        f"{escape(r['note'] or '')}</div>"
        for r in skipped.iter_rows(named=True)
    )
    body = f"""{banner}{skip_html}
<h2>1. Human agreement and UE fidelity per task</h2>
<p class=note>H_f: balanced accuracy against human labels, macro-averaged over dataset–model groups. F_f =
1 − D_f,
D_f = mean |AUROC under the criterion − AUROC under human labels| over UE methods and groups. Bars: 95% paired
bootstrap intervals.</p>
{_criteria_table(criterion_audit)}
{_two_axis_plot(criterion_audit)}
{_audit_table(criterion_audit)}
<h2>2. Criterion sensitivity of UE evaluation</h2>
{_auroc_table(ue_sensitivity)}
<h2>3. False acceptance by error category</h2>
{_fa_plot(false_acceptance)}
{_fa_table(false_acceptance)}"""
    return report_html.page(title, body, created=created, extra_css=_EXTRA_CSS)
