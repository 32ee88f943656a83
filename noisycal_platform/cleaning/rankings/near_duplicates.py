"""Near-duplicate ranking: the exact top-k closest pairs (seed 001 §3.2; SelfClean's pair ranking).

Hand-written because no library returns the *global* top-k pairs exactly in O(N·D) memory
(faiss k-NN lists need a certificate and a retry to be exact).
"""

from __future__ import annotations

import numbers

import numpy as np

from ._kernels import as_unit_embeddings, exact_dists, screen_margin
from .types import PairRanking

__all__ = ["rank_near_duplicates"]

_TILE = 4096


def rank_near_duplicates(emb: np.ndarray, top_k: int) -> PairRanking:
    """Exact top-k closest pairs under d = (1 - cos) / 2.

    Returns ``PairRanking(pairs, scores)``: ``pairs[r] = (i, j)`` with ``i < j``, ``scores[r] = d(i, j)``,
    sorted by ``(d, i, j)`` ascending (ties broken deterministically by the indices). This is the
    first ``top_k`` entries of SelfClean's ranking of all N(N-1)/2 pairs.

    ``top_k`` larger than N(N-1)/2 is **clamped**: all pairs are returned (none for N = 1).

    Algorithm: upper-triangle tiles of float32 inner products; a running threshold (the current k-th
    best exact similarity, minus the float32 error bound) prefilters each tile, and the survivors are
    re-evaluated in float64, so the result equals a float64 brute force. Memory: O(N·D + k) plus one
    4096×4096 float32 tile.
    """
    x = as_unit_embeddings(emb)
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    n = x.shape[0]
    k = int(min(int(top_k), n * (n - 1) // 2))
    if k == 0:
        return PairRanking(np.empty((0, 2), np.int64), np.empty(0, np.float64))
    eps2 = screen_margin(x)

    tile = min(_TILE, n)
    lower = ~np.triu(np.ones((tile, tile), dtype=bool), 1)  # diagonal tile: keep j > i only
    buf_i = np.empty(0, np.int64)
    buf_j = np.empty(0, np.int64)
    buf_d = np.empty(0, np.float64)
    thr = -2.0  # float32 screening threshold (sims are >= -1 - eps)

    for a in range(0, n, tile):
        xa = x[a : a + tile]
        for b in range(a, n, tile):
            s = xa @ x[b : b + tile].T
            if a == b:
                np.putmask(s, lower[: s.shape[0], : s.shape[1]], -np.inf)
                n_valid = s.shape[0] * (s.shape[0] - 1) // 2
            else:
                n_valid = s.size
            if buf_d.size < k and n_valid >= k:
                # k-th best float32 value of this tile bounds the final k-th best from below
                flat = s.ravel()
                kth32 = float(np.partition(flat, flat.size - k)[flat.size - k])
                thr = max(thr, kth32 - eps2)
            idx = np.flatnonzero(s >= thr)
            if idx.size == 0:
                continue
            w = s.shape[1]
            ii = a + idx // w
            jj = b + idx % w
            buf_i = np.concatenate([buf_i, ii])
            buf_j = np.concatenate([buf_j, jj])
            buf_d = np.concatenate([buf_d, exact_dists(x, ii, jj)])
            if buf_d.size >= k:
                dk = float(np.partition(buf_d, k - 1)[k - 1])
                keep = buf_d <= dk
                buf_i, buf_j, buf_d = buf_i[keep], buf_j[keep], buf_d[keep]
                # d <= dk  =>  s >= 1 - 2 dk (up to rounding); screen float32 values with the bound
                thr = max(thr, 1.0 - 2.0 * dk - eps2)

    order = np.lexsort((buf_j, buf_i, buf_d))[:k]
    pairs = np.stack([buf_i[order], buf_j[order]], axis=1)
    return PairRanking(pairs, buf_d[order])
