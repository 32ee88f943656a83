"""Exact minimum spanning tree of the complete graph under d = ||x_i - x_j||²/4, in O(N·D) memory.

Single linkage = the MST with its edges sorted by weight, so this gives the exact single-linkage
dendrogram without the condensed N² matrix (scipy needs it; fastcluster.linkage_vector avoids it but
is a single-threaded Prim at ~1.5e9 distance terms/s). Hand-written because no installed library
offers an exact, GEMM-blocked MST.

Borůvka with certified neighbour lists:

0. Block order (``_Blocks``): every point goes to its most similar of ~N/64 pivots (evenly
   spaced rows, themselves grouped by ~sqrt of them), the points are sorted by pivot, and cut into blocks
   of 64 consecutive points, so that near points share few blocks.
1. One exact k-NN pass (k = 8; ``_first_lists``: upper-triangle float32 GEMM tiles in block order, each
   inner product screened for both of its points) gives every point its top-k neighbours; the k entries
   are re-evaluated in float64 and every other point is known to be at distance >= ``lb`` (the
   (k+1)-th float32 value widened by the rigorous rounding margin). Rows whose first entry cannot
   be certified that way (float32 near-ties) are settled exactly. The same tiles give every point its
   largest float32 similarity to each block (N × N/64 float32, at most 64 MiB: coarser blocks past
   N ≈ 32,000), and entries are searched only in the blocks whose maximum reaches a threshold.
2. Each round, a point's nearest neighbour *outside its component* is certified when the first
   list entry outside the component is closer than ``lb`` (components only grow, so the outside set
   only shrinks and an old list stays a valid lower bound). Each component takes its best certified
   edge, but only after every uncertified member whose lower bound could still beat (or tie) it has
   been rescanned exactly (``_rescan_exact``: float32 GEMM against the points outside its
   component, near-ties of the row maximum re-evaluated in float64; the result is a one-entry list
   whose distance becomes the new lower bound once that neighbour is absorbed). A rescan
   (``_rescan_blocks``) reads only the blocks whose first-pass maximum comes within the
   margin of the best maximum of a block wholly outside the row's component (a point attains it), about
   10 blocks of 64 instead of all N points on clustered data; same result, same ties (rescans that would
   read more than half of all row × point products go to ``_rescan_exact``). An int8 screening
   with int8 rescans, used before where the CPU has int8 dot-product units, was slower there too (figures at
   ``exact_mst``). A component
   holding more than half of the points is skipped while it would need rescans: any component's
   lightest outgoing edge is an MST edge (cut property), so correctness only needs progress, which
   the others supply.
3. Edges are compared by the key (d, min(i, j), max(i, j)), a strict total order, so Borůvka never
   forms a cycle and ties are resolved deterministically.

The GEMM tiles of step 1, the block rescans and the large ``_rescan_exact`` rescans run on a few threads, each
with a single-threaded BLAS (``_kernels.ordered_map``; the BLAS stays single-threaded for the whole MST,
``_kernels.blas_on_workers``, so that no spinning BLAS thread takes a core from them). The per-element work beside
the GEMMs is compiled (``_mst_kernels``: one pass per k-NN strip for its block maxima and entries, the list
merges, the rescan plan and scans, the best edge per component) and releases the GIL. The MST does not depend on
the number of threads.

Memory: the rows are read in block order (``_Blocks.xs``; every other access goes through ``_Blocks.rows`` and
``_Blocks.dists`` by point index): a copy of the caller's rows, or with ``exact_mst(..., in_place=True)`` the
caller's array itself, permuted and put back (``rank_irrelevant`` passes its own normalised copy), so N·D·4 bytes
in all; a full-width rescan (``_rescan_exact``) puts them into component order in place and back (a cycle-following
permutation, faster than the gathered copy it replaced: 1.2 against 5.4 ms at 20,000 × 192, 28 against 79 ms at
100,000 × 832); plus the N × N/64 block maxima (at most 64 MiB).

Measured (``benchmarks/bench_rankings.py``'s clustered data, D = 192, the tuning seed 1; 2-core Intel Xeon with
AVX-512, 2026-12-07; same tree before and after): N = 20,000 0.49 s against 0.82 s with the numpy forms those
kernels replaced; 50,000 2.2 against 3.0 s; 100,000 9.5 against 15.6 s. Of the 0.49 s at 20,000 the first pass'
GEMM (every pair once, 7.7·10¹⁰ flop) needs 0.22 s on the two cores.
"""

from __future__ import annotations

import threading

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components
from threadpoolctl import threadpool_limits

