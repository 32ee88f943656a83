"""Self-contained HTML cleaning report (issue 3 §2 ``reports/cleaning``; seed 001 Tables 1-4, Figure 2).

Sections: confirmed issues per dataset and aggregation rule (Table 1), label-error prevalence, agreement
plot with 95% CIs on the Regier et al. bands, agreement table, ranking quality against the answers and
against a known truth, speed-up, cleaning impact (Table 2 format: median [CI] in %, ``*``/``°``),
stopping-rule sensitivity, expert vs lay, and the top candidates as embedded thumbnails (pairs side by
side). Plots are base64 PNG (matplotlib, Agg), thumbnails base64 JPEG (Pillow); no external resources.
"""

from __future__ import annotations

import base64
import html
import io
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import polars as pl

__all__ = ["render_cleaning_report", "thumbnail_data_uri"]

_CSS = """
body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px;color:#222}
table{border-collapse:collapse;margin:0.5em 0 1.5em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f2f2f2}td.l,th.l{text-align:left}td{white-space:nowrap}img.plot{max-width:100%}.note{color:#555;font-size:0.9em}
.cands{display:flex;flex-wrap:wrap;gap:8px}.cand{border:1px solid #ccc;padding:4px;font-size:0.75em;
text-align:center;width:auto}.cand img{display:inline-block;margin:1px}.yes{background:#fde2e2}
"""


def _e(x: object) -> str:
    return html.escape("" if x is None else str(x))


def _fmt(v: object, digits: int = 3) -> str:
    if v is None:
        return ""
    if isinstance(v, float):
        if not np.isfinite(v):
            return "nan"
        return f"{v:.2e}" if 0 < abs(v) < 0.5 * 10.0**-digits else f"{v:.{digits}f}"
    return _e(v)


