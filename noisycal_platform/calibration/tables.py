"""Annotation matrix, channel table and NC-ECE tables for the pipeline (frame in, frame out).

See `noisycal_platform.calibration.pipeline` for the flow and the per-bin formula the SQL model reproduces.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from .channels import Channel, ChannelFit, estimate_channels, known_channels
from .nc_ece import bin_index, binned_ece, corrected_labels, nc_ece, plugin_prevalence
from .recalibration import naive_targets
from .weights import WEIGHT_RULES, aggregation_weights

__all__ = [
    "AnnotationMatrix",
    "ChannelTable",
    "annotation_matrix",
    "channel_estimates_table",
    "channels_from_table",
    "nc_ece_bins_table",
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
    values : (n, K) float64, label 0/1, NaN where the annotator did not label the item.
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
        raise ValueError(
            f"annotations label must be 0 or 1, got {bad['label'][0]!r} (item {bad['item_id'][0]!r})"
        )
    dup = ann.filter(pl.struct("item_id", "annotator_id").is_duplicated())
    if dup.height:
        raise ValueError(
            "annotations has duplicate (item_id, annotator_id) = "
            f"({dup['item_id'][0]!r}, {dup['annotator_id'][0]!r})"
        )
    annotated = ann["item_id"].unique()
    if predictions is not None:
        _require(predictions, "predictions", ("item_id", "score"))
        pred = predictions.select(pl.col("item_id").cast(pl.Utf8), pl.col("score").cast(pl.Float64)).sort(
            "item_id"
        )
        if pred["item_id"].is_duplicated().any():
            raise ValueError(
                "predictions has duplicate item_id "
                f"{pred.filter(pl.col('item_id').is_duplicated())['item_id'][0]!r}"
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
    return AnnotationMatrix(tuple(items.to_list()), annot_ids, values, scores, n_unscored, n_unann)


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
    k = len(matrix.annotator_ids)
    return pl.DataFrame(
        {
            "annotator_id": list(matrix.annotator_ids),
            "fpr": fit.fpr,
            "fnr": fit.fnr,
            "gap": fit.gaps,
            "weight": w,
            "n_labels": matrix.n_labels.astype(np.int64),
            "method": [fit.method] * k,
            "converged": [bool(fit.converged)] * k,
            "prevalence": [float(fit.prevalence)] * k,
            "min_gap": [float(d["min_gap"])] * k,
            "log_likelihood": [float(d.get("log_likelihood", float("nan")))] * k,
            "n_iter": [int(d.get("n_iter", 0))] * k,
            "starts_accepted": [int(d.get("starts_accepted", 0))] * k,
            "n_items": [int(d.get("n_items", 0))] * k,
            "weight_rule": [weights] * k,
            "n_bins": [int(n_bins)] * k,
            "min_items_per_bin": pl.Series(
                [_min_items_per_bin(matrix.scores, matrix.values, n_bins)] * k, dtype=pl.Int64
            ),
        }
    )


@dataclass(frozen=True, eq=False)
class ChannelTable:
    """Channels and weights read back from a channel table (see `channels_from_table`)."""

    annotator_ids: tuple[str, ...]
    channels: tuple[Channel, ...]
    weights: np.ndarray
    prevalence: float
    method: str
    converged: bool

    def for_matrix(self, matrix: AnnotationMatrix) -> tuple[tuple[Channel, ...], np.ndarray]:
        """Channels and weights in ``matrix.annotator_ids`` order; every matrix annotator must be known."""
        index = {a: i for i, a in enumerate(self.annotator_ids)}
        missing = [a for a in matrix.annotator_ids if a not in index]
        if missing:
            raise ValueError(f"annotator(s) {missing} have no channel estimate; re-estimate the channels")
        order = [index[a] for a in matrix.annotator_ids]
        return tuple(self.channels[i] for i in order), self.weights[order]

    def as_fit(self) -> ChannelFit:
        return ChannelFit(self.channels, self.prevalence, self.method, self.converged, {})


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
    """Binned ECE of bootstrap resamples of the items (multinomial counts); the same draws for every caller
    with the same seed, generated on the fly (memory O(n))."""
    rng = np.random.default_rng(seed)
    n = b.size
    out = np.empty(n_bootstrap)
    for t in range(n_bootstrap):  # loop over bootstrap replicates
        cw = np.bincount(rng.integers(0, n, n), minlength=n) * inc
        tot = cw.sum()
        out[t] = np.abs(np.bincount(b, weights=cw * r, minlength=n_bins)).sum() / tot if tot else np.nan
    return out


def nc_ece_report_table(
    matrix: AnnotationMatrix,
    channel_table: Any,
    n_bins: int = 15,
    n_bootstrap: int = 500,
    ci_level: float = 0.95,
    seed: int = 0,
) -> pl.DataFrame:
    """NC-ECE beside naive ECEs (majority vote, soft vote, each single annotator), with bootstrap CIs.

    Columns: estimator ("nc_ece", "naive_majority_vote", "naive_soft_vote", "naive_annotator"),
    annotator_id (null except single-annotator rows), value, ci_low, ci_high, n_items, n_excluded,
    n_bins, min_items_per_bin, n_bootstrap, ci_level. CIs: percentile bootstrap over items
    (``np.random.default_rng(seed)``), channels and weights held fixed (evaluation-sample variability
    only). Majority-vote ties count as 0.5.
    """
    if matrix.scores is None:
        raise ValueError("matrix has no scores; build it with predictions")
    if not 0 < ci_level < 1:
        raise ValueError(f"ci_level must be in (0, 1), got {ci_level!r}")
    if n_bootstrap < 0:
        raise ValueError(f"n_bootstrap must be >= 0, got {n_bootstrap!r}")
    ct = _as_channel_table(channel_table)
    chans, w = ct.for_matrix(matrix)
    s = matrix.scores
    n = s.size
    b = bin_index(s, n_bins)
    rows: list[tuple[str, str | None, np.ndarray]] = [
        ("nc_ece", None, corrected_labels(matrix.values, chans, w)),
        ("naive_majority_vote", None, naive_targets(matrix.values, "majority_vote")),
        ("naive_soft_vote", None, naive_targets(matrix.values, "soft_vote")),
    ]
    for j, a in enumerate(matrix.annotator_ids):
        rows.append(("naive_annotator", a, matrix.values[:, j].copy()))
    lo_q, hi_q = (1 - ci_level) / 2, 1 - (1 - ci_level) / 2
    out: dict[str, list] = {
        k: []
        for k in (
            "estimator",
            "annotator_id",
            "value",
            "ci_low",
            "ci_high",
            "n_items",
            "n_excluded",
            "min_items_per_bin",
        )
    }
    for name, annot, y in rows:
        inc = ~np.isnan(y)
        n_inc = int(inc.sum())
        out["estimator"].append(name)
        out["annotator_id"].append(annot)
        out["n_items"].append(n_inc)
        out["n_excluded"].append(n - n_inc)
        if n_inc == 0:
            out["value"].append(None)
            out["ci_low"].append(None)
            out["ci_high"].append(None)
            out["min_items_per_bin"].append(0)
            continue
        out["value"].append(binned_ece(s[inc], y[inc], n_bins))
        cnt = np.bincount(b[inc], minlength=n_bins)
        out["min_items_per_bin"].append(int(cnt[cnt > 0].min()))
        if n_bootstrap:
            r = np.where(inc, y - s, 0.0)
            vals = _bootstrap_values(b, r, inc.astype(float), n_bins, n_bootstrap, seed)
            out["ci_low"].append(float(np.nanquantile(vals, lo_q)))
            out["ci_high"].append(float(np.nanquantile(vals, hi_q)))
        else:
            out["ci_low"].append(None)
            out["ci_high"].append(None)
    k = len(rows)
    return pl.DataFrame(
        {
            **{c: out[c] for c in ("estimator", "annotator_id")},
            "value": pl.Series(out["value"], dtype=pl.Float64),
            "ci_low": pl.Series(out["ci_low"], dtype=pl.Float64),
            "ci_high": pl.Series(out["ci_high"], dtype=pl.Float64),
            "n_items": pl.Series(out["n_items"], dtype=pl.Int64),
            "n_excluded": pl.Series(out["n_excluded"], dtype=pl.Int64),
            "n_bins": pl.Series([n_bins] * k, dtype=pl.Int64),
            "min_items_per_bin": pl.Series(out["min_items_per_bin"], dtype=pl.Int64),
            "n_bootstrap": pl.Series([n_bootstrap] * k, dtype=pl.Int64),
            "ci_level": pl.Series([ci_level] * k, dtype=pl.Float64),
        },
        schema_overrides={"annotator_id": pl.Utf8},
    )
