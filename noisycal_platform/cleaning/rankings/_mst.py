"""Exact minimum spanning tree of the complete graph under d = ||x_i - x_j||²/4, in O(N·D) memory.

Single linkage = the MST with its edges sorted by weight, so this gives the exact single-linkage
dendrogram without the condensed N² matrix (scipy needs it; fastcluster.linkage_vector avoids it but
is a single-threaded Prim at ~1.5e9 distance terms/s). Hand-written because no installed library
offers an exact, GEMM-blocked MST.

Borůvka with certified neighbour lists:

1. One exact k-NN pass (faiss ``IndexFlatIP`` float32 screening, k = 8) gives every point its top-k
   neighbours; the k entries are re-evaluated in float64 and every other point is known to be at
   distance >= ``lb`` (the (k+1)-th float32 value widened by the rigorous rounding margin). Rows
   whose first entry cannot be certified that way (float32 near-ties) are settled exactly.
2. Each round, a point's nearest neighbour *outside its component* is certified when the first
   list entry outside the component is closer than ``lb`` (components only grow, so the outside set
   only shrinks and an old list stays a valid lower bound). Each component takes its best certified
   edge, but only after every uncertified member whose lower bound could still beat (or tie) it has
   been rescanned exactly (float32 GEMM against the points outside its component, near-ties of the
   row maximum re-evaluated in float64; the result is a one-entry list whose distance becomes the
   new lower bound once that neighbour is absorbed). A component holding more than half of the
   points is skipped while it would need rescans: any component's lightest outgoing edge is an
   MST edge (cut property), so correctness only needs progress, which the others supply.
3. Edges are compared by the key (d, min(i, j), max(i, j)), a strict total order, so Borůvka never
   forms a cycle and ties are resolved deterministically.
"""

from __future__ import annotations

import numpy as np
from scipy.sparse import coo_matrix
from scipy.sparse.csgraph import connected_components

from ._kernels import exact_dists, rows_per_block, screen_margin


