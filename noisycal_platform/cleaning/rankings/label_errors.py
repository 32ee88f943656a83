"""Label-error ranking: intra-/extra-class distance ratio (seed 001 §3.2; SelfClean).

Hand-written because it needs, per sample, the exact nearest same-label *and* nearest other-label
neighbour in O(N·D) memory; a k-NN library would need per-class indexes plus a farthest search.
"""

from __future__ import annotations

import numpy as np

from ._kernels import as_unit_embeddings, exact_dists, screen_margin
from .types import Ranking

__all__ = ["label_error_scores", "rank_label_errors"]

_TILE = 4096


def _validate_labels(labels: object, n: int) -> np.ndarray:
    lab = np.asarray(labels)
    if lab.ndim != 1 or lab.shape[0] != n:
        raise ValueError(f"labels must be 1-D with one entry per embedding row ({n}), got shape {lab.shape}")
    if lab.dtype.kind == "f" and np.isnan(lab).any():
        raise ValueError(f"labels contain NaN at index {int(np.flatnonzero(np.isnan(lab))[0])}")
    if lab.dtype.kind == "O" and any(v is None for v in lab):
        raise ValueError(f"labels contain None at index {next(i for i, v in enumerate(lab) if v is None)}")
    try:
        return np.unique(lab, return_inverse=True)[1].astype(np.int64).ravel()
    except TypeError as exc:  # unorderable mixed objects
        raise ValueError(f"labels must be mutually comparable values, got dtype {lab.dtype}: {exc}") from None


