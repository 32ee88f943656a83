"""Near-duplicate ranking: the exact top-k closest pairs (Gröger et al. 2023 §3.2; SelfClean's pair ranking).

Hand-written because no library returns the *global* top-k pairs exactly in O(N·D) memory
(faiss k-NN lists need a certificate and a retry to be exact).

Scheme: the upper triangle is cut into ``_TILE``-point tiles; a tile is computed as strips of
``_TILE // 8`` rows (one float32 GEMM each, stored as the integer screening products of
``_lowp.ScreenRows`` in a per-worker int32 buffer that stays in cache), and each strip is screened
against a threshold ``thr`` on the screening similarity ŝ = Q / S², within ``_lowp``'s rigorous
margin of the exact one: every pair of the final top-k has ``ŝ >= thr``. The survivors are
re-evaluated in float64 (``_kernels.exact_dists``) and merged, in tile order, into a buffer of the
best pairs, which tightens ``thr``. Tiles run on a few threads with a single-threaded BLAS each
(``_kernels.ordered_map``).
"""

from __future__ import annotations

import numbers
import threading

import numpy as np

import noisycal_platform.cleaning.rankings._pruned as _pruned  # the module: its switches are read per call

from ._kernels import as_unit_embeddings, exact_dists, ordered_map
from ._lowp import screen_rows
from .types import PairRanking

__all__ = ["rank_near_duplicates"]

_TILE = 4096  # tile side (points)
_STRIPS_PER_TILE = 8  # GEMM strip = _TILE // 8 = 512 rows: 8 MiB int32 buffer per worker

_TileOut = tuple[np.ndarray, np.ndarray, np.ndarray, float]


class _Screen:
    """Shared screening threshold (similarity units; written by the main thread, read by the workers)."""

    def __init__(self) -> None:
        self.thr = -2.0  # sims are >= -1 - eps: everything passes
        self.full = False  # the merged buffer holds >= k pairs (thr comes from its k-th distance)