def _scan(
    x: np.ndarray,
    rows: np.ndarray,
    comp: np.ndarray | None,
    k: int,
    eps2: float,
    lists: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """Refresh the neighbour lists of ``rows`` against the points outside their component.

    Writes, per row: the k nearest outside points (float64 distances, sorted by (d, j)), the bound
    ``lb`` (every other outside point is at distance >= lb) and ``exact0`` = False; rows whose first
    entry cannot be certified against ``lb`` (float32 near-ties) get their exact nearest outside
    point from all near-tied candidates instead (one entry, lb = its distance, exact0 = True).
    ``comp=None`` masks only the point itself (first round).
    """
    import torch  # heavy import kept local

    nbr, nd, lb, exact0 = lists
    n = x.shape[0]
    b = rows_per_block(n)
    for a in range(0, rows.size, b):
        r_ = rows[a : a + b]
        s = x[r_] @ x.T
        if comp is None:
            s[np.arange(r_.size), r_] = -np.inf
        else:
            np.copyto(s, -np.inf, where=comp[r_][:, None] == comp[None, :])
        v, j = torch.topk(torch.from_numpy(s), k, dim=1, largest=True, sorted=True)
        v = v.numpy().astype(np.float64)
        j = j.numpy().astype(np.int64)
        d = exact_dists(x, np.repeat(r_, k), j.ravel()).reshape(-1, k)
        d[~np.isfinite(v)] = np.inf  # fewer than k outside points
        j[~np.isfinite(v)] = r_[np.nonzero(~np.isfinite(v))[0]]
        o = np.lexsort((j, d), axis=1)
        j = np.take_along_axis(j, o, axis=1)
        d = np.take_along_axis(d, o, axis=1)
        low = (1.0 - (v[:, -1] + eps2)) * 0.5
        nbr[r_, :k] = j
        nd[r_, :k] = d
        nbr[r_, k:] = r_[:, None]  # own index: never outside = empty slot
        nd[r_, k:] = np.inf
        lb[r_] = low
        exact0[r_] = False
        bad = np.flatnonzero(~(d[:, 0] < low) & np.isfinite(v[:, 0]))
        if bad.size:  # exact nearest among all float32 near-ties of the row maximum
            sb = s[bad]
            w = sb.shape[1]
            flat = np.flatnonzero(sb >= (v[bad, 0] - eps2)[:, None])
            rr, cc = flat // w, flat % w
            dd = exact_dists(x, r_[bad][rr], cc)
            oo = np.lexsort((cc, dd, rr))
            first = np.ones(oo.size, bool)
            first[1:] = rr[oo][1:] != rr[oo][:-1]
            sel = oo[first]
            rows_b = r_[bad][rr[sel]]
            nbr[rows_b, 0] = cc[sel]
            nd[rows_b, 0] = dd[sel]
            nbr[rows_b, 1:] = rows_b[:, None]
            nd[rows_b, 1:] = np.inf
            lb[rows_b] = dd[sel]
            exact0[rows_b] = True


def _first_lists(
    x: np.ndarray, k: int, eps2: float, lists: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]
) -> None:
    """Round-1 lists: exact k-NN of every point (faiss IndexFlatIP screening, float64 re-evaluation).

    faiss computes float32 inner products (BLAS for batches), so the same rigorous margin applies;
    without faiss the numpy/torch block scan is used.
    """
    try:
        import faiss
    except ImportError:  # pragma: no cover - faiss-cpu is a project dependency
        _scan(x, np.arange(x.shape[0]), None, k, eps2, lists)
        return
    nbr, nd, lb, exact0 = lists
    n = x.shape[0]
    index = faiss.IndexFlatIP(x.shape[1])
    index.add(x)
    step = 16384
    for a in range(0, n, step):
        rows = np.arange(a, min(a + step, n))
        v, j = index.search(x[rows], k + 1)
        v = v.astype(np.float64)
        is_self = j == rows[:, None]
        # drop the point itself (or, when k+1 exact copies hide it, the last entry)
        drop = np.where(is_self.any(axis=1), np.argmax(is_self, axis=1), k)
        keep = np.ones_like(is_self)
        keep[np.arange(rows.size), drop] = False
        jj = j[keep].reshape(-1, k)
        d = exact_dists(x, np.repeat(rows, k), jj.ravel()).reshape(-1, k)
        o = np.lexsort((jj, d), axis=1)
        nbr[rows] = np.take_along_axis(jj, o, axis=1)
        nd[rows] = np.take_along_axis(d, o, axis=1)
        # every point not returned has float32 similarity <= the (k+1)-th returned value
        low = (1.0 - (v[:, -1] + eps2)) * 0.5
        lb[rows] = low
        exact0[rows] = False
        bad = rows[~(nd[rows, 0] < low)]
        if bad.size:  # float32 near-ties at the list boundary: settle those rows exactly
            _rescan_exact(x, bad, np.arange(n), eps2, lists)