def _table(df: pl.DataFrame | None, digits: int = 3, left: tuple[str, ...] = ()) -> str:
    if df is None or df.height == 0:
        return "<p class='note'>(no rows)</p>"
    head = "".join(f"<th class='{'l' if c in left else ''}'>{_e(c)}</th>" for c in df.columns)
    body = []
    for row in df.iter_rows():
        tds = "".join(
            f"<td class='{'l' if c in left else ''}'>{_fmt(v, digits)}</td>"
            for c, v in zip(df.columns, row, strict=True)
        )
        body.append(f"<tr>{tds}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def thumbnail_data_uri(root: Path, item_id: str, size: int = 96) -> str | None:
    """data: URI of a small JPEG of ``root/item_id`` (None if unreadable or outside ``root``)."""
    from PIL import Image

    try:
        base = Path(root).resolve()
        p = (base / item_id).resolve()
        p.relative_to(base)
        with Image.open(p) as im:
            im = im.convert("RGB")
            im.thumbnail((size, size))
            buf = io.BytesIO()
            im.save(buf, format="JPEG", quality=80)
    except (OSError, ValueError):
        return None
    return "data:image/jpeg;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def _png(fig) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


_ROLE_COLOURS = {"expert-expert": "#1f4e79", "expert-lay": "#e07b00", "lay-lay": "#7f7f7f", "all": "#000000",
                 "expert": "#1f4e79", "lay": "#7f7f7f"}


def _agreement_plot(agreement: pl.DataFrame) -> str | None:
    """One row per (dataset, issue_type): α per annotator set (left) and κ per pair (right, coloured by
    role pair), with 95% CIs on the Regier et al. bands (seed 001 Figure 2)."""
    if agreement.height == 0:
        return None
    from matplotlib.figure import Figure  # no pyplot: no global state, safe in worker threads

    groups = sorted({(r["dataset"], r["issue_type"]) for r in agreement.iter_rows(named=True)})
    n_kappa = max(
        agreement.filter((pl.col("statistic") == "cohen_kappa") & (pl.col("dataset") == d)
                         & (pl.col("issue_type") == i)).height for d, i in groups
    )
    fig = Figure(figsize=(min(4 + 0.45 * n_kappa, 16), 2.7 * len(groups)))
    axes = fig.subplots(len(groups), 2, squeeze=False, sharey=True, width_ratios=[1, max(n_kappa, 1) / 3 + 1])
    for row, (ds, it) in enumerate(groups):
        part = agreement.filter((pl.col("dataset") == ds) & (pl.col("issue_type") == it))
        for ax, stat in zip(axes[row], ("krippendorff_alpha", "cohen_kappa"), strict=True):
            sub = part.filter(pl.col("statistic") == stat).sort("role_pair", "annotator_a", "annotator_b")
            ax.axhspan(0.4, 1.05, color="#d9f0d3", zorder=0)
            ax.axhspan(0.2, 0.4, color="#fff3c4", zorder=0)
            ax.axhspan(-1.0, 0.2, color="#f8d7d7", zorder=0)
            labels = []
            for x, r in enumerate(sub.iter_rows(named=True)):
                labels.append(r["role_pair"] if stat == "krippendorff_alpha"
                              else f"{r['annotator_a']}–{r['annotator_b']}")
                v, lo, hi = r["value"], r["ci_low"], r["ci_high"]
                if v is None or not np.isfinite(v):
                    continue
                err = None
                if lo is not None and hi is not None and np.isfinite(lo) and np.isfinite(hi):
                    err = [[max(v - lo, 0)], [max(hi - v, 0)]]
                ax.errorbar([x], [v], yerr=err, fmt="o", ms=4, capsize=2,
                            color=_ROLE_COLOURS.get(r["role_pair"], "#1f4e79"))
            ax.set_xticks(range(len(labels)))
            ax.set_xticklabels(labels, rotation=45 if stat == "cohen_kappa" else 0, ha="right"
                               if stat == "cohen_kappa" else "center", fontsize=8)
            ax.set_xlim(-0.7, max(len(labels), 1) - 0.3)
            ax.set_ylim(-0.2, 1.05)
            name = "Krippendorff's α" if stat == "krippendorff_alpha" else "Cohen's κ (pairs)"
            ax.set_title(f"{ds} / {it}: {name}", fontsize=9)
        axes[row][0].set_ylabel("agreement", fontsize=8)
    kappa = agreement.filter(pl.col("statistic") == "cohen_kappa")
    for rp in ("expert-expert", "expert-lay", "lay-lay"):
        if (kappa["role_pair"] == rp).any():
            axes[0][1].plot([], [], "o", color=_ROLE_COLOURS[rp], label=rp)
    if kappa.height:
        axes[0][1].legend(fontsize=7, loc="lower left")
    fig.tight_layout()
    return _png(fig)


def _sensitivity_plot(sens: pl.DataFrame) -> str | None:
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 3.2))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, param in zip(axes, ("p_chance", "p_plus"), strict=True):
        part = sens.filter(pl.col("parameter") == param)
        for (ds, it), g in sorted(part.group_by(["dataset", "issue_type"]), key=lambda x: x[0]):
            g = g.sort("value")
            ax.plot(g["value"].to_numpy(), g["n_unanimous"].to_numpy(), "o-", ms=3, label=f"{ds} / {it}")
        ax.set_xlabel(param + (" (p₊ = 0.05)" if param == "p_chance" else " (p_chance = 0.05)"), fontsize=8)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel("unanimous issues", fontsize=8)
    axes[1].legend(fontsize=7)
    fig.tight_layout()
    return _png(fig)


def _sensitivity_wide(sens: pl.DataFrame) -> pl.DataFrame:
    """One row per grid value: the stopping count and the unanimous issues per (dataset, issue, parameter)."""
    rows = []
    for v in sorted(set(sens["value"].to_list())):
        part = sens.filter(pl.col("value") == v)
        row: dict[str, object] = {"value": f"{v:.2f}"}
        for param in ("p_chance", "p_plus"):
            sub = part.filter(pl.col("parameter") == param)
            if sub.height:
                row[f"n_stop ({param})"] = int(sub["stopping_count"][0])
        for r in part.sort("dataset", "issue_type", "parameter").iter_rows(named=True):
            row[f"{r['dataset']}/{r['issue_type']} ({r['parameter']})"] = r["n_unanimous"]
        rows.append(row)
    return pl.DataFrame(rows)


def _issue_table_wide(issues: pl.DataFrame) -> pl.DataFrame:
    rows = []
    for ds in sorted(set(issues["dataset"].to_list())):
        part = issues.filter(pl.col("dataset") == ds)
        row: dict[str, object] = {"dataset": ds, "size": int(part["size"][0])}
        for r in part.iter_rows(named=True):
            row[f"{r['rule']}: {r['issue_type']}"] = f"{r['n_issues']} ({r['percent']:.1f}%)"
        rows.append(row)
    return pl.DataFrame(rows)


