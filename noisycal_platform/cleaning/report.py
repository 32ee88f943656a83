"""Self-contained HTML cleaning report (SelfClean protocol; Gröger et al. 2023 Tables 1-4, Figure 2), built on the
report
kit (`noisycal_platform.report_html`).

Sections: review progress, confirmed issues per dataset and aggregation rule (Table 1), label-error
prevalence, agreement plot with 95% CIs on the Regier et al. bands, agreement table, ranking quality against
the answers and against a known truth (``truth.json``), speed-up, cleaning impact (Table 2 format: median
[CI] in %, ``*``/``°``), stopping-rule sensitivity, expert vs lay, then the unanimously confirmed issues and
the top candidates of each ranking as thumbnails (pairs side by side), made from the dataset root at report
time and embedded in the page. On day one, with rankings but no answers, the report says that no answers
have arrived, shows the candidates first, and every statistic that needs answers says so instead of printing
zeros. An empty section always says which data would fill it.
"""

from __future__ import annotations

import base64
import io
from collections.abc import Mapping
from pathlib import Path

import numpy as np
import polars as pl

from noisycal_platform import report_html as rh

__all__ = ["cleaning_status_line", "render_cleaning_report", "review_progress", "thumbnail_data_uri"]

_EXTRA_CSS = """
.cands{display:flex;flex-wrap:wrap;gap:8px}.cand{border:1px solid #ccc;padding:4px;font-size:0.75em;
text-align:center}.cand img{display:inline-block;margin:1px;height:72px;width:auto}.yes{background:#fde2e2}
"""

NOT_REVIEWED = "not reviewed yet"
_NEEDS_ANSWERS = "no answers have arrived yet; "
TRUTH_SENTENCE = (
    "it fills when a dataset folder holds <code>truth.json</code>, the dataset's known contamination: one JSON "
    "object with <code>irrelevant</code> (a list of file names), <code>near_duplicates</code> (a list of "
    "<code>[file_a, file_b]</code> pairs) and <code>flipped</code> (a list of <code>{\"file_name\", "
    "\"true_label\", \"given_label\"}</code>), file names relative to the dataset folder (README, "
    "“Known contamination: truth.json”)."
)


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


def _usable(df: pl.DataFrame | None, *columns: str) -> bool:
    """A frame with rows and the columns a section reads (an upstream never built loads without columns)."""
    return df is not None and df.height > 0 and all(c in df.columns for c in columns)


def review_progress(queue: pl.DataFrame | None, confirmed: pl.DataFrame | None) -> pl.DataFrame:
    """Per (dataset, issue_type): candidates queued, reviewed (answered by at least one annotator) and
    answered by the whole panel."""
    schema = {"dataset": pl.String, "issue_type": pl.String, "queued": pl.Int64, "reviewed": pl.Int64,
              "answered_by_panel": pl.Int64}
    frames = []
    if _usable(queue, "dataset", "issue_type"):
        frames.append(queue.group_by("dataset", "issue_type").agg(pl.len().cast(pl.Int64).alias("queued")))
    if _usable(confirmed, "dataset", "issue_type", "n_annotators", "seen_by_all"):
        frames.append(
            confirmed.group_by("dataset", "issue_type").agg(
                (pl.col("n_annotators") > 0).sum().cast(pl.Int64).alias("reviewed"),
                pl.col("seen_by_all").sum().cast(pl.Int64).alias("answered_by_panel"),
            )
        )
    if not frames:
        return pl.DataFrame(schema=schema)
    out = frames[0]
    for f in frames[1:]:
        out = out.join(f, on=["dataset", "issue_type"], how="full", coalesce=True)
    for c in ("queued", "reviewed", "answered_by_panel"):
        out = out.with_columns(pl.col(c).fill_null(0)) if c in out.columns else out.with_columns(pl.lit(0).alias(c))
    return out.select(list(schema)).cast(schema).sort("dataset", "issue_type")


def _reviewed(progress: pl.DataFrame) -> set[tuple[str, str]]:
    return {(r["dataset"], r["issue_type"]) for r in progress.filter(pl.col("reviewed") > 0).iter_rows(named=True)}


