"""Audit metrics of a correctness criterion against human labels (Rethinking Correctness 2026 §2.2, §2.3, §3.2, §3.4).

- error_detection_auroc: AUROC of the uncertainty score for detecting errors (incorrect = positive class).
- H_f (Human Validation Consistency): per-group balanced accuracy of the criterion's accept/reject against the
  human correct/incorrect label, macro-averaged over dataset-model groups.
- D_f (UE distortion) = mean over UE methods and groups of |AUROC(u, criterion errors) - AUROC(u, human
errors)|;
  F_f = 1 - D_f.
- Directional errors: false rejects of human-correct answers, false accepts of human-incorrect answers.
- False acceptance per error category: accepted share of human-incorrect answers of that category, averaged
  with equal weight over the groups that contain the category.
"""

from __future__ import annotations

import warnings
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

__all__ = [
    "ERROR_CATEGORIES",
    "DirectionalErrors",
    "balanced_accuracy_by_group",
    "directional_errors",
    "error_detection_auroc",
    "false_acceptance_by_category",
    "human_validation_consistency",
    "ue_distortion",
]

ERROR_CATEGORIES = ("missing/partial", "extra/wrong", "invalid/uncertain")


def _bool(x: ArrayLike, name: str) -> np.ndarray:
    a = np.asarray(x)
    if a.ndim != 1:
        raise ValueError(f"{name} must be 1-D, got shape {a.shape}")
    if a.dtype != bool:
        if not np.all(np.isin(a, (0, 1))):
            raise ValueError(f"{name} must be boolean or 0/1, got values {np.unique(a)[:5]}")
        a = a.astype(bool)
    return a


def error_detection_auroc(uncertainty: ArrayLike, correct: ArrayLike) -> float:
    """AUROC of `uncertainty` ranking incorrect (positive) above correct answers; nan (with a warning) if
    one class."""
    u = np.asarray(uncertainty, dtype=np.float64)
    c = _bool(correct, "correct")
    if u.shape != c.shape:
        raise ValueError(f"uncertainty and correct differ in shape: {u.shape} vs {c.shape}")
    if not np.all(np.isfinite(u)):
        raise ValueError("uncertainty contains non-finite values")
    if c.all() or not c.any():
        warnings.warn("only one class present; error-detection AUROC is undefined (nan)", stacklevel=2)
        return float("nan")
    from sklearn.metrics import roc_auc_score  # lazy: keeps the Dagster code location import fast

    return float(roc_auc_score(~c, u))


def balanced_accuracy_by_group(
    accepted: ArrayLike, human_correct: ArrayLike, group: ArrayLike
) -> tuple[np.ndarray, np.ndarray]:
    """(groups, H_{f,g}): 1/2 [P(accept | human correct) + P(reject | human incorrect)] per group.

    A group holding only one human class gets the recall of that class (sklearn's balanced_accuracy_score
    rule).
    """
    acc = _bool(accepted, "accepted")
    hc = _bool(human_correct, "human_correct")
    g = np.asarray(group)
    if not (acc.shape == hc.shape == g.shape):
        raise ValueError(
            f"accepted, human_correct and group differ in shape: {acc.shape}, {hc.shape}, {g.shape}"
        )
    groups, inv = np.unique(g, return_inverse=True)
    n_pos = np.bincount(inv, weights=hc, minlength=groups.size)
    n_neg = np.bincount(inv, weights=~hc, minlength=groups.size)
    tp = np.bincount(inv, weights=hc & acc, minlength=groups.size)
    tn = np.bincount(inv, weights=~hc & ~acc, minlength=groups.size)
    with np.errstate(invalid="ignore", divide="ignore"):
        recalls = np.stack([tp / n_pos, tn / n_neg])
    return groups, np.nanmean(recalls, axis=0)


def human_validation_consistency(accepted: ArrayLike, human_correct: ArrayLike, group: ArrayLike) -> float:
    """H_f = (1/G) sum_g H_{f,g} (Rethinking Correctness 2026 §2.2)."""
    return float(np.mean(balanced_accuracy_by_group(accepted, human_correct, group)[1]))


def ue_distortion(
    uncertainty: Mapping[str, ArrayLike],
    criterion_correct: ArrayLike,
    human_correct: ArrayLike,
    group: ArrayLike,
) -> tuple[float, int]:
    """(D_f, n_undefined): mean |AUROC_f - AUROC_human| over UE methods x groups with both AUROCs defined."""
    cc = _bool(criterion_correct, "criterion_correct")
    hc = _bool(human_correct, "human_correct")
    g = np.asarray(group)
    diffs: list[float] = []
    undefined = 0
    for name, u in uncertainty.items():
        uu = np.asarray(u, dtype=np.float64)
        if uu.shape != cc.shape:
            raise ValueError(f"uncertainty[{name!r}] has shape {uu.shape}, expected {cc.shape}")
        for gv in np.unique(g):
            m = g == gv
            with warnings.catch_warnings():
                warnings.simplefilter("ignore")
                a_f, a_h = error_detection_auroc(uu[m], cc[m]), error_detection_auroc(uu[m], hc[m])
            if np.isnan(a_f) or np.isnan(a_h):
                undefined += 1
            else:
                diffs.append(abs(a_f - a_h))
    return (float(np.mean(diffs)) if diffs else float("nan")), undefined


@dataclass(frozen=True)
class DirectionalErrors:
    """False rejects of human-correct answers and false accepts of human-incorrect answers."""

    false_rejects: int
    n_human_correct: int
    false_accepts: int
    n_human_incorrect: int


def directional_errors(accepted: ArrayLike, human_correct: ArrayLike) -> DirectionalErrors:
    """Counts of (human correct, rejected) and (human incorrect, accepted)."""
    acc = _bool(accepted, "accepted")
    hc = _bool(human_correct, "human_correct")
    if acc.shape != hc.shape:
        raise ValueError(f"accepted and human_correct differ in shape: {acc.shape} vs {hc.shape}")
    return DirectionalErrors(int(np.sum(hc & ~acc)), int(hc.sum()), int(np.sum(~hc & acc)), int((~hc).sum()))


def false_acceptance_by_category(
    accepted: ArrayLike,
    human_correct: ArrayLike,
    error_category: Sequence[str | None],
    group: ArrayLike,
    categories: Sequence[str] = ERROR_CATEGORIES,
) -> dict[str, dict[str, float]]:
    """Per category: rate = equal-weight mean over groups containing it of (accepted / errors of that
    category),
    plus the pooled counts n_accepted, n_errors and the number of groups n_groups."""
    acc = _bool(accepted, "accepted")
    hc = _bool(human_correct, "human_correct")
    cat = np.asarray([c if c is not None else "" for c in error_category], dtype=object)
    g = np.asarray(group)
    if not (acc.shape == hc.shape == cat.shape == g.shape):
        raise ValueError("accepted, human_correct, error_category and group must have the same length")
    out: dict[str, dict[str, float]] = {}
    for c in categories:
        m = (~hc) & (cat == c)
        rates = [acc[m & (g == gv)].mean() for gv in np.unique(g[m])]
        out[c] = {
            "rate": float(np.mean(rates)) if rates else float("nan"),
            "n_accepted": int(acc[m].sum()),
            "n_errors": int(m.sum()),
            "n_groups": len(rates),
        }
    return out
