"""Criterion sensitivity of UE evaluation on the full prediction set (Rethinking Correctness 2026 §3.3).

AUROC_{d,u,f} = (1/|M_d|) sum_{m in M_d} AUROC(u on (d, m), errors under criterion f): models equally
weighted.
Spread_{d,u} = max_f AUROC_{d,u,f} - min_f AUROC_{d,u,f}. A ranking reversal is a dataset d, a pair of UE
methods
(u1, u2) and a pair of criteria (f1, f2) with AUROC_{d,u1,f1} > AUROC_{d,u2,f1} but AUROC_{d,u1,f2} <
AUROC_{d,u2,f2}.
"""

from __future__ import annotations

import itertools
import warnings
from collections.abc import Sequence

import numpy as np
import polars as pl

from noisycal_platform.correctness.audit import error_detection_auroc

__all__ = ["REVERSAL_SCHEMA", "SENSITIVITY_SCHEMA", "ranking_reversals", "sensitivity_table"]

SENSITIVITY_SCHEMA = {
    "dataset": pl.String,
    "ue_method": pl.String,
    "criterion": pl.String,
    "auroc": pl.Float64,
    "n_models": pl.Int64,
    "n_predictions": pl.Int64,
    "spread": pl.Float64,
    "in_reversal": pl.Boolean,
}
REVERSAL_SCHEMA = {
    "dataset": pl.String,
    "ue_method_a": pl.String,
    "ue_method_b": pl.String,
    "criterion_1": pl.String,
    "criterion_2": pl.String,
    "auroc_a_1": pl.Float64,
    "auroc_b_1": pl.Float64,
    "auroc_a_2": pl.Float64,
    "auroc_b_2": pl.Float64,
}


def sensitivity_table(correct: pl.DataFrame, scores: pl.DataFrame, ue_methods: Sequence[str]) -> pl.DataFrame:
    """AUROC per dataset x UE method x criterion with models equally weighted, plus spread and reversal flag.

    correct: dataset, model, case_id, criterion, accepted (bool, non-null). scores: dataset, model, case_id
    and
    one column per UE method. Predictions with a non-finite score are left out of that method only.
    """
    for col in ("dataset", "model", "case_id", "criterion", "accepted"):
        if col not in correct.columns:
            raise ValueError(f"correct is missing column {col!r}")
    missing = [m for m in ue_methods if m not in scores.columns]
    if missing:
        raise ValueError(f"scores is missing UE method columns {missing}")
    joined = correct.join(
        scores.select("dataset", "model", "case_id", *ue_methods),
        on=["dataset", "model", "case_id"],
        how="inner",
    )
    rows = []
    for (dataset, criterion), part in joined.group_by(["dataset", "criterion"], maintain_order=True):
        for method in ue_methods:
            per_model, n_pred = [], 0
            for _, pm in part.group_by("model", maintain_order=True):
                u = pm[method].to_numpy().astype(np.float64)
                ok = np.isfinite(u)
                n_pred += int(ok.sum())
                with warnings.catch_warnings():
                    warnings.simplefilter("ignore")
                    a = error_detection_auroc(u[ok], pm["accepted"].to_numpy()[ok]) if ok.any() else np.nan
                if np.isfinite(a):
                    per_model.append(a)
            rows.append(
                {
                    "dataset": dataset,
                    "ue_method": method,
                    "criterion": criterion,
                    "auroc": float(np.mean(per_model)) if per_model else None,
                    "n_models": len(per_model),
                    "n_predictions": n_pred,
                }
            )
    table = pl.DataFrame(
        rows,
        schema={
            k: SENSITIVITY_SCHEMA[k]
            for k in ("dataset", "ue_method", "criterion", "auroc", "n_models", "n_predictions")
        },
    )
    table = table.with_columns(
        (pl.col("auroc").max() - pl.col("auroc").min()).over("dataset", "ue_method").alias("spread")
    )
    rev = ranking_reversals(table)
    involved = (
        pl.concat(
            [
                rev.select("dataset", pl.col("ue_method_a").alias("ue_method")),
                rev.select("dataset", pl.col("ue_method_b").alias("ue_method")),
            ]
        )
        .unique()
        .with_columns(pl.lit(True).alias("in_reversal"))
    )
    return (
        table.join(involved, on=["dataset", "ue_method"], how="left")
        .with_columns(pl.col("in_reversal").fill_null(False))
        .select(list(SENSITIVITY_SCHEMA))
        .sort("dataset", "ue_method", "criterion")
    )


def ranking_reversals(table: pl.DataFrame) -> pl.DataFrame:
    """Every (dataset, UE pair, criterion pair) whose AUROC ordering flips between the two criteria."""
    rows = []
    for (dataset,), part in table.group_by(["dataset"], maintain_order=True):
        look = {(r["ue_method"], r["criterion"]): r["auroc"] for r in part.iter_rows(named=True)}
        methods = sorted(part["ue_method"].unique())
        crits = sorted(part["criterion"].unique())
        for a, b in itertools.combinations(methods, 2):
            for f1, f2 in itertools.combinations(crits, 2):
                v = [look.get((a, f1)), look.get((b, f1)), look.get((a, f2)), look.get((b, f2))]
                if any(x is None for x in v):
                    continue
                d1, d2 = v[0] - v[1], v[2] - v[3]
                if d1 * d2 < 0:
                    rows.append(
                        {
                            "dataset": dataset,
                            "ue_method_a": a,
                            "ue_method_b": b,
                            "criterion_1": f1,
                            "criterion_2": f2,
                            "auroc_a_1": v[0],
                            "auroc_b_1": v[1],
                            "auroc_a_2": v[2],
                            "auroc_b_2": v[3],
                        }
                    )
    return pl.DataFrame(rows, schema=REVERSAL_SCHEMA)