def cleaning_status_line(queue: pl.DataFrame | None, confirmed: pl.DataFrame | None) -> str:
    """One plain sentence for the index page: how far the review is and what it confirmed."""
    progress = review_progress(queue, confirmed)
    queued, reviewed = int(progress["queued"].sum()), int(progress["reviewed"].sum())
    if reviewed == 0:
        return f"No answers yet; {queued:,} candidates ranked and waiting for review."
    unanimous = int(confirmed["unanimous"].sum()) if _usable(confirmed, "unanimous") else 0
    return f"{reviewed:,} candidates reviewed, {unanimous:,} confirmed unanimously; {queued:,} ranked in all."


_ROLE_COLOURS = {"expert-expert": "#1f4e79", "expert-lay": "#e07b00", "lay-lay": "#7f7f7f", "all": "#000000",
                 "expert": "#1f4e79", "lay": "#7f7f7f"}


def _agreement_plot(agreement: pl.DataFrame) -> str | None:
    """One row per (dataset, issue_type): α per annotator set (left) and κ per pair (right, coloured by
    role pair), with 95% CIs on the Regier et al. bands (Gröger et al. 2023 Figure 2). The row is named once, on the
    left axis; each panel's title is short, so titles never run into each other."""
    if agreement.height == 0:
        return None
    groups = sorted({(r["dataset"], r["issue_type"]) for r in agreement.iter_rows(named=True)})
    n_kappa = max(
        agreement.filter((pl.col("statistic") == "cohen_kappa") & (pl.col("dataset") == d)
                         & (pl.col("issue_type") == i)).height for d, i in groups
    )
    fig = rh.figure(figsize=(min(5 + 0.45 * n_kappa, 16), 2.9 * len(groups)), layout="constrained")
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
            ax.set_title("Krippendorff's α" if stat == "krippendorff_alpha" else "Cohen's κ per pair", fontsize=9)
        axes[row][0].set_ylabel(f"{ds}\n{it.replace('_', ' ')}", fontsize=9)
    kappa = agreement.filter(pl.col("statistic") == "cohen_kappa")
    for rp in ("expert-expert", "expert-lay", "lay-lay"):
        if (kappa["role_pair"] == rp).any():
            axes[0][1].plot([], [], "o", color=_ROLE_COLOURS[rp], label=rp)
    if kappa.height:
        axes[0][1].legend(fontsize=7, loc="lower left")
    return rh.figure_png(fig)


def _sensitivity_plot(sens: pl.DataFrame) -> str | None:
    fig = rh.figure(figsize=(10, 3.2), layout="constrained")
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
    return rh.figure_png(fig)


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


def _issue_table_wide(issues: pl.DataFrame, reviewed: set[tuple[str, str]]) -> pl.DataFrame:
    """Gröger et al. 2023 Table 1, one row per dataset; an issue type nobody has reviewed reads ``not reviewed yet``."""
    rows = []
    for ds in sorted(set(issues["dataset"].to_list())):
        part = issues.filter(pl.col("dataset") == ds)
        row: dict[str, object] = {"dataset": ds, "images": rh.fmt_count(int(part["size"][0]))}
        for r in part.iter_rows(named=True):
            cell = (
                f"{r['n_issues']:,} ({rh.fmt(r['percent'])}%)" if (ds, r["issue_type"]) in reviewed else NOT_REVIEWED
            )
            row[f"{r['rule']}: {r['issue_type']}"] = cell
        rows.append(row)
    return pl.DataFrame(rows)


def _prevalence_view(prevalence: pl.DataFrame, reviewed: set[tuple[str, str]]) -> pl.DataFrame:
    rows = []
    for r in prevalence.iter_rows(named=True):
        seen = (r["dataset"], "label_error") in reviewed
        rows.append({
            "dataset": r["dataset"],
            "rule": r["rule"],
            "label errors": f"{r['n_label_errors']:,} of {r['n_items']:,}" if seen else NOT_REVIEWED,
            "prevalence, % (95% CI)": (
                rh.fmt_ci(100 * r["prevalence"], 100 * r["ci_low"], 100 * r["ci_high"]) if seen else NOT_REVIEWED
            ),
        })
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


def _status(confirmed: pl.DataFrame | None) -> dict[tuple, tuple[int, int, bool]]:
    """(dataset, issue_type, item_id, item_id_2) -> (n_yes, n_annotators, unanimous)."""
    if not _usable(confirmed, "n_yes", "n_annotators", "unanimous"):
        return {}
    return {
        (r["dataset"], r["issue_type"], r["item_id"], r["item_id_2"]): (r["n_yes"], r["n_annotators"], r["unanimous"])
        for r in confirmed.iter_rows(named=True)
    }


