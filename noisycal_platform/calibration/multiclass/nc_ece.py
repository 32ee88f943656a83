"""Multi-class noise-corrected ECE: top-label and classwise, with per-bin statistics.

Bin rule (the binary one): bin(s) = min(floor(s·B), B − 1). Corrected labels Ỹ_ic as in `corrected`
(backward correction, Patrini et al. 2017; unbiased for P(Y = c | X)). With p_i the predicted probability
vector of item i and N the items included:

- top-label (Guo et al. 2017, "On calibration of modern neural networks", ICML): confidence
  s_i = max_c p_ic, predicted class ĉ_i = argmax_c p_ic, target the corrected indicator Ỹ_{i,ĉ_i};
  NC-ECE = Σ_k |Σ_{i∈k}(Ỹ_{i,ĉ_i} − s_i)| / N. Unbiased bin by bin because ĉ_i is a function of X.
- classwise (Kull et al. 2019, "Beyond temperature scaling", NeurIPS): one binned NC-ECE per class,
  NC-ECE_c = Σ_k |Σ_{i∈k_c}(Ỹ_ic − p_ic)| / N with bins of p_ic, averaged over the C classes.

Each class's term is the binary NC-ECE of Hanada and Futami 2026 §3 applied to the indicator of class c; for C = 2 the
class-1 term equals the binary `nc_ece` of p_i1 exactly.

Implementation: Ỹ_i depends only on the item's answer pattern (digits d_j = label + 1, 0 = missing, at
most (C+1)^K patterns), so one pass over cache-sized chunks counts items and sums s and s² per
(class, bin, pattern) cell with ``bincount`` and the ≤ C·B·(C+1)^K cells are then combined with the
per-pattern corrected labels (Hanada and Futami 2026 §F.3: O(nK + M)).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from ..nc_ece import NCECEResult, _check_n_bins
from .corrected import MVU, PREVALENCE_CLIP, as_confusion, class_weights, mvu_pattern_targets, pattern_targets

__all__ = [
    "NC_ECE_KINDS",
    "MulticlassNCECEResult",
    "binned_ece_multiclass",
    "check_probs",
    "nc_ece_multiclass",
    "score_cell_probs",
]

NC_ECE_KINDS = ("top_label", "classwise")
PROB_SUM_TOL = 1e-6
_CHUNK = 1 << 15
_MAX_CELLS = 1 << 23


@dataclass(frozen=True, eq=False)
class MulticlassNCECEResult:
    """Multi-class NC-ECE with its per-bin sums.

    value : top-label NC-ECE, or the mean of ``per_class`` (classwise).
    kind : "top_label" or "classwise". per_class : (C,) classwise terms (None for top-label).
    bin_n, bin_sum_score, bin_sum_label, bin_sum_sq_residual : (G, B) per-bin item counts and sums of
        s, of Ỹ and of (Ỹ − s)², G = C (classwise, row c = class c) or 1 (top-label). Residual of bin k:
        (bin_sum_label − bin_sum_score)/bin_n; NC-ECE of row g = Σ_k |bin_sum_label − bin_sum_score| / n_items.
    n_items : N, items with at least one annotation (and positive weight); n_unannotated : excluded items.
    n_zero_weight : items excluded because their annotators all have weight 0 for the class concerned.
    weights : (K, C) per-class annotator weights. prevalence : (C,) π used for "iv" (nan if unused).
    """

    value: float
    kind: str
    per_class: np.ndarray | None
    bin_n: np.ndarray
    bin_sum_score: np.ndarray
    bin_sum_label: np.ndarray
    bin_sum_sq_residual: np.ndarray
    n_items: int
    n_unannotated: int
    n_zero_weight: int
    weights: np.ndarray
    prevalence: np.ndarray
    n_bins: int

    @property
    def bins(self) -> pl.DataFrame:
        """Non-empty bins: class (Int64; −1 for top-label), bin, n, mean_score, mean_corrected_label, residual."""
        g, k = np.nonzero(self.bin_n)
        n = self.bin_n[g, k].astype(np.float64)
        ms = self.bin_sum_score[g, k] / n
        my = self.bin_sum_label[g, k] / n
        cls = g.astype(np.int64) if self.kind == "classwise" else np.full(len(g), -1, np.int64)
        return pl.DataFrame(
            {
                "class": cls,
                "bin": k.astype(np.int64),
                "n": self.bin_n[g, k].astype(np.int64),
                "mean_score": ms,
                "mean_corrected_label": my,
                "residual": my - ms,
            }
        )

    def binary_results(self) -> tuple[NCECEResult, ...]:
        """One binary `NCECEResult` per row (class c, or the top-label indicator), for code written for it."""
        out = []
        for g in range(self.bin_n.shape[0]):
            n_k, ss, sy = self.bin_n[g], self.bin_sum_score[g], self.bin_sum_label[g]
            nz = np.flatnonzero(n_k)
            nn = n_k[nz].astype(np.float64)
            frame = pl.DataFrame(
                {
                    "bin": nz.astype(np.int64),
                    "n": n_k[nz].astype(np.int64),
                    "mean_score": ss[nz] / nn,
                    "mean_corrected_label": sy[nz] / nn,
                    "residual": (sy[nz] - ss[nz]) / nn,
                }
            )
            # top-label: the weights depend on the predicted class; their mean over classes is reported
            w = self.weights[:, g] if self.kind == "classwise" else self.weights.mean(axis=1)
            out.append(
                NCECEResult(
                    value=float(np.abs(sy - ss).sum() / max(n_k.sum(), 1)),
                    bins=frame,
                    n_items=int(n_k.sum()),
                    n_unannotated=self.n_unannotated,
                    n_zero_weight=self.n_zero_weight,
                    weights=w,
                    prevalence=float(self.prevalence[g]) if self.kind == "classwise" else float("nan"),
                    n_bins=self.n_bins,
                )
            )
        return tuple(out)


def check_probs(probs: Any, n_classes: int | None = None, name: str = "probs") -> np.ndarray:
    """Validate an (n, C) probability array: entries in [0, 1], rows summing to 1 within 1e-6."""
    p = np.asarray(probs)
    if p.ndim != 2 or p.shape[1] < 2:
        raise ValueError(f"{name} must be a 2-D array (n_items, n_classes >= 2), got shape {p.shape}")
    if n_classes is not None and p.shape[1] != n_classes:
        raise ValueError(f"{name} has {p.shape[1]} class columns but the confusion matrices have {n_classes}")
    if not np.issubdtype(p.dtype, np.floating):
        p = p.astype(np.float64)
    for lo in range(0, p.shape[0], 1 << 16):  # chunks keep the checks cache-resident
        _check_prob_chunk(p[lo : lo + (1 << 16)], lo, name)
    return p


def _check_prob_chunk(pc: np.ndarray, offset: int, name: str) -> None:
    if pc.size == 0:
        return
    if not (pc.min() >= 0.0 and pc.max() <= 1.0):  # NaN fails both
        r, c = np.argwhere(~((pc >= 0) & (pc <= 1)))[0]
        raise ValueError(f"{name} row {offset + r} column {c}: {pc[r, c]!r} is not a probability in [0, 1]")
    dev = np.abs(pc @ np.ones(pc.shape[1]) - 1.0)  # row sums (a matrix-vector product is the fast reduction)
    if dev.max() > PROB_SUM_TOL:
        r = int(np.argmax(dev))
        raise ValueError(f"{name} row {offset + r} sums to {pc[r].sum()!r}, not 1 (tolerance {PROB_SUM_TOL})")


def _pattern_table(k: int, c: int) -> np.ndarray:
    """(P, K) digits of every pattern: 0 = missing, d = label + 1."""
    p = np.arange((c + 1) ** k)
    return np.stack([(p // (c + 1) ** j) % (c + 1) for j in range(k)], axis=1)


def _chunk_keys(x: np.ndarray, c: int, offset: int) -> np.ndarray:
    """Pattern key Σ_j (label + 1)·(C+1)^j of a chunk of annotations (validates the values).

    Float input: fmax(x, −1) maps NaN to −1; the key is one matrix-vector product, exact in float64 for
    (C+1)^K < 2^53."""
    k = x.shape[1]
    powers = (c + 1) ** np.arange(k)
    if np.issubdtype(x.dtype, np.floating):
        xf = np.fmax(x, -1.0)  # NaN → −1 (missing)
        d = xf.astype(np.intp)
        ok = np.array_equal(d, xf) and (d.max() < c if d.size else True)
        ok = ok and np.count_nonzero(d == -1) == np.count_nonzero(np.isnan(x))
        if ok:
            return (xf @ powers.astype(np.float64)).astype(np.intp) + int(powers.sum())
        bad = ~np.isnan(x) & ((x != np.floor(x)) | (x < 0) | (x >= c))
    else:
        d = x.astype(np.intp)
        bad = (d < -1) | (d >= c)
        if not bad.any():
            return (d + 1) @ powers.astype(np.intp)
    r, j = np.argwhere(bad)[0]
    raise ValueError(
        f"annotations row {offset + r} column {j}: {x[r, j]!r} is not a class index 0..{c - 1} "
        "(missing: NaN, or -1 for integer arrays)"
    )


def _cell_sums(p: np.ndarray, a: np.ndarray, c: int, n_bins: int, kind: str):
    """Per (group, bin, pattern) cell counts and sums of s and s², group = class (classwise) or predicted
    class (top-label); arrays of shape (G, B, P). Buffers are preallocated and updated in place (mixed-dtype
    broadcasts are slow)."""
    n, k = a.shape
    n_pat = (c + 1) ** k
    n_cells = c * n_bins * n_pat
    counts = np.zeros(n_cells, np.float64)
    ssum = np.zeros(n_cells, np.float64)
    n_groups = c * n_bins
    ssq = np.zeros(n_groups, np.float64)  # Σ s² needs no pattern split: kept per (group, bin)
    m = min(_CHUNK, n)
    g = c if kind == "classwise" else 1
    fbuf = np.empty((g, m), np.float64)
    cbuf = np.empty((g, m), np.intp)
    bbuf = np.empty((g, m), np.intp)
    qbuf = np.empty((g, m), np.float64)
    cls_off = (np.arange(c, dtype=np.intp) * n_bins)[:, None]
    for lo in range(0, n, _CHUNK):  # loop over cache-sized chunks, not items
        hi = min(lo + _CHUNK, n)
        w = hi - lo
        pc = p[lo:hi]
        _check_prob_chunk(pc, lo, "probs")
        key = _chunk_keys(a[lo:hi], c, lo)
        f, cell, q, gb = fbuf[:, :w], cbuf[:, :w], qbuf[:, :w], bbuf[:, :w]
        if kind == "classwise":
            s = f
            np.copyto(s, pc.T)  # (C, m) contiguous
        else:
            pred = pc.argmax(axis=1)
            s = pc[np.arange(w), pred][None, :]
        np.multiply(s, float(n_bins), out=q)
        np.copyto(gb, q, casting="unsafe")  # truncation = floor for s >= 0
        np.minimum(gb, n_bins - 1, out=gb)
        if kind == "classwise":
            np.add(gb, cls_off, out=gb)  # group·B + bin
        else:
            np.add(gb, (pred * n_bins)[None, :], out=gb)
        np.multiply(gb, n_pat, out=cell)
        np.add(cell, key[None, :], out=cell)
        cf = cell.ravel()
        np.multiply(s, s, out=q)
        np.multiply(q, (key > 0)[None, :], out=q)  # Σ s² over annotated items only (key 0: nobody labelled)
        counts += np.bincount(cf, minlength=n_cells)
        ssum += np.bincount(cf, weights=s.ravel(), minlength=n_cells)
        ssq += np.bincount(gb.ravel(), weights=q.ravel(), minlength=n_groups)
    shape = (c, n_bins, n_pat)
    return counts.reshape(shape), ssum.reshape(shape), ssq.reshape(c, n_bins)


def score_cell_probs(p: np.ndarray, kind: str, n_bins: int) -> np.ndarray:
    """(C·B, C) mean predicted probability vector of the items in each score cell (row class t, bin k), cell
    t·B + k: classwise, the items whose p_t falls in bin k; top-label, those predicted t whose max falls in bin k.
    Uniform 1/C for an empty cell. The q of the "mvu" targets (`corrected.mvu_pattern_targets`)."""
    c = p.shape[1]
    if kind == "top_label":
        t = p.argmax(axis=1)[:, None]
        s = np.take_along_axis(p, t, axis=1)
    else:
        t = np.arange(c)[None, :]
        s = p
    cell = (t * n_bins + np.minimum(np.floor(s * n_bins).astype(np.intp), n_bins - 1)).ravel()
    g = s.shape[1]
    cnt = np.bincount(cell, minlength=c * n_bins)
    # loop over the C probability columns, each one bincount over the items
    sums = np.stack([np.bincount(cell, weights=np.repeat(p[:, j], g), minlength=c * n_bins) for j in range(c)], 1)
    return np.where(cnt[:, None] > 0, sums / np.maximum(cnt, 1)[:, None], 1.0 / c)


def nc_ece_multiclass(
    probs: Any,
    annotations: Any,
    channels: Any,
    kind: str = "top_label",
    n_bins: int = 15,
    weights: Any = "iv",
    prevalence: Any = None,
) -> MulticlassNCECEResult:
    """Top-label or classwise NC-ECE from noisy class annotations (see module doc).

    Parameters
    ----------
    probs : (n, C) predicted probabilities, rows summing to 1 within 1e-6.
    annotations : (n, K) class indices; float with NaN = missing, or integer with −1 = missing.
    channels : a `ConfusionFit`, (K, C, C) confusion matrices, or binary channels (C = 2).
    kind : "top_label" or "classwise". n_bins : B equal-width bins.
    weights : "iv", "equal", or a (K,) / (K, C) array: the corrected labels are weighted averages over the
        annotators; or "mvu": the minimum-variance unbiased function of the whole answer pattern, per score cell
        with q = `score_cell_probs` (`corrected` module doc; needs annotators independent given the class; the
        result's ``weights`` are NaN). prevalence : (C,) π for "iv"; None → plug-in (mean of the equally weighted
        corrected labels over the annotated items, clipped to [1e-4, 1 − 1e-4]).
    """
    if kind not in NC_ECE_KINDS:
        raise ValueError(f"kind must be one of {NC_ECE_KINDS}, got {kind!r}")
    n_bins = _check_n_bins(n_bins)
    a = np.asarray(annotations)
    if a.ndim == 1:
        a = a[:, None]
    if a.ndim != 2:
        raise ValueError(f"annotations must be a 2-D array (n_items, n_annotators), got shape {a.shape}")
    t = as_confusion(channels, a.shape[1])
    k, c, _ = t.shape
    p = np.asarray(probs)
    if p.ndim != 2 or p.shape[1] != c:
        raise ValueError(f"probs must have shape (n_items, {c}), got {p.shape}")
    if p.shape[0] != a.shape[0]:
        raise ValueError(f"annotations has {a.shape[0]} rows but probs has {p.shape[0]}")
    if not np.issubdtype(p.dtype, np.floating):
        p = p.astype(np.float64)
    if prevalence is not None:
        prevalence = np.asarray(prevalence, dtype=np.float64)
    mvu = isinstance(weights, str) and weights == MVU
    if c * n_bins * (c + 1) ** k > _MAX_CELLS:
        if mvu:
            raise ValueError(
                f"weights='mvu' needs the {c * n_bins * (c + 1) ** k} answer-pattern cells of {c} classes × {n_bins} "
                f"bins × {k} annotators (limit {_MAX_CELLS}); use weights='iv'"
            )
        return _nc_ece_items(p, a, t, kind, int(n_bins), weights, prevalence)
    counts, ssum, ssq = _cell_sums(p, a, c, int(n_bins), kind)
    table = _pattern_table(k, c)
    present = table > 0
    tinv = np.linalg.inv(t)
    lab = table - 1
    annotated = present.any(axis=1)
    n_pat_items = counts.sum(axis=(0, 1)) / (c if kind == "classwise" else 1)
    if isinstance(weights, str) and weights == "iv" and prevalence is None:
        tot = n_pat_items[annotated].sum()
        if tot == 0:
            raise ValueError("annotations has no labelled item")
        eq = pattern_targets(tinv, np.ones((k, c)), lab, present)[0]
        prevalence = np.clip(n_pat_items[annotated] @ eq[annotated] / tot, PREVALENCE_CLIP, 1 - PREVALENCE_CLIP)
    if mvu:
        q = score_cell_probs(p, kind, int(n_bins))
        f, _ = mvu_pattern_targets(t, q, np.repeat(np.arange(c), int(n_bins)), lab, present)  # (C·B, P)
        w = np.full((k, c), np.nan)
        inc = np.broadcast_to(annotated[:, None], (annotated.size, c))
        incf = inc.T.astype(np.float64)[:, None, :]
        yg = f.reshape(c, int(n_bins), -1)  # (C, B, P): target of group t, bin k, pattern p
    else:
        w = class_weights(t, prevalence, weights)
        ycorr, inc = pattern_targets(tinv, w, lab, present)  # (P, C) each
        incf = inc.T.astype(np.float64)[:, None, :]  # (C, 1, P) per group = class
        yg = ycorr.T[:, None, :]  # (C, 1, P)
    cn = counts * incf
    bin_n = cn.sum(axis=2)
    bin_s = (ssum * incf).sum(axis=2)
    bin_y = (cn * yg).sum(axis=2)
    excluded = counts.sum(axis=1) * (annotated[None, :] & ~inc.T)  # (C, P) items × groups excluded for weight
    if excluded.any():  # zero-weight exclusions: the per-(group, bin) Σ s² would include them; use the item path
        return _nc_ece_items(p, a, t, kind, int(n_bins), w, prevalence)
    # Σ(Ỹ − s)² = Σ_p n_p Ỹ_p² − 2 Σ_p Ỹ_p S_p + Σ s² (Σ s² kept per (group, bin) over annotated items)
    bin_q = (cn * yg**2 - 2 * ssum * incf * yg).sum(axis=2) + ssq
    n_unann = int(n_pat_items[~annotated].sum())
    if kind == "top_label":
        bin_n, bin_s, bin_y, bin_q = (x.sum(axis=0, keepdims=True) for x in (bin_n, bin_s, bin_y, bin_q))
        n_zero = int(excluded.sum())
        n_items = round(float(bin_n.sum()))
    else:
        n_zero = round(float(excluded.sum(axis=1).max()))
        n_items = round(float(n_pat_items[annotated].sum())) - n_zero
    return _result(kind, bin_n, bin_s, bin_y, bin_q, n_items, n_unann, n_zero, w, prevalence, int(n_bins))


def _result(kind, bin_n, bin_s, bin_y, bin_q, n_items, n_unann, n_zero, w, prevalence, n_bins):
    n_rows = bin_n.sum(axis=1)
    if n_items <= 0 or np.any(n_rows <= 0):
        raise ValueError("no item is both scored and annotated (with positive weight)")
    terms = np.abs(bin_y - bin_s).sum(axis=1) / n_rows  # each class over the items included for it
    per_class = terms if kind == "classwise" else None
    value = float(terms.mean()) if kind == "classwise" else float(terms[0])
    c = w.shape[1]
    pi = np.full(c, np.nan) if prevalence is None else np.asarray(prevalence, float)
    return MulticlassNCECEResult(
        value=value,
        kind=kind,
        per_class=per_class,
        bin_n=np.rint(bin_n).astype(np.int64),
        bin_sum_score=bin_s,
        bin_sum_label=bin_y,
        bin_sum_sq_residual=bin_q,
        n_items=int(n_items),
        n_unannotated=int(n_unann),
        n_zero_weight=int(n_zero),
        weights=w,
        prevalence=pi,
        n_bins=n_bins,
    )


def _nc_ece_items(p, a, t, kind, n_bins, weights, prevalence) -> MulticlassNCECEResult:
    """Per-item path for many annotators or classes (too many pattern cells)."""
    from .corrected import corrected_onehot, plugin_prevalence

    check_probs(p, t.shape[1])
    if isinstance(weights, str) and weights == "iv" and prevalence is None:
        prevalence = plugin_prevalence(a, t)
    w = class_weights(t, prevalence, weights)
    y = corrected_onehot(a, t, weights=w)
    annotated = ~np.isnan(y).all(axis=1)
    n_unann = int((~annotated).sum())
    if kind == "classwise":
        s = p.T
        yy = y.T
    else:
        pred = p.argmax(axis=1)
        s = p[np.arange(len(p)), pred][None, :]
        yy = y[np.arange(len(p)), pred][None, :]
    g = s.shape[0]
    bin_n = np.zeros((g, n_bins))
    bin_s, bin_y, bin_q = np.zeros_like(bin_n), np.zeros_like(bin_n), np.zeros_like(bin_n)
    n_zero = 0
    for r in range(g):  # loop over classes
        ok = ~np.isnan(yy[r])
        n_zero = max(n_zero, int((annotated & ~ok).sum()))
        b = np.minimum((s[r, ok] * n_bins).astype(np.int64), n_bins - 1)
        bin_n[r] = np.bincount(b, minlength=n_bins)
        bin_s[r] = np.bincount(b, weights=s[r, ok], minlength=n_bins)
        bin_y[r] = np.bincount(b, weights=yy[r, ok], minlength=n_bins)
        bin_q[r] = np.bincount(b, weights=(yy[r, ok] - s[r, ok]) ** 2, minlength=n_bins)
    n_items = int(annotated.sum()) - n_zero
    return _result(kind, bin_n, bin_s, bin_y, bin_q, n_items, n_unann, n_zero, w, prevalence, n_bins)


def binned_ece_multiclass(probs: Any, targets: Any, kind: str = "top_label", n_bins: int = 15) -> float:
    """Plain binned top-label or classwise ECE against (n, C) targets (one-hot clean labels, vote shares...).

    Same bins and formulas as `nc_ece_multiclass` with Ỹ replaced by ``targets``; rows of ``targets`` with a
    NaN are skipped.
    """
    if kind not in NC_ECE_KINDS:
        raise ValueError(f"kind must be one of {NC_ECE_KINDS}, got {kind!r}")
    p = check_probs(probs)
    y = np.asarray(targets, dtype=np.float64)
    if y.shape != p.shape:
        raise ValueError(f"targets must have shape {p.shape}, got {y.shape}")
    keep = ~np.isnan(y).any(axis=1)
    p, y = p[keep], y[keep]
    if p.shape[0] == 0:
        raise ValueError("no item with a target")
    if kind == "top_label":
        pred = p.argmax(axis=1)
        rows = np.arange(len(p))
        s, yy = p[rows, pred][None, :], y[rows, pred][None, :]
    else:
        s, yy = p.T, y.T
    b = np.minimum(np.floor(s * n_bins).astype(np.int64), n_bins - 1) + (np.arange(s.shape[0]) * n_bins)[:, None]
    diff = np.bincount(b.ravel(), weights=(yy - s).ravel(), minlength=s.shape[0] * n_bins)
    return float(np.abs(diff).reshape(s.shape[0], n_bins).sum(axis=1).mean() / p.shape[0])