def _impact_wide(impact: pl.DataFrame) -> pl.DataFrame:
    def cell(r: dict) -> str:
        def pct(x: float) -> str:  # seed Table 2: exact zero unsigned ("0.0"), else signed ("-0.0" < 0)
            if not np.isfinite(x):
                return "nan"
            return "0.0" if x == 0 else f"{100 * x:+.1f}"

        return f"{pct(r['median'])} [{pct(r['ci_low'])}, {pct(r['ci_high'])}]{r['flag']}"

    rows = []
    keys = sorted({(r["dataset"], r["model_version"], r["rule"]) for r in impact.iter_rows(named=True)})
    for ds, mv, rule in keys:
        part = impact.filter(
            (pl.col("dataset") == ds) & (pl.col("model_version") == mv) & (pl.col("rule") == rule)
        )
        row = {"dataset": ds, "model": mv, "rule": rule}
        for r in part.iter_rows(named=True):
            row[f"Δ {r['metric']} (%)"] = cell(r)
            row[f"{r['metric']} before"] = f"{100 * r['before']:.1f}"
        rows.append(row)
    return pl.DataFrame(rows)


def _candidates(
    queue: pl.DataFrame, confirmed: pl.DataFrame | None, roots: Mapping[str, Path], n: int
) -> str:
    out = []
    status: dict[tuple, tuple[int, int, bool]] = {}
    if confirmed is not None:
        for r in confirmed.iter_rows(named=True):
            status[(r["dataset"], r["issue_type"], r["item_id"], r["item_id_2"])] = (
                r["n_yes"],
                r["n_annotators"],
                r["unanimous"],
            )
    cache: dict[tuple[str, str], str | None] = {}

    def thumb(ds: str, item: str) -> str:
        if (ds, item) not in cache:
            cache[(ds, item)] = thumbnail_data_uri(roots[ds], item) if ds in roots else None
        uri = cache[(ds, item)]
        if uri is None:
            return f"<div>[{_e(item)}: no image]</div>"
        return f"<img src='{uri}' alt='{_e(item)}' title='{_e(item)}'>"

    for (ds, it), part in sorted(queue.group_by(["dataset", "issue_type"]), key=lambda g: g[0]):
        part = part.sort("position").head(n)
        cells = []
        for r in part.iter_rows(named=True):
            yes, seen, unan = status.get((ds, it, r["item_id"], r["item_id_2"]), (0, 0, False))
            imgs = thumb(ds, r["item_id"]) + (thumb(ds, r["item_id_2"]) if r["item_id_2"] else "")
            cap = _e(r["item_id"]) + (f"<br>{_e(r['item_id_2'])}" if r["item_id_2"] else "")
            if r.get("label") is not None:
                cap += f"<br>label: {_e(r['label'])}"
            cap += f"<br>rank {r['position'] + 1}; yes {yes}/{seen}"
            cells.append(f"<div class='cand{' yes' if unan else ''}'>{imgs}<br>{cap}</div>")
        out.append(f"<h3>{_e(ds)} — {_e(it)}</h3><div class='cands'>{''.join(cells)}</div>")
    return "".join(out)


