"""Recalibrator tables for the pipeline: fit on a stable split, export JSON, evaluate on held-out items.

Sample regime "split" (Hanada and Futami 2026 §E.4–E.5): the items are split once by `holdout_mask`; the channels,
weights and
every recalibrator are fitted on the fit part only, and the held-out part is scored with those same fit-part
channels, so nothing used to score a held-out item was fitted on it. When the fit part alone cannot identify
the channels, the stored all-item channel table is used and the regime is recorded as "reuse" with the reason
(§C.3: allowed for a fixed predictor and partition, but the held-out score then reuses the evaluation items).
"""

from __future__ import annotations

import hashlib
import json
from typing import Any

import numpy as np
import polars as pl

from .channels import NotIdentifiableError, estimate_channels
from .multiclass.recalibration import MulticlassRecalibrator
from .nc_ece import binned_ece, corrected_labels
from .recalibration import RECALIBRATION_METHODS, Recalibrator, UnboundedObjectiveError, fit_recalibrator, naive_targets
from .tables import AnnotationMatrix, _as_channel_table, _require
from .weights import WEIGHT_RULES, resolve_weights

__all__ = [
    "RECALIBRATION_REPORT_SCHEMA",
    "RECALIBRATORS_SCHEMA",
    "fit_part_channels",
    "holdout_mask",
    "recalibration_report_table",
    "recalibrator_exports",
    "recalibrators_from_table",
    "recalibrators_table",
]


def holdout_mask(item_ids: Any, fraction: float = 0.5, salt: str = "noisycal-recalibration") -> np.ndarray:
    """Stable evaluation split: True for items with u(item) < fraction, u = first 8 bytes of
    blake2b(f"{salt}:{item_id}") / 2^64.

    Depends only on the item id, so the split does not move when new batches or model versions arrive.
    """
    if not 0.0 < fraction < 1.0:
        raise ValueError(f"fraction must be in (0, 1), got {fraction!r}")
    ids = list(item_ids)
    h = np.fromiter(
        (int.from_bytes(hashlib.blake2b(f"{salt}:{i}".encode(), digest_size=8).digest(), "big") for i in ids),
        dtype=np.uint64,
        count=len(ids),
    )
    return (h.astype(np.float64) / 2.0**64) < fraction


def _rec_name(method: str, corrected: bool) -> str:
    return f"{method}_{'corrected' if corrected else 'naive'}"


RECALIBRATORS_SCHEMA = {
    "name": pl.Utf8,
    "method": pl.Utf8,
    "corrected": pl.Boolean,
    "target": pl.Utf8,
    "status": pl.Utf8,
    "converged": pl.Boolean,
    "n_fit": pl.Int64,
    "params_json": pl.Utf8,
    "message": pl.Utf8,
    "regime": pl.Utf8,
    "channels_json": pl.Utf8,
}

RECALIBRATION_REPORT_SCHEMA = {
    "name": pl.Utf8,
    "method": pl.Utf8,
    "corrected": pl.Boolean,
    "n_eval": pl.Int64,
    "nc_ece": pl.Float64,
    "naive_soft_vote_ece": pl.Float64,
    "n_reference": pl.Int64,
    "ece": pl.Float64,
    "log_loss": pl.Float64,
    "brier": pl.Float64,
    "regime": pl.Utf8,
}


def fit_part_channels(
    matrix: AnnotationMatrix, fit_mask: np.ndarray, channel_table: Any, method: str = "auto", seed: int = 0
) -> tuple[str, dict[str, Any]]:
    """Channels and weights for the "split" regime: estimated on the fit items only (Hanada and Futami 2026 §E.5).

    Returns (regime, {"fpr", "fnr", "weights", "prevalence", "note"}); regime "reuse" (with the stored all-item
    channels and the reason in "note") when the fit part cannot identify the channels.
    """
    ct = _as_channel_table(channel_table)
    chans, w = ct.for_matrix(matrix)
    rule = ct.weight_rule if ct.weight_rule in WEIGHT_RULES else None
    try:
        if ct.method == "known":
            raise NotIdentifiableError("channels are supplied (known); nothing to fit")
        fit = estimate_channels(matrix.values[fit_mask], scores=matrix.scores[fit_mask], method=method, seed=seed)
        chans = fit.channels
        w = resolve_weights(rule, chans, fit.prevalence) if rule else w
        prevalence, regime, note = fit.prevalence, "split", None
    except NotIdentifiableError as exc:
        prevalence, regime, note = ct.prevalence, "reuse", f"fit part alone: {exc}"
    return regime, {
        "fpr": [c.fpr for c in chans],
        "fnr": [c.fnr for c in chans],
        "weights": [float(v) for v in w],
        "prevalence": float(prevalence),
        "note": note,
    }