from ._kernels import BLOCK_ELEMS, blas_on_workers, exact_dists, floor32, ordered_map, screen_margin

_TILE = 4096  # tile side (points) of the k-NN pass; columns per GEMM block in the rescans
_STRIPS_PER_TILE = 8  # GEMM strip = _TILE // 8 = 512 rows (k-NN strip, rescan task): 8 MiB float32
_GROUPS = 64  # group maxima per row for the first k-NN thresholds (at least 2 (k + 1) are used)
_FLOOR = np.float32(-2.0)  # below every similarity of unit vectors (>= -1 - 1e-6)
_PARALLEL_MIN = 1 << 21  # rescans (and pivot searches) with fewer row×column products run on the calling thread
_CHUNK = 64  # width of the compiled chunk maxima (``_mst_kernels``: a literal there, for its SIMD loop)
_BLOCK = _CHUNK  # points per column block of the block maxima (``_Blocks``; larger past _BLOCK_MEM)
_RESCAN_DENSE = 0.5  # block rescans reading more than this share of all row×point products use ``_rescan_exact``
_PARALLEL_BLOCKS = 1 << 21  # block rescans with at least this many row×point products use worker threads
_TASK_MACS = 1 << 23  # a block-rescan task's fixed cost in float32 multiply-adds (~0.3 ms of GEMM)
_BLOCK_MEM = 1 << 24  # at most this many float32 block maxima (64 MiB)


