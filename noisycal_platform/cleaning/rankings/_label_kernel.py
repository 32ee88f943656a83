"""The compiled union-find labelling of a minimum spanning tree into a scipy linkage matrix (numba; imported on
the first single-linkage call).

Edges sorted by (height, lo, hi) are merged in order: merge r joins the current clusters of its endpoints,
ra = find(lo_r) and rb = find(hi_r), into the new cluster n + r, and row r of Z is (ra, rb, d_r, |ra| + |rb|)
(Müllner 2011, "Modern hierarchical, agglomerative clustering algorithms", §2.3, the MST-to-dendrogram step of
single linkage). ``find`` halves paths as it walks them. Hand-written: scipy exposes no labelling of given MST
edges, and scikit-learn's (``sklearn.cluster._hierarchical_fast``) is private and costs about 2 CPU s of import in
a process that needs nothing else of it.

No ``fastmath``; ``nogil``; cached on disk after the first compile.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["label_mst"]


@njit(nogil=True, cache=True)
def _find(parent, v):  # pragma: no cover - compiled
    """The root of v's cluster, halving the path on the way."""
    while parent[v] != v:
        parent[v] = parent[parent[v]]
        v = parent[v]
    return v


@njit(nogil=True, cache=True)
def _label(lo, hi, d, n, z):  # pragma: no cover - compiled
    parent = np.arange(2 * n - 1)
    size = np.ones(2 * n - 1, np.int64)
    for r in range(n - 1):
        ra = _find(parent, lo[r])
        rb = _find(parent, hi[r])
        new = n + r
        parent[ra] = new
        parent[rb] = new
        size[new] = size[ra] + size[rb]
        z[r, 0] = ra
        z[r, 1] = rb
        z[r, 2] = d[r]
        z[r, 3] = size[new]


def label_mst(lo: np.ndarray, hi: np.ndarray, d: np.ndarray, n: int) -> np.ndarray:
    """Linkage matrix (n − 1)×4 of the n − 1 MST edges (lo, hi, d) of n points, already sorted by (d, lo, hi).

    Endpoints must be in [0, n) and the edges must span all n points (each merge joins two clusters); the kernel
    has no bounds checks, so both are checked here."""
    lo = np.ascontiguousarray(lo, np.int64)
    hi = np.ascontiguousarray(hi, np.int64)
    d = np.ascontiguousarray(d, np.float64)
    if not (lo.shape == hi.shape == d.shape == (n - 1,)):
        raise ValueError(f"expected {n - 1} edges for {n} points, got lo {lo.shape}, hi {hi.shape}, d {d.shape}")
    if n > 1 and (min(lo.min(), hi.min()) < 0 or max(lo.max(), hi.max()) >= n):
        raise ValueError(f"edge endpoints must be in [0, {n})")
    z = np.empty((max(n - 1, 0), 4), np.float64)
    if n > 1:
        _label(lo, hi, d, n, z)
    if n > 1 and np.any(z[:, 0] == z[:, 1]):
        raise ValueError("the edges do not form a spanning tree (an edge joins a cluster to itself)")
    return z