class _Thumbs:
    """Candidate cells with embedded thumbnails made from each dataset's root at report time; each image is
    encoded once per report however many sections show it."""

    def __init__(self, roots: Mapping[str, Path]) -> None:
        self.roots = roots
        self.cache: dict[tuple[str, str], str | None] = {}

    def img(self, ds: str, item: str) -> str:
        if (ds, item) not in self.cache:
            self.cache[(ds, item)] = thumbnail_data_uri(self.roots[ds], item) if ds in self.roots else None
        uri = self.cache[(ds, item)]
        if uri is None:
            return f"<div>[{rh.esc(item)}: no image]</div>"
        return f"<img src='{uri}' alt='{rh.esc(item)}' title='{rh.esc(item)}'>"

    def cell(self, ds: str, r: Mapping, note: str, *, shaded: bool = False) -> str:
        """One candidate (a pair side by side), its file names, given label and ``note``."""
        imgs = self.img(ds, r["item_id"]) + (self.img(ds, r["item_id_2"]) if r["item_id_2"] else "")
        cap = rh.esc(r["item_id"]) + (f"<br>{rh.esc(r['item_id_2'])}" if r["item_id_2"] else "")
        if r.get("label") is not None:
            cap += f"<br>given label: {rh.esc(r['label'])}"
        return f"<div class='cand{' yes' if shaded else ''}'>{imgs}<br>{cap}<br>{note}</div>"


def _heading(ds: str, it: str, extra: str = "") -> str:
    return f"<h3>{rh.esc(ds)} — {rh.esc(it.replace('_', ' '))}{extra}</h3>"


def _candidates(queue: pl.DataFrame, confirmed: pl.DataFrame | None, thumbs: _Thumbs, n: int) -> str:
    out = []
    status = _status(confirmed)
    for (ds, it), part in sorted(queue.group_by(["dataset", "issue_type"]), key=lambda g: g[0]):
        cells = []
        for r in part.sort("position").head(n).iter_rows(named=True):
            yes, seen, unan = status.get((ds, it, r["item_id"], r["item_id_2"]), (0, 0, False))
            note = f"rank {r['position'] + 1}; " + (f"yes {yes}/{seen}" if seen else NOT_REVIEWED)
            cells.append(thumbs.cell(ds, r, note, shaded=unan))
        out.append(_heading(ds, it) + f"<div class='cands'>{''.join(cells)}</div>")
    return "".join(out)


def _confirmed_gallery(confirmed: pl.DataFrame, reviewed: set[tuple[str, str]], thumbs: _Thumbs, cap: int) -> str:
    """Per dataset and issue type, the unanimously confirmed candidates (most suspicious first, at most ``cap``)
    and a line counting those left out; a reviewed issue type with none confirmed says so."""
    yes = confirmed.filter(pl.col("unanimous"))
    counts = {(d, i): n for d, i, n in yes.group_by("dataset", "issue_type").len().iter_rows()}
    out = []
    for ds, it in sorted(reviewed | set(counts)):
        n = counts.get((ds, it), 0)
        if n == 0:
            out.append(_heading(ds, it) + "<p class='note'>No issue confirmed among the reviewed candidates.</p>")
            continue
        part = yes.filter((pl.col("dataset") == ds) & (pl.col("issue_type") == it))
        part = part.sort("position", "item_id", "item_id_2", nulls_last=True).head(cap)
        cells = [
            thumbs.cell(ds, r, (f"rank {r['position'] + 1}" if r["position"] is not None else "no longer queued")
                        + f"; yes {r['n_yes']}/{r['n_annotators']}")
            for r in part.iter_rows(named=True)
        ]
        out.append(_heading(ds, it, f" ({n:,} confirmed)") + f"<div class='cands'>{''.join(cells)}</div>")
        if n > cap:
            out.append(f"<p class='note'>{n - cap:,} more confirmed, not shown (the first {cap:,} by rank are "
                       "shown).</p>")
    return "".join(out)


def _section(s: list[str], heading: str, note: str | None, table: pl.DataFrame | None, *, left: tuple[str, ...],
             empty: str, plot: tuple[str | None, str] | None = None, level: int = 2) -> None:
    """Append to ``s``: the heading, its note, a plot (data URI or None, alt text) when drawn, then the table or
    the sentence saying which data would fill it."""
    s.append(f"<h{level}>{heading}</h{level}>" + (f"<p class='note'>{note}</p>" if note else ""))
    if plot is not None and plot[0]:
        s.append(rh.img(*plot))
    s.append(rh.html_table(table, left=left, empty=empty))


