"""NC-ECE, its interval and the calibration test per subgroup, with Holm's correction across the subgroups.

Subgroups come from ``items.csv`` (``raw.predictions.subgroups``): every (metadata column, value) pair is one
subgroup of the version's scored items. A subgroup with fewer than ``min_items`` annotated items is listed with
status "too_small" and not computed. Each computed subgroup gets the version's NC-ECE rows restricted to its
items (binary: Hanada and Futami 2026 §3 with `inference.calibration_test`; multi-class: top-label and classwise,
`class_tables.class_nc_ece_rows`); the p-values of one kind are adjusted by Holm's step-down procedure across
all computed subgroups of the version (every column's values together, one family), and a subgroup is flagged
when its adjusted p-value is below ``alpha``.

Channels: the whole version's estimates, held fixed. Annotator channels are properties of the annotators:
the seed's noise model takes P(A_j | Y, X) = P(A_j | Y), the same for every score (§2.2, §4.1), and a subgroup
is a function of X, so the same channels apply in each subgroup. Re-estimating them per subgroup would fit the
same parameters on a fraction of the items (C·(C−1) per annotator with C classes; 90 for ten classes, more than
a 200-item subgroup identifies), and the whole-version estimate's error is small beside a subgroup's sampling
error. Consequence: the subgroup interval and test condition on the version's channel estimate (they do not
carry its error), and a subgroup in which annotators behave differently violates the model, as it would for
the whole version.

Holm (1979), "A simple sequentially rejective multiple test procedure", Scand. J. Statist. 6(2):65–70:
p_(1) ≤ … ≤ p_(m) sorted, adjusted p̃_(i) = max_{l ≤ i} min(1, (m − l + 1)·p_(l)). Written here in a few lines
because statsmodels (whose ``multipletests(method="holm")`` computes the same) is not a dependency.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import polars as pl

from .class_tables import ClassMatrix, ConfusionTable, class_nc_ece_rows
from .inference import calibration_test
from .multiclass.nc_ece import NC_ECE_KINDS
from .nc_ece import nc_ece
from .tables import AnnotationMatrix, calibration_test_columns

__all__ = [
    "SUBGROUP_ESTIMATOR",
    "binary_subgroup_rows",
    "class_subgroup_rows",
    "holm",
    "holm_min_p",
    "subgroup_masks",
    "subgroup_rows",
]

SUBGROUP_ESTIMATOR = "nc_ece_subgroup"


def holm(p_values: Any) -> np.ndarray:
    """Holm-adjusted p-values (module doc), in the input order."""
    p = np.asarray(p_values, dtype=np.float64)
    m = p.size
    if m == 0:
        return p.copy()
    order = np.argsort(p, kind="stable")
    stepped = np.minimum(1.0, (m - np.arange(m)) * p[order])
    out = np.empty(m)
    out[order] = np.maximum.accumulate(stepped)
    return out


def holm_min_p(p_values: Any) -> float:
    """The smallest Holm-adjusted p-value of a family, min(1, m·min_i p_i) over its m finite p-values (NaN when
    none): the family is rejected at level α (some member rejects after Holm) exactly when this is below α.

    Used by the multi-class WARN check `calibration_test_not_rejected`, which reads the top-label and the
    classwise test of one data set: taking the smaller raw p-value against α tests twice and false-alarms in
    up to 2α (measured 0.087–0.092 at α = .05, benchmarks/size_power.md); Holm's first step keeps the family-wise
    error at ≤ α under any dependence between the two tests (Bonferroni's inequality)."""
    p = np.asarray(p_values, dtype=np.float64).ravel()
    p = p[np.isfinite(p)]
    return float(holm(p).min()) if p.size else float("nan")


def subgroup_masks(item_ids: tuple[str, ...], predictions: pl.DataFrame) -> list[tuple[str, str, np.ndarray]]:
    """(column, value, boolean mask over ``item_ids``) for every subgroup in ``predictions.subgroups``, sorted."""
    if "subgroups" not in predictions.columns or predictions.height == 0:
        return []
    long = (
        predictions.select("item_id", "subgroups")
        .explode("subgroups")
        .drop_nulls("subgroups")
        .unnest("subgroups")
    )
    if long.height == 0:
        return []
    index = pl.DataFrame({"item_id": list(item_ids), "_row": np.arange(len(item_ids), dtype=np.int64)})
    long = long.join(index, on="item_id").sort("column", "value")
    out = []
    for (col, val), part in long.group_by("column", "value", maintain_order=True):
        mask = np.zeros(len(item_ids), dtype=bool)
        mask[part["_row"].to_numpy()] = True
        out.append((str(col), str(val), mask))
    return out


def subgroup_rows(
    groups: list[tuple[str, str, np.ndarray]],
    annotated: np.ndarray,
    evaluate: Callable[[np.ndarray], list[dict[str, Any]]],
    kinds: tuple[str, ...],
    min_items: int = 200,
    alpha: float = 0.05,
) -> list[dict[str, Any]]:
    """Rows for every subgroup: ``evaluate(mask)`` (one NC-ECE row per kind) where the subgroup has at least
    ``min_items`` annotated items, else one "too_small" row per kind; then Holm across the computed subgroups of
    each kind (``p_value_holm``, ``flagged``; a row without a p-value is neither adjusted nor flagged)."""
    rows: list[dict[str, Any]] = []
    for col, val, mask in groups:
        n = int((mask & annotated).sum())
        where = {"estimator": SUBGROUP_ESTIMATOR, "subgroup_column": col, "subgroup_value": val}
        if n < min_items:
            rows += [{**where, "kind": kind, "status": "too_small", "n_items": n} for kind in kinds]
            continue
        rows += [{**r, **where, "status": "ok"} for r in evaluate(mask)]
    for kind in kinds:
        tested = [r for r in rows if r["kind"] == kind and r["status"] == "ok" and r.get("p_value") is not None]
        for r, p in zip(tested, holm([r["p_value"] for r in tested]), strict=True):
            r["p_value_holm"] = float(p)
            r["flagged"] = bool(p < alpha)
    return rows


def binary_subgroup_rows(
    matrix: AnnotationMatrix,
    predictions: pl.DataFrame,
    channels: tuple,
    weights: np.ndarray,
    *, n_bins: int = 15, n_bootstrap: int = 500, ci_level: float = 0.95, seed: int = 0, min_items: int = 200,
) -> list[dict[str, Any]]:
    """Subgroup rows of a binary version: plug-in `nc_ece` and `calibration_test` on the subgroup's items with
    the version's channels and weights held fixed (module doc)."""
    if matrix.scores is None:
        raise ValueError("matrix has no scores; build it with predictions")
    groups = subgroup_masks(matrix.item_ids, predictions)
    common = {"n_bins": n_bins, "n_bootstrap": n_bootstrap, "ci_level": ci_level, "seed": seed, "kind": "binary",
              "n_classes": 2}

    def evaluate(mask: np.ndarray) -> list[dict[str, Any]]:
        s, v = matrix.scores[mask], matrix.values[mask]
        point = nc_ece(s, v, channels, weights=weights, n_bins=n_bins)
        row = {"value": point.value, "n_items": point.n_items, "n_excluded": int(mask.sum()) - point.n_items,
               "min_items_per_bin": int(point.bins["n"].min()), **common}
        if n_bootstrap:
            t = calibration_test(s, v, channels, weights=weights, n_bins=n_bins, n_boot=n_bootstrap,
                                 alpha=1 - ci_level, seed=seed)
            row.update(calibration_test_columns(t))
        return [row]

    annotated = ~np.isnan(matrix.values).all(axis=1)
    return subgroup_rows(groups, annotated, evaluate, ("binary",), min_items, alpha=1 - ci_level)


def class_subgroup_rows(
    cm: ClassMatrix,
    predictions: pl.DataFrame,
    ct: ConfusionTable,
    *, n_bins: int = 15, n_bootstrap: int = 500, ci_level: float = 0.95, seed: int = 0, min_items: int = 200,
) -> list[dict[str, Any]]:
    """Subgroup rows of a multi-class version: top-label and classwise NC-ECE and the multi-class calibration
    test on the subgroup's items with the version's confusion matrices and weights held fixed (module doc)."""
    groups = subgroup_masks(cm.item_ids, predictions)

    def evaluate(mask: np.ndarray) -> list[dict[str, Any]]:
        rows = class_nc_ece_rows(cm.subset(mask), ct, n_bins, n_bootstrap, ci_level, seed, weight_rule=None,
                                 refit=False, naive=False)
        return [r for r in rows if r["estimator"] == "nc_ece"]

    annotated = ~np.isnan(cm.values).all(axis=1)
    return subgroup_rows(groups, annotated, evaluate, NC_ECE_KINDS, min_items, alpha=1 - ci_level)
