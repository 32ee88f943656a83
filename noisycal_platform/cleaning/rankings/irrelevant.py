"""Irrelevant-sample ranking: single linkage + dendrogram-area walk (Gröger et al. 2023 §3.2; SelfClean's LAD).

The single-linkage tree comes from an exact O(N·D)-memory MST (``_mst``); the walk is vectorised
(pointer doubling over the tree, then one cumulative sum), so it has no recursion and no Python loop
over samples.
"""

from __future__ import annotations

import numpy as np

from ._kernels import as_unit_embeddings
from ._mst import exact_mst
from .types import Ranking

__all__ = ["lad_walk", "rank_irrelevant", "single_linkage"]


def _label_mst(lo: np.ndarray, hi: np.ndarray, d: np.ndarray, n: int) -> np.ndarray:
    """scipy-format linkage matrix from MST edges already sorted by (d, lo, hi) (union-find, ``_label_kernel``)."""
    from ._label_kernel import label_mst

    z = label_mst(lo, hi, d, n)
    z[:, :2] = np.sort(z[:, :2], axis=1)  # scipy convention: smaller cluster id first
    return z


def single_linkage(emb: np.ndarray) -> np.ndarray:
    """Exact single-linkage matrix (scipy format, heights d = (1 - cos)/2) in O(N·D) memory.

    Rows are merges sorted by (height, lo, hi) of the MST edge; ``Z[r, 0] < Z[r, 1]``. Heights equal
    ``scipy.cluster.hierarchy.linkage(condensed d, 'single')``.
    """
    x = as_unit_embeddings(emb)
    n = x.shape[0]
    i, j, d, _ = exact_mst(x, in_place=True)  # x is this function's own normalised copy
    if n == 1:
        return np.empty((0, 4), np.float64)
    o = np.lexsort((j, i, d))
    return _label_mst(i[o], j[o], d[o], n)


def lad_walk(z: np.ndarray, n: int) -> tuple[np.ndarray, np.ndarray]:
    """Walk order and dendrogram-area scores of the leaves of linkage matrix ``z`` (see rank_irrelevant).

    Returns ``(order, scores)``: leaves in walk order and the score per leaf index.
    """
    z = np.asarray(z, dtype=np.float64)
    if n < 1 or z.shape != (n - 1, 4):
        raise ValueError(f"z must be a linkage matrix of shape (n-1, 4) = ({n - 1}, 4), got {z.shape}")
    if n == 1:
        return np.zeros(1, np.int64), np.ones(1, np.float64)
    m = 2 * n - 1
    root = m - 1
    c1 = z[:, 0].astype(np.int64)
    c2 = z[:, 1].astype(np.int64)
    lo_id = np.minimum(c1, c2)
    hi_id = np.maximum(c1, c2)
    cnt = np.ones(m, np.int64)
    cnt[n:] = z[:, 3].astype(np.int64)
    h = np.zeros(m)
    h[n:] = z[:, 2]
    # smaller child first; equal sizes: smaller cluster id first (leaf index / earlier merge)
    swap = cnt[lo_id] > cnt[hi_id]
    first = np.where(swap, hi_id, lo_id)
    second = np.where(swap, lo_id, hi_id)
    internal = np.arange(n, m)
    par = np.empty(m, np.int64)
    par[first] = internal
    par[second] = internal
    par[root] = root
    off = np.empty(m, np.int64)  # pre-order offset from the parent
    off[first] = 1
    off[second] = 2 * cnt[first]  # skip the first child's subtree (2 n_first - 1 nodes) + 1
    off[root] = 0
    hp = np.empty(m)
    hp[first] = z[:, 2]
    hp[second] = z[:, 2]
    hp[root] = 1.0  # the root hangs from the largest possible distance
    # pointer doubling: pos[v] = sum of offsets on the path root -> v  (ceil(log2 depth) steps)
    pos = off.copy()
    anc = par.copy()
    while np.any(anc != root):
        pos = pos + pos[anc]
        anc = anc[anc]
    area = cnt / n * np.clip(hp - h, 0.0, None)
    node_at = np.empty(m, np.int64)
    node_at[pos] = np.arange(m)
    cum = np.cumsum(area[node_at])
    scores = cum[pos[:n]]
    order = node_at[node_at < n]
    return order, scores


def rank_irrelevant(emb: np.ndarray) -> Ranking:
    """Rank samples by how late and how alone they join the single-linkage tree (SelfClean LAD).

    Definition (d = (1 - cos)/2 in [0, 1]):

    1. Exact single-linkage clustering; node v has leaf count n_v and merge height h_v (0 for
       leaves); the root hangs from height 1 (the largest possible distance).
    2. Draw the dendrogram in the unit square: node v spans a width n_v / N and the heights
       (h_v, h_parent(v)], so it covers the area a_v = (n_v / N) (h_parent(v) - h_v); all areas sum to 1.
    3. Walk the tree depth-first from the root (pre-order), always visiting the child with **fewer
       leaves first**; equal sizes: the child with the smaller cluster id first (scipy ids: a leaf's
       id is its index, merge r creates id N + r, merges ordered by (height, edge indices)).
    4. A leaf's score is the area swept so far: the sum of a_v over the nodes visited up to and
       including the leaf. Lower = more irrelevant; ``order`` is the walk order (scores are
       non-decreasing along it, ties keep walk order). N = 1 gives score 1.

    Example: A–B merge at 0.1, C joins at 0.3, D at 0.8 → order D, C, A, B with scores 0.4, 0.85,
    0.975, 1.0. The walk order equals SelfClean's ``LAD`` with ``global_leaves=False``, and so does
    the first leaf's score, (1 - h) + h/N for a singleton joining last at h. SelfClean's code lays
    the second child out on only (n_b - n_a)/n of the parent's width and adds "white-space"
    rectangles on jumps, so its later scores differ (0.700, 0.742, 0.742 in the example); here each
    node gets its full share, which makes the score exactly the dendrogram area swept.

    Exact (equal to scipy's single linkage on the float64 distance matrix), O(N·D) memory.
    """
    x = as_unit_embeddings(emb)
    n = x.shape[0]
    if n == 1:
        return Ranking(np.zeros(1, np.int64), np.ones(1))
    i, j, d, _ = exact_mst(x, in_place=True)  # x is this function's own normalised copy
    o = np.lexsort((j, i, d))
    z = _label_mst(i[o], j[o], d[o], n)
    order, scores = lad_walk(z, n)
    return Ranking(order, scores)
