"""The compiled kernels of the exact MST (numba; imported on the first ``exact_mst`` call, not with the package).

Strip pass (``strip_pass``, the first pass). For a float32 GEMM strip s (rows × columns), in one pass over it: the
maximum of each row over each 64-point chunk of columns, of each column over each 64-row chunk (off the diagonal),
and the entries that reach their row's or their column's threshold (only chunks whose maximum reaches it are read
again). `_mst._Blocks` folds the chunk maxima into its blocks (a multiple of 64 points). A row's chunk maximum is
taken 64 → 16 lanes by three vertical maxima and then across the lanes, which the compiler turns into SIMD
maxima, and the column maxima read each row again while it is still in the first-level cache: on one 512 × 4,096
strip (2-core Intel Xeon with AVX-512, 2026-12-07) the two maxima took 0.51 ms against 1.9 ms for numpy's
``np.maximum.reduceat`` + the per-block ``max(axis=0)``. Hand-written: numpy has no one-pass row-and-column
segment maximum, and its thresholded search over the chunks took as long again in many small calls.

``fastmath`` without ``ninf``: the strips hold -inf (a point's own product is masked) and no NaN (unit
vectors), and the maximum is exact in any order.

Block scan (``scan_block``, the block rescans). For the float32 products s (rows × the points of one block): the
products of a row with the points of its own component set to -inf, each row's maximum, and the entries with
s >= floor32(max(row maximum - eps2, floor0)) (and > -inf), the numpy expressions of ``_mst._rescan_blocks`` in
one pass and no temporaries (about 0.02 against 0.15 ms for a typical 500 × 64 block). No ``fastmath``: the
float64 threshold and its rounding down to float32 must be the same as numpy's (``_kernels.floor32``).

List merge (``merge_top``, the first pass). Entries (point, partner, s32) into every point's list of its k + 1
largest s32, kept sorted by (s32 descending, partner ascending), a strict order, so the lists do not depend on the
order the entries come in: an insertion per entry that beats the list's last, on the calling thread while the
workers compute the next strips (the numpy form, a sort of every touched list per batch, held the GIL for about
0.08 s of the 0.3 s pass at N = 20,000). No ``fastmath``.

Rescan plan (``block_rows``): per rescanned row the largest first-pass maximum m0 of a block that holds no point
of its component, and the (block, row) pairs with maximum >= floor32(m0 - eps2), grouped by block, rows ascending:
the numpy form gathered an N_rows × blocks copy and a mask of the same size (about 25 of the 85 ms of the largest
rescan at N = 20,000). Best edges (``best_edges``): per component its candidate edge of least (d, lo, hi), one
pass instead of a four-key sort of every candidate. No ``fastmath`` in either.

Row permutation (``permute_rows``): x[i] <- x[perm[i]] in place by following the permutation's cycles, with one
row of scratch, so the MST can put the caller's rows into block order without a second N·D copy.

All ``nogil`` (the MST calls them beside its worker threads) and cached on disk after the first compile.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["best_edges", "block_rows", "merge_top", "permute_rows", "scan_block", "strip_pass"]

_FASTMATH = {"nnan", "reassoc", "nsz", "arcp", "contract"}


@njit(nogil=True, cache=True, fastmath=_FASTMATH, boundscheck=False, inline="always")
def _record(i, j, v, k, ent_i, ent_j, ent_s):  # pragma: no cover - compiled
    if k < ent_i.size:
        ent_i[k] = i
        ent_j[k] = j
        ent_s[k] = v
    return k + 1


@njit(nogil=True, cache=True, fastmath=_FASTMATH, boundscheck=False)
def strip_pass(s, r_off, c_off, cw, tr, tc, cols, rm, cm, ent_i, ent_j, ent_s):  # pragma: no cover - compiled
    """Chunk maxima of strip ``s`` and its entries with s >= tr[i] or (if ``cols``) s >= tc[j], each once.

    Chunks are ``cw`` points wide, aligned to the strip's place in the point order: the strip's first row is at
    offset ``r_off`` (< cw) of its chunk, its first column at ``c_off``, so the first chunk of each may be short
    and so may the last. ``rm[i, c]`` = the maximum of row i over column chunk c; if ``cols``, ``cm[j, a]`` = the
    maximum of column j over row chunk a. The entries go to ``ent_*`` while they have room; the return value is
    their number (more than ``ent_i.size``: call again with that much room). A row's chunk whose maximum is below
    tr[i] holds none of its row entries; a column's chunk whose maximum is below tc[j] none of its column entries
    (those reaching tr[i] too are row entries already). With cw = 64 and c_off = 0 (the MST's strips past 512
    points) a chunk's maximum is three vertical maxima 64 → 16 lanes and then across the lanes: SIMD.
    """
    h, w = s.shape
    fast = cw == 64 and c_off == 0
    c_first = cw - c_off
    n_cc = 1 + max(0, -(-(w - c_first) // cw))
    k = 0
    acc = np.empty(w, np.float32)
    a0 = 0
    a = 0
    while a0 < h:
        a1 = min(h, a0 + (cw - r_off if a0 == 0 else cw))
        for i in range(a0, a1):
            if cols:
                if i == a0:
                    for j in range(w):
                        acc[j] = s[i, j]
                else:
                    for j in range(w):
                        acc[j] = max(acc[j], s[i, j])
            if fast:
                for c in range(w // 64):
                    base = c * 64
                    m = np.float32(-np.inf)
                    for lane in range(16):
                        x = max(
                            max(s[i, base + lane], s[i, base + 16 + lane]),
                            max(s[i, base + 32 + lane], s[i, base + 48 + lane]),
                        )
                        m = max(m, x)
                    rm[i, c] = m
            t_i = tr[i]
            for c in range(n_cc):
                u = 0 if c == 0 else c_first + (c - 1) * cw
                v = min(w, c_first + c * cw)
                if not fast or v - u < 64:
                    m = np.float32(-np.inf)
                    for j in range(u, v):
                        m = max(m, s[i, j])
                    rm[i, c] = m
                if rm[i, c] >= t_i:
                    for j in range(u, v):
                        if s[i, j] >= t_i:
                            k = _record(i, j, s[i, j], k, ent_i, ent_j, ent_s)
        if cols:
            for j in range(w):
                cm[j, a] = acc[j]
                if acc[j] >= tc[j]:
                    for i in range(a0, a1):
                        if s[i, j] >= tc[j] and s[i, j] < tr[i]:
                            k = _record(i, j, s[i, j], k, ent_i, ent_j, ent_s)
        a0 = a1
        a += 1
    return k


@njit(nogil=True, cache=True, boundscheck=False)
def _floor32(t64):  # pragma: no cover - compiled
    """The largest float32 <= the float64 ``t64`` (``_kernels.floor32``)."""
    t32 = np.float32(t64)
    if np.float64(t32) > t64:
        t32 = np.nextafter(t32, np.float32(-np.inf))
    return t32


@njit(nogil=True, cache=True, boundscheck=False)
def scan_block(s, row_comp, col_comp, floor0, eps2):  # pragma: no cover - compiled
    """Mask own-component products of ``s`` (rows × columns, in place) to -inf; return (row maxima, row and column
    of each entry reaching its row's threshold floor32(max(maximum - eps2, floor0[row])), and their values)."""
    h, w = s.shape
    rm = np.empty(h, np.float32)
    th = np.empty(h, np.float32)
    count = 0
    for i in range(h):
        m = np.float32(-np.inf)
        for j in range(w):
            if row_comp[i] == col_comp[j]:
                s[i, j] = -np.inf
            elif s[i, j] > m:
                m = s[i, j]
        rm[i] = m
        th[i] = _floor32(max(np.float64(m) - eps2, floor0[i]))
        for j in range(w):
            if s[i, j] >= th[i] and s[i, j] > -np.inf:
                count += 1
    ri = np.empty(count, np.int64)
    cj = np.empty(count, np.int64)
    sv = np.empty(count, np.float32)
    k = 0
    for i in range(h):
        for j in range(w):
            if s[i, j] >= th[i] and s[i, j] > -np.inf:
                ri[k] = i
                cj[k] = j
                sv[k] = s[i, j]
                k += 1
    return rm, ri, cj, sv


@njit(nogil=True, cache=True, boundscheck=False)
def merge_top(pp, qq, ss, topv, topj, thr):  # pragma: no cover - compiled
    """Insert the entries (pp, qq, ss) into the lists ``topv``/``topj`` (N × (k + 1), each row sorted by (s32
    descending, partner ascending); empty slots -inf / -1) and keep ``thr`` = their last values. A (point,
    partner) pair must come at most once."""
    last = topv.shape[1] - 1
    for e in range(pp.size):
        p, q, s = pp[e], qq[e], ss[e]
        if s < topv[p, last] or (s == topv[p, last] and q > topj[p, last]):
            continue
        pos = last
        while pos > 0 and (topv[p, pos - 1] < s or (topv[p, pos - 1] == s and topj[p, pos - 1] > q)):
            topv[p, pos] = topv[p, pos - 1]
            topj[p, pos] = topj[p, pos - 1]
            pos -= 1
        topv[p, pos] = s
        topj[p, pos] = q
        thr[p] = topv[p, last]


@njit(nogil=True, cache=True, boundscheck=False)
def block_rows(m, pos, own_start, own_count, own_blocks, eps2):  # pragma: no cover - compiled
    """For rescanned rows r (first-pass block maxima ``m[pos[r]]``; the blocks holding a point of r's component
    are ``own_blocks[own_start[r] : own_start[r] + own_count[r]]``): m0 (float64; -inf when every block holds one)
    and the pairs (block, row) with m[pos[r], block] >= floor32(m0 - eps2), as arrays sorted by block, then row."""
    n_rows = pos.size
    nb = m.shape[1]
    m0 = np.empty(n_rows, np.float64)
    th = np.empty(n_rows, np.float32)
    own = np.zeros(nb, np.bool_)
    per_block = np.zeros(nb + 1, np.int64)
    for r in range(n_rows):
        row = m[pos[r]]
        for u in range(own_start[r], own_start[r] + own_count[r]):
            own[own_blocks[u]] = True
        best = np.float32(-np.inf)
        for b in range(nb):
            if not own[b] and row[b] > best:
                best = row[b]
        for u in range(own_start[r], own_start[r] + own_count[r]):
            own[own_blocks[u]] = False
        m0[r] = np.float64(best)
        th[r] = _floor32(np.float64(best) - eps2)
        for b in range(nb):
            if row[b] >= th[r]:
                per_block[b + 1] += 1
    for b in range(nb):
        per_block[b + 1] += per_block[b]
    bi = np.empty(per_block[nb], np.int64)
    ri = np.empty(per_block[nb], np.int64)
    fill = per_block[:nb].copy()
    for r in range(n_rows):
        row = m[pos[r]]
        for b in range(nb):
            if row[b] >= th[r]:
                bi[fill[b]] = b
                ri[fill[b]] = r
                fill[b] += 1
    return m0, bi, ri


@njit(nogil=True, cache=True, boundscheck=False)
def best_edges(ci, cand_j, cand_d, comp, n_comp):  # pragma: no cover - compiled
    """Per component present among ``ci``: the index into ``ci`` of its candidate edge ci -> cand_j[ci] of least
    (d, min(ci, j), max(ci, j)), in component order."""
    best = np.full(n_comp, -1, np.int64)
    for u in range(ci.size):
        i = ci[u]
        c = comp[i]
        b = best[c]
        if b < 0:
            best[c] = u
            continue
        d, lo, hi = cand_d[i], min(i, cand_j[i]), max(i, cand_j[i])
        i2 = ci[b]
        d2, lo2, hi2 = cand_d[i2], min(i2, cand_j[i2]), max(i2, cand_j[i2])
        if d < d2 or (d == d2 and (lo < lo2 or (lo == lo2 and hi < hi2))):
            best[c] = u
    count = 0
    for c in range(n_comp):
        if best[c] >= 0:
            count += 1
    sel = np.empty(count, np.int64)
    k = 0
    for c in range(n_comp):
        if best[c] >= 0:
            sel[k] = best[c]
            k += 1
    return sel


@njit(nogil=True, cache=True, boundscheck=False)
def permute_rows(x, perm):  # pragma: no cover - compiled
    """Rows of ``x`` in place: row i becomes the old row perm[i] (``perm`` a permutation of range(len(x)))."""
    n = x.shape[0]
    done = np.zeros(n, np.bool_)
    tmp = np.empty(x.shape[1], x.dtype)
    for start in range(n):
        if done[start]:
            continue
        tmp[:] = x[start]
        i = start
        while True:
            done[i] = True
            j = perm[i]
            if j == start:
                x[i] = tmp
                break
            x[i] = x[j]
            i = j
