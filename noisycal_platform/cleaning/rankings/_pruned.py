"""Cell-pruned forms of the near-duplicate and label-error rankings: the same results, less of the N² work.

Both scan the pairs that the spherical cells of ``_cells`` cannot rule out, in float32 GEMM blocks screened with the
rigorous margin ``_kernels.screen_margin`` (eps2), and re-evaluate every pair a screening decision keeps in float64
(``_kernels.exact_dists``), as the dense kernels do:

1. within each cell (tiles of whole cells, other cells' entries masked), which gives the first thresholds: the
   k-th best pair so far, or each row's nearest same-label and other-label partner so far;
2. every row against the cells whose bound ``θ(x, c_b) − R_b`` stays within α = arccos(threshold − eps2) of it
   (a partner y with cos θ(x, y) >= threshold − eps2 could still beat or tie the current one; none of the skipped
   cells holds one), and the rows whose bound rules out too little against every row of the other cells (pairs)
   or of the labels they need (label errors);
3. the outliers (rows in no cell) against every row (label errors: right after step 1 and both ways, so that the
   thresholds of step 2 include them).

The thresholds only grow, so a pair skipped at any time could never enter the result: the output equals the dense
kernels' (a float64 brute force) pair for pair and value for value. Each returns ``None`` when the cells would
leave more than ``PRUNE_MAX_WORK`` of the N(N − 1)/2 inner products to compute (embeddings without clusters); the
callers then run their dense scans. Blocks run on ``_kernels.ordered_map`` worker threads (single-threaded BLAS
each) and are folded in order on the calling thread, so the results do not depend on the thread count.
"""

from __future__ import annotations

import itertools
from collections.abc import Iterator

import numpy as np

from ._cells import Cells, build_cells
from ._kernels import Records, TopPairs, exact_dists, floor32, ordered_map, screen_margin
from .types import PairRanking

__all__ = ["PRUNE_EARLY_WORK", "PRUNE_MAX_WORK", "PRUNE_MIN_ROWS", "pruned_label_distances", "pruned_top_pairs"]

PRUNE_MIN_ROWS = 20_000  # below this the dense kernels are fast enough that the cells do not pay
PRUNE_MAX_WORK = 0.4  # fall back to the dense kernels above this share of the N(N − 1)/2 inner products
PRUNE_EARLY_WORK = 0.15  # label errors: the same for the work before the per-row bounds (outliers, neighbourhoods)
LABEL_COPY_BYTES = 256 << 20  # label errors: largest label-sorted copy of the rows kept (above: gathers per block)
NEIGHBOURS = 4  # label errors: overlapping cells per cell scanned before the per-row bounds
MAX_CLASSES = 64  # label errors: blocks split into (label × label) sub-blocks, a loop each; more classes: dense kernel
MAX_SINGLETON_ROWS = 64  # rows of one-member classes (a scan of every row each) before the dense kernel is used
_STRIP = 512  # rows per GEMM block
_COLS = 4096  # columns per GEMM block
_TILE = 512  # rows of a within-cell tile (whole cells; a larger cell is a tile by itself)
_NEIGH_ROWS = 128  # rows per task of the neighbourhood pass (whole cells, against the union of their neighbours)

Block = tuple[np.ndarray, np.ndarray, np.ndarray]  # rows, columns (sorted positions), float32 similarities


def _cell_tiles(cells: Cells) -> list[tuple[int, int]]:
    """Row ranges of runs of whole consecutive cells of at most ``_TILE`` rows (or one larger cell)."""
    return [(int(cells.start[a]), int(cells.start[b])) for a, b in _cell_runs(cells, _TILE)]


def _cell_runs(cells: Cells, size: int) -> list[tuple[int, int]]:
    """Runs [a, b) of consecutive cells with at most ``size`` rows in all (or one larger cell)."""
    out, lo = [], 0
    for b in range(cells.n_cells):
        if cells.start[b + 1] - cells.start[lo] > size and b > lo:
            out.append((lo, b))
            lo = b
    if cells.n_cells:
        out.append((lo, cells.n_cells))
    return out


