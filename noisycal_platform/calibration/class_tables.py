"""Pipeline tables for a multi-class model version (C classes): class matrix, confusion-matrix channel table,
top-label and classwise NC-ECE rows, recalibrators (frame in, frame out; no dagster).

A version is multi-class when its predictions came as ``p_<class>`` columns (``raw.predictions.classes`` set);
its annotations' ``label_text`` is matched against those class names. Channels are per-annotator C×C confusion
matrices T_j[y, a] = P(A_j = a | Y = y) by multi-class Dawid–Skene (Dawid & Skene 1979), corrected one-hot labels
Ỹ = T_j^{-T} e_{A_j} (backward correction, Patrini et al. 2017) and top-label / classwise NC-ECE, extending
Hanada and Futami 2026 §3–§5 from two classes to C.

Channel table, long format (the binary table's columns, so both kinds of version share one warehouse table):
one row per (annotator_id, true_class, answered_class) with ``probability`` = T_j[y, a]; ``gap`` is the smallest
singular value of T_j (the multi-class channel gap; repeated on its rows), ``weight`` the annotator's
inverse-variance weight for class ``true_class`` (`multiclass.class_weights`), ``prevalence`` π_y of
``true_class``; ``fpr``/``fnr`` are null. A binary version fills one row per annotator with ``n_classes`` 2 and
the three class columns null (its mapping: fpr = T_j[0, 1], fnr = T_j[1, 0]).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from .channels import NotIdentifiableError
from .inference import CalibrationTest
from .multiclass import (
    MULTICLASS_RECALIBRATION_METHODS,
    ConfusionFit,
    MulticlassRecalibrator,
    binned_ece_multiclass,
    class_weights,
    estimate_confusion,
    fit_multiclass_recalibrator,
    known_confusion,
    naive_onehot,
    nc_ece_multiclass,
)
from .multiclass.corrected import MVU
from .multiclass.nc_ece import NC_ECE_KINDS
from .recalibration import UnboundedObjectiveError
from .recalibration_tables import RECALIBRATION_REPORT_SCHEMA, RECALIBRATORS_SCHEMA, holdout_mask
from .tables import calibration_test_columns

__all__ = [
    "ClassMatrix",
    "UnknownLabelError",
    "class_channel_rows",
    "class_matrix",
    "class_nc_ece_rows",
    "class_recalibration_report_table",
    "class_recalibrators_table",
    "confusion_from_table",
    "is_multiclass",
    "multiclass_test",
]


class UnknownLabelError(ValueError):
    """An annotation of a scored item whose label is not a class of the model version (file, row, column)."""


def is_multiclass(predictions: pl.DataFrame) -> bool:
    """Whether a version's ``raw.predictions`` rows came as ``p_<class>`` columns (``classes`` set)."""
    return "classes" in predictions.columns and predictions.height > 0 and predictions["classes"][0] is not None


@dataclass(frozen=True, eq=False)
class ClassMatrix:
    """Class annotations aligned with probabilities (the multi-class `tables.AnnotationMatrix`).

    item_ids (n,) sorted; annotator_ids (K,) sorted; classes (C,) in probability-column order;
    values (n, K) float class indices, NaN = not labelled; probs (n, C); n_scored_unannotated as there.
    """

    item_ids: tuple[str, ...]
    annotator_ids: tuple[str, ...]
    classes: tuple[str, ...]
    values: np.ndarray
    probs: np.ndarray
    n_annotated_unscored: int
    n_scored_unannotated: int

    @property
    def n_labels(self) -> np.ndarray:
        return (~np.isnan(self.values)).sum(axis=0)

    def subset(self, mask: np.ndarray) -> ClassMatrix:
        ids = tuple(np.asarray(self.item_ids, dtype=object)[mask].tolist())
        unann = int(np.isnan(self.values[mask]).all(axis=1).sum())
        return ClassMatrix(ids, self.annotator_ids, self.classes, self.values[mask], self.probs[mask], 0, unann)


