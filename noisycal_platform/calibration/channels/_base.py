"""Shared types of the channel estimators: `Channel`, `ChannelFit`, `NotIdentifiableError` (Hanada and Futami 2026
§2.2).

Also the input encoding every estimator uses: an n×K annotation array (float with NaN = missing, or
integer with -1 = missing) is turned once into int8 codes 0/1/2 (2 = missing) and then into per-item
answer patterns ``p = Σ_j c_j·3^j``. With binary labels there are at most 3^K distinct patterns, so the
EM estimators work on pattern counts instead of items (Hanada and Futami 2026 §F.3).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np

__all__ = [
    "Channel",
    "ChannelFit",
    "LabelMatrix",
    "NotIdentifiableError",
    "annotation_codes",
    "as_annotation_array",
    "exchange_labels",
    "pattern_counts",
    "validated_labels",
]

MISSING = 2  # code of a missing annotation


class NotIdentifiableError(ValueError):
    """The data cannot identify the annotator channels (Hanada and Futami 2026 §4.1, §D.1); the message says what
    would."""


@dataclass(frozen=True)
class Channel:
    """Class-conditional annotator channel: ``fpr`` a_j = P(A_j=1 | Y=0), ``fnr`` b_j = P(A_j=0 | Y=1).

    ``gap`` δ_j = 1 − a_j − b_j; E[A_j | X] = a_j + δ_j·η(X) (Hanada and Futami 2026 §2.2).
    """

    fpr: float
    fnr: float

    def __post_init__(self) -> None:
        for name in ("fpr", "fnr"):
            v = getattr(self, name)
            if not isinstance(v, (int, float, np.floating, np.integer)) or not (0.0 <= float(v) <= 1.0):
                raise ValueError(f"Channel.{name} must be a number in [0, 1], got {v!r}")
            object.__setattr__(self, name, float(v))

    @property
    def gap(self) -> float:
        """δ = 1 − fpr − fnr (the channel gap; > 0 means positively oriented)."""
        return 1.0 - self.fpr - self.fnr


@dataclass(frozen=True, eq=False)
class ChannelFit:
    """Result of `estimate_channels`.

    Attributes
    ----------
    channels : tuple of Channel, one per annotator column, in column order.
    prevalence : float, estimated P(Y = 1) over the fitted items (group fits: item-weighted mean of
        the group prevalences).
    method : str, "known", "two_group", "dawid_skene" or "score_group_em".
    converged : bool, the selected fit converged and passed the final gap threshold.
    diagnostics : dict with at least ``log_likelihood`` (float or nan for closed forms), ``n_iter``,
        ``n_starts``, ``starts_accepted``, ``min_gap``, ``n_items``; group methods add
        ``group_prevalence`` (tuple, one per group, in sorted group-label order) and ``groups``.
    """

    channels: tuple[Channel, ...]
    prevalence: float
    method: str
    converged: bool
    diagnostics: dict[str, Any] = field(default_factory=dict)

    @property
    def fpr(self) -> np.ndarray:
        return np.array([c.fpr for c in self.channels])

    @property
    def fnr(self) -> np.ndarray:
        return np.array([c.fnr for c in self.channels])

    @property
    def gaps(self) -> np.ndarray:
        return np.array([c.gap for c in self.channels])


class LabelMatrix(np.ndarray):
    """An n×K annotation array that `validated_labels` has checked: `as_annotation_array` returns it as it is
    instead of checking it again, so a matrix built once per step (`tables.annotation_matrix`) is validated once
    however many functions it passes through. Views and arrays computed from it (slices, arithmetic, astype)
    are of this type too but not vouched for, and are checked again."""

    _validated: bool = False

    def __array_finalize__(self, obj: Any) -> None:
        self._validated = False


def validated_labels(annotations: Any, name: str = "annotations") -> LabelMatrix:
    """`as_annotation_array` once, as a `LabelMatrix` that later calls accept without checking again."""
    out = as_annotation_array(annotations, name).view(LabelMatrix)
    out._validated = True
    return out


def as_annotation_array(annotations: Any, name: str = "annotations", validate: bool = True) -> np.ndarray:
    """Validate an n×K annotation array; returned unchanged (float or int dtype), never copied needlessly.

    Float arrays: values in {0, 1} or NaN (missing). Integer/bool arrays: values in {0, 1} or -1 (missing).
    ``validate=False`` checks only shape and dtype (for callers that validate values while streaming).
    A `LabelMatrix` from `validated_labels` is returned as it is (validated once).
    """
    if isinstance(annotations, LabelMatrix) and annotations._validated:
        return annotations
    a = np.asarray(annotations)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (n_items, n_annotators), got shape {a.shape}")
    if a.shape[1] == 0:
        raise ValueError(f"{name} must have at least one annotator column, got shape {a.shape}")
    if a.dtype == bool:
        return a.astype(np.int8)
    if np.issubdtype(a.dtype, np.floating):
        if validate and a.size:
            # x(x−1) is 0 only for 0 and 1; NaN is non-zero too, so subtract the NaN count.
            n_nonbinary = np.count_nonzero(a * (a - 1)) - np.count_nonzero(np.isnan(a))
            if n_nonbinary:
                bad = a[~(np.isnan(a) | (a == 0) | (a == 1))].ravel()[0]
                raise ValueError(f"{name} must contain only 0, 1 or NaN (missing), got {bad!r}")
        return a
    if np.issubdtype(a.dtype, np.integer):
        if validate and a.size and (a.min() < -1 or a.max() > 1):
            bad = a[(a < -1) | (a > 1)].ravel()[0]
            raise ValueError(f"{name} (integer) must contain only 0, 1 or -1 (missing), got {bad!r}")
        return a
    raise ValueError(f"{name} must be a float (NaN = missing) or integer (-1 = missing) array, got {a.dtype}")


def annotation_codes(a: np.ndarray) -> np.ndarray:
    """int8 codes of a validated annotation array: 0, 1, or 2 (= missing)."""
    if np.issubdtype(a.dtype, np.floating):
        with np.errstate(invalid="ignore"):
            c = a.astype(np.int8)
        c[np.isnan(a)] = MISSING
        return c
    c = a.astype(np.int8, copy=True)
    c[c < 0] = MISSING
    return c


def pattern_counts(
    codes: np.ndarray, groups: np.ndarray | None = None, n_groups: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Distinct (group, answer pattern) cells and their item counts.

    Returns ``(patterns (P, K) int8 codes, group (P,) int, counts (P,) float)`` for the non-empty cells,
    in increasing code order. Uses a dense ``bincount`` when 3^K·G is small, else ``np.unique``.
    """
    n, k = codes.shape
    if k > 39:
        # base-3 codes overflow int64; fall back to row-unique (rare: > 39 annotators)
        key = np.ascontiguousarray(codes)
        if groups is not None:
            key = np.column_stack([groups.astype(np.int8 if n_groups < 127 else np.int64), key])
        uniq, counts = np.unique(key, axis=0, return_counts=True)
        if groups is not None:
            return uniq[:, 1:].astype(np.int8), uniq[:, 0].astype(np.int64), counts.astype(float)
        return uniq.astype(np.int8), np.zeros(len(uniq), np.int64), counts.astype(float)
    dtype = np.int32 if 3**k * n_groups < 2**31 else np.int64
    pat = np.zeros(n, dtype=dtype)
    for j in range(k):  # loop over annotators (K small), not items
        pat += codes[:, j].astype(dtype) * dtype(3**j)
    n_pat = 3**k
    if groups is not None:
        pat += groups.astype(dtype) * dtype(n_pat)
    total = n_pat * n_groups
    if total <= 4_000_000:
        counts = np.bincount(pat, minlength=total)
        keys = np.flatnonzero(counts)
        counts = counts[keys]
    else:
        keys, counts = np.unique(pat, return_counts=True)
    keys = keys.astype(np.int64)
    grp = keys // n_pat
    rem = keys % n_pat
    pats = np.empty((len(keys), k), dtype=np.int8)
    for j in range(k):
        pats[:, j] = rem % 3
        rem //= 3
    return pats, grp, counts.astype(float)


def labelled_pattern_counts(
    a: np.ndarray, groups: np.ndarray | None = None, n_groups: int = 1
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`pattern_counts` of a validated annotation array without the cells nobody labelled (they carry no
    information about the channels); a clear error when no item is labelled."""
    pats, grp, counts = pattern_counts(annotation_codes(a), groups, n_groups)
    keep = (pats != MISSING).any(axis=1)
    if not keep.any():
        raise ValueError("annotations has no labelled item")
    return pats[keep], grp[keep], counts[keep]


def exchange_labels(prevalence: Any, fpr: np.ndarray, fnr: np.ndarray) -> tuple[Any, np.ndarray, np.ndarray]:
    """Global label exchange (π, a_j, b_j) → (1 − π, 1 − b_j, 1 − a_j); likelihood unchanged (§4.3)."""
    return 1.0 - np.asarray(prevalence), 1.0 - np.asarray(fnr), 1.0 - np.asarray(fpr)