def recalibrators_table(
    matrix: AnnotationMatrix,
    channel_table: Any,
    methods: tuple[str, ...] = RECALIBRATION_METHODS,
    n_bins: int = 15,
    fit_mask: np.ndarray | None = None,
    naive_target: str = "soft_vote",
    method: str = "auto",
    seed: int = 0,
) -> pl.DataFrame:
    """Fit corrected and naive recalibrators on the fit items (default: ``~holdout_mask(item_ids)``).

    Columns `RECALIBRATORS_SCHEMA`: name ("<method>_<corrected|naive>"), method, corrected, target, status ("ok",
    or "unbounded_objective" from older fits), converged, n_fit, params_json (`Recalibrator.to_dict` JSON),
    message, regime ("split" or "reuse", see `fit_part_channels`) and channels_json (the channels and weights
    the corrected fits used, which `recalibration_report_table` scores the held-out items with).
    """
    if matrix.scores is None:
        raise ValueError("matrix has no scores; build it with predictions")
    mask = ~holdout_mask(matrix.item_ids) if fit_mask is None else np.asarray(fit_mask, bool)
    if mask.shape != (len(matrix.item_ids),):
        raise ValueError(f"fit_mask must have shape ({len(matrix.item_ids)},), got {mask.shape}")
    regime, used = fit_part_channels(matrix, mask, channel_table, method, seed)
    chans = list(zip(used["fpr"], used["fnr"], strict=True))
    shared = {"regime": regime, "channels_json": json.dumps(used, sort_keys=True)}
    rows = []
    for rec_method in methods:
        for corrected in (True, False):
            row = {"name": _rec_name(rec_method, corrected), "method": rec_method, "corrected": corrected, **shared}
            try:
                r = fit_recalibrator(
                    matrix.scores[mask],
                    matrix.values[mask],
                    chans,
                    method=rec_method,
                    corrected=corrected,
                    n_bins=n_bins,
                    weights=np.asarray(used["weights"]),
                    naive_target=naive_target,
                )
                row.update(
                    status="ok",
                    converged=r.converged,
                    n_fit=r.n_fit,
                    target=r.target,
                    params_json=json.dumps(r.to_dict(), sort_keys=True),
                    message=used["note"],
                )
            except UnboundedObjectiveError as e:  # not raised by the bounded fits; kept for custom methods
                row.update(
                    status="unbounded_objective",
                    converged=False,
                    n_fit=int(mask.sum()),
                    message=str(e),
                    target="corrected" if corrected else naive_target,
                )
            rows.append(row)
    return pl.DataFrame([{c: r.get(c) for c in RECALIBRATORS_SCHEMA} for r in rows], schema=RECALIBRATORS_SCHEMA)


def _recalibrator_from_dict(d: dict[str, Any]) -> Recalibrator | MulticlassRecalibrator:
    cls = MulticlassRecalibrator if d.get("format") == MulticlassRecalibrator.FORMAT else Recalibrator
    return cls.from_dict(d)


def recalibrators_from_table(df: pl.DataFrame) -> dict[str, Recalibrator | MulticlassRecalibrator]:
    """name → `Recalibrator` (or `MulticlassRecalibrator`, by its format) for the rows with status "ok"."""
    _require(df, "recalibrators", ("name", "status", "params_json"))
    return {
        name: _recalibrator_from_dict(json.loads(p))
        for name, status, p in zip(df["name"], df["status"], df["params_json"], strict=True)
        if status == "ok"
    }


def recalibrator_exports(df: pl.DataFrame) -> dict[str, dict[str, Any]]:
    """name → JSON-able dict, to write as exports/recalibrators/<version>/<name>.json."""
    return {name: r.to_dict() for name, r in recalibrators_from_table(df).items()}