def _top_candidates(queue: pl.DataFrame | None, confirmed: pl.DataFrame | None, thumbs: _Thumbs, n: int) -> list[str]:
    """"Top candidates": the first ``n`` of each ranking as thumbnails (nothing when ``n`` is 0)."""
    if not n:
        return []
    s = [f"<h2>Top candidates</h2><p class='note'>The first {n} of each ranking, most suspicious "
         "first; near duplicates are shown as pairs side by side; shaded = unanimously confirmed.</p>"]
    if _usable(queue, "dataset", "issue_type", "position", "item_id", "item_id_2"):
        s.append(_candidates(queue, confirmed, thumbs, n))
    else:
        s.append(rh.empty_note("the rankings fill it once a dataset is registered and its images are ranked "
                               "(irrelevant images, near duplicates, label errors)."))
    return s


def _progress_section(progress: pl.DataFrame, sizes: Mapping[str, int], answered: bool) -> list[str]:
    """"Review progress": the day-one banner when no answer has arrived, the dataset sizes, the progress table."""
    s = ["<h2>Review progress</h2>"]
    if not answered:
        s.append("<p class='banner'><b>No answers have arrived yet.</b> The rankings below are ready for review in "
                 "the confirmation tool. The statistics further down need answers and say so until they "
                 "arrive.</p>")
    if sizes:
        s.append("<p class='note'>" + "; ".join(f"{rh.esc(d)}: {n:,} images" for d, n in sorted(sizes.items()))
                 + ".</p>")
    s.append(rh.html_table(
        progress, left=("dataset", "issue_type"),
        labels={"issue_type": "issue type", "answered_by_panel": "answered by the whole panel"},
        empty="it fills once a dataset is registered and ranked (its confirmation queue).",
    ))
    return s


def _protocol_sections(s: list[str], issues: pl.DataFrame | None, prevalence: pl.DataFrame | None,
                       reviewed: set[tuple[str, str]]) -> None:
    """Confirmed issues (Gröger et al. 2023 Table 1) and the label-error prevalence."""
    _section(
        s, "Confirmed issues (Gröger et al. 2023 Table 1)",
        "Unanimous: every panel member answered yes. Majority: more than half of the panel answered yes. Near "
        "duplicates are pairs; the percentage is of the dataset's images.",
        _issue_table_wide(issues, reviewed) if _usable(issues, "dataset", "size", "rule", "issue_type") else None,
        left=("dataset",), empty="it fills once a dataset is registered and its candidates are ranked.",
    )
    _section(
        s, "Label-error prevalence",
        "Label errors are reported, not removed (Gröger et al. 2023 §3.4); a lower bound, since only the top of the "
        "ranking is reviewed. 95% Clopper-Pearson CI.",
        _prevalence_view(prevalence, reviewed) if _usable(prevalence, "dataset", "rule", "n_label_errors") else None,
        left=("dataset", "rule"),
        empty="it fills once a dataset is registered; the estimate needs answers on label-error candidates.",
    )


def _agreement_and_ranking_sections(s: list[str], agreement: pl.DataFrame | None,
                                    ranking_quality: pl.DataFrame | None, annotator_quality: pl.DataFrame | None,
                                    wait: str) -> None:
    """Inter-annotator agreement (plot and table), ranking quality against the unanimous answers and, when given,
    against each annotator's answers."""
    plotted = _usable(agreement, "dataset", "issue_type", "statistic", "value", "ci_low", "ci_high", "role_pair")
    _section(
        s, "Inter-annotator agreement",
        "Bands (Regier et al. 2013): good &gt; 0.4, questionable 0.2–0.4, unacceptable &lt; 0.2. 95% CIs from "
        "bootstrap resamples of the annotated items.",
        agreement if _usable(agreement) else None,
        left=("dataset", "issue_type", "statistic", "annotator_a", "annotator_b", "role_pair", "band"),
        empty=wait + "agreement needs at least two annotators answering the same candidates.",
        plot=(_agreement_plot(agreement) if plotted else None, "agreement plot"),
    )
    _section(
        s, "Ranking quality vs unanimous answers",
        "Candidates answered by every panel member; the positive rate is the uninformed AP baseline (AUROC 0.5, "
        "AUPRG 0).",
        ranking_quality if _usable(ranking_quality) else None, left=("dataset", "issue_type"),
        empty=wait + "it needs candidates answered by every panel member.",
    )
    if annotator_quality is not None:
        _section(
            s, "Ranking vs each annotator's answers", None, annotator_quality if _usable(annotator_quality) else None,
            left=("dataset", "issue_type", "annotator_id", "role"), empty=wait + "it needs each annotator's answers.",
            level=3,
        )


