"""Annotation matrix, channel table and NC-ECE tables for the pipeline (frame in, frame out).

See `noisycal_platform.calibration.pipeline` for the flow and the per-bin formula the SQL model reproduces.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from .channels import Channel, ChannelFit, estimate_channels, known_channels
from .channels._base import validated_labels
from .inference import CalibrationTest, calibration_test
from .nc_ece import bin_index, binned_ece, nc_ece, plugin_prevalence
from .recalibration import naive_targets
from .weights import WEIGHT_RULES, aggregation_weights

__all__ = [
    "CHANNEL_TABLE_SCHEMA",
    "NC_ECE_REPORT_SCHEMA",
    "AnnotationMatrix",
    "ChannelTable",
    "annotation_matrix",
    "calibration_test_arguments",
    "calibration_test_columns",
    "channel_estimates_table",
    "channels_from_table",
    "nc_ece_bins_table",
    "nc_ece_calibration_test",
    "nc_ece_report_settings",
    "nc_ece_report_table",
]


def _require(df: pl.DataFrame, name: str, cols: tuple[str, ...]) -> None:
    if not isinstance(df, pl.DataFrame):
        raise ValueError(f"{name} must be a polars DataFrame, got {type(df).__name__}")
    missing = [c for c in cols if c not in df.columns]
    if missing:
        raise ValueError(f"{name} is missing column(s) {missing}; has {df.columns}")


@dataclass(frozen=True, eq=False)
class AnnotationMatrix:
    """Wide annotations aligned with scores.

    item_ids : (n,) item ids, sorted. annotator_ids : (K,) sorted annotator ids (the column order).
    values : (n, K) float64, label 0/1, NaN where the annotator did not label the item; a validated
        `channels._base.LabelMatrix` (checked once, when the matrix is built).
    scores : (n,) float64 or None (no predictions given).
    n_annotated_unscored : annotated items without a score (dropped). n_scored_unannotated : scored items
    with no annotation (kept as all-NaN rows; NC-ECE excludes and counts them).
    """

    item_ids: tuple[str, ...]
    annotator_ids: tuple[str, ...]
    values: np.ndarray
    scores: np.ndarray | None
    n_annotated_unscored: int
    n_scored_unannotated: int

    @property
    def n_labels(self) -> np.ndarray:
        """Labels per annotator."""
        return (~np.isnan(self.values)).sum(axis=0)


def annotation_matrix(annotations: pl.DataFrame, predictions: pl.DataFrame | None = None) -> AnnotationMatrix:
    """Long annotations → n×K float matrix (NaN = missing), rows = predicted items sorted by item_id
    (or all annotated items when ``predictions`` is None), columns = annotators sorted by id."""
    _require(annotations, "annotations", ("item_id", "annotator_id", "label"))
    ann = annotations.select(
        pl.col("item_id").cast(pl.Utf8),
        pl.col("annotator_id").cast(pl.Utf8),
        pl.col("label").cast(pl.Float64),
    )
    if ann.height == 0:
        raise ValueError("annotations is empty")
    bad = ann.filter(~pl.col("label").is_in([0.0, 1.0]) | pl.col("label").is_null())
    if bad.height:
        raise ValueError(f"annotations label must be 0 or 1, got {bad['label'][0]!r} (item {bad['item_id'][0]!r})")
    dup = ann.filter(pl.struct("item_id", "annotator_id").is_duplicated())
    if dup.height:
        raise ValueError(
            f"annotations has duplicate (item_id, annotator_id) = ({dup['item_id'][0]!r}, {dup['annotator_id'][0]!r})"
        )
    annotated = ann["item_id"].unique()
    if predictions is not None:
        _require(predictions, "predictions", ("item_id", "score"))
        pred = predictions.select(pl.col("item_id").cast(pl.Utf8), pl.col("score").cast(pl.Float64)).sort("item_id")
        if pred["item_id"].is_duplicated().any():
            raise ValueError(
                f"predictions has duplicate item_id {pred.filter(pl.col('item_id').is_duplicated())['item_id'][0]!r}"
            )
        s = pred["score"].to_numpy()
        if s.size == 0 or not (np.all(s >= 0) and np.all(s <= 1)):
            raise ValueError("predictions score must be non-empty and lie in [0, 1] (no NaN)")
        items = pred["item_id"]
        scores = s.astype(np.float64)
    else:
        items = annotated.sort()
        scores = None
    rows = pl.DataFrame({"item_id": items, "_row": np.arange(len(items), dtype=np.int64)})
    ann = ann.join(rows, on="item_id", how="inner")
    annot_ids = tuple(sorted(ann["annotator_id"].unique().to_list()))  # annotators of scored items
    if not annot_ids:
        raise ValueError("no annotation refers to a scored item (check item_id values against predictions)")
    cols = pl.DataFrame({"annotator_id": list(annot_ids), "_col": np.arange(len(annot_ids), dtype=np.int64)})
    joined = ann.join(cols, on="annotator_id", how="inner")
    values = np.full((len(items), len(annot_ids)), np.nan)
    values[joined["_row"].to_numpy(), joined["_col"].to_numpy()] = joined["label"].to_numpy()
    n_unscored = int((~annotated.is_in(items.implode())).sum()) if predictions is not None else 0
    n_unann = int(np.isnan(values).all(axis=1).sum())
    # validated here, once: every function the matrix reaches accepts the LabelMatrix without checking again
    return AnnotationMatrix(tuple(items.to_list()), annot_ids, validated_labels(values), scores, n_unscored, n_unann)


CHANNEL_TABLE_SCHEMA = {
    "annotator_id": pl.Utf8,
    "fpr": pl.Float64,
    "fnr": pl.Float64,
    "gap": pl.Float64,
    "weight": pl.Float64,
    "n_labels": pl.Int64,
    "method": pl.Utf8,
    "converged": pl.Boolean,
    "prevalence": pl.Float64,
    "min_gap": pl.Float64,
    "log_likelihood": pl.Float64,
    "n_iter": pl.Int64,
    "starts_accepted": pl.Int64,
    "n_items": pl.Int64,
    "weight_rule": pl.Utf8,
    "n_bins": pl.Int64,
    "min_items_per_bin": pl.Int64,
    # several classes (`class_tables`): one row per (annotator, true_class, answered_class); null for binary
    "n_classes": pl.Int64,
    "true_class": pl.Utf8,
    "answered_class": pl.Utf8,
    "probability": pl.Float64,
}

NC_ECE_REPORT_SCHEMA = {
    "estimator": pl.Utf8,
    "annotator_id": pl.Utf8,
    "value": pl.Float64,
    "ci_low": pl.Float64,
    "ci_high": pl.Float64,
    "n_items": pl.Int64,
    "n_excluded": pl.Int64,
    "n_bins": pl.Int64,
    "min_items_per_bin": pl.Int64,
    "n_bootstrap": pl.Int64,
    "ci_level": pl.Float64,
    "value_debiased": pl.Float64,
    "p_value": pl.Float64,
    "null_q95": pl.Float64,
    "channels_refit": pl.Boolean,
    "n_unidentified": pl.Int64,
    "seed": pl.Int64,
    # "binary" (the score's NC-ECE), or "top_label" / "classwise" for a multi-class version
    "kind": pl.Utf8,
    "n_classes": pl.Int64,
    # subgroup rows (estimator "nc_ece_subgroup", `subgroups`): the items.csv column and value, status
    # ("ok" or "too_small"), Holm-adjusted p-value across the version's subgroups of one kind, flagged = p_holm < α
    "subgroup_column": pl.Utf8,
    "subgroup_value": pl.Utf8,
    "status": pl.Utf8,
    "p_value_holm": pl.Float64,
    "flagged": pl.Boolean,
}


def _min_items_per_bin(scores: np.ndarray | None, values: np.ndarray, n_bins: int) -> int | None:
    if scores is None:
        return None
    keep = ~np.isnan(values).all(axis=1)
    if not keep.any():
        return 0
    cnt = np.bincount(bin_index(scores[keep], n_bins), minlength=n_bins)
    return int(cnt[cnt > 0].min())


def channel_estimates_table(
    matrix: AnnotationMatrix,
    method: str = "auto",
    weights: str = "iv",
    n_groups: int = 2,
    n_starts: int = 10,
    seed: int = 0,
    n_bins: int = 15,
    known: dict[str, Channel] | None = None,
) -> pl.DataFrame:
    """Estimate channels (or take ``known`` ones) and the aggregation weights; one row per annotator.

    Columns: annotator_id, fpr, fnr, gap, weight (sum 1), n_labels, method, converged, prevalence,
    min_gap, log_likelihood, n_iter, starts_accepted, n_items, weight_rule, n_bins, min_items_per_bin
    (smallest non-empty bin count of annotated scored items; null without scores).
    Raises `NotIdentifiableError` when the channels cannot be identified (message says what would).
    """
    if weights not in WEIGHT_RULES:
        raise ValueError(f"weights must be one of {WEIGHT_RULES}, got {weights!r}")
    if known is not None:
        missing = [a for a in matrix.annotator_ids if a not in known]
        if missing:
            raise ValueError(f"known channels missing for annotator(s) {missing}")
        chans = tuple(known[a] for a in matrix.annotator_ids)
        fit = known_channels(chans, plugin_prevalence(matrix.values, chans))
    else:
        fit = estimate_channels(
            matrix.values,
            scores=matrix.scores,
            method=method,
            n_groups=n_groups,
            n_starts=n_starts,
            seed=seed,
        )
    w = aggregation_weights(fit.channels, fit.prevalence, rule=weights)
    d = fit.diagnostics
    shared = {
        "method": fit.method,
        "converged": bool(fit.converged),
        "prevalence": float(fit.prevalence),
        "min_gap": float(d["min_gap"]),
        "log_likelihood": float(d.get("log_likelihood", float("nan"))),
        "n_iter": int(d.get("n_iter", 0)),
        "starts_accepted": int(d.get("starts_accepted", 0)),
        "n_items": int(d.get("n_items", 0)),
        "weight_rule": weights,
        "n_bins": int(n_bins),
        "min_items_per_bin": _min_items_per_bin(matrix.scores, matrix.values, n_bins),
        "n_classes": 2,
    }
    rows = [
        {
            "annotator_id": a,
            "fpr": c.fpr,
            "fnr": c.fnr,
            "gap": c.gap,
            "weight": float(wj),
            "n_labels": int(nl),
            **shared,
        }
        for a, c, wj, nl in zip(matrix.annotator_ids, fit.channels, w, matrix.n_labels, strict=True)
    ]
    return pl.DataFrame(rows, schema=CHANNEL_TABLE_SCHEMA)


@dataclass(frozen=True, eq=False)
class ChannelTable:
    """Channels and weights read back from a channel table (see `channels_from_table`)."""

    annotator_ids: tuple[str, ...]
    channels: tuple[Channel, ...]
    weights: np.ndarray
    prevalence: float
    method: str
    converged: bool
    weight_rule: str | None = None

    def for_matrix(self, matrix: AnnotationMatrix) -> tuple[tuple[Channel, ...], np.ndarray]:
        """Channels and weights in ``matrix.annotator_ids`` order; every matrix annotator must be known."""
        index = {a: i for i, a in enumerate(self.annotator_ids)}
        missing = [a for a in matrix.annotator_ids if a not in index]
        if missing:
            raise ValueError(f"annotator(s) {missing} have no channel estimate; re-estimate the channels")
        order = [index[a] for a in matrix.annotator_ids]
        return tuple(self.channels[i] for i in order), self.weights[order]

    def as_fit(self, matrix: AnnotationMatrix | None = None) -> ChannelFit:
        """The stored fit, in ``matrix.annotator_ids`` order when a matrix is given."""
        chans = self.channels if matrix is None else self.for_matrix(matrix)[0]
        return ChannelFit(chans, self.prevalence, self.method, self.converged, {})


def channels_from_table(df: pl.DataFrame) -> ChannelTable:
    """Read a `channel_estimates_table` frame back into channels, weights and fit-level fields."""
    _require(df, "channel table", ("annotator_id", "fpr", "fnr", "weight"))
    if df.height == 0:
        raise ValueError("channel table is empty")
    chans = tuple(Channel(float(f), float(b)) for f, b in zip(df["fpr"], df["fnr"], strict=True))
    w = df["weight"].to_numpy().astype(float)
    return ChannelTable(
        tuple(df["annotator_id"].cast(pl.Utf8).to_list()),
        chans,
        w,
        float(df["prevalence"][0]) if "prevalence" in df.columns else float("nan"),
        str(df["method"][0]) if "method" in df.columns else "known",
        bool(df["converged"][0]) if "converged" in df.columns else True,
        str(df["weight_rule"][0]) if "weight_rule" in df.columns else None,
    )


def _as_channel_table(channels: Any) -> ChannelTable:
    return channels if isinstance(channels, ChannelTable) else channels_from_table(channels)


def nc_ece_bins_table(matrix: AnnotationMatrix, channel_table: Any, n_bins: int = 15) -> pl.DataFrame:
    """Per-bin NC-ECE table (bin, n, mean_score, mean_corrected_label, residual), as the SQL model has it."""
    if matrix.scores is None:
        raise ValueError("matrix has no scores; build it with predictions")
    ct = _as_channel_table(channel_table)
    chans, w = ct.for_matrix(matrix)
    return nc_ece(matrix.scores, matrix.values, chans, weights=w, n_bins=n_bins).bins


def _bootstrap_values(
    b: np.ndarray, r: np.ndarray, inc: np.ndarray, n_bins: int, n_bootstrap: int, seed: int
) -> np.ndarray:
    """Binned ECE of bootstrap resamples of the items (multinomial counts), for the naive rows; memory O(n)."""
    rng = np.random.default_rng(seed)
    n = b.size
    out = np.empty(n_bootstrap)
    for t in range(n_bootstrap):  # loop over bootstrap replicates
        cw = np.bincount(rng.integers(0, n, n), minlength=n) * inc
        tot = cw.sum()
        out[t] = np.abs(np.bincount(b, weights=cw * r, minlength=n_bins)).sum() / tot if tot else np.nan
    return out


def _min_bin_count(b: np.ndarray, inc: np.ndarray, n_bins: int) -> int:
    cnt = np.bincount(b[inc], minlength=n_bins)
    return int(cnt[cnt > 0].min()) if inc.any() else 0


def calibration_test_arguments(matrix: AnnotationMatrix, channel_table: Any, row: Mapping[str, Any]) -> dict[str, Any]:
    """The `calibration_test` arguments of an "nc_ece" report row: the row's n_bins, n_bootstrap, ci_level and
    seed, the stored channel fit as point estimate (re-estimated in every replicate unless the table holds known
    channels) and the stored weight rule (else its weights)."""
    n_bins, n_bootstrap, ci_level, seed = (row[k] for k in ("n_bins", "n_bootstrap", "ci_level", "seed"))
    ct = _as_channel_table(channel_table)
    chans, w = ct.for_matrix(matrix)
    weights: Any = ct.weight_rule if ct.weight_rule in WEIGHT_RULES else w
    kw = {"weights": weights, "n_bins": n_bins, "n_boot": n_bootstrap, "alpha": 1 - ci_level, "seed": seed}
    if ct.method == "known":
        if weights == "iv":  # the table's weights used the stored prevalence: keep them exactly
            kw["weights"] = w
        return {"scores": matrix.scores, "annotations": matrix.values, "channels": chans, **kw}
    return {"scores": matrix.scores, "annotations": matrix.values, "fitted": ct.as_fit(matrix), **kw}


def nc_ece_calibration_test(matrix: AnnotationMatrix, channel_table: Any, row: Mapping[str, Any]) -> CalibrationTest:
    """`calibration_test` of an "nc_ece" report row (arguments: `calibration_test_arguments`)."""
    return calibration_test(**calibration_test_arguments(matrix, channel_table, row))


def calibration_test_columns(test: CalibrationTest) -> dict[str, Any]:
    """The report columns a calibration test fills: value_debiased, ci_low/ci_high, p_value, null_q95,
    channels_refit, n_unidentified (replicates of either side whose refit was not identified)."""
    return {
        "value_debiased": test.nc_ece_debiased,
        "ci_low": test.ci_low,
        "ci_high": test.ci_high,
        "p_value": test.p_value,
        "null_q95": test.null_q95,
        "channels_refit": test.channels_refit,
        "n_unidentified": test.n_unidentified_boot + test.n_unidentified_null,
    }


def nc_ece_report_settings(
    matrix: AnnotationMatrix, n_bins: int = 15, n_bootstrap: int = 500, ci_level: float = 0.95, seed: int = 0
) -> dict[str, Any]:
    """The settings every binary report row repeats (n_bins, n_bootstrap, ci_level, seed, kind, n_classes),
    checked: the matrix has scores, ``ci_level`` in (0, 1), ``n_bootstrap`` >= 0, ``n_bins`` and the scores
    valid (`bin_index`)."""
    if matrix.scores is None:
        raise ValueError("matrix has no scores; build it with predictions")
    if not 0 < ci_level < 1:
        raise ValueError(f"ci_level must be in (0, 1), got {ci_level!r}")
    if n_bootstrap < 0:
        raise ValueError(f"n_bootstrap must be >= 0, got {n_bootstrap!r}")
    bin_index(matrix.scores, n_bins)
    return {"n_bins": n_bins, "n_bootstrap": n_bootstrap, "ci_level": ci_level, "seed": seed, "kind": "binary",
            "n_classes": 2}


def nc_ece_report_table(
    matrix: AnnotationMatrix,
    channel_table: Any,
    n_bins: int = 15,
    n_bootstrap: int = 500,
    ci_level: float = 0.95,
    seed: int = 0,
    *,
    test: CalibrationTest | None = None,
) -> pl.DataFrame:
    """NC-ECE with its calibration test beside naive ECEs (majority vote, soft vote, each single annotator).

    One row per estimator ("nc_ece", "naive_majority_vote", "naive_soft_vote", "naive_annotator");
    columns `NC_ECE_REPORT_SCHEMA`. The "nc_ece" row is `calibration_test` (Hanada and Futami 2026 §3, §C): value =
    plug-in
    `nc_ece`, value_debiased, the interval ci_low/ci_high around value_debiased, p_value of H0 "calibrated", null_q95,
    channels_refit and n_unidentified (replicates whose refit was not identified). Naive rows: `binned_ece` of
    the noisy target with a percentile bootstrap over items, channels not involved; majority-vote ties count
    0.5. ``n_bootstrap`` = 0 stores the plug-in values only. ``test``: the headline test when the caller has run
    it with these settings (`calibration_test_arguments`, as `versions.BinaryVersion.nc_ece_table` does); None:
    run here.
    """
    common = nc_ece_report_settings(matrix, n_bins, n_bootstrap, ci_level, seed)
    s = matrix.scores
    n = s.size
    b = bin_index(s, n_bins)
    ct = _as_channel_table(channel_table)
    if n_bootstrap:  # the headline is the test's plug-in NC-ECE: one computation
        if test is None:
            test = calibration_test(**calibration_test_arguments(matrix, ct, common))
        value, n_items, bin_n, test_cols = test.nc_ece, test.n_items, test.bins["n"], calibration_test_columns(test)
    else:
        chans, w = ct.for_matrix(matrix)
        point = nc_ece(s, matrix.values, chans, weights=w, n_bins=n_bins)
        value, n_items, bin_n, test_cols = point.value, point.n_items, point.bins["n"], {}
    nc_row = {
        "estimator": "nc_ece",
        "annotator_id": None,
        "value": value,
        "n_items": n_items,
        "n_excluded": n - n_items,
        "min_items_per_bin": int(bin_n.min()),
        **common,
        **test_cols,
    }
    rows = [nc_row]
    naive = [
        ("naive_majority_vote", None, naive_targets(matrix.values, "majority_vote")),
        ("naive_soft_vote", None, naive_targets(matrix.values, "soft_vote")),
        *(("naive_annotator", a, matrix.values[:, j]) for j, a in enumerate(matrix.annotator_ids)),
    ]
    lo_q, hi_q = (1 - ci_level) / 2, 1 - (1 - ci_level) / 2
    for name, annot, y in naive:
        inc = ~np.isnan(y)
        row = {
            "estimator": name,
            "annotator_id": annot,
            "n_items": int(inc.sum()),
            "n_excluded": n - int(inc.sum()),
            "min_items_per_bin": _min_bin_count(b, inc, n_bins),
            **common,
        }
        if inc.any():
            row["value"] = binned_ece(s[inc], y[inc], n_bins)
            if n_bootstrap:
                vals = _bootstrap_values(b, np.where(inc, y - s, 0.0), inc.astype(float), n_bins, n_bootstrap, seed)
                row["ci_low"], row["ci_high"] = (float(np.nanquantile(vals, q)) for q in (lo_q, hi_q))
        rows.append(row)
    return pl.DataFrame([{c: r.get(c) for c in NC_ECE_REPORT_SCHEMA} for r in rows], schema=NC_ECE_REPORT_SCHEMA)