def _label_error(bad: pl.DataFrame, classes: list[str], what: str) -> UnknownLabelError:
    r = bad.row(0, named=True)
    where = f"{r.get('source_file') or 'annotations'}: row {r.get('source_row')}, column 'label'"
    return UnknownLabelError(
        f"{where}: label {r['label_text']!r} of item {r['item_id']!r} (annotator {r['annotator_id']!r}) is not "
        f"{what} {classes}; {bad.height} annotation(s) affected"
    )


def scored_annotations(annotations: pl.DataFrame, predictions: pl.DataFrame, classes: list[str]) -> pl.DataFrame:
    """The annotations of the scored items; one whose ``label_text`` is not in ``classes`` raises
    `UnknownLabelError` naming its file, row and column."""
    ann = annotations.join(predictions.select("item_id"), on="item_id", how="semi")
    text = pl.col("label_text") if "label_text" in ann.columns else pl.col("label").cast(pl.String)
    ann = ann.with_columns(text.alias("label_text"))
    bad = ann.filter(~pl.col("label_text").is_in(classes) | pl.col("label_text").is_null())
    if bad.height:
        raise _label_error(bad, classes, "a class of this model version")
    return ann


def class_matrix(annotations: pl.DataFrame, predictions: pl.DataFrame) -> ClassMatrix:
    """``raw.annotations`` + one version's ``raw.predictions`` → `ClassMatrix` (rows = scored items)."""
    classes = list(predictions["classes"][0])
    c = len(classes)
    pred = predictions.select("item_id", "probabilities").sort("item_id")
    probs = pred["probabilities"].list.to_array(c).to_numpy().astype(np.float64)
    items = pred["item_id"]
    ann = scored_annotations(annotations, pred, classes)
    annot_ids = tuple(sorted(ann["annotator_id"].unique().to_list()))
    if not annot_ids:
        raise ValueError("no annotation refers to a scored item (check item_id values against predictions)")
    rows = pl.DataFrame({"item_id": items, "_row": np.arange(len(items), dtype=np.int64)})
    cols = pl.DataFrame({"annotator_id": list(annot_ids), "_col": np.arange(len(annot_ids), dtype=np.int64)})
    code = pl.DataFrame({"label_text": classes, "_cls": np.arange(c, dtype=np.float64)})
    joined = ann.join(rows, on="item_id").join(cols, on="annotator_id").join(code, on="label_text")
    values = np.full((len(items), len(annot_ids)), np.nan)
    values[joined["_row"].to_numpy(), joined["_col"].to_numpy()] = joined["_cls"].to_numpy()
    n_unscored = int(annotations.join(pred.select("item_id"), on="item_id", how="anti")["item_id"].n_unique())
    n_unann = int(np.isnan(values).all(axis=1).sum())
    return ClassMatrix(tuple(items.to_list()), annot_ids, tuple(classes), values, probs, n_unscored, n_unann)


def _top_label_min_bin(probs: np.ndarray, values: np.ndarray, n_bins: int) -> int:
    keep = ~np.isnan(values).all(axis=1)
    if not keep.any():
        return 0
    b = np.minimum((probs[keep].max(axis=1) * n_bins).astype(np.int64), n_bins - 1)
    cnt = np.bincount(b, minlength=n_bins)
    return int(cnt[cnt > 0].min())


def class_channel_rows(
    cm: ClassMatrix, weights: str = "iv", n_bins: int = 15, n_starts: int = 10, seed: int = 0
) -> tuple[list[dict[str, Any]], ConfusionFit]:
    """Confusion matrices (multi-class Dawid–Skene, `multiclass.estimate_confusion`) and per-class weights as
    channel-table rows (long format, module doc). Raises `NotIdentifiableError` (message says what would help)."""
    c = len(cm.classes)
    fit = estimate_confusion(cm.values, n_classes=c, n_starts=n_starts, seed=seed)
    w = class_weights(fit.confusion, fit.prevalence, weights)
    gaps = fit.gaps
    d = fit.diagnostics
    shared = {
        "fpr": None,
        "fnr": None,
        "method": fit.method,
        "converged": bool(fit.converged),
        "min_gap": float(gaps.min()),
        "log_likelihood": float(fit.log_likelihood),
        "n_iter": int(fit.n_iter),
        "starts_accepted": int(d.get("starts_accepted", 0)),
        "n_items": int(d.get("n_items", 0)),
        "weight_rule": weights,
        "n_bins": int(n_bins),
        "min_items_per_bin": _top_label_min_bin(cm.probs, cm.values, n_bins),
        "n_classes": c,
    }
    rows = [
        {
            "annotator_id": a,
            "gap": float(gaps[j]),
            "weight": float(w[j, y]),
            "n_labels": int(cm.n_labels[j]),
            "prevalence": float(fit.prevalence[y]),
            "true_class": cm.classes[y],
            "answered_class": cm.classes[k],
            "probability": float(fit.confusion[j, y, k]),
            **shared,
        }
        for j, a in enumerate(cm.annotator_ids)
        for y in range(c)
        for k in range(c)
    ]
    return rows, fit