def _rescan_exact(
    x: np.ndarray,
    rows: np.ndarray,
    comp: np.ndarray,
    eps2: float,
    lists: tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray],
) -> None:
    """Exact nearest point outside its own component for ``rows`` (ties by index).

    float32 GEMM against the points sorted by component, so a row's own component is one column
    range: skipped in the GEMM when the block has one component, else set to -inf by slicing.
    Every column within the margin of the row maximum is re-evaluated in float64. Stores a one-entry
    list with lb = its distance.
    """
    nbr, nd, lb, exact0 = lists
    n = x.shape[0]
    perm = np.argsort(comp, kind="stable")
    xs = x[perm]
    cs = comp[perm]
    seg_lo = np.searchsorted(cs, comp[rows], side="left")
    seg_hi = np.searchsorted(cs, comp[rows], side="right")
    o = np.lexsort((rows, comp[rows]))
    rows, seg_lo, seg_hi = rows[o], seg_lo[o], seg_hi[o]
    b = rows_per_block(n)
    for a in range(0, rows.size, b):
        r_ = rows[a : a + b]
        lo_, hi_ = seg_lo[a : a + b], seg_hi[a : a + b]
        xr = x[r_]
        if lo_[0] == lo_[-1]:  # one component in the block: compute only the outside columns
            lo, hi = int(lo_[0]), int(hi_[0])
            parts = [(xr @ xs[:lo].T, 0), (xr @ xs[hi:].T, hi)]
        else:
            s = xr @ xs.T
            starts = np.flatnonzero(np.r_[True, lo_[1:] != lo_[:-1]])
            if starts.size <= 64:
                ends = np.r_[starts[1:], r_.size]
                for u, v in zip(starts.tolist(), ends.tolist(), strict=True):
                    s[u:v, lo_[u] : hi_[u]] = -np.inf
            else:  # many small components: one broadcast comparison
                np.copyto(s, -np.inf, where=comp[r_][:, None] == cs[None, :])
            parts = [(s, 0)]
        m = np.full(r_.size, -np.inf, np.float32)
        for sp, _ in parts:
            if sp.shape[1]:
                np.maximum(m, sp.max(axis=1), out=m)
        rr_l, cc_l = [], []
        for sp, off in parts:
            if sp.shape[1]:
                w = sp.shape[1]
                flat = np.flatnonzero(sp >= (m - eps2)[:, None])
                rr_l.append(flat // w)
                cc_l.append(off + flat % w)
        rr = np.concatenate(rr_l)
        cc = perm[np.concatenate(cc_l)]
        dd = exact_dists(x, r_[rr], cc)
        oo = np.lexsort((cc, dd, rr))
        first = np.ones(oo.size, bool)
        first[1:] = rr[oo][1:] != rr[oo][:-1]
        sel = oo[first]
        rb = r_[rr[sel]]
        nbr[rb, 0] = cc[sel]
        nd[rb, 0] = dd[sel]
        nbr[rb, 1:] = rb[:, None]  # own index: never outside = empty slot
        nd[rb, 1:] = np.inf
        lb[rb] = dd[sel]
        exact0[rb] = True


def exact_mst(x: np.ndarray, k: int = 8) -> tuple[np.ndarray, np.ndarray, np.ndarray, dict]:
    """Exact MST of unit float32 rows ``x``: arrays (i, j, d) of the N-1 edges, i < j, plus stats."""
    n = x.shape[0]
    stats: dict = {"rounds": 0, "rescanned": []}
    if n == 1:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0, np.float64), stats
    eps2 = screen_margin(x)
    k = int(min(k, n - 1))
    nbr = np.empty((n, k), np.int64)
    nd = np.empty((n, k), np.float64)
    lb = np.empty(n, np.float64)
    exact0 = np.zeros(n, bool)  # entry 0 is the exact nearest outside point (near-tie fallback)
    lists = (nbr, nd, lb, exact0)
    _first_lists(x, k, eps2, lists)

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
            lo = np.minimum(ci, cand_j[ci])
            hi = np.maximum(ci, cand_j[ci])
            o = np.lexsort((hi, lo, cand_d[ci], comp[ci]))
            cc = comp[ci][o]
            first = np.ones(o.size, bool)
            first[1:] = cc[1:] != cc[:-1]
            best_d[cc[first]] = cand_d[ci][o][first]
        need = ~cert & (lower <= best_d[comp])
        giant = np.flatnonzero(sizes * 2 > n)
        skip = np.zeros(n_comp, bool)
        if giant.size and need[comp == giant[0]].any():
            skip[giant[0]] = True
            need &= comp != giant[0]
        rows = np.flatnonzero(need)
        stats["rescanned"].append(int(rows.size))
        if rows.size:
            _rescan_exact(x, rows, comp, eps2, lists)
            cand_j[rows] = nbr[rows, 0]
            cand_d[rows] = nd[rows, 0]
            cert[rows] = True
        ci = np.flatnonzero(cert & ~skip[comp])
        lo = np.minimum(ci, cand_j[ci])
        hi = np.maximum(ci, cand_j[ci])
        o = np.lexsort((hi, lo, cand_d[ci], comp[ci]))
        cc = comp[ci][o]
        first = np.ones(o.size, bool)
        first[1:] = cc[1:] != cc[:-1]
        sel = o[first]
        lo, hi, dd = lo[sel], hi[sel], cand_d[ci][sel]
        key = np.unique(lo * n + hi, return_index=True)[1]
        ei.append(lo[key])
        ej.append(hi[key])
        ed.append(dd[key])
        a = np.concatenate(ei)
        b = np.concatenate(ej)
        g = coo_matrix((np.ones(a.size, np.int8), (a, b)), shape=(n, n))
        n_comp, comp = connected_components(g, directed=False)
        comp = comp.astype(np.int32)
    i_all = np.concatenate(ei)
    j_all = np.concatenate(ej)
    d_all = np.concatenate(ed)
    if i_all.size != n - 1:  # pragma: no cover - would indicate a bug
        raise RuntimeError(f"MST has {i_all.size} edges for {n} points")
    return i_all, j_all, d_all, stats