def _strips(rows: np.ndarray) -> Iterator[np.ndarray]:
    for a in range(0, rows.size, _STRIP):
        yield rows[a : a + _STRIP]


def _col_chunks(cols: np.ndarray) -> Iterator[np.ndarray]:
    for a in range(0, cols.size, _COLS):
        yield cols[a : a + _COLS]


def _slices(lo: int, hi: int) -> list[slice]:
    """[lo, hi) in slices of at most ``_COLS``."""
    return [slice(a, min(a + _COLS, hi)) for a in range(lo, hi, _COLS)]


def _runs(values: np.ndarray) -> list[tuple[int, int, int]]:
    """(value, lo, hi) of the runs of equal values of a sorted array (labels of a block, cells of entries)."""
    if values.size == 0:
        return []
    cuts = np.flatnonzero(np.r_[True, values[1:] != values[:-1], True])
    return [(int(values[a]), int(a), int(b)) for a, b in itertools.pairwise(cuts.tolist())]


def _by_cell(pos: np.ndarray, cell: np.ndarray) -> list[tuple[int, np.ndarray]]:
    """Entries grouped by cell: (cell, its rows), the rows in strips of at most ``_STRIP``."""
    if pos.size == 0:
        return []
    o = np.argsort(cell, kind="stable")
    pos = pos[o]
    return [(b, pos[s : min(s + _STRIP, hi)]) for b, lo, hi in _runs(cell[o]) for s in range(lo, hi, _STRIP)]


def _alpha(threshold: np.ndarray | float, eps2: float) -> np.ndarray:
    """arccos(threshold − eps2), π where no threshold is known (−inf)."""
    t = np.asarray(threshold, np.float64) - eps2
    return np.arccos(np.clip(np.nan_to_num(t, nan=-1.0, neginf=-1.0), -1.0, 1.0))


# --- near duplicates ----------------------------------------------------------------------------------------------


def pruned_top_pairs(x: np.ndarray, k: int) -> PairRanking | None:
    """The exact top-``k`` closest pairs of the unit float32 rows ``x`` (as ``rank_near_duplicates``), or ``None``
    when the cells leave more than ``PRUNE_MAX_WORK`` of the work."""
    n = x.shape[0]
    cells = build_cells(x)
    order, nc, cell, start = cells.order, cells.n_core, cells.cell, cells.start
    xs = x[order]
    top = TopPairs(k, screen_margin(xs))
    eps2 = top.eps2

    def within(tile: tuple[int, int]) -> list[Block]:
        lo, hi = tile
        out = []
        for r0 in range(lo, hi, _STRIP):
            r1 = min(r0 + _STRIP, hi)
            s = xs[r0:r1] @ xs[r0:hi].T
            rows, cols = np.arange(r0, r1), np.arange(r0, hi)
            s[(cell[rows][:, None] != cell[cols][None, :]) | (cols[None, :] <= rows[:, None])] = -np.inf
            out.append((rows, cols, s))
        return out

    def against(task: tuple[np.ndarray, np.ndarray, np.ndarray | None]) -> list[Block]:
        rows, cols, col_min = task  # col_min: per row, the first column it may pair with (None: all)
        s = xs[rows] @ xs[cols].T
        if col_min is not None:
            s[cols[None, :] < col_min[:, None]] = -np.inf
        return [(rows, cols, s)]

    def fold(blocks: Iterator[list[Block]]) -> None:
        for part in blocks:
            for rows, cols, s in part:
                r, c = top.screen(s, s.max(axis=1))
                if r.size:
                    i, j = order[rows[r]], order[cols[c]]
                    top.add(np.minimum(i, j), np.maximum(i, j), exact_dists(xs, rows[r], cols[c]))

    with ordered_map(n > _STRIP) as pmap:
        fold(pmap(within, _cell_tiles(cells)))
        found = cells.candidates(xs, _alpha(top.thr, eps2), pmap=pmap)
        if found is None:
            return None
        ((pos, cb, dense),) = found
        later = cb > cell[pos]  # a pair of two cells is scanned from the row of the lower cell
        pos, cb = pos[later], cb[later]
        dense_rows = np.flatnonzero(dense)
        sizes = np.diff(start)
        work = sizes[cb].sum() + (nc - start[cell[dense_rows] + 1]).sum() + (n - nc) * n
        if work > PRUNE_MAX_WORK * n * (n - 1) / 2:
            return None
        tasks: list[tuple[np.ndarray, np.ndarray, np.ndarray | None]] = [
            (rows, np.arange(start[b], start[b + 1]), None) for b, rows in _by_cell(pos, cb)
        ]
        for rows in _strips(dense_rows):  # rows the cells rule out too little for: every row of a later cell
            first = start[cell[rows] + 1]
            tasks += [(rows, cols, first) for cols in _col_chunks(np.arange(int(first.min()), nc))]
        outliers = np.arange(nc, n)
        for rows in _strips(outliers):  # outliers: every core row, and the outliers after them
            tasks += [(rows, cols, None) for cols in _col_chunks(np.arange(nc))]
            tasks += [(rows, cols, rows + 1) for cols in _col_chunks(np.arange(int(rows[0]) + 1, n))]
        fold(pmap(against, tasks))
    i, j, d = top.result()
    return PairRanking(np.stack([i, j], axis=1), d)