def _group_bound(s: np.ndarray, kk: int) -> np.ndarray:
    """Per row of ``s``: the kk-th largest of its max(``_GROUPS``, 2 kk) column-group maxima (one pass).

    At least kk distinct entries of the row reach it, so it bounds the row's kk-th largest value
    from below (-inf when there are fewer than kk groups or kk finite group maxima). The groups are
    strided (column j in group j mod g, the last w mod g·(w // g) columns apart), so that a run of near
    points (``_Blocks`` order) spreads over all of them and the bound stays tight.
    """
    h, w = s.shape
    gs = -(-w // max(_GROUPS, 2 * kk))
    g = w // gs
    gm = np.empty((h, g + (g * gs < w)), np.float32)
    np.max(s[:, : g * gs].reshape(h, gs, g), axis=1, out=gm[:, :g])
    if g * gs < w:
        np.max(s[:, g * gs :], axis=1, out=gm[:, g])
    if gm.shape[1] < kk:
        return np.full(h, -np.inf, np.float32)
    return np.partition(gm, gm.shape[1] - kk, axis=1)[:, gm.shape[1] - kk]


def _nearest_pivot(x: np.ndarray, piv: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per row of ``x``: the index of its most similar row of ``piv`` (float32 GEMM, first on ties), and that value."""
    n = x.shape[0]
    g = np.empty(n, np.int64)
    v = np.empty(n, np.float32)
    step = max(1, min(n // 8, BLOCK_ELEMS // (4 * max(piv.shape[0], x.shape[1]))))

    def nearest(a: int) -> None:
        s = x[a : a + step] @ piv.T
        g[a : a + step] = np.argmax(s, axis=1)
        v[a : a + step] = s[np.arange(s.shape[0]), g[a : a + step]]

    with ordered_map(n * piv.shape[0] >= _PARALLEL_MIN) as pmap:
        for _ in pmap(nearest, range(0, n, step)):
            pass
    return g, v


class _Blocks:
    """Points ordered so that near points share fixed-size blocks, and each point's largest float32 similarity
    to every block (filled by the first pass, ``_first_lists``), for the block-pruned rescans (``_rescan_blocks``).

    Order: every point goes to its most similar of ``nb`` pivots (evenly spaced rows; no randomness), points
    sorted by (pivot, similarity descending); block b = sorted positions [b·B, (b+1)·B). ``m[p, b]`` = the
    largest float32 GEMM value s32(p, q) over the points q of block b other than p itself (-inf: none), so
    every such q has exact s(p, q) <= m[p, b] + eps (``_kernels.sim_error_bound``). Memory N·nb float32
    (``_BLOCK_MEM`` caps it: B doubles until it fits).
    """

    def __init__(self, x: np.ndarray, in_place: bool = False) -> None:
        """``in_place``: ``xs`` is ``x`` itself, its rows permuted into block order (``restore`` puts them back);
        else ``xs`` is a block-ordered copy."""
        n = x.shape[0]
        b = _BLOCK
        while n * -(-n // b) > _BLOCK_MEM:
            b *= 2
        self.size = b
        self.nb = -(-n // b)
        piv = x[np.linspace(0, n - 1, self.nb).astype(np.int64)]
        g, v = _nearest_pivot(x, piv)
        # pivots grouped the same way by ~sqrt(nb) of them, so the runs of near pivots are adjacent
        top = piv[np.linspace(0, self.nb - 1, max(1, int(np.sqrt(self.nb)))).astype(np.int64)]
        gp, vp = _nearest_pivot(piv, top)
        rank = np.empty(self.nb, np.int64)
        rank[np.lexsort((np.arange(self.nb), -vp, gp))] = np.arange(self.nb)
        self.perm = np.lexsort((np.arange(n), -v, rank[g]))  # sorted position -> point
        self.pos = np.empty(n, np.int64)  # point -> sorted position
        self.pos[self.perm] = np.arange(n)
        if in_place:
            from ._mst_kernels import permute_rows  # numba: compiled (or loaded from its cache) on first use

            permute_rows(x, self.perm)
            self.xs = x
        else:
            self.xs = x[self.perm]
        self.m = np.full((n, self.nb), -np.inf, np.float32)  # by sorted position

    def restore(self) -> None:
        """Put the rows of an in-place ``xs`` back into the caller's order."""
        from ._mst_kernels import permute_rows

        permute_rows(self.xs, self.pos)

    def rows(self, points: np.ndarray) -> np.ndarray:
        """The float32 rows of ``points`` (point indices), gathered from the block-ordered ``xs``."""
        return self.xs[self.pos[points]]

    def dists(self, i: np.ndarray, j: np.ndarray, parallel: bool = False) -> np.ndarray:
        """``exact_dists`` of the point pairs (i, j): the same rows, so the same values, as on the caller's array."""
        return exact_dists(self.xs, self.pos[np.asarray(i)], self.pos[np.asarray(j)], parallel=parallel)

    def strip(
        self, r0: int, c0: int, s: np.ndarray, tr: np.ndarray, tc: np.ndarray | None
    ) -> tuple[tuple[np.ndarray, np.ndarray, np.ndarray], list[tuple[int, int, np.ndarray]]]:
        """One compiled pass over strip ``s`` (rows from position r0, columns from c0; ``_mst_kernels.strip_pass``):
        its entries (i, j, s[i, j]) with s >= tr[i] or (``tc`` given) s >= tc[j], each once, and the block maxima
        to fold, (first row, first block, per-row maxima over each block's columns) and, with ``tc``, the same per
        column over each block's rows. Blocks wider than 64 points take the maximum of their 64-point chunks."""
        from ._mst_kernels import strip_pass  # numba: compiled (or loaded from its cache) on first use

        b = self.size
        cw = min(b, _CHUNK)  # every block size past 64 is a multiple of 64
        h, w = s.shape
        cols = tc is not None
        r_off, c_off = r0 % cw, c0 % cw
        rm = np.empty((h, 1 + max(0, -(-(w - cw + c_off) // cw))), np.float32)
        cm = np.empty((w, 1 + max(0, -(-(h - cw + r_off) // cw))) if cols else (0, 0), np.float32)
        tcv = tc if cols else tr[:0]
        room = 32 * h
        while True:
            ent = np.empty(room, np.int64), np.empty(room, np.int64), np.empty(room, np.float32)
            count = strip_pass(s, r_off, c_off, cw, tr, tcv, cols, rm, cm, *ent)
            if count <= room:
                break
            room = count
        folds = [(r0, c0 // b, self._blocks_of_chunks(rm, c0 - c_off, cw))]
        if cols:
            folds.append((c0, r0 // b, self._blocks_of_chunks(cm, r0 - r_off, cw)))
        return (ent[0][:count], ent[1][:count], ent[2][:count]), folds

    def _blocks_of_chunks(self, v: np.ndarray, start: int, cw: int) -> np.ndarray:
        """Maxima over the blocks of the chunk maxima ``v`` (chunk c > 0 starts at position start + cw·c; chunk 0 at
        or after ``start``, in the same block)."""
        if self.size == cw:
            return v
        blk = (start + cw * np.arange(v.shape[1])) // self.size
        return np.maximum.reduceat(v, np.r_[0, np.flatnonzero(np.diff(blk)) + 1], axis=1)

    def fold(self, p0: int, b0: int, red: np.ndarray) -> None:
        """m[p0 + i, b0 + j] = max(m[..], red[i, j]) (on the calling thread only: the fold is not atomic)."""
        blk = self.m[p0 : p0 + red.shape[0], b0 : b0 + red.shape[1]]
        np.maximum(blk, red, out=blk)


def _first_lists(
    k: int,
    eps2: float,
    lists: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    blocks: _Blocks,
) -> None:
    """Round-1 lists: the k nearest points of every point, and lb from the (k+1)-th.

    Hand-written, not faiss: faiss' k-NN search computes the full N² product and its heaps take
    about as long again; here each off-diagonal tile gives its inner products to both of their
    points (half the GEMM), on single-threaded-BLAS worker threads. Per point the k+1 largest
    float32 similarities s32 (ties by index) are kept. Phase 1, the diagonal squares (a quarter
    tile side) as full squares (rows only, self masked): a strip (``_TILE // 8`` rows) yields the
    entries reaching ``_group_bound``; phase 2, the rest of the upper triangle (the off-diagonal
    squares of each diagonal tile, then the off-diagonal tiles): entries reaching the (k+1)-th value of
    the merged list of their row or their column point. Both thresholds bound the final
    (k+1)-th value from below, so the kept lists are the exact top-(k+1) under (-s32, j) whatever
    the thread timing. The first k are re-evaluated in float64 (sorted by (d, j)); every other
    point has s32 <= v_(k+1), hence d >= lb = (1 - v_(k+1) - eps2) / 2. Rows whose first entry is
    not below lb (float32 near-ties) are settled by ``_rescan_blocks``.

    The tiles run over the points in ``blocks.perm`` order and every strip also folds its block maxima into
    ``blocks.m`` (row maxima per column block; off the diagonal also column maxima per row block), so the
    rescans can prune blocks (``_rescan_blocks``); the lists and lb do not depend on the order. In that
    order near points are adjacent, so the diagonal squares already give tight thresholds, and a strip's
    entries are searched only in the 64-point chunks whose maximum reaches one (``_Blocks.strip``). The entries
    are merged into the lists on the calling thread while the workers compute (``_mst_kernels.merge_top``).
    """
    nbr, nd, lb, exact0 = lists
    xw = blocks.xs  # the tiles' point order
    n = xw.shape[0]
    k1 = k + 1
    tile = min(_TILE, n)
    h = max(1, tile // _STRIPS_PER_TILE)
    h = h // _CHUNK * _CHUNK or h  # strips at multiples of 64 points: the strip pass' SIMD chunk maxima
    topv = np.full((n, k1), -np.inf, np.float32)  # k+1 largest s32 per point, descending
    topj = np.full((n, k1), -1, np.int64)
    thr = np.full(n, -np.inf, np.float32)  # = topv[:, k]: smaller entries cannot enter a list
    local = threading.local()

    def tile_candidates(task: tuple[int, int, int, int, bool]) -> tuple[np.ndarray, np.ndarray, np.ndarray, list]:
        """Pairs (p, q, s32) of tile rows ra..ra1 × columns b..b1 that may enter p's (or, off the diagonal,
        q's) list, and the block maxima (p0, b0, values) to fold into ``blocks.m`` (positions in ``xw`` order)."""
        ra, ra1, b, b1, on_diag = task
        folds: list = []
        if not hasattr(local, "buf"):
            local.buf = np.empty(h * tile, np.float32)
        out_p, out_q, out_s = [], [], []
        for r0 in range(ra, ra1, h):
            r1 = min(r0 + h, ra1)
            s = local.buf[: (r1 - r0) * (b1 - b)].reshape(r1 - r0, b1 - b)
            np.matmul(xw[r0:r1], xw[b:b1].T, out=s)
            tr = np.maximum(thr[r0:r1], _FLOOR)  # the floor excludes masked (-inf) entries
            if on_diag:
                s.ravel()[r0 - b :: b1 - b + 1][: r1 - r0] = -np.inf  # the point itself
                np.maximum(tr, _group_bound(s, k1), out=tr)
            tc = None if on_diag else np.maximum(thr[b:b1], _FLOOR)
            (ii, jj, vv), strip_folds = blocks.strip(r0, b, s, tr, tc)
            folds += strip_folds
            if ii.size:
                out_p.append(r0 + ii)
                out_q.append(b + jj)
                out_s.append(vv)
        if not out_p:
            return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float32), folds
        return np.concatenate(out_p), np.concatenate(out_q), np.concatenate(out_s), folds

    from ._mst_kernels import merge_top  # numba: compiled (or loaded from its cache) on first use

    with ordered_map(n > tile, depth=8) as pmap:
        # the diagonal squares first (a quarter tile: fewer products computed twice, and more tasks to share):
        # every point then has a threshold from its own square; then the rest of the upper triangle
        sub = max(h, tile // 4 // h * h)
        diag, off = [], []
        for a in range(0, n, tile):
            a1 = min(a + tile, n)
            for u in range(a, a1, sub):
                diag.append((u, min(u + sub, a1), u, min(u + sub, a1), True))
                off += [(u, min(u + sub, a1), v, min(v + sub, a1), False) for v in range(u + sub, a1, sub)]
            off += [(a, a1, b, min(b + tile, n), False) for b in range(a + tile, n, tile)]
        for p, q, sv, folds in pmap(tile_candidates, diag):
            merge_top(p, q, sv, topv, topj, thr)
            for f in folds:
                blocks.fold(*f)
        for p, q, sv, folds in pmap(tile_candidates, off):
            merge_top(p, q, sv, topv, topj, thr)  # each entry goes to both of its points' lists
            merge_top(q, p, sv, topv, topj, thr)
            for f in folds:
                blocks.fold(*f)

    # back to point indices
    topv, topj = topv[blocks.pos], np.where(topj >= 0, blocks.perm[np.maximum(topj, 0)], -1)[blocks.pos]
    jj = topj[:, :k]
    d = blocks.dists(np.repeat(np.arange(n), k), jj.ravel(), parallel=True).reshape(n, k)
    o = np.lexsort((jj, d), axis=1)
    nbr[:] = np.take_along_axis(jj, o, axis=1)
    nd[:] = np.take_along_axis(d, o, axis=1)
    # every point not in the list has float32 similarity <= the (k+1)-th value (-inf: none left)
    lb[:] = (1.0 - (topv[:, k].astype(np.float64) + eps2)) * 0.5
    exact0[:] = False
    bad = np.flatnonzero(~(nd[:, 0] < lb))
    if bad.size:  # float32 near-ties at the list boundary: settle those rows exactly
        _rescan_blocks(bad, np.arange(n), eps2, lists, blocks)


def _store_exact_nearest(
    nbr: np.ndarray,
    nd: np.ndarray,
    lb: np.ndarray,
    exact0: np.ndarray,
    rb: np.ndarray,
    cb: np.ndarray,
    db: np.ndarray,
) -> None:
    """Rows ``rb`` get the one-entry list (``cb``, ``db``) of a rescan: exact, and ``db`` their new lower bound."""
    nbr[rb, 0] = cb
    nd[rb, 0] = db
    nbr[rb, 1:] = rb[:, None]  # own index: never outside = empty slot
    nd[rb, 1:] = np.inf
    lb[rb] = db
    exact0[rb] = True


def _rescan_exact(
    rows: np.ndarray,
    comp: np.ndarray,
    eps2: float,
    lists: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    blocks: _Blocks,
) -> None:
    """Exact nearest point outside its own component for ``rows`` (ties by index).

    Points are sorted by component, so a row's own component is one column range: skipped in the
    GEMM when a row strip has one component, else set to -inf by slicing. Each task is a strip of
    rows against ``_TILE``-column blocks (one float32 GEMM each into a per-worker buffer that stays
    in cache); per row it keeps the running float32 maximum m and records the columns with
    s32 >= m - eps2 at the time (m only grows, so this is a superset of the final near-ties, filtered
    at the end). The near-ties are re-evaluated in float64 and the smallest (d, j) is stored as a
    one-entry list with lb = its distance. Large rescans run on worker threads with a
    single-threaded BLAS each (``_kernels.ordered_map``); results are independent of their number.
    """
    n = blocks.xs.shape[0]
    perm = np.argsort(comp, kind="stable")  # component-order position -> point
    at = np.empty(n, np.int64)  # point -> component-order position
    at[perm] = np.arange(n)
    xs = blocks.xs  # put into component order in place while the rescan runs, then back into block order
    to_comp = blocks.pos[perm]
    from ._mst_kernels import permute_rows  # numba: compiled (or loaded from its cache) on first use

    permute_rows(xs, to_comp)
    try:
        _rescan_sorted(xs, perm, at, rows, comp, eps2, lists)
    finally:
        back = np.empty(n, np.int64)
        back[to_comp] = np.arange(n)
        permute_rows(xs, back)


def _rescan_sorted(
    xs: np.ndarray,
    perm: np.ndarray,
    at: np.ndarray,
    rows: np.ndarray,
    comp: np.ndarray,
    eps2: float,
    lists: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """``_rescan_exact`` on the rows ``xs`` sorted by component (row c is point perm[c]; point p is row at[p])."""
    nbr, nd, lb, exact0 = lists
    n = xs.shape[0]
    neg = -np.inf
    cs = comp[perm]
    seg_lo = np.searchsorted(cs, comp[rows], side="left")
    seg_hi = np.searchsorted(cs, comp[rows], side="right")
    o = np.lexsort((rows, comp[rows]))
    rows, seg_lo, seg_hi = rows[o], seg_lo[o], seg_hi[o]
    w = min(_TILE, n)
    parallel = rows.size * n >= _PARALLEL_MIN
    h = max(1, _TILE // _STRIPS_PER_TILE)
    h = max(1, min(h, -(-rows.size // 4))) if parallel else h  # >= 4 tasks to share
    local = threading.local()

    def nearest(a: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        """Exact nearest outside point (row, j, d) of the rows in strip ``a`` (runs in a worker)."""
        r_ = rows[a : a + h]
        lo_, hi_ = seg_lo[a : a + h], seg_hi[a : a + h]
        xr = xs[at[r_]]
        if not hasattr(local, "buf"):
            local.buf = np.empty(h * w, np.float32)
        starts = np.flatnonzero(np.r_[True, lo_[1:] != lo_[:-1]])
        one = starts.size == 1  # one component: compute only the outside columns
        spans = [(0, int(lo_[0])), (int(hi_[0]), n)] if one else [(0, n)]
        runs = zip(starts.tolist(), np.r_[starts[1:], r_.size].tolist(), strict=True)
        runs = [(u, v, int(lo_[u]), int(hi_[u])) for u, v in runs] if 1 < starts.size <= 64 else []
        own = comp[r_][:, None] if starts.size > 64 else None  # many small components: broadcast
        m = np.full(r_.size, neg, local.buf.dtype)
        rec_r, rec_c, rec_s = [], [], []
        for c_lo, c_hi in spans:
            for c0 in range(c_lo, c_hi, w):
                c1 = min(c0 + w, c_hi)
                s = local.buf[: r_.size * (c1 - c0)].reshape(r_.size, c1 - c0)
                np.matmul(xr, xs[c0:c1].T, out=s)
                for u, v, lo, hi in runs:
                    if lo < c1 and hi > c0:
                        s[u:v, max(lo, c0) - c0 : min(hi, c1) - c0] = neg
                if own is not None:
                    np.copyto(s, neg, where=own == cs[None, c0:c1])
                rm = s.max(axis=1)
                np.maximum(m, rm, out=m)
                thr = floor32(m.astype(np.float64) - eps2)
                sel = np.flatnonzero((rm >= thr) & (rm > neg))
                if sel.size:
                    sub = s[sel]
                    flat = np.flatnonzero(sub >= thr[sel, None])
                    rec_r.append(sel[flat // (c1 - c0)])
                    rec_c.append(c0 + flat % (c1 - c0))
                    rec_s.append(sub.ravel()[flat])
        rr, cc, sv = np.concatenate(rec_r), np.concatenate(rec_c), np.concatenate(rec_s)
        keep = sv >= floor32(m[rr].astype(np.float64) - eps2)
        rr, cpos = rr[keep], cc[keep]  # columns: component-order positions
        dd = exact_dists(xs, at[r_[rr]], cpos)  # the same rows as the caller's, so the same values
        cc = perm[cpos]
        oo = np.lexsort((cc, dd, rr))
        first = np.ones(oo.size, bool)
        first[1:] = rr[oo][1:] != rr[oo][:-1]
        sel = oo[first]
        return r_[rr[sel]], cc[sel], dd[sel]

    with ordered_map(parallel) as pmap:
        for rb, cb, db in pmap(nearest, range(0, rows.size, h)):
            _store_exact_nearest(nbr, nd, lb, exact0, rb, cb, db)


def _rescan_blocks(
    rows: np.ndarray,
    comp: np.ndarray,
    eps2: float,
    lists: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
    blocks: _Blocks,
) -> None:
    """``_rescan_exact`` (same lists, same ties) with the GEMMs limited to the blocks that can hold the answer.

    A row's blocks are "mixed" when they hold a point of its own component (scanned, own points masked) or
    "pure" (every point outside). The largest first-pass block maximum m0 of a pure block is attained by an
    outside point q0, so every pure block b with m[r, b] < m0 - eps2 is skipped: its points q have
    s(r, q) <= m[r, b] + eps < s(r, q0) - eps - 2 delta + ... <= s(r, q0) - delta, i.e. d(r, q) > d(r, q0)
    (eps2 = 2 eps + 2 delta + 1e-12, ``_kernels.screen_margin``). Every other block is one small GEMM of its
    rows; per row the columns with s32 >= max s32 - eps2 (the final near-ties; a superset is recorded
    per block, and m0 - 2 eps2 <= max s32 - eps2 because q0's rescan value is >= m0 - 2 eps) are
    re-evaluated in float64 and the smallest (d, j) wins, as in ``_rescan_exact``.
    """
    nbr, nd, lb, exact0 = lists
    n, dim = blocks.xs.shape
    bs, nb = blocks.size, blocks.nb
    cs = comp[blocks.perm]  # component by sorted position
    key = np.unique(cs.astype(np.int64) * nb + np.arange(n) // bs)  # (component, block) pairs present
    kc, kb = key // nb, key % nb
    cr = comp[rows]
    lo = np.searchsorted(kc, cr, side="left")
    cnt = np.searchsorted(kc, cr, side="right") - lo
    from ._mst_kernels import block_rows, scan_block  # numba: compiled (or loaded from its cache) on first use

    # m0 from the blocks holding no point of the row's component; a mixed block's maximum bounds its outside
    # points too: it is skipped by the same rule
    m0, bi, ri = block_rows(blocks.m, blocks.pos[rows], lo, cnt, kb, eps2)
    edges = np.searchsorted(bi, np.arange(nb + 1))
    n_tasks = int(np.count_nonzero(np.diff(edges)))
    # little pruned (near-equidistant points), or so few rows that the per-block calls cost more than all
    # products: the full-tile rescan (parallel, same result)
    if bi.size * bs > _RESCAN_DENSE * rows.size * n or rows.size * n * dim <= n_tasks * _TASK_MACS:
        _rescan_exact(rows, comp, eps2, lists, blocks)
        return
    tasks = [(b, ri[edges[b] : edges[b + 1]]) for b in range(nb) if edges[b + 1] > edges[b]]
    floor0 = m0 - 2.0 * eps2  # <= the final near-tie threshold of each row

    def scan(task: tuple[int, np.ndarray]) -> tuple[np.ndarray, ...]:
        """Block ``b`` against its rows: (row slots, their maxima, recorded slots, points, s32)."""
        b, slot = task
        c0, c1 = b * bs, min(b * bs + bs, n)
        r_ = rows[slot]
        s = blocks.rows(r_) @ blocks.xs[c0:c1].T
        rm, i, j, sv = scan_block(s, comp[r_], cs[c0:c1], floor0[slot], eps2)
        return slot, rm, slot[i], blocks.perm[c0 + j], sv

    m = np.full(rows.size, -np.inf, np.float32)
    rec_r, rec_c, rec_s = [], [], []
    # small GEMMs lose much to a multi-threaded BLAS' synchronisation: single-threaded BLAS, tasks on worker threads
    with ordered_map(bi.size * bs >= _PARALLEL_BLOCKS) as pmap, threadpool_limits(1, user_api="blas"):
        for slot, rm, rr, cc, sv in pmap(scan, tasks):
            m[slot] = np.maximum(m[slot], rm)
            rec_r.append(rr)
            rec_c.append(cc)
            rec_s.append(sv)
    rr, cc, sv = np.concatenate(rec_r), np.concatenate(rec_c), np.concatenate(rec_s)
    keep = sv >= floor32(m[rr].astype(np.float64) - eps2)
    rr, cc = rr[keep], cc[keep]
    dd = blocks.dists(rows[rr], cc, parallel=True)
    oo = np.lexsort((cc, dd, rr))
    first = np.ones(oo.size, bool)
    first[1:] = rr[oo][1:] != rr[oo][:-1]
    sel = oo[first]
    if sel.size != rows.size:  # pragma: no cover - every row has an outside point in a scanned block
        raise RuntimeError("block rescan lost a row")
    _store_exact_nearest(nbr, nd, lb, exact0, rows[rr[sel]], cc[sel], dd[sel])


def _best_per_component(
    ci: np.ndarray, cand_j: np.ndarray, cand_d: np.ndarray, comp: np.ndarray, n_comp: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Cheapest candidate edge ``ci -> cand_j[ci]`` of each component under the key (d, lo, hi), so ties
    resolve the same way everywhere. Returns (sel, lo, hi): ``sel`` indexes ``ci``, one per component present
    (in component order); ``lo``/``hi`` are the endpoints (lo < hi) of every edge in ``ci``."""
    from ._mst_kernels import best_edges  # numba: compiled (or loaded from its cache) on first use

    return best_edges(ci, cand_j, cand_d, comp, n_comp), np.minimum(ci, cand_j[ci]), np.maximum(ci, cand_j[ci])


def exact_mst(x: np.ndarray, k: int = 8, *, in_place: bool = False) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Exact MST of unit float32 rows ``x``: arrays (i, j, d) of the N-1 edges, i < j, plus stats.

    ``in_place`` (``x`` a writable C-contiguous float32 array): the rows of ``x`` are permuted into block order
    while the MST runs and put back before it returns, also on an error, instead of copied: one N·D·4-byte copy
    fewer (the same MST). Nothing else may read ``x`` meanwhile.
    """
    n = x.shape[0]
    stats: dict = {"rounds": 0, "rescanned": []}
    if n == 1:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64), stats
    if in_place and not (x.dtype == np.float32 and x.flags.c_contiguous and x.flags.writeable):
        raise ValueError("in_place needs a writable C-contiguous float32 array")
    with blas_on_workers():  # no spinning BLAS threads beside the worker pools (``_kernels.blas_on_workers``)
        eps2 = screen_margin(x)
        blocks = _Blocks(x, in_place=in_place)
        try:
            return _exact_mst(blocks, k, eps2, stats)
        finally:
            if in_place:
                blocks.restore()


def _exact_mst(blocks: _Blocks, k: int, eps2: float, stats: dict) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    n = blocks.xs.shape[0]
    k = int(min(k, n - 1))
    nbr = np.empty((n, k), np.int64)
    nd = np.empty((n, k), np.float64)
    lb = np.empty(n, np.float64)
    exact0 = np.zeros(n, bool)  # entry 0 is the exact nearest outside point (near-tie fallback)
    lists = (nbr, nd, lb, exact0)
    # float32 block order and block maxima on every CPU: on an AVX-512 VNNI Xeon (2026-12-07, seed-1 data of
    # bench_rankings) they beat the former int8 screening + int8 rescans there too, 0.85 against 1.2 s at
    # N = 20,000, 3.0 against 4.8 s at 50,000, 15.6 against 17.2 s at 100,000 (D = 192, the same tree)
    _first_lists(k, eps2, lists, blocks)

    ei: list[np.ndarray] = []
    ej: list[np.ndarray] = []
    ed: list[np.ndarray] = []
    comp = np.arange(n)
    n_comp = n
    idx = np.arange(n)
    while n_comp > 1:
        stats["rounds"] += 1
        sizes = np.bincount(comp, minlength=n_comp)
        outside = comp[nbr] != comp[:, None]
        has = outside.any(axis=1)
        p = np.argmax(outside, axis=1)
        cand_j = nbr[idx, p]
        cand_d = np.where(has, nd[idx, p], np.inf)
        cert = has & ((cand_d < lb) | ((p == 0) & exact0))
        lower = np.where(cert, cand_d, np.minimum(cand_d, lb))

        # best certified edge per component under the key (d, lo, hi)
        best_d = np.full(n_comp, np.inf)
        ci = np.flatnonzero(cert)
        if ci.size:
            sel, _, _ = _best_per_component(ci, cand_j, cand_d, comp, n_comp)
            best_d[comp[ci][sel]] = cand_d[ci][sel]
        need = ~cert & (lower <= best_d[comp])
        giant = np.flatnonzero(sizes * 2 > n)
        skip = np.zeros(n_comp, bool)
        if giant.size and need[comp == giant[0]].any():
            skip[giant[0]] = True
            need &= comp != giant[0]
        rows = np.flatnonzero(need)
        stats["rescanned"].append(int(rows.size))
        if rows.size:
            _rescan_blocks(rows, comp, eps2, lists, blocks)
            cand_j[rows] = nbr[rows, 0]
            cand_d[rows] = nd[rows, 0]
            cert[rows] = True
        ci = np.flatnonzero(cert & ~skip[comp])
        sel, lo, hi = _best_per_component(ci, cand_j, cand_d, comp, n_comp)
        lo, hi, dd = lo[sel], hi[sel], cand_d[ci][sel]
        key = np.unique(lo * n + hi, return_index=True)[1]
        ei.append(lo[key])
        ej.append(hi[key])
        ed.append(dd[key])
        a = np.concatenate(ei)
        b = np.concatenate(ej)
        g = coo_matrix((np.ones(a.size, np.int8), (a, b)), shape=(n, n))
        before = n_comp
        n_comp, comp = connected_components(g, directed=False)
        comp = comp.astype(np.int32)
        if n_comp >= before:  # pragma: no cover - every Borůvka round merges; a stall would be a bug
            raise RuntimeError(f"exact MST made no progress in round {stats['rounds']} ({n_comp} components)")
    i_all = np.concatenate(ei)
    j_all = np.concatenate(ej)
    d_all = np.concatenate(ed)
    if i_all.size != n - 1:  # pragma: no cover - would indicate a bug
        raise RuntimeError(f"MST has {i_all.size} edges for {n} points")
    return i_all, j_all, d_all, stats