def rank_near_duplicates(emb: np.ndarray, top_k: int) -> PairRanking:
    """Exact top-k closest pairs under d = (1 - cos) / 2.

    Returns ``PairRanking(pairs, scores)``: ``pairs[r] = (i, j)`` with ``i < j``, ``scores[r] = d(i, j)``,
    sorted by ``(d, i, j)`` ascending (ties broken deterministically by the indices). This is the
    first ``top_k`` entries of SelfClean's ranking of all N(N-1)/2 pairs.

    ``top_k`` larger than N(N-1)/2 is **clamped**: all pairs are returned (none for N = 1).

    Algorithm: upper-triangle tiles of integer screening products (``_lowp``), screened in row strips
    against a threshold that only keeps pairs able to enter the top k: ``kth - eps2`` with kth the
    k-th largest screening similarity seen in the tile (while fewer than k pairs are merged), then
    ``1 - 2 d_k - eps2`` with d_k the current k-th smallest exact distance (eps2 =
    ``ScreenRows.eps2``: twice the rigorous screening error plus twice the norm deviation). Survivors
    are re-evaluated in float64 and only pairs with d <= d_k are kept (ties included; the final
    order is by (d, i, j)), so the result equals a float64 brute force and does not depend on the
    tile order, the thread timing or the worker count. Memory:
    O(N·D + k) (a float32 copy of the rows) plus one 512×4096 int32 strip per worker thread (at most 4).

    From ``_pruned.PRUNE_MIN_ROWS`` rows the cell-pruned form (``_pruned.pruned_top_pairs``: the same pairs, most of
    the N² inner products skipped on clustered embeddings) runs first; this scan runs where it declines.
    """
    x = as_unit_embeddings(emb)
    if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
        raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
    n = x.shape[0]
    k = int(min(int(top_k), n * (n - 1) // 2))
    if k == 0:
        return PairRanking(np.empty((0, 2), np.int64), np.empty(0, np.float64))
    if n >= _pruned.PRUNE_MIN_ROWS and (pruned := _pruned.pruned_top_pairs(x, k)) is not None:
        return pruned
    lp = screen_rows(x)
    eps2 = lp.eps2
    masked = np.iinfo(np.int32).min  # below every screening product

    tile = min(_TILE, n)
    h = max(1, tile // _STRIPS_PER_TILE)
    tri = np.tri(h, dtype=bool)  # diagonal strip block: mask column <= row (keep j > i)
    screen = _Screen()
    local = threading.local()

    def tile_pairs(ab: tuple[int, int]) -> _TileOut:
        """Survivors (i, j, d) of tile (a, b) and its own threshold (runs in a worker)."""
        a, b = ab
        if not hasattr(local, "buf"):
            local.buf = np.empty(h * tile, dtype=np.int32)
        top = None if screen.full else np.empty(0, np.int32)  # k largest products Q of this tile so far
        thr_own = -2.0
        out_i, out_j = [], []
        for r0 in range(a, min(a + tile, n), h):
            r1 = min(r0 + h, a + tile, n)
            c0, c1 = (r0 if a == b else b), min(b + tile, n)  # diagonal tile: columns >= r0 only
            s = local.buf[: (r1 - r0) * (c1 - c0)].reshape(r1 - r0, c1 - c0)
            lp.gemm(r0, r1, c0, c1, s)
            if a == b:
                np.copyto(s[:, : r1 - r0], masked, where=tri[: r1 - r0, : r1 - r0])
            if top is not None:
                flat = s.ravel()
                top = np.concatenate([top, flat[flat >= top.min()] if top.size >= k else flat])
                if top.size > k:
                    top = np.partition(top, top.size - k)[top.size - k :]
                if top.size >= k and (kth := int(top.min())) > masked:
                    thr_own = max(thr_own, lp.to_sim(kth) - eps2)
            thr = lp.int_threshold(max(screen.thr, thr_own))  # rounded down: never drops a pair
            rows = np.flatnonzero(s.max(axis=1) >= thr)  # row maxima first: 2.5x cheaper than s >= thr
            if rows.size:
                w = c1 - c0
                flat = np.flatnonzero(s[rows] >= thr)  # np.nonzero on 2-D is ~7x slower
                out_i.append(r0 + rows[flat // w])
                out_j.append(c0 + flat % w)
        if not out_i:
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0), thr_own
        ii, jj = np.concatenate(out_i), np.concatenate(out_j)
        return ii, jj, exact_dists(x, ii, jj), thr_own

    buf_i = np.empty(0, np.int64)
    buf_j = np.empty(0, np.int64)
    buf_d = np.empty(0, np.float64)
    tiles = ((a, b) for a in range(0, n, tile) for b in range(a, n, tile))
    with ordered_map(n > tile) as pmap:
        for ii, jj, dd, thr_own in pmap(tile_pairs, tiles):
            # k pairs with ŝ >= kth exist, so every top-k pair has ŝ >= kth - eps2
            screen.thr = max(screen.thr, thr_own)
            if ii.size == 0:
                continue
            buf_i = np.concatenate([buf_i, ii])
            buf_j = np.concatenate([buf_j, jj])
            buf_d = np.concatenate([buf_d, dd])
            if buf_d.size >= k:
                dk = float(np.partition(buf_d, k - 1)[k - 1])
                keep = buf_d <= dk
                buf_i, buf_j, buf_d = buf_i[keep], buf_j[keep], buf_d[keep]
                # d <= dk  =>  s >= 1 - 2 dk (up to the norm deviation); screen ŝ with the bound
                screen.thr = max(screen.thr, 1.0 - 2.0 * dk - eps2)
                screen.full = True

    order = np.lexsort((buf_j, buf_i, buf_d))[:k]
    pairs = np.stack([buf_i[order], buf_j[order]], axis=1)
    return PairRanking(pairs, buf_d[order])
