"""The compiled null draw of the multi-class calibration test (numba; imported on the first null draw).

For replicate r and item i, from two uniforms u, v (drawn by the caller's numpy Generator, so the stream is the
caller's): the true class y = #{c : u ≥ F_i(c)} (F_i the cumulative class probabilities, last one dropped), the
table row q = presence-set code of item i · C + y, and the answer pattern the entry
``min(max(searchsorted(table, q + v, side="right"), row_start[q]), row_last[q])`` of the sorted inverse-CDF
table (`inference._null_draw` builds it); every row g of the item then counts one in cell ``slot[i, g] + key``.
The search starts from a guide table (Chen & Asau 1974, "On generating random variates from an empirical
distribution", AIIE Trans. 6(2)): ``guide[q, b]`` = #{entries ≤ q + b/M} for M buckets per row, a lower bound of
the answer for v in [b/M, (b + 1)/M), then a short forward scan (expected O(1); a binary search's unpredictable
branches cost ~65 ns per item).
This is the numpy form of `inference._null_draw` item for item (the same comparisons and float sums, integer
counts), without its (R, N, G) temporaries. Hand-written: no numpy primitive draws from per-item categorical
tables and scatters the counts in one pass.

No ``fastmath``; ``nogil``; cached on disk after the first compile.
"""

from __future__ import annotations

from numba import njit

__all__ = ["null_cells"]


@njit(nogil=True, cache=True)
def null_cells(u, v, cum_p, q0, table, row_start, row_last, guide, entry_key, slot, cells):  # pragma: no cover
    """Add the null-draw counts of R replicates to ``cells`` (R, n_cells) in place.

    u, v (R, N) uniforms in [0, 1); cum_p (N, C − 1); q0 (N,) presence code · C; table (T,) sorted;
    row_start, row_last (rows,) first and last entry of each row; guide (rows, M) = #{entries ≤ q + b/M} (any
    lower bound of the search's answer is correct, only slower); entry_key (T,) pattern key of each entry;
    slot (N, G) cell offset of each item's row g."""
    n_rep, n = u.shape
    n_cmp = cum_p.shape[1]
    n_rows = slot.shape[1]
    n_buckets = guide.shape[1]
    for r in range(n_rep):
        for i in range(n):
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
            key = entry_key[idx]
            for g in range(n_rows):
                cells[r, slot[i, g] + key] += 1.0