def _encoder_and_truth_sections(s: list[str], encoders: pl.DataFrame | None,
                                ranking_truth: pl.DataFrame | None) -> None:
    """The encoder each dataset resolved to and the rankings against a known truth (each only when given)."""
    if encoders is not None:
        _section(
            s, "Encoder per dataset", "The <code>encoder</code> setting, what it resolved to for the dataset's "
            "images and why (<code>auto</code>: real photographs get a frozen ImageNet encoder with verified "
            "near-duplicate candidates, tiny images the DINO trained on them).",
            encoders if _usable(encoders, "dataset", "encoder_resolved") else None, left=("dataset",),
            empty="it fills once a dataset's encoder is built (cleaning/ssl_encoder).",
        )
    if ranking_truth is not None:
        _section(
            s, "Rankings vs known truth",
            "All N items (N(N−1)/2 pairs); candidates outside a ranked top-k are tied at the bottom. recall_at_k = "
            "share of true issues listed.",
            ranking_truth if _usable(ranking_truth) else None, left=("dataset", "ranking", "issue_type"),
            empty="no known truth for any dataset: " + TRUTH_SENTENCE,
        )


def _effort_sections(s: list[str], speedup: pl.DataFrame | None, sessions: pl.DataFrame | None, wait: str) -> None:
    """Annotation speed-up (Gröger et al. 2023 Table 4) and, when given, how each review session ended."""
    _section(
        s, "Annotation speed-up", "n_total / mean candidates answered per annotator (Gröger et al. 2023 Table 4).",
        speedup if _usable(speedup) else None, left=("dataset", "issue_type"),
        empty=wait + "the speed-up needs the annotators' answers and where they stopped.",
    )
    if sessions is not None:
        _section(
            s, "How each review session ended",
            "Per annotator and issue type: candidates answered along the ranking, how many “yes”, and what ended "
            "the session — the stopping rule (stopping_count consecutive “no”) or the end of the candidates; "
            "empty = still open (Gröger et al. 2023 Figure 9).",
            sessions if _usable(sessions, "ended_by") else None,
            left=("dataset", "issue_type", "annotator_id", "role"), empty=wait + "it needs the annotators' answers.",
            level=3,
        )


def _impact_section(impact: pl.DataFrame | None, sizes: Mapping[str, int]) -> list[str]:
    """Impact of cleaning on model evaluation (Gröger et al. 2023 Table 2), naming the datasets no model scored."""
    s = [
        "<h2>Impact of cleaning on model evaluation</h2><p class='note'>Difference after − before "
        "cleaning: bootstrap median [95% CI] in percentage points; * = 0 outside the CI, ° = a bound "
        "is exactly 0 (Gröger et al. 2023 Table 2).</p>"
    ]
    scored = set(impact["dataset"].to_list()) if _usable(impact, "dataset") else set()
    unscored = sorted(set(sizes) - scored)
    if unscored and scored:
        s.append("<p class='note'>No model has scored " + ", ".join(rh.esc(d) for d in unscored)
                 + " (<code>models/&lt;version&gt;/cleaning/&lt;dataset&gt;.csv</code>), so it has no impact rows.</p>")
    s.append(rh.html_table(
        _impact_wide(impact) if _usable(impact, "dataset", "model_version", "rule", "metric") else None,
        left=("dataset", "model", "rule"),
        empty="it fills when a model version has scored a dataset's images "
        "(<code>models/&lt;version&gt;/cleaning/&lt;dataset&gt;.csv</code> with file_name, target, score) "
        "and answers have confirmed issues to remove.",
    ))
    return s