@dataclass(frozen=True, eq=False)
class ConfusionTable:
    """A multi-class channel table read back: confusion (K, C, C), weights (K, C), prevalence (C,)."""

    annotator_ids: tuple[str, ...]
    classes: tuple[str, ...]
    confusion: np.ndarray
    weights: np.ndarray
    prevalence: np.ndarray
    method: str
    converged: bool

    def for_matrix(self, cm: ClassMatrix) -> ConfusionTable:
        index = {a: i for i, a in enumerate(self.annotator_ids)}
        missing = [a for a in cm.annotator_ids if a not in index]
        if missing:
            raise ValueError(f"annotator(s) {missing} have no channel estimate; re-estimate the channels")
        if tuple(cm.classes) != self.classes:
            raise ValueError(f"channel table classes {list(self.classes)} differ from the version's {list(cm.classes)}")
        o = [index[a] for a in cm.annotator_ids]
        return ConfusionTable(cm.annotator_ids, self.classes, self.confusion[o], self.weights[o], self.prevalence,
                              self.method, self.converged)

    def as_fit(self) -> ConfusionFit:
        return known_confusion(self.confusion, self.prevalence)


def confusion_from_table(df: pl.DataFrame, classes: tuple[str, ...]) -> ConfusionTable:
    """Read the long multi-class channel table back (inverse of `class_channel_rows`)."""
    c = len(classes)
    pos = {name: i for i, name in enumerate(classes)}
    annot = tuple(sorted(df["annotator_id"].unique().to_list()))
    ai = {a: i for i, a in enumerate(annot)}
    j = np.array([ai[a] for a in df["annotator_id"].to_list()])
    y = np.array([pos[v] for v in df["true_class"].to_list()])
    k = np.array([pos[v] for v in df["answered_class"].to_list()])
    t = np.zeros((len(annot), c, c))
    t[j, y, k] = df["probability"].to_numpy()
    w = np.zeros((len(annot), c))
    w[j, y] = df["weight"].to_numpy()
    pi = np.zeros(c)
    pi[y] = df["prevalence"].to_numpy()
    return ConfusionTable(annot, tuple(classes), t, w, pi, str(df["method"][0]), bool(df["converged"].all()))


def multiclass_test(
    cm: ClassMatrix, ct: ConfusionTable, kind: str, weights: Any, n_bins: int, n_bootstrap: int, ci_level: float,
    seed: int, refit: bool = True,
) -> CalibrationTest | None:
    """The multi-class calibration test (`multiclass.inference.calibration_test_multiclass`: debiased NC-ECE,
    interval around the debiased value, p-value of H0 "calibrated", null_q95) with the stored confusion matrices
    as point estimate, re-estimated in every replicate (``refit``) or held fixed; None where the library has no
    such test."""
    try:
        from .multiclass.inference import calibration_test_multiclass
    except ImportError:
        return None
    fit = ct.as_fit()
    return calibration_test_multiclass(
        cm.probs, cm.values, None if refit else fit, kind=kind, weights=weights, n_bins=n_bins, n_boot=n_bootstrap,
        alpha=1 - ci_level, seed=seed, fitted=fit if refit else None,
    )