class _Best:
    """Running float32 extreme per point plus the (point, partner, s32) pairs that may attain it."""

    def __init__(self, n: int, sign: float, eps2: float) -> None:
        self.sign = sign  # +1: track the max similarity (nearest); -1: the min (farthest)
        self.val = np.full(n, -np.inf)  # in sign-flipped units: sign * s
        self.eps2 = eps2
        self.p: list[np.ndarray] = []
        self.q: list[np.ndarray] = []
        self.s: list[np.ndarray] = []

    def update(self, s: np.ndarray, rows: slice, cols_offset: int, axis: int) -> None:
        """Fold block ``s`` into the points along ``axis`` (0: rows of s, 1: columns of s).

        One reduction pass over the block; only the lines whose block extreme reaches the running
        extreme minus the margin are scanned again for candidate partners.
        """
        t = s if self.sign > 0 else -s
        red = t.max(axis=1) if axis == 0 else t.max(axis=0)
        cur = self.val[rows]
        np.maximum(cur, red, out=cur)
        self.val[rows] = cur
        thr = cur - self.eps2
        hot = np.flatnonzero(red >= thr)
        if hot.size == 0:
            return
        if hot.size * 4 > red.size:  # many hot lines: one full comparison pass
            w = t.shape[1]
            flat = np.flatnonzero(t >= (thr[:, None] if axis == 0 else thr[None, :]))
            r, c = flat // w, flat % w
            line, partner = (r, c) if axis == 0 else (c, r)
            vals = t.ravel()[flat]
        else:  # few hot lines: gather them, compare only there
            sub = t[hot] if axis == 0 else t[:, hot].T  # (hot lines) x (partners)
            w = sub.shape[1]
            flat = np.flatnonzero(sub >= thr[hot][:, None])
            line, partner = hot[flat // w], flat % w
            vals = sub.ravel()[flat]
        self.p.append(rows.start + line)
        self.q.append(cols_offset + partner)
        self.s.append(vals.astype(np.float64))

    def exact_dist(self, x: np.ndarray, n: int) -> np.ndarray:
        """Exact float64 distance to the winning partner per point (inf where none was seen)."""
        out = np.full(n, np.inf if self.sign > 0 else -np.inf)
        if not self.p:
            return out
        p = np.concatenate(self.p)
        q = np.concatenate(self.q)
        s = np.concatenate(self.s)
        keep = s >= self.val[p] - self.eps2
        p, q = p[keep], q[keep]
        d = exact_dists(x, p, q)
        if self.sign > 0:
            np.minimum.at(out, p, d)
        else:
            np.maximum.at(out, p, d)
        return out


def label_error_scores(emb: np.ndarray, labels: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample ``(score, d_same, d_diff)``, see :func:`rank_label_errors`."""
    x0 = as_unit_embeddings(emb)
    n = x0.shape[0]
    codes = _validate_labels(labels, n)
    n_cls = int(codes.max()) + 1
    if n_cls == 1:
        return np.ones(n), np.full(n, np.nan), np.full(n, np.inf)
    eps2 = screen_margin(x0)

    perm = np.argsort(codes, kind="stable")
    x = x0[perm]
    cs = codes[perm]
    counts = np.bincount(cs, minlength=n_cls)
    starts = np.concatenate([[0], np.cumsum(counts)])
    # tiles never straddle a class boundary: each chunk is (lo, hi, class)
    chunks = [
        (lo, min(lo + _TILE, int(starts[c + 1])), c)
        for c in range(n_cls)
        for lo in range(int(starts[c]), int(starts[c + 1]), _TILE)
    ]
    same = _Best(n, +1.0, eps2)
    diff = _Best(n, +1.0, eps2)
    far = _Best(n, -1.0, eps2)  # singleton classes: farthest other-label sample
    singleton = counts == 1

    for ai, (alo, ahi, acls) in enumerate(chunks):
        xa = x[alo:ahi]
        ra = slice(alo, ahi)
        for blo, bhi, bcls in chunks[ai:]:
            s = xa @ x[blo:bhi].T
            rb = slice(blo, bhi)
            if blo == alo:  # diagonal tile, same class: rows cover every ordered pair
                if s.shape[0] > 1:
                    np.fill_diagonal(s, -np.inf)
                    same.update(s, ra, blo, axis=0)
                continue
            tgt = same if acls == bcls else diff
            tgt.update(s, ra, blo, axis=0)
            tgt.update(s, rb, alo, axis=1)
            if acls != bcls:
                if singleton[acls]:
                    far.update(s, ra, blo, axis=0)
                if singleton[bcls]:
                    far.update(s, rb, alo, axis=1)

    d_same_s = same.exact_dist(x, n)
    d_diff_s = diff.exact_dist(x, n)
    single_rows = singleton[cs]
    d_same_s[single_rows] = far.exact_dist(x, n)[single_rows]

    d_same = np.empty(n)
    d_diff = np.empty(n)
    d_same[perm] = d_same_s
    d_diff[perm] = d_diff_s
    num = d_diff * d_diff
    den = d_same * d_same + num
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(den > 0.0, num / np.where(den > 0.0, den, 1.0), 0.5)
    return score, d_same, d_diff


def rank_label_errors(emb: np.ndarray, labels: object) -> Ranking:
    """Rank samples by the intra-/extra-class distance ratio, most suspicious first.

    score(i) = d_diff(i)² / (d_same(i)² + d_diff(i)²), ascending (SelfClean), where d = (1 - cos)/2,
    d_same = distance to the nearest *other* sample with the same label and d_diff = distance to the
    nearest sample with a different label.

    Conventions:
    - a class with a single member uses the **largest** distance to the other-label samples as d_same;
    - 0/0 (an exact duplicate with the same label *and* one with a different label) scores **0.5**,
      the value of the ratio whenever d_same = d_diff; an exact duplicate with only a different label
      scores 0 and comes first;
    - only one distinct label (no other-label neighbour exists, d_diff = inf): every score is 1.0;
    - ties are ordered by sample index (stable sort).

    Exact: float32 tiles screen candidates, the winners are re-evaluated in float64 (see ``_kernels``).
    Memory O(N·D) plus one 4096×4096 float32 tile; the upper triangle is computed once (each tile
    updates its rows and its columns).
    """
    score, _, _ = label_error_scores(emb, labels)
    order = np.argsort(score, kind="stable")
    return Ranking(order, score)