def _scoring_channels(matrix: AnnotationMatrix, recalibrators: pl.DataFrame, channel_table: Any):
    if "channels_json" in recalibrators.columns and recalibrators.height and recalibrators["channels_json"][0]:
        used = json.loads(recalibrators["channels_json"][0])
        chans = tuple(zip(used["fpr"], used["fnr"], strict=True))
        return chans, np.asarray(used["weights"], float), str(recalibrators["regime"][0])
    chans, w = _as_channel_table(channel_table).for_matrix(matrix)
    return chans, w, "reuse"


def _log_loss(y: np.ndarray, p: np.ndarray) -> float:
    from sklearn.metrics import log_loss

    return float(log_loss(y, np.clip(p, 1e-15, 1 - 1e-15), labels=[0, 1]))


def recalibration_report_table(
    matrix: AnnotationMatrix,
    recalibrators: pl.DataFrame,
    channel_table: Any,
    references: pl.DataFrame | None = None,
    n_bins: int = 15,
    eval_mask: np.ndarray | None = None,
) -> pl.DataFrame:
    """Evaluate the base scores and every fitted recalibrator on the held-out items.

    Rows: "base" (identity) then each recalibrator with status ok. Columns: name, method, corrected, n_eval,
    nc_ece (corrected labels, channel table weights), naive_soft_vote_ece, n_reference, ece, log_loss, brier
    (clean-target metrics on held-out items with a reference label; null when there is none).
    ``eval_mask`` defaults to `holdout_mask(item_ids)` (the complement of the fit items). The corrected labels of
    the held-out items use the channels stored with the recalibrators (fitted on the fit part, regime "split");
    tables without them fall back to ``channel_table`` (regime "reuse").
    """
    if matrix.scores is None:
        raise ValueError("matrix has no scores; build it with predictions")
    chans, w, regime = _scoring_channels(matrix, recalibrators, channel_table)
    ev = holdout_mask(matrix.item_ids) if eval_mask is None else np.asarray(eval_mask, bool)
    s = matrix.scores[ev]
    vals = matrix.values[ev]
    ytil = corrected_labels(vals, chans, w)
    soft = naive_targets(vals, "soft_vote")
    ref = None
    if references is not None:
        _require(references, "references", ("item_id", "label"))
        lut = dict(zip(references["item_id"].cast(pl.Utf8).to_list(), references["label"].to_list(), strict=True))
        ids = np.array(matrix.item_ids, dtype=object)[ev]
        ref = np.array([lut.get(i, np.nan) for i in ids], dtype=float)
    models: list[tuple[str, str, bool | None, Any]] = [("base", "identity", None, None)]
    for name, r in recalibrators_from_table(recalibrators).items():
        models.append((name, r.method, r.corrected, r))
    out: dict[str, list] = {k: [] for k in RECALIBRATION_REPORT_SCHEMA}
    for name, method, corrected, r in models:
        p = s if r is None else r.predict(s)
        inc = ~np.isnan(ytil)
        out["name"].append(name)
        out["method"].append(method)
        out["corrected"].append(corrected)
        out["n_eval"].append(int(s.size))
        out["nc_ece"].append(binned_ece(p[inc], ytil[inc], n_bins) if inc.any() else None)
        inc2 = ~np.isnan(soft)
        out["naive_soft_vote_ece"].append(binned_ece(p[inc2], soft[inc2], n_bins) if inc2.any() else None)
        if ref is not None and (~np.isnan(ref)).any():
            from sklearn.metrics import brier_score_loss

            m = ~np.isnan(ref)
            out["n_reference"].append(int(m.sum()))
            out["ece"].append(binned_ece(p[m], ref[m], n_bins))
            out["log_loss"].append(_log_loss(ref[m].astype(int), p[m]))
            out["brier"].append(float(brier_score_loss(ref[m].astype(int), p[m], pos_label=1)))
        else:
            out["n_reference"].append(0)
            out["ece"].append(None)
            out["log_loss"].append(None)
            out["brier"].append(None)
    out["regime"] = [regime] * len(out["name"])
    return pl.DataFrame(out, schema=RECALIBRATION_REPORT_SCHEMA)
