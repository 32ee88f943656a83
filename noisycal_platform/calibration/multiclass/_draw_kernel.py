"""The compiled replicate kernels of the multi-class calibration test (numba; imported on the first replicate).

Null draw. For replicate r and item i, from two uniforms u, v (drawn by the caller's numpy Generator, so the
stream is the caller's): the true class y = #{c : u ≥ F_i(c)} (F_i the cumulative class probabilities, last one
dropped), the table row q = presence-set code of item i · C + y, and the answer pattern the entry
``min(max(searchsorted(table, q + v, side="right"), row_start[q]), row_last[q])`` of the sorted inverse-CDF
table (`inference._null_draw` builds it); every row g of the item then counts one in cell ``slot[i, g] + key``
(`null_columns`: in column ``colmap[slot[i, g] + key]`` of the reachable cells, and once in its pattern's count).
The search starts from a guide table (Chen & Asau 1974, "On generating random variates from an empirical
distribution", AIIE Trans. 6(2)): ``guide[q, b]`` = #{entries ≤ q + b/M} for M buckets per row, a lower bound of
the answer for v in [b/M, (b + 1)/M), then a short forward scan (expected O(1); a binary search's unpredictable
branches cost ~65 ns per item).
This is the numpy form of `inference._null_draw` item for item (the same comparisons and float sums, integer
counts), without its (R, N, G) temporaries. Hand-written: no numpy primitive draws from per-item categorical
tables and scatters the counts in one pass.

Column sums (`column_sums`): per replicate, the count-weighted sums of a target and an inclusion table over the
reachable cells of each (class, bin) segment, one pass over the (R, columns) table (the evaluator's contraction
without dense (R, C, B, P) temporaries or gathered (R, columns) copies of the targets).

No ``fastmath``; ``nogil``; cached on disk after the first compile.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["column_sums", "null_columns"]


@njit(nogil=True, cache=True)
def null_columns(u, v, cum_p, q0, table, row_start, row_last, guide, entry_key, slot, colmap, cells,
                 counts):  # pragma: no cover
    """Add the null-draw counts of R replicates to ``cells`` (R, columns) and ``counts`` (R, P) in place (any
    numeric dtype; the caller's are int32, whose increments chain faster than float adds).

    u, v (R, N) uniforms in [0, 1); cum_p (N, C − 1); q0 (N,) presence code · C; table (T,) sorted;
    row_start, row_last (rows,) first and last entry of each row; guide (rows, M) = #{entries ≤ q + b/M} (any
    lower bound of the search's answer is correct, only slower); entry_key (T,) pattern key of each entry;
    slot (N, G) cell offset of each item's row g; colmap (cells,) column of each cell (every cell
    ``slot[i, g] + key`` of a pattern of item i's presence set has one); counts (R, P) one per item and pattern."""
    n_rep, n = u.shape
    n_cmp = cum_p.shape[1]
    n_rows = slot.shape[1]
    n_buckets = guide.shape[1]
    keys = np.empty(n, np.int64)
    for r in range(n_rep):
        for i in range(n):  # the draws of replicate r, then its counts (a loop of unpredictable branches apart)
            ui = u[r, i]
            q = q0[i]
            for col in range(n_cmp):
                if ui >= cum_p[i, col]:
                    q += 1
            vi = v[r, i]
            x = q + vi
            lo = row_start[q]
            hi = row_last[q]
            # #{entries ≤ x} clipped to [lo, hi]: from the guide's lower bound, forward while entries are ≤ x
            idx = guide[q, int(vi * n_buckets)]
            if idx < lo:
                idx = lo
            while idx <= hi and table[idx] <= x:
                idx += 1
            if idx > hi:
                idx = hi
            keys[i] = entry_key[idx]
        for i in range(n):
            key = keys[i]
            counts[r, key] += 1
            for g in range(n_rows):
                cells[r, colmap[slot[i, g] + key]] += 1


@njit(nogil=True, cache=True)
def column_sums(cells, seg, tgt, tgt_idx, inc, inc_idx, col_major, sum_y, n_inc):  # pragma: no cover
    """Add sum_y[r, seg[j]] += cells[r, j]·tgt[r, tgt_idx[j]] and n_inc[r, seg[j]] += cells[r, j]·inc[r, inc_idx[j]]
    in place, over the columns j in increasing order for each replicate r (either loop order gives the same sums).

    cells (R, J) counts (integer or float), read replicate by replicate or, ``col_major`` (a column-major table),
    column by column; seg, tgt_idx, inc_idx (J,); tgt, inc (R, ·) or (1, ·) (one row: shared by every replicate);
    sum_y, n_inc (R, segments)."""
    n_rep, n_col = cells.shape
    one_t = tgt.shape[0] == 1
    one_i = inc.shape[0] == 1
    if col_major:
        for j in range(n_col):
            s, a, b = seg[j], tgt_idx[j], inc_idx[j]
            for r in range(n_rep):
                x = cells[r, j]
                sum_y[r, s] += x * tgt[0 if one_t else r, a]
                n_inc[r, s] += x * inc[0 if one_i else r, b]
    else:
        for r in range(n_rep):
            rt = 0 if one_t else r
            ri = 0 if one_i else r
            for j in range(n_col):
                x = cells[r, j]
                s = seg[j]
                sum_y[r, s] += x * tgt[rt, tgt_idx[j]]
                n_inc[r, s] += x * inc[ri, inc_idx[j]]