def render_cleaning_report(
    *,
    issues: pl.DataFrame | None = None,
    prevalence: pl.DataFrame | None = None,
    agreement: pl.DataFrame | None = None,
    ranking_quality: pl.DataFrame | None = None,
    ranking_truth: pl.DataFrame | None = None,
    annotator_quality: pl.DataFrame | None = None,
    speedup: pl.DataFrame | None = None,
    impact: pl.DataFrame | None = None,
    sensitivity: pl.DataFrame | None = None,
    expert_lay: pl.DataFrame | None = None,
    queue: pl.DataFrame | None = None,
    confirmed: pl.DataFrame | None = None,
    dataset_roots: Mapping[str, str | Path] | None = None,
    n_thumbnails: int = 8,
    title: str = "Data-cleaning report (SelfClean protocol)",
    created: str | None = None,
) -> str:
    """HTML string of the cleaning report; every argument is optional (missing sections say so).

    Frames are the outputs of the ``pipeline`` functions (any number of datasets); ``dataset_roots``
    maps dataset -> image folder for thumbnails (item_ids resolving outside the root are not shown).
    """
    if n_thumbnails < 0:
        raise ValueError(f"n_thumbnails must be >= 0, got {n_thumbnails}")
    roots = {k: Path(v) for k, v in (dataset_roots or {}).items()}
    s = [
        f"<!doctype html><html><head><meta charset='utf-8'><title>{_e(title)}</title>",
        f"<style>{_CSS}</style></head><body><h1>{_e(title)}</h1>",
    ]
    if created:
        s.append(f"<p class='note'>created {_e(created)}</p>")
    s.append(
        "<h2>Confirmed issues (seed 001 Table 1)</h2><p class='note'>Unanimous: every panel member "
        "answered yes. Majority: more than half of the panel answered yes. Near duplicates are pairs.</p>"
    )
    s.append(
        _table(_issue_table_wide(issues) if issues is not None and issues.height else None, left=("dataset",))
    )
    s.append(
        "<h2>Label-error prevalence</h2><p class='note'>Label errors are reported, not removed "
        "(seed 001 §3.4); a lower bound, since only the top of the ranking is reviewed. "
        "95% Clopper-Pearson CI.</p>"
    )
    s.append(_table(prevalence, 4, ("dataset", "rule")))
    s.append(
        "<h2>Inter-annotator agreement</h2><p class='note'>Bands (Regier et al. 2013): good &gt; 0.4, "
        "questionable 0.2–0.4, unacceptable &lt; 0.2. 95% CIs from 1,000 bootstrap resamples of the "
        "annotated items.</p>"
    )
    if agreement is not None and agreement.height:
        uri = _agreement_plot(agreement)
        if uri:
            s.append(f"<img class='plot' src='{uri}' alt='agreement plot'>")
    s.append(
        _table(
            agreement,
            3,
            ("dataset", "issue_type", "statistic", "annotator_a", "annotator_b", "role_pair", "band"),
        )
    )
    s.append(
        "<h2>Ranking quality vs unanimous answers</h2><p class='note'>Candidates answered by every "
        "panel member; the positive rate is the uninformed AP baseline (AUROC 0.5, AUPRG 0).</p>"
    )
    s.append(_table(ranking_quality, 3, ("dataset", "issue_type")))
    if annotator_quality is not None:
        s.append("<h3>Ranking vs each annotator's answers</h3>")
        s.append(_table(annotator_quality, 3, ("dataset", "issue_type", "annotator_id", "role")))
    if ranking_truth is not None:
        s.append(
            "<h2>Rankings vs known truth</h2><p class='note'>All N items (N(N−1)/2 pairs); candidates "
            "outside a ranked top-k are tied at the bottom. recall_at_k = share of true issues listed.</p>"
        )
        s.append(_table(ranking_truth, 4, ("dataset", "ranking", "issue_type")))
    s.append(
        "<h2>Annotation speed-up</h2><p class='note'>n_total / mean candidates answered per annotator "
        "(seed 001 Table 4).</p>"
    )
    s.append(_table(speedup, 1, ("dataset", "issue_type")))
    s.append(
        "<h2>Impact of cleaning on model evaluation</h2><p class='note'>Difference after − before "
        "cleaning: bootstrap median [95% CI] in percentage points; * = 0 outside the CI, ° = a bound "
        "is exactly 0 (seed 001 Table 2).</p>"
    )
    s.append(
        _table(
            _impact_wide(impact) if impact is not None and impact.height else None,
            left=("dataset", "model", "rule"),
        )
    )
    if sensitivity is not None:
        s.append("<h2>Stopping-rule sensitivity</h2><p class='note'>Unanimously confirmed issues when each "
                 "recorded session is cut at the stopping count of (p_chance, p₊); one parameter grows from "
                 "0.05 to 1 while the other stays at 0.05 (seed 001 Appendix D).</p>")
        uri = _sensitivity_plot(sensitivity) if sensitivity.height else None
        if uri:
            s.append(f"<img class='plot' src='{uri}' alt='stopping-rule sensitivity'>")
        s.append(_table(_sensitivity_wide(sensitivity) if sensitivity.height else None, 0, ("value",)))
    if expert_lay is not None:
        s.append("<h2>Experts vs lay raters</h2>")
        s.append(_table(expert_lay, 3, ("dataset", "issue_type")))
    if queue is not None and queue.height and n_thumbnails:
        s.append(
            f"<h2>Top candidates</h2><p class='note'>First {n_thumbnails} of each ranking; shaded = "
            "unanimously confirmed.</p>"
        )
        s.append(_candidates(queue, confirmed, roots, n_thumbnails))
    s.append("</body></html>")
    return "\n".join(s)
