"""Asset functions of the audit stage: correctness/criterion_audit, correctness/ue_sensitivity and
correctness/false_acceptance (re-exported by pipeline.py). Frames in, frames out.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from noisycal_platform.correctness.audit import ERROR_CATEGORIES, false_acceptance_by_category
from noisycal_platform.correctness.bootstrap import paired_bootstrap, percentile_ci
from noisycal_platform.correctness.sensitivity import SENSITIVITY_SCHEMA, sensitivity_table

__all__ = [
    "AUDIT_RESULT_SCHEMA",
    "FALSE_ACCEPTANCE_SCHEMA",
    "KEY",
    "REFERENCE_CRITERION",
    "UE_METHODS",
    "criterion_audit",
    "false_acceptance",
    "ue_sensitivity",
]

KEY = ["dataset", "model", "case_id"]
UE_METHODS = ("self_certainty", "logtoku", "answer_entropy", "semantic_entropy")
REFERENCE_CRITERION = "exact_match"
_CI = [
    "h_f",
    "h_f_lo",
    "h_f_hi",
    "d_f",
    "d_f_lo",
    "d_f_hi",
    "f_f",
    "f_f_lo",
    "f_f_hi",
    "delta_h",
    "delta_h_lo",
    "delta_h_hi",
    "delta_h_lo_adj",
    "delta_h_hi_adj",
    "delta_d",
    "delta_d_lo",
    "delta_d_hi",
    "delta_d_lo_adj",
    "delta_d_hi_adj",
]
AUDIT_RESULT_SCHEMA = {
    "scope_kind": pl.String,
    "scope": pl.String,
    "criterion": pl.String,
    "status": pl.String,
    "note": pl.String,
    **{c: pl.Float64 for c in _CI},
    "reference": pl.String,
    "n_comparisons": pl.Int64,
    "ci_level": pl.Float64,
    "ci_level_adj": pl.Float64,
    "n_tasks_undefined": pl.Int64,
    "false_rejects": pl.Int64,
    "n_human_correct": pl.Int64,
    "false_accepts": pl.Int64,
    "n_human_incorrect": pl.Int64,
    "n_items": pl.Int64,
    "n_groups": pl.Int64,
    "n_boot": pl.Int64,
    "n_em_stratum_mismatch": pl.Int64,
}
FALSE_ACCEPTANCE_SCHEMA = {
    "criterion": pl.String,
    "error_category": pl.String,
    "rate": pl.Float64,
    "n_accepted": pl.Int64,
    "n_errors": pl.Int64,
    "n_groups": pl.Int64,
}


def _audit_items(
    decisions: pl.DataFrame, scores: pl.DataFrame, audit_labels: pl.DataFrame, ue_methods: Sequence[str]
) -> tuple[pl.DataFrame, list[str], list[str], list[str]]:
    active = decisions.filter(~pl.col("skipped"))
    crits = sorted(active["criterion"].unique().to_list(), key=lambda c: (c != REFERENCE_CRITERION, c))
    wide = active.pivot(on="criterion", index=KEY, values="accepted")
    items = (
        audit_labels.select(*KEY, "human_correct", "error_category", "em_stratum")
        .join(wide, on=KEY, how="left")
        .join(scores.select(*KEY, *ue_methods), on=KEY, how="left")
    )
    missing = items.filter(pl.any_horizontal(pl.col(crits).is_null()))
    if missing.height:
        raise ValueError(f"audit labels without criterion decisions, e.g. {missing.select(KEY).rows()[:3]}")
    kept = [m for m in ue_methods if bool(items[m].is_finite().fill_null(False).all())]
    dropped = [m for m in ue_methods if m not in kept]
    return items.sort(KEY), crits, kept, dropped


def criterion_audit(
    decisions: pl.DataFrame,
    scores: pl.DataFrame,
    audit_labels: pl.DataFrame,
    *,
    ue_methods: Sequence[str] = UE_METHODS,
    reference: str = REFERENCE_CRITERION,
    n_boot: int = 10_000,
    seed: int = 0,
    ci_level: float = 0.95,
    compare: Sequence[str] | None = None,
) -> pl.DataFrame:
    """correctness/criterion_audit: H_f, D_f, F_f = 1 - D_f with paired stratified bootstrap CIs,
    differences vs `reference` for the criteria in `compare` (default: every other active criterion) at
    `ci_level` and Bonferroni-adjusted over n_comparisons = len(compare) (level 1 - (1 - ci_level)/k), and
    directional errors; one row per scope (all / dataset / dataset-model group) x criterion
    (AUDIT_RESULT_SCHEMA). Skipped criteria get status "skipped" and their note. Seed 002 §2.2-2.3, §3.2."""
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    items, crits, methods, dropped = _audit_items(decisions, scores, audit_labels, ue_methods)
    if reference not in crits:
        raise ValueError(f"reference criterion {reference!r} not among the active criteria {crits}")
    compared = [c for c in crits if c != reference] if compare is None else list(compare)
    bad = [c for c in compared if c not in crits or c == reference]
    if bad:
        raise ValueError(f"compare has {bad}: each must be an active criterion other than {reference!r}")
    if not methods:
        raise ValueError(f"no UE method in {list(ue_methods)} has finite scores on every audited item")
    note = f"UE methods left out (non-finite scores on audited items): {dropped}" if dropped else ""
    acc = items.select(crits).to_numpy().astype(bool)
    hc = items["human_correct"].to_numpy().astype(bool)
    u = items.select(methods).to_numpy().astype(np.float64)
    group = (items["dataset"] + "/" + items["model"]).to_numpy()
    em = (items["em_stratum"] == "EM-accepted").to_numpy()
    args = (acc, hc, u, group, em)
    kw = {"criteria": tuple(crits), "ue_methods": tuple(methods)}
    rep = paired_bootstrap(*args, **kw, n_boot=n_boot, seed=seed)
    point = paired_bootstrap(*args, **kw, counts=np.ones((1, hc.size), dtype=np.float32))
    mismatch = (
        int(np.sum(acc[:, crits.index(REFERENCE_CRITERION)] != em)) if REFERENCE_CRITERION in crits else None
    )
    ref = crits.index(reference)
    k = max(len(compared), 1)
    level_adj = 1 - (1 - ci_level) / k
    groups = np.array(rep.groups)
    g_dataset = np.array([x.split("/", 1)[0] for x in groups])
    scopes = [("all", "all", np.arange(groups.size))]
    scopes += [("dataset", d, np.flatnonzero(g_dataset == d)) for d in sorted(set(g_dataset))]
    scopes += [("group", str(x), np.array([i])) for i, x in enumerate(groups)]
    rows = []
    for kind, scope, gi in scopes:
        in_scope = np.isin(group, groups[gi])
        h_b, (d_b, _) = rep.h_f(gi), rep.d_f(gi)
        h_p, (d_p, undef) = point.h_f(gi)[0], point.d_f(gi)
        vals = {"h": (h_p, h_b), "d": (d_p[0], d_b), "f": (1 - d_p[0], 1 - d_b)}
        dh_b, dd_b = h_b - h_b[:, ref : ref + 1], d_b - d_b[:, ref : ref + 1]
        for ci, c in enumerate(crits):
            row = {"scope_kind": kind, "scope": scope, "criterion": c, "status": "ok", "note": note}
            for key, (p, b) in vals.items():
                lo, hi = percentile_ci(b[:, ci], ci_level)
                row |= {f"{key}_f": float(p[ci]), f"{key}_f_lo": float(lo), f"{key}_f_hi": float(hi)}
            for key, p, b in (("h", h_p, dh_b), ("d", d_p[0], dd_b)):
                is_ref = c not in compared  # no difference reported for the reference or uncompared
                lo, hi = percentile_ci(b[:, ci], ci_level)
                lo2, hi2 = percentile_ci(b[:, ci], level_adj)
                row |= {
                    f"delta_{key}": None if is_ref else float(p[ci] - p[ref]),
                    f"delta_{key}_lo": None if is_ref else float(lo),
                    f"delta_{key}_hi": None if is_ref else float(hi),
                    f"delta_{key}_lo_adj": None if is_ref else float(lo2),
                    f"delta_{key}_hi_adj": None if is_ref else float(hi2),
                }
            a, h = acc[in_scope, ci], hc[in_scope]
            row |= {
                "reference": reference,
                "n_comparisons": k,
                "ci_level": ci_level,
                "ci_level_adj": level_adj,
                "n_tasks_undefined": int(undef[0, ci]),
                "false_rejects": int(np.sum(h & ~a)),
                "n_human_correct": int(h.sum()),
                "false_accepts": int(np.sum(~h & a)),
                "n_human_incorrect": int((~h).sum()),
                "n_items": int(in_scope.sum()),
                "n_groups": int(gi.size),
                "n_boot": n_boot,
                "n_em_stratum_mismatch": mismatch,
            }
            rows.append(row)
    skipped = (
        decisions.filter(pl.col("skipped"))
        .group_by("criterion")
        .agg(pl.col("reason").first())
        .sort("criterion")
    )
    for c, reason in skipped.iter_rows():
        rows.append(
            {"scope_kind": "all", "scope": "all", "criterion": c, "status": "skipped", "note": reason}
        )
    return pl.DataFrame(rows, schema=AUDIT_RESULT_SCHEMA)


def ue_sensitivity(
    decisions: pl.DataFrame,
    scores: pl.DataFrame,
    *,
    criteria: Sequence[str] | None = None,
    ue_methods: Sequence[str] = UE_METHODS,
    parseable_only: bool = True,
) -> pl.DataFrame:
    """correctness/ue_sensitivity: AUROC per dataset x UE method x criterion on the full prediction set,
    models
    equally weighted, with the spread across criteria and a reversal flag (seed 002 §3.3; SENSITIVITY_SCHEMA).
    Default criteria: every active one; parseable_only keeps predictions whose output parsed (seed:
    23,254)."""
    d = decisions.filter(~pl.col("skipped"))
    if parseable_only:
        d = d.filter(pl.col("parseable"))
    if criteria is not None:
        unknown = set(criteria) - set(d["criterion"].unique().to_list())
        if unknown:
            raise ValueError(f"criteria {sorted(unknown)} are not active in decisions")
        d = d.filter(pl.col("criterion").is_in(list(criteria)))
    if d.height == 0:
        return pl.DataFrame(schema=SENSITIVITY_SCHEMA)
    return sensitivity_table(d.select(*KEY, "criterion", "accepted"), scores, ue_methods)


def false_acceptance(decisions: pl.DataFrame, audit_labels: pl.DataFrame) -> pl.DataFrame:
    """correctness/false_acceptance: per criterion x human error category, the accepted share averaged equally
    over the dataset-model groups containing that category, with pooled counts (seed 002 §3.4)."""
    d = decisions.filter(~pl.col("skipped")).select(*KEY, "criterion", "accepted")
    a = audit_labels.select(*KEY, "human_correct", "error_category")
    rows = []
    for (c,), part in d.join(a, on=KEY, how="inner").sort(KEY).group_by(["criterion"], maintain_order=True):
        res = false_acceptance_by_category(
            part["accepted"].to_numpy(),
            part["human_correct"].to_numpy(),
            part["error_category"].to_list(),
            (part["dataset"] + "/" + part["model"]).to_numpy(),
            ERROR_CATEGORIES,
        )
        rows += [{"criterion": c, "error_category": cat, **v} for cat, v in res.items()]
    return pl.DataFrame(rows, schema=FALSE_ACCEPTANCE_SCHEMA).sort("criterion", "error_category")