# --- label errors -------------------------------------------------------------------------------------------------





def _kind_scan(s: np.ndarray, rows: np.ndarray, cols: np.ndarray, lab: np.ndarray, kinds: str, eps2: float,
               by_cols: bool = False) -> list:
    """Per kind ("s" same label, "d" other label) of ``kinds``: the row maxima of block ``s`` (rows and columns
    label-sorted, so each kind is a set of rectangular sub-blocks) and the (row, column, value) entries within eps2
    of them; ``by_cols``: the same for the columns as the points (column maxima, (column, row, value) entries),
    without a transposed copy. Entries of −inf (masked) are never recorded."""
    runs_r, runs_c = _runs(lab[rows]), _runs(lab[cols])
    points = cols if by_cols else rows
    out = []
    for kind in kinds:
        subs = [(r0, r1, c0, c1) for la, r0, r1 in runs_r for lb, c0, c1 in runs_c if (la == lb) == (kind == "s")]
        m = np.full(points.size, -np.inf, np.float32)
        for r0, r1, c0, c1 in subs:
            lo, hi = (c0, c1) if by_cols else (r0, r1)
            np.maximum(m[lo:hi], s[r0:r1, c0:c1].max(axis=0 if by_cols else 1), out=m[lo:hi])
        floor = np.maximum(m - np.float32(eps2), np.float32(-3.0))  # sims are >= -1 - 1e-6: −inf is never kept
        ps, qs, vs = [], [], []
        for r0, r1, c0, c1 in subs:
            sub = s[r0:r1, c0:c1]
            flat = np.flatnonzero(sub >= (floor[None, c0:c1] if by_cols else floor[r0:r1, None]))
            r, c = flat // (c1 - c0), flat % (c1 - c0)
            pr, pc = rows[r0 + r], cols[c0 + c]
            ps.append(pc if by_cols else pr)
            qs.append(pr if by_cols else pc)
            vs.append(sub[r, c].astype(np.float64))
        cat = (lambda v, dt: np.concatenate(v) if v else np.empty(0, dt))  # noqa: E731
        out.append((kind, points, m.astype(np.float64), cat(ps, np.int64), cat(qs, np.int64), cat(vs, np.float64)))
    return out