def _onehot(labels: np.ndarray, c: int) -> np.ndarray:
    """(n, C) one-hot of one annotator's class indices; NaN rows where it did not label the item."""
    out = np.full((labels.shape[0], c), np.nan)
    ok = ~np.isnan(labels)
    out[ok] = np.eye(c)[labels[ok].astype(np.int64)]
    return out


def class_nc_ece_rows(
    cm: ClassMatrix, ct: ConfusionTable, n_bins: int = 15, n_bootstrap: int = 500, ci_level: float = 0.95,
    seed: int = 0, weight_rule: str | None = "iv", refit: bool = True, naive: bool = True,
) -> list[dict[str, Any]]:
    """Per kind ("top_label", "classwise"): the "nc_ece" row (plug-in `nc_ece_multiclass` with the stored
    confusion matrices and weights; with ``n_bootstrap`` > 0 the multi-class calibration test's debiased value,
    interval, p-value and null_q95) and the naive rows (`binned_ece_multiclass` against majority vote, soft vote
    and each single annotator; plug-in only). ``refit``: the test re-estimates the channels in its replicates."""
    ct = ct.for_matrix(cm)
    c = len(cm.classes)
    n = len(cm.item_ids)
    common = {"n_bins": n_bins, "n_bootstrap": n_bootstrap, "ci_level": ci_level, "seed": seed, "n_classes": c}
    targets = [
        ("naive_majority_vote", None, naive_onehot(cm.values, c, "majority_vote")),
        ("naive_soft_vote", None, naive_onehot(cm.values, c, "soft_vote")),
        *(("naive_annotator", a, _onehot(cm.values[:, j], c)) for j, a in enumerate(cm.annotator_ids)),
    ] if naive else []
    rows = []
    for kind in NC_ECE_KINDS:
        # classwise with the default rule: the minimum-variance unbiased pattern targets ("mvu", the library's
        # classwise default: same estimand, an interval about 0.94x as wide at nominal coverage; README)
        mvu = kind == "classwise" and weight_rule == "iv"
        point = nc_ece_multiclass(
            cm.probs, cm.values, ct.confusion, kind=kind, n_bins=n_bins, weights=MVU if mvu else ct.weights
        )
        bins_n = point.bin_n[point.bin_n > 0]
        row = {
            "estimator": "nc_ece", "kind": kind, "annotator_id": None, "value": point.value,
            "n_items": point.n_items, "n_excluded": n - point.n_items, "min_items_per_bin": int(bins_n.min()),
            **common,
        }
        if n_bootstrap:
            rule = MVU if mvu else weight_rule if weight_rule in ("iv", "equal") else ct.weights
            test = multiclass_test(cm, ct, kind, rule, n_bins, n_bootstrap, ci_level, seed, refit)
            if test is not None:
                row.update(calibration_test_columns(test))
        rows.append(row)
        for name, annot, target in targets:
            inc = ~np.isnan(target).any(axis=1)
            rows.append({
                "estimator": name, "kind": kind, "annotator_id": annot, "n_items": int(inc.sum()),
                "n_excluded": n - int(inc.sum()), "min_items_per_bin": _top_label_min_bin(cm.probs, target, n_bins),
                "value": binned_ece_multiclass(cm.probs, target, kind, n_bins) if inc.any() else None, **common,
            })
    return rows


# ------------------------------------------------------------------------------------------- recalibration
def _fit_part(cm: ClassMatrix, mask: np.ndarray, ct: ConfusionTable, seed: int) -> tuple[str, dict[str, Any]]:
    """Confusion matrices and weights fitted on the fit items ("split", Hanada and Futami 2026 §E.5), else the stored
    ones
    ("reuse", with the reason)."""
    try:
        if ct.method == "known":
            raise NotIdentifiableError("channels are supplied (known); nothing to fit")
        fit = estimate_confusion(cm.values[mask], n_classes=len(cm.classes), seed=seed)
        t, w, pi = fit.confusion, class_weights(fit.confusion, fit.prevalence, "iv"), fit.prevalence
        regime, note = "split", None
    except (NotIdentifiableError, ValueError) as exc:
        t, w, pi = ct.confusion, ct.weights, ct.prevalence
        regime, note = "reuse", f"fit part alone: {exc}"
    used = {"confusion": t.tolist(), "weights": w.tolist(), "prevalence": [float(v) for v in pi], "note": note}
    return regime, used


