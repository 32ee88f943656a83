"""Asset functions of the audit stage: correctness/criterion_audit, correctness/ue_sensitivity and
correctness/false_acceptance (re-exported by pipeline.py). Frames in, frames out.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import polars as pl

from noisycal_platform.correctness.audit import ERROR_CATEGORIES, false_acceptance_by_category
from noisycal_platform.correctness.bootstrap import BootstrapReplicates, paired_bootstrap, percentile_ci
from noisycal_platform.correctness.io import KEY
from noisycal_platform.correctness.sensitivity import SENSITIVITY_SCHEMA, sensitivity_table

__all__ = [
    "AUDIT_RESULT_SCHEMA",
    "FALSE_ACCEPTANCE_SCHEMA",
    "KEY",
    "REFERENCE_CRITERION",
    "SEED_COMPARISONS",
    "UE_METHODS",
    "criterion_audit",
    "false_acceptance",
    "ue_sensitivity",
]

UE_METHODS = ("self_certainty", "logtoku", "answer_entropy", "semantic_entropy")
REFERENCE_CRITERION = "exact_match"
# Rethinking Correctness 2026 §3.2: BEM and the LLM judge are each compared with EM (two comparisons, Bonferroni 97.5%).
SEED_COMPARISONS: tuple[tuple[str, str], ...] = (("bem", "exact_match"), ("llm_judge", "exact_match"))
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
    "reference": pl.String,  # the criterion this row's deltas are taken against (null: not compared)
    "criterion_model": pl.String,  # local model path the criterion used
    "criterion_model_sha256": pl.String,
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


def _comparisons(
    decisions: pl.DataFrame, comparisons: Sequence[tuple[str, str]], crits: list[str]
) -> tuple[list[tuple[str, str]], dict[str, str], list[str]]:
    """The planned pairs, checked (two different known criteria; a criterion first of one pair only); ``against``:
    first -> second for pairs whose criteria both ran; ``not_run``: "a − b" for the others."""
    known = set(decisions["criterion"].unique().to_list())
    pairs = [(str(a), str(b)) for a, b in comparisons]
    bad = [p for p in pairs if p[0] not in known or p[1] not in known or p[0] == p[1]]
    if bad:
        raise ValueError(f"comparison pairs {bad}: each needs two different criteria among {sorted(known)}")
    firsts = [a for a, _ in pairs]
    if len(set(firsts)) != len(firsts):
        raise ValueError(f"comparison pairs {pairs}: a criterion may be the first of one pair only")
    against = {a: b for a, b in pairs if a in crits and b in crits}
    not_run = [f"{a} − {b}" for a, b in pairs if (a, b) not in against.items()]
    return pairs, against, not_run


def _audit_note(dropped: list[str], not_run: list[str]) -> str:
    notes = []
    if dropped:
        notes.append(f"UE methods left out (non-finite scores on audited items): {dropped}")
    if not_run:
        notes.append(f"comparisons not computed (a criterion was skipped): {not_run}")
    return "; ".join(notes)


def _criterion_models(decisions: pl.DataFrame) -> dict[str, tuple[str | None, str | None]]:
    """criterion -> (model path, sha256) of the active criteria."""
    models = (
        decisions.filter(~pl.col("skipped"))
        .group_by("criterion")
        .agg(pl.col("criterion_model").first(), pl.col("criterion_model_sha256").first())
    )
    return {r[0]: (r[1], r[2]) for r in models.iter_rows()}


def _scopes(groups: np.ndarray) -> list[tuple[str, str, np.ndarray]]:
    """(scope_kind, scope, indices of the groups in it): all, each dataset, each dataset-model group."""
    g_dataset = np.array([x.split("/", 1)[0] for x in groups])
    scopes = [("all", "all", np.arange(groups.size))]
    scopes += [("dataset", d, np.flatnonzero(g_dataset == d)) for d in sorted(set(g_dataset))]
    scopes += [("group", str(x), np.array([i])) for i, x in enumerate(groups)]
    return scopes


@dataclass(frozen=True)
class _AuditRun:
    """What every row of one audit shares: the items' arrays, the bootstrap replicates and the point estimate
    (`paired_bootstrap` with unit counts), the comparisons and the levels."""

    crits: list[str]
    acc: np.ndarray  # (n, C) accepted
    hc: np.ndarray  # (n,) human_correct
    group: np.ndarray  # (n,) "dataset/model"
    rep: BootstrapReplicates
    point: BootstrapReplicates
    against: dict[str, str]
    model_of: dict[str, tuple[str | None, str | None]]
    note: str
    k: int
    ci_level: float
    level_adj: float
    n_boot: int
    mismatch: int | None


def _scope_rows(run: _AuditRun, kind: str, scope: str, gi: np.ndarray) -> list[dict]:
    """One AUDIT_RESULT_SCHEMA row per criterion for the groups ``gi`` of one scope."""
    rows = []
    in_scope = np.isin(run.group, np.array(run.rep.groups)[gi])
    h_b, (d_b, _) = run.rep.h_f(gi), run.rep.d_f(gi)
    h_p, (d_p, undef) = run.point.h_f(gi)[0], run.point.d_f(gi)
    vals = {"h": (h_p, h_b), "d": (d_p[0], d_b), "f": (1 - d_p[0], 1 - d_b)}
    for ci, c in enumerate(run.crits):
        other = run.against.get(c)
        oi = run.crits.index(other) if other is not None else ci
        dh_b, dd_b = h_b[:, ci] - h_b[:, oi], d_b[:, ci] - d_b[:, oi]
        row = {"scope_kind": kind, "scope": scope, "criterion": c, "status": "ok", "note": run.note}
        for key, (p, b) in vals.items():
            lo, hi = percentile_ci(b[:, ci], run.ci_level)
            row |= {f"{key}_f": float(p[ci]), f"{key}_f_lo": float(lo), f"{key}_f_hi": float(hi)}
        for key, p, b in (("h", h_p, dh_b), ("d", d_p[0], dd_b)):
            is_ref = other is None  # no difference reported for an uncompared criterion
            lo, hi = percentile_ci(b, run.ci_level)
            lo2, hi2 = percentile_ci(b, run.level_adj)
            row |= {
                f"delta_{key}": None if is_ref else float(p[ci] - p[oi]),
                f"delta_{key}_lo": None if is_ref else float(lo),
                f"delta_{key}_hi": None if is_ref else float(hi),
                f"delta_{key}_lo_adj": None if is_ref else float(lo2),
                f"delta_{key}_hi_adj": None if is_ref else float(hi2),
            }
        a, h = run.acc[in_scope, ci], run.hc[in_scope]
        row |= {
            "reference": other,
            "criterion_model": run.model_of.get(c, (None, None))[0],
            "criterion_model_sha256": run.model_of.get(c, (None, None))[1],
            "n_comparisons": run.k,
            "ci_level": run.ci_level,
            "ci_level_adj": run.level_adj,
            "n_tasks_undefined": int(undef[0, ci]),
            "false_rejects": int(np.sum(h & ~a)),
            "n_human_correct": int(h.sum()),
            "false_accepts": int(np.sum(~h & a)),
            "n_human_incorrect": int((~h).sum()),
            "n_items": int(in_scope.sum()),
            "n_groups": int(gi.size),
            "n_boot": run.n_boot,
            "n_em_stratum_mismatch": run.mismatch,
        }
        rows.append(row)
    return rows


def _skipped_rows(decisions: pl.DataFrame, k: int, ci_level: float, level_adj: float) -> list[dict]:
    """One "skipped" row per skipped criterion, its reason as the note."""
    skipped = (
        decisions.filter(pl.col("skipped"))
        .group_by("criterion")
        .agg(pl.col("reason").first())
        .sort("criterion")
    )
    return [
        {
            "scope_kind": "all",
            "scope": "all",
            "criterion": c,
            "status": "skipped",
            "note": reason,
            "n_comparisons": k,
            "ci_level": ci_level,
            "ci_level_adj": level_adj,
        }
        for c, reason in skipped.iter_rows()
    ]


def criterion_audit(
    decisions: pl.DataFrame,
    scores: pl.DataFrame,
    audit_labels: pl.DataFrame,
    *,
    ue_methods: Sequence[str] = UE_METHODS,
    comparisons: Sequence[tuple[str, str]] = SEED_COMPARISONS,
    n_boot: int = 10_000,
    seed: int = 0,
    ci_level: float = 0.95,
) -> pl.DataFrame:
    """correctness/criterion_audit: H_f, D_f, F_f = 1 - D_f with paired stratified bootstrap CIs and
    directional errors, one row per scope (all / dataset / dataset-model group) x criterion
    (AUDIT_RESULT_SCHEMA); Rethinking Correctness 2026 §2.2-2.3, §3.2.

    `comparisons` lists (a, b) criterion pairs: the row of a carries delta = stat_a - stat_b with the
    `ci_level` interval and the Bonferroni-adjusted one at level 1 - (1 - ci_level)/k, k = len(comparisons)
    (the planned comparisons; the seed's two give 97.5%). A pair with a skipped criterion is not computed and
    says so in the note. Skipped criteria get status "skipped" and their reason.
    """
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    items, crits, methods, dropped = _audit_items(decisions, scores, audit_labels, ue_methods)
    pairs, against, not_run = _comparisons(decisions, comparisons, crits)
    if not methods:
        raise ValueError(f"no UE method in {list(ue_methods)} has finite scores on every audited item")
    acc = items.select(crits).to_numpy().astype(bool)
    hc = items["human_correct"].to_numpy().astype(bool)
    u = items.select(methods).to_numpy().astype(np.float64)
    group = (items["dataset"] + "/" + items["model"]).to_numpy()
    em = (items["em_stratum"] == "EM-accepted").to_numpy()
    args = (acc, hc, u, group, em)
    kw = {"criteria": tuple(crits), "ue_methods": tuple(methods)}
    k = max(len(pairs), 1)
    run = _AuditRun(
        crits=crits, acc=acc, hc=hc, group=group,
        rep=paired_bootstrap(*args, **kw, n_boot=n_boot, seed=seed),
        point=paired_bootstrap(*args, **kw, counts=np.ones((1, hc.size), dtype=np.float32)),
        against=against, model_of=_criterion_models(decisions), note=_audit_note(dropped, not_run), k=k,
        ci_level=ci_level, level_adj=1 - (1 - ci_level) / k, n_boot=n_boot,
        mismatch=(
            int(np.sum(acc[:, crits.index(REFERENCE_CRITERION)] != em)) if REFERENCE_CRITERION in crits else None
        ),
    )
    rows = [row for kind, scope, gi in _scopes(np.array(run.rep.groups)) for row in _scope_rows(run, kind, scope, gi)]
    rows += _skipped_rows(decisions, k, ci_level, run.level_adj)
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
    equally weighted, with the spread across criteria and a reversal flag (Rethinking Correctness 2026 §3.3;
    SENSITIVITY_SCHEMA).
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
    over the dataset-model groups containing that category, with pooled counts (Rethinking Correctness 2026 §3.4)."""
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