def _ranges(lo: np.ndarray, hi: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """The integers of the ranges [lo_e, hi_e) one after another, and the range e of each."""
    size = hi - lo
    which = np.repeat(np.arange(size.size), size)
    first = np.r_[0, np.cumsum(size)[:-1]]
    return which, lo[which] + np.arange(which.size) - first[which]


def _floor_scan(s: np.ndarray, rows: np.ndarray, cols: np.ndarray, lab: np.ndarray, kinds: str,
                floor: np.ndarray, by_cols: bool = False) -> list:
    """``_kind_scan`` for points whose partners below ``floor`` (float32, finite; per point, the current best of
    the kinds scanned less eps2, from any earlier state: bests only grow) can no longer matter: one comparison pass,
    and the maxima and records from the entries at or above it only (an entry below cannot raise a best and fails
    the final eps2 filter)."""
    flat = np.flatnonzero(s >= (floor[None, :] if by_cols else floor[:, None]))
    r, c = flat // s.shape[1], flat % s.shape[1]
    v = s[r, c].astype(np.float64)
    (p, q, at), points = ((cols[c], rows[r], c), cols) if by_cols else ((rows[r], cols[c], r), rows)
    eq = lab[p] == lab[q]  # a point's own entry is −inf, below every finite floor
    out = []
    for kind in kinds:
        k = eq if kind == "s" else ~eq
        m = np.full(points.size, -np.inf)
        np.maximum.at(m, at[k], v[k])
        out.append((kind, points, m, p[k], q[k], v[k]))
    return out


def pruned_label_distances(x: np.ndarray, codes: np.ndarray) -> tuple[np.ndarray, np.ndarray] | None:
    """Exact ``(d_same, d_diff)`` of ``label_error_scores`` for the unit float32 rows ``x`` and integer labels
    ``codes`` (0..C−1), or ``None`` when the cells leave more than ``PRUNE_MAX_WORK`` of the work, more than
    ``MAX_SINGLETON_ROWS`` rows are alone in their class or there are more than ``MAX_CLASSES`` classes.

    Every block is label-sorted along both sides, so the same-label and other-label partners of its rows are
    rectangular sub-blocks. After the cells and the outliers (both ways), each row is scanned against the cells
    whose caps overlap its own cell's (a first tightening where a cluster spans several cells), then per kind
    against the cells that can still hold a nearer partner of that kind, or against every row of its label (same)
    or of the other labels (other). Once a row's best of the kinds a block scans is known, only the block entries
    within eps2 of it are looked at (``_floor_scan``)."""
    n = x.shape[0]
    counts = np.bincount(codes)
    if int((counts == 1).sum()) > MAX_SINGLETON_ROWS or counts.size > MAX_CLASSES:
        return None
    cells = build_cells(x)
    order, nc, cell, start = cells.order, cells.n_core, cells.cell, cells.start
    sizes = np.diff(start)
    na, nb = cells.overlapping(NEIGHBOURS)
    # the work done before the per-row bounds are known: the cells, the outliers (both ways), the neighbourhoods
    if (sizes**2).sum() / 2 + (n - nc) * n + (sizes[na] * sizes[nb]).sum() > PRUNE_EARLY_WORK * n * (n - 1) / 2:
        return None
    xs = x[order]
    lab = codes[order]
    eps2 = screen_margin(xs)
    near = {kind: Records(np.full(n, -np.inf), eps2, nearest=True) for kind in "sd"}  # per kind, val = running best
    single = counts[lab] == 1

    def by_label(pos: np.ndarray) -> np.ndarray:
        return pos[np.argsort(lab[pos], kind="stable")]

    def within(tile: tuple[int, int]) -> list:
        pos = by_label(np.arange(*tile))
        s = xs[pos] @ xs[pos].T
        s[cell[pos][:, None] != cell[pos][None, :]] = -np.inf
        np.fill_diagonal(s, -np.inf)
        return _kind_scan(s, pos, pos, lab, "sd", eps2)

    def floor_of(rows: np.ndarray, kinds: str) -> np.ndarray:
        """The rows' floors for ``_floor_scan`` from the bests of the kinds they need as this thread reads them
        (the fold on the main thread only raises them: any value read is a valid floor, and the results do not
        depend on which); −inf where a needed best is still unknown."""
        f = np.full(rows.size, np.inf)
        for kind in kinds:
            b = near[kind].val[rows]
            f = np.minimum(f, b if kind == "d" else np.where(single[rows], np.inf, b))
        return floor32(f - eps2)

    def scan(s: np.ndarray, rows: np.ndarray, cols: np.ndarray, kinds: str, by_cols: bool = False) -> list:
        """``_floor_scan`` for the points (rows, or columns ``by_cols``) with finite floors, ``_kind_scan`` for the
        others."""
        floor = floor_of(cols if by_cols else rows, kinds)
        fin = np.isfinite(floor)
        if fin.all():
            return _floor_scan(s, rows, cols, lab, kinds, floor, by_cols)
        if not fin.any():
            return _kind_scan(s, rows, cols, lab, kinds, eps2, by_cols)
        if by_cols:
            return (_floor_scan(s[:, fin], rows, cols[fin], lab, kinds, floor[fin], True)
                    + _kind_scan(s[:, ~fin], rows, cols[~fin], lab, kinds, eps2, True))
        return (_floor_scan(s[fin], rows[fin], cols, lab, kinds, floor[fin])
                + _kind_scan(s[~fin], rows[~fin], cols, lab, kinds, eps2))

    def against(task: tuple[np.ndarray, np.ndarray | slice, str, bool]) -> list:
        rows, cols, kinds, both_ways = task  # cols: positions, or a slice of the label-sorted core rows ``xl``
        rows = by_label(rows)
        if isinstance(cols, slice):
            s = xs[rows] @ (xs[lorder[cols]] if xl is None else xl[cols]).T
            cols = lorder[cols]
        else:
            cols = by_label(cols)
            s = xs[rows] @ xs[cols].T
        _, i, j = np.intersect1d(rows, cols, assume_unique=True, return_indices=True)
        s[i, j] = -np.inf  # a row is not its own partner
        out = scan(s, rows, cols, kinds)
        if both_ways:
            out += scan(s, rows, cols, kinds, by_cols=True)
        return out

    def fold(parts: Iterator[list]) -> None:
        for part in parts:
            for kind, rows, m, p, q, v in part:
                rec = near[kind]
                rec.val[rows] = np.maximum(rec.val[rows], m)  # rows are distinct within a block
                rec.add(p, q, v)

    def cell_tasks(pos: np.ndarray, cb: np.ndarray, kinds: str) -> list:
        return [(rows, np.arange(start[b], start[b + 1]), kinds, False) for b, rows in _by_cell(pos, cb)]

    outliers = by_label(np.arange(nc, n))
    lorder = by_label(np.arange(nc))  # core positions, label-sorted
    n_cls = int(counts.size)
    lstart = np.searchsorted(lab[lorder], np.arange(n_cls + 1))
    need_same = ~single[:nc]
    with ordered_map(n > _STRIP) as pmap:
        fold(pmap(within, _cell_tiles(cells)))
        # outliers against the core (both directions) and against each other
        tasks = [(rows, cols, "sd", True) for cols in _strips(outliers) for rows in _col_chunks(lorder)]
        tasks += [(rows, cols, "sd", False) for rows in _strips(outliers) for cols in _col_chunks(outliers)]
        fold(pmap(against, tasks))
        # each cell's neighbourhood, up to NEIGHBOURS cells whose caps overlap its own (θ(c_a, c_b) <= R_a + R_b): a
        # first tightening of the bests where a cluster spans several cells (exactness comes from the per-row bounds)
        cuts = np.searchsorted(na, np.arange(cells.n_cells + 1))
        tasks = []
        for a0, a1 in _cell_runs(cells, _NEIGH_ROWS):  # a few cells per task (tiny GEMMs are all overhead)
            nbs = np.unique(nb[cuts[a0] : cuts[a1]])
            if nbs.size:
                tasks.append((np.arange(start[a0], start[a1]), _ranges(start[nbs], start[nbs + 1])[1], "sd", False))
        fold(pmap(against, tasks))
        pair_of, rows_of = _ranges(start[na], start[na + 1])  # the rows of cell a, for each pair (a, b)
        seen = rows_of * cells.n_cells + nb[pair_of]
        # per kind: the cells that may still hold a nearer partner of that kind and hold that kind at all
        a_same = np.where(need_same, _alpha(near["s"].val[:nc], eps2), 0.0)
        found = cells.candidates(xs, a_same, _alpha(near["d"].val[:nc], eps2), pmap=pmap)
        if found is None:
            return None
        (p_s, c_s, dense_s), (p_d, c_d, dense_d) = found
        dense_s &= need_same
        n_of = np.diff(lstart)
        dense_work = n_of[lab[:nc][dense_s]].sum() + (nc - n_of[lab[:nc][dense_d]]).sum()
        if dense_work + max(sizes[c_s].sum(), sizes[c_d].sum()) > PRUNE_MAX_WORK * n * (n - 1) / 2:
            return None  # a lower bound of the work already exceeds the share
        key = np.unique(cell * n_cls + lab[:nc])  # (cell, label) pairs present
        n_lab = np.bincount(key // n_cls, minlength=cells.n_cells)
        only_lab = np.full(cells.n_cells, -1)
        only_lab[key // n_cls] = key % n_cls  # the label of a one-label cell
        ok_s = need_same[p_s] & (c_s != cell[p_s]) & np.isin(c_s * n_cls + lab[p_s], key)
        ok_d = (c_d != cell[p_d]) & ((n_lab[c_d] > 1) | (only_lab[c_d] != lab[p_d]))
        ent = np.unique(np.r_[p_s[ok_s] * cells.n_cells + c_s[ok_s], p_d[ok_d] * cells.n_cells + c_d[ok_d]])
        ent = ent[~np.isin(ent, seen)]
        pos, cb = ent // cells.n_cells, ent % cells.n_cells
        work = sizes[cb].sum() + (sizes[na] * sizes[nb]).sum() + dense_work + (n - nc) * n
        if work > PRUNE_MAX_WORK * n * (n - 1) / 2:
            return None
        tasks = cell_tasks(pos, cb, "sd")
        # the core rows label-sorted: the scans of every row of some labels read slices of it (a third copy of the
        # rows, so only while it stays small; above, each block gathers its rows)
        xl = xs[lorder] if xs.nbytes <= LABEL_COPY_BYTES else None
        for c in range(n_cls):  # rows the cells rule out too little for: every core row of the label(s) needed
            mine = _slices(int(lstart[c]), int(lstart[c + 1]))
            others = _slices(0, int(lstart[c])) + _slices(int(lstart[c + 1]), nc)
            for rows in _strips(np.flatnonzero(dense_s & (lab[:nc] == c))):
                tasks += [(rows, cols, "s", False) for cols in mine]
            for rows in _strips(np.flatnonzero(dense_d & (lab[:nc] == c))):
                tasks += [(rows, cols, "d", False) for cols in others]
        fold(pmap(against, tasks))
    d_same_s, d_diff_s = near["s"].exact(xs), near["d"].exact(xs)
    for p in np.flatnonzero(single):  # one-member classes: the farthest other-label row (the dense convention)
        s = (xs @ xs[p]).astype(np.float64)
        s[lab == lab[p]] = np.inf
        q = np.flatnonzero(s <= s.min() + eps2)
        d_same_s[p] = exact_dists(xs, np.full(q.size, p), q).max()
    d_same, d_diff = np.empty(n), np.empty(n)
    d_same[order] = d_same_s
    d_diff[order] = d_diff_s
    return d_same, d_diff