def class_recalibrators_table(cm: ClassMatrix, ct: ConfusionTable, n_bins: int = 15, seed: int = 0) -> pl.DataFrame:
    """Corrected-loss temperature scaling and the corrected classwise projected histogram, and their naive
    versions against the soft vote, fitted on the fit items (``~holdout_mask``) with channels fitted there too.
    Columns `RECALIBRATORS_SCHEMA` (params_json: `MulticlassRecalibrator.to_dict`)."""
    ct = ct.for_matrix(cm)
    mask = ~holdout_mask(cm.item_ids)
    regime, used = _fit_part(cm, mask, ct, seed)
    shared = {"regime": regime, "channels_json": json.dumps(used, sort_keys=True)}
    t, w = np.asarray(used["confusion"]), np.asarray(used["weights"])
    rows = []
    for method in MULTICLASS_RECALIBRATION_METHODS:
        for corrected in (True, False):
            name = f"{method}_{'corrected' if corrected else 'naive'}"
            row = {"name": name, "method": method, "corrected": corrected, **shared}
            try:
                r = fit_multiclass_recalibrator(
                    cm.probs[mask], cm.values[mask], t, method=method, corrected=corrected, n_bins=n_bins,
                    weights=w, naive_target="soft_vote",
                )
                row.update(status="ok", converged=r.converged, n_fit=r.n_fit, target=r.target,
                           params_json=json.dumps(r.to_dict(), sort_keys=True), message=used["note"])
            except (UnboundedObjectiveError, ValueError) as e:
                status = "unbounded_objective" if isinstance(e, UnboundedObjectiveError) else "not_fitted"
                row.update(status=status, converged=False, n_fit=int(mask.sum()), message=str(e),
                           target="corrected" if corrected else "soft_vote")
            rows.append(row)
    return pl.DataFrame([{k: r.get(k) for k in RECALIBRATORS_SCHEMA} for r in rows], schema=RECALIBRATORS_SCHEMA)


def class_recalibration_report_table(cm: ClassMatrix, recalibrators: pl.DataFrame, n_bins: int = 15) -> pl.DataFrame:
    """Base probabilities and every fitted recalibrator on the held-out items: top-label NC-ECE with the fit-part
    channels stored with the recalibrators, and top-label ECE against the soft vote. Reference labels are binary
    (0/1) by contract, so ``ece``/``log_loss``/``brier`` stay null here."""
    ev = holdout_mask(cm.item_ids)
    used = json.loads(recalibrators["channels_json"][0])
    t, w = np.asarray(used["confusion"]), np.asarray(used["weights"])
    regime = str(recalibrators["regime"][0])
    p, vals = cm.probs[ev], cm.values[ev]
    soft = naive_onehot(vals, len(cm.classes), "soft_vote")
    models: list[tuple[str, str, bool | None, Any]] = [("base", "identity", None, None)]
    for r in recalibrators.filter(pl.col("status") == "ok").iter_rows(named=True):
        rec = MulticlassRecalibrator.from_dict(json.loads(r["params_json"]))
        models.append((r["name"], rec.method, rec.corrected, rec))
    rows = []
    for name, method, corrected, rec in models:
        q = p if rec is None else rec.predict(p)
        has = ~np.isnan(vals).all(axis=1)
        rows.append({
            "name": name, "method": method, "corrected": corrected, "n_eval": int(ev.sum()),
            "nc_ece": nc_ece_multiclass(q, vals, t, "top_label", n_bins, weights=w).value if has.any() else None,
            "naive_soft_vote_ece": binned_ece_multiclass(q, soft, "top_label", n_bins) if has.any() else None,
            "n_reference": 0, "regime": regime,
        })
    return pl.DataFrame([{k: r.get(k) for k in RECALIBRATION_REPORT_SCHEMA} for r in rows],
                        schema=RECALIBRATION_REPORT_SCHEMA)
