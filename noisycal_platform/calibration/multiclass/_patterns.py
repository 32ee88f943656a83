"""Class-index annotation arrays and their answer patterns (C classes, K annotators).

Input: an n×K array of class indices 0..C−1, float with NaN = missing or integer with −1 = missing.
Each annotation becomes a code 0..C (C = missing); item i's answer pattern is the base-(C+1) number
key_i = Σ_j code_ij·(C+1)^j. There are at most (C+1)^K patterns, so the EM and the binned NC-ECE work on
pattern counts instead of items (the compression the binary path uses with C = 2).
"""

from __future__ import annotations

from typing import Any

import numpy as np

__all__ = [
    "DENSE_PATTERNS_MAX",
    "as_class_annotations",
    "class_codes",
    "is_multiclass",
    "n_classes_of",
    "pattern_counts",
    "pattern_digits",
    "pattern_keys",
]

DENSE_PATTERNS_MAX = 4_000_000  # dense bincount over all (C+1)^K keys up to this many; np.unique above


def as_class_annotations(
    annotations: Any, n_classes: int | None = None, name: str = "annotations"
) -> tuple[np.ndarray, int]:
    """Validate an n×K class-index array; returns it (not copied) and the number of classes C.

    Float: integer values in [0, C−1] or NaN (missing). Integer: values in [0, C−1] or −1 (missing).
    ``n_classes`` None → C = 1 + the largest label (at least 2).
    """
    a = np.asarray(annotations)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2 or a.shape[1] == 0:
        raise ValueError(f"{name} must be a 2-D array (n_items, n_annotators), got shape {a.shape}")
    if a.dtype == bool:
        a = a.astype(np.int8)
    if np.issubdtype(a.dtype, np.floating):
        nan = np.isnan(a)  # no copy of the observed entries: masks and NaN-skipping reductions over a
        with np.errstate(invalid="ignore"):
            frac = a != np.floor(a)  # NaN too; ±inf is an integer here and fails the finiteness test below
        frac &= ~nan
        if frac.any():
            raise ValueError(f"{name} must hold integer class indices or NaN (missing), got {a[frac][0]!r}")
        observed = not nan.all()
        lo = np.fmin.reduce(a, axis=None) if observed else 0  # fmin/fmax skip NaN
        hi = np.fmax.reduce(a, axis=None) if observed else -1
        if observed and (np.isinf(lo) or np.isinf(hi)):
            raise ValueError(f"{name} must hold finite class indices or NaN (missing), got inf")
        if lo < 0:
            raise ValueError(f"{name} must hold class indices >= 0 (NaN = missing), got {lo!r}")
    elif np.issubdtype(a.dtype, np.integer):
        lo = a.min() if a.size else 0
        if lo < -1:
            raise ValueError(f"{name} (integer) must hold class indices >= 0 or -1 (missing), got {lo!r}")
        hi = a.max() if a.size else -1
    else:
        raise ValueError(f"{name} must be a float (NaN = missing) or integer (-1 = missing) array, got {a.dtype}")
    if n_classes is None:
        n_classes = max(int(hi) + 1, 2)
    if not isinstance(n_classes, (int, np.integer)) or isinstance(n_classes, bool) or n_classes < 2:
        raise ValueError(f"n_classes must be an integer >= 2, got {n_classes!r}")
    if hi >= n_classes:
        raise ValueError(f"{name} holds class index {int(hi)} but n_classes={n_classes} (indices 0..{n_classes - 1})")
    return a, int(n_classes)


def n_classes_of(annotations: Any) -> int:
    """1 + the largest class index present (NaN / −1 ignored); 0 when nothing is labelled."""
    a = np.asarray(annotations)
    if np.issubdtype(a.dtype, np.floating):
        return int(np.nanmax(a)) + 1 if np.any(~np.isnan(a)) else 0
    return int(a.max()) + 1 if a.size else 0


def is_multiclass(annotations: Any) -> bool:
    """True for a numeric class-index array with a label above 1 (the multi-class channel path)."""
    a = np.asarray(annotations)
    if a.dtype == bool or not (np.issubdtype(a.dtype, np.floating) or np.issubdtype(a.dtype, np.integer)):
        return False
    return n_classes_of(a) > 2


def class_codes(a: np.ndarray, n_classes: int) -> np.ndarray:
    """Codes 0..C (C = missing) of a validated array, in the smallest integer dtype that holds C."""
    dt = np.int8 if n_classes < 127 else np.int32
    if np.issubdtype(a.dtype, np.floating):
        with np.errstate(invalid="ignore"):
            c = a.astype(dt)  # NaN casts to an arbitrary integer: overwritten just below
        c[np.isnan(a)] = n_classes
    else:
        c = a.astype(dt, copy=True)
        c[c < 0] = n_classes
    return c


def pattern_keys(codes: np.ndarray, n_classes: int) -> np.ndarray | None:
    """key_i = Σ_j code_ij·(C+1)^j as int64, or None when (C+1)^K overflows int64."""
    k = codes.shape[1]
    base = n_classes + 1
    if k * np.log2(base) > 62:
        return None
    dt = np.int32 if base**k < 2**31 else np.int64
    key = np.zeros(codes.shape[0], dtype=dt)
    for j in range(k):  # loop over annotators (K small), not items
        key += codes[:, j].astype(dt) * dt(base**j)
    return key


def pattern_digits(keys: np.ndarray, n_annotators: int, n_classes: int) -> np.ndarray:
    """(P, K) codes of pattern keys (inverse of `pattern_keys`)."""
    base = n_classes + 1
    rem = np.asarray(keys, dtype=np.int64).copy()
    out = np.empty((len(rem), n_annotators), dtype=np.int8 if n_classes < 127 else np.int32)
    for j in range(n_annotators):
        out[:, j] = rem % base
        rem //= base
    return out


def pattern_counts(codes: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """Distinct answer patterns (P, K) codes and their item counts (P,) float, in increasing key order."""
    k = codes.shape[1]
    key = pattern_keys(codes, n_classes)
    if key is None:  # too many annotators for one integer key: row-unique
        uniq, counts = np.unique(np.ascontiguousarray(codes), axis=0, return_counts=True)
        return uniq, counts.astype(float)
    total = (n_classes + 1) ** k
    if total <= DENSE_PATTERNS_MAX:
        cnt = np.bincount(key, minlength=total)
        keys = np.flatnonzero(cnt)
        counts = cnt[keys]
    else:
        keys, counts = np.unique(key, return_counts=True)
    return pattern_digits(keys, k, n_classes), counts.astype(float)