def _sensitivity_and_rater_sections(s: list[str], sensitivity: pl.DataFrame | None,
                                    expert_lay: pl.DataFrame | None, wait: str) -> None:
    """Stopping-rule sensitivity (Gröger et al. 2023 Appendix D) and experts vs lay raters, each only when given."""
    if sensitivity is not None:
        ok = _usable(sensitivity, "value", "parameter", "dataset", "issue_type", "n_unanimous", "stopping_count")
        _section(
            s, "Stopping-rule sensitivity",
            "Unanimously confirmed issues when each recorded session is cut at the stopping count of (p_chance, "
            "p₊); one parameter grows from 0.05 to 1 while the other stays at 0.05 (Gröger et al. 2023 Appendix D).",
            _sensitivity_wide(sensitivity) if ok else None, left=("value",),
            empty=wait + "it needs recorded review sessions (answers in the order given).",
            plot=(_sensitivity_plot(sensitivity) if ok else None, "stopping-rule sensitivity"),
        )
    if expert_lay is not None:
        _section(
            s, "Experts vs lay raters", None, expert_lay if _usable(expert_lay) else None,
            left=("dataset", "issue_type"),
            empty=wait + "it needs answers from both expert and lay annotators on the same candidates.",
        )


def _confirmed_images_section(confirmed: pl.DataFrame | None, reviewed: set[tuple[str, str]], thumbs: _Thumbs,
                              cap: int, answered: bool) -> list[str]:
    """"Confirmed issues, as images": at most ``cap`` unanimously confirmed issues per dataset and issue type
    (nothing when ``cap`` is 0)."""
    if not cap:
        return []
    s = ["<h2>Confirmed issues, as images</h2><p class='note'>Candidates every panel member answered yes "
         f"to (unanimous), at most {cap} per dataset and issue type, most suspicious "
         "first; near duplicates as pairs side by side, label errors with their given label.</p>"]
    if answered and _usable(confirmed, "dataset", "issue_type", "position", "item_id", "item_id_2", "n_yes",
                            "n_annotators", "unanimous"):
        s.append(_confirmed_gallery(confirmed, reviewed, thumbs, cap))
    else:
        s.append("<p class='note'>No issue is confirmed yet: no answers have arrived.</p>")
    return s


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
    sessions: pl.DataFrame | None = None,
    encoders: pl.DataFrame | None = None,
    queue: pl.DataFrame | None = None,
    confirmed: pl.DataFrame | None = None,
    dataset_roots: Mapping[str, str | Path] | None = None,
    dataset_sizes: Mapping[str, int] | None = None,
    n_thumbnails: int = 8,
    n_confirmed_thumbnails: int = 24,
    title: str = "Data-cleaning report (SelfClean protocol)",
    created: str | None = None,
) -> str:
    """HTML string of the cleaning report; every argument is optional (missing sections say which data
    would fill them).

    Frames are the outputs of the ``pipeline`` functions (any number of datasets); an empty frame, or one
    without columns, counts as missing. ``dataset_roots`` maps dataset -> image folder for thumbnails
    (item_ids resolving outside the root are not shown); ``dataset_sizes`` maps dataset -> number of images.
    ``n_thumbnails`` candidates of each ranking and at most ``n_confirmed_thumbnails`` confirmed issues per
    dataset and issue type are shown as thumbnails (0 hides the section). On day one (no answers yet) the top
    candidates come right after the review progress, otherwise at the end.
    """
    for name, n in (("n_thumbnails", n_thumbnails), ("n_confirmed_thumbnails", n_confirmed_thumbnails)):
        if n < 0:
            raise ValueError(f"{name} must be >= 0, got {n}")
    sizes = dict(dataset_sizes or {})
    progress = review_progress(queue, confirmed)
    reviewed = _reviewed(progress)
    answered = bool(reviewed)
    wait = "" if answered else _NEEDS_ANSWERS
    thumbs = _Thumbs({k: Path(v) for k, v in (dataset_roots or {}).items()})
    s = _progress_section(progress, sizes, answered)
    if not answered:
        s += _top_candidates(queue, confirmed, thumbs, n_thumbnails)
    _protocol_sections(s, issues, prevalence, reviewed)
    _agreement_and_ranking_sections(s, agreement, ranking_quality, annotator_quality, wait)
    _encoder_and_truth_sections(s, encoders, ranking_truth)
    _effort_sections(s, speedup, sessions, wait)
    s += _impact_section(impact, sizes)
    _sensitivity_and_rater_sections(s, sensitivity, expert_lay, wait)
    s += _confirmed_images_section(confirmed, reviewed, thumbs, n_confirmed_thumbnails, answered)
    if answered:
        s += _top_candidates(queue, confirmed, thumbs, n_thumbnails)
    return rh.page(title, s, created=created, extra_css=_EXTRA_CSS)
