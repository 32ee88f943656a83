"""Near-duplicate and label-error rankings split into row-block tasks (for Dask workers), merged exactly.

The rows are cut into ``m`` blocks B_0..B_{m-1}; task (a, b), a <= b, computes only the pairs B_a × B_b (a = b:
the pairs i < j of B_a), so the m(m + 1)/2 tasks hold every pair exactly once and compute N(N - 1)/2 inner
products in all, the single-process kernels' count. A task works in float32 GEMM strips (``_STRIP`` rows ×
``_TILE`` columns) screened with the rigorous margin ``_kernels.screen_margin`` (thresholds rounded down by
``floor32``); every pair that a screening decision keeps is re-evaluated in float64 (``_kernels.exact_dists``).
One pass over the inner products feeds both rankings:

- near duplicates: a running top-k threshold per task (the k-th largest float32 similarity while fewer than k
  pairs are held, then 1 - 2 d_k - margin with d_k the task's k-th smallest exact distance), so only pairs that
  can enter the task's top k are re-evaluated; the task returns its first k pairs in (d, i, j) order;
- label errors (rows sorted by class inside each block, so a strip's columns of one class are contiguous): per
  point and kind (same label, other label) the running float32 maximum similarity over its partners (row maxima
  for B_a, column maxima for B_b), and the partners within the margin of it; for a point whose class has one
  member overall, the running minimum and the partners within the margin of it (the farthest other-label
  sample, ``label_error_scores``' convention).

Exactness (results equal to :func:`rank_near_duplicates` and :func:`label_error_scores` pair for pair and value
for value): every row is normalised by itself (``as_unit_embeddings``) and every kept distance is the same
float64 function of the same two float32 rows as in the single-process kernels. The margin bounds |float32
similarity - exact similarity| plus the deviation of the stored norms from 1, so the exact nearest (farthest)
partner always lies within the margin of the running float32 maximum (minimum) and is re-evaluated; the minimum
(maximum) over tasks of those float64 values is the single-process value. Each pair lies in one task, and the
pairs ranked before a global top-k pair in its task are ranked before it globally, so it is in its task's top
k; the merge keeps the first k of all task lists in (d, i, j) order.

Memory per task: O((|B_a| + |B_b|) · D + k) plus one strip. The embeddings reach the tasks as a path to a
``.npy`` file that each task memory-maps (shared storage), or as an in-memory array. ``client`` is anything
with the ``submit``/``scatter``/``gather`` interface of ``distributed.Client``; ``None`` runs the tasks here,
one after another. Each task runs a single-threaded BLAS (the parallelism is across tasks).
"""

from __future__ import annotations

import itertools
import numbers
from pathlib import Path
from typing import Any

import numpy as np

from ._kernels import Records, TopPairs, as_unit_embeddings, exact_dists, screen_margin
from .label_errors import _validate_labels, ratio_scores
from .types import PairRanking

__all__ = [
    "blocked_label_error_scores",
    "blocked_near_duplicates",
    "blocked_rankings",
    "row_blocks",
    "task_pair_counts",
]

Embeddings = np.ndarray | str | Path
LabelScores = tuple[np.ndarray, np.ndarray, np.ndarray]

_TILE = 4096  # strip columns
_STRIP = 512  # strip rows: 512 × 4096 float32 = 8 MiB buffer per task


def row_blocks(n: int, n_blocks: int) -> list[tuple[int, int]]:
    """``n_blocks`` contiguous row ranges [lo, hi) covering 0..n (sizes differ by at most one)."""
    cuts = np.linspace(0, n, max(1, min(n_blocks, n)) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(cuts.tolist())]


def _tasks(blocks: list[tuple[int, int]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    """Tasks (a, b), a <= b: the cross blocks first, then the (half as large) diagonal ones (a shorter tail)."""
    m = len(blocks)
    return [(blocks[a], blocks[b]) for a in range(m) for b in range(a + 1, m)] + [(blk, blk) for blk in blocks]


def task_pair_counts(n: int, n_blocks: int) -> list[int]:
    """Pairs (inner products) per task: |B_a|·|B_b| for a < b, |B_a|(|B_a| - 1)/2 for a = b; they sum to N(N-1)/2."""
    out = []
    for (a0, a1), (b0, b1) in _tasks(row_blocks(n, n_blocks)):
        na, nb = a1 - a0, b1 - b0
        out.append(na * (na - 1) // 2 if a0 == b0 else na * nb)
    return out


class _LabelState:
    """Running nearest same-label / other-label similarities and farthest (one-member classes) per point."""

    def __init__(self, n: int, eps2: float) -> None:
        self.eps2 = eps2
        self.same = Records(np.full(n, -np.inf, np.float32), eps2, nearest=True)
        self.diff = Records(np.full(n, -np.inf, np.float32), eps2, nearest=True)
        self.far = Records(np.full(n, np.inf, np.float32), eps2, nearest=False)

    def fold(self, s: np.ndarray, cols: bool, p0: int, lab_p: np.ndarray, q0: int, lab_q: np.ndarray) -> np.ndarray:
        """Fold strip ``s`` into the points p0.. (its rows, or its columns if ``cols``) over the partners q0..

        Per point and run of partners of one label (``lab_q`` sorted): the run's maximum updates the running
        maximum of its kind; only runs within the margin of it are compared element-wise and their partners
        within the margin recorded. Returns the runs' maxima (points × runs).
        """
        cuts = np.r_[0, np.flatnonzero(lab_q[1:] != lab_q[:-1]) + 1, lab_q.size].tolist()
        runs = list(itertools.pairwise(cuts))
        m = np.stack([(s[a:b].max(axis=0) if cols else s[:, a:b].max(axis=1)) for a, b in runs], axis=1)
        same = lab_p[:, None] == lab_q[cuts[:-1]][None, :]
        vs = self.same.val[p0 : p0 + m.shape[0]]
        vd = self.diff.val[p0 : p0 + m.shape[0]]
        np.maximum(vs, np.where(same, m, -np.inf).max(axis=1), out=vs)
        np.maximum(vd, np.where(same, -np.inf, m).max(axis=1), out=vd)
        thr = np.where(same, vs.astype(np.float64)[:, None], vd.astype(np.float64)[:, None]) - self.eps2
        hit = (m > -np.inf) & (m >= thr)
        for g in np.flatnonzero(hit.any(axis=0)).tolist():
            lines = np.flatnonzero(hit[:, g])
            a, b = runs[g]
            sub = s[a:b, lines].T if cols else s[lines, a:b]
            r, c = np.nonzero(sub >= thr[lines, g][:, None])  # finite thresholds: masked (-inf) never pass
            kind = same[lines[r], g]
            for rec, keep in ((self.same, kind), (self.diff, ~kind)):
                if keep.any():
                    rec.add(p0 + lines[r[keep]], q0 + a + c[keep], sub[r[keep], c[keep]])
        return m

    def fold_far(self, st: np.ndarray, lines: np.ndarray, p0: int, q0: int) -> None:
        """Farthest partner of one-member-class points ``p0 + lines`` over strip ``st``'s columns."""
        if lines.size == 0:
            return
        sub = st[lines]
        cur = self.far.val[p0 + lines]
        cur = np.minimum(cur, sub.min(axis=1))
        self.far.val[p0 + lines] = cur
        r, c = np.nonzero(sub <= (cur.astype(np.float64) + self.eps2)[:, None])
        self.far.add(p0 + lines[r], q0 + c, sub[r, c])


def _source(emb: Embeddings) -> np.ndarray:
    """The embeddings array (memory-mapped when ``emb`` is a path to a ``.npy`` file)."""
    return np.load(emb, mmap_mode="r") if isinstance(emb, (str, Path)) else np.asarray(emb)


def _load(emb: Embeddings, lo: int, hi: int) -> np.ndarray:
    return as_unit_embeddings(_source(emb)[lo:hi], row_offset=lo)


def _block_task(
    emb: Embeddings, a: tuple[int, int], b: tuple[int, int], top_k: int, codes: np.ndarray | None,
    alone: np.ndarray | None,
) -> dict[str, np.ndarray]:
    """Task (a, b): the pairs B_a × B_b (a = b: i < j in B_a) in one pass (module docstring).

    Returns ``pairs`` (global i, j, d: the task's top ``top_k``, when ``top_k`` > 0) and, with ``codes``, the
    global indices ``idx`` of its points with their nearest same-label / other-label distance and farthest
    distance (one-member classes only; inf / -inf where the task holds no such partner).
    """
    from threadpoolctl import threadpool_limits

    diag = a == b
    parts = [a] if diag else [a, b]
    idx = np.concatenate([np.arange(*blk) for blk in parts])
    na = a[1] - a[0]
    lab = np.zeros(idx.size, np.int64) if codes is None else codes[idx]
    # class-sorted inside each block (a strip's columns of one class are contiguous), one copy of the rows
    perm = np.r_[np.argsort(lab[:na], kind="stable"), na + np.argsort(lab[na:], kind="stable")]
    idx, lab = idx[perm], lab[perm]
    x = np.empty((idx.size, _source(emb).shape[1]), np.float32)
    for (lo, hi), o in zip(parts, (0, na), strict=False):
        np.take(_load(emb, lo, hi), perm[o : o + hi - lo] - o, axis=0, out=x[o : o + hi - lo])
    far_pts = np.zeros(idx.size, bool) if alone is None else alone[idx]
    xa, xb = x[:na], x if diag else x[na:]
    off = 0 if diag else na  # state index of B's first point
    eps2 = screen_margin(x)
    top = TopPairs(top_k, eps2) if top_k > 0 else None
    state = _LabelState(idx.size, eps2) if codes is not None else None
    buf = np.empty(_STRIP * _TILE, np.float32)
    tri = np.tri(_STRIP, dtype=bool)
    with threadpool_limits(1, user_api="blas"):
        for r0 in range(0, na, _STRIP):
            r1 = min(r0 + _STRIP, na)
            for c0 in range(r0 if diag else 0, xb.shape[0], _TILE):
                c1 = min(c0 + _TILE, xb.shape[0])
                s = buf[: (r1 - r0) * (c1 - c0)].reshape(r1 - r0, c1 - c0)
                np.matmul(xa[r0:r1], xb[c0:c1].T, out=s)
                if state is not None:  # farthest first: counting a pair twice (or the point itself) changes no max
                    state.fold_far(s, np.flatnonzero(far_pts[r0:r1]), r0, off + c0)
                    state.fold_far(s.T, np.flatnonzero(far_pts[off + c0 : off + c1]), off + c0, r0)
                if diag and c0 == r0:  # keep column > row only
                    np.copyto(s[:, : r1 - r0], -np.inf, where=tri[: r1 - r0, : r1 - r0])
                if state is not None:
                    la, lb = lab[r0:r1], lab[off + c0 : off + c1]
                    row_max = state.fold(s, False, r0, la, off + c0, lb).max(axis=1)
                    state.fold(s, True, off + c0, lb, r0, la)
                elif top is not None:
                    row_max = s.max(axis=1)
                if top is not None:
                    r, c = top.screen(s, row_max)
                    if r.size:
                        p, q = r0 + r, off + c0 + c
                        gi, gj = idx[p], idx[q]
                        top.add(np.minimum(gi, gj), np.maximum(gi, gj), exact_dists(x, p, q))
    out: dict[str, np.ndarray] = {}
    if top is not None:
        i, j, d = top.result()
        out["pairs"] = np.stack([i, j]), d
    if state is not None:
        out.update(idx=idx, same=state.same.exact(x), diff=state.diff.exact(x), far=state.far.exact(x))
    return out


def _run(client: Any, emb: Embeddings, tasks: list, *extra: Any) -> list:
    if client is None:
        return [_block_task(emb, a, b, *extra) for a, b in tasks]
    data = emb if isinstance(emb, (str, Path)) else client.scatter(emb, broadcast=True, hash=False)
    extra = tuple(client.scatter(e, broadcast=True, hash=False) if isinstance(e, np.ndarray) else e for e in extra)
    futures = [client.submit(_block_task, data, a, b, *extra, pure=False) for a, b in tasks]
    return client.gather(futures)


def _n_rows(emb: Embeddings) -> int:
    x = _source(emb)
    if x.ndim != 2:
        raise ValueError(f"emb must be a 2-D array (N, D), got shape {x.shape}")
    return int(x.shape[0])


def blocked_rankings(
    emb: Embeddings, top_k: int | None, labels: object = None, client: Any = None, n_blocks: int = 4
) -> tuple[PairRanking | None, LabelScores | None]:
    """Both rankings in one pass of row-block tasks (module docstring): the exact top-``top_k`` pairs (as
    :func:`rank_near_duplicates`; ``None`` skips them) and, with ``labels``, ``(score, d_same, d_diff)`` as
    :func:`label_error_scores`."""
    n = _n_rows(emb)
    k = 0
    if top_k is not None:
        if isinstance(top_k, bool) or not isinstance(top_k, numbers.Integral) or top_k < 1:
            raise ValueError(f"top_k must be a positive integer, got {top_k!r}")
        k = int(min(int(top_k), n * (n - 1) // 2))
    codes = alone = None
    label_out: LabelScores | None = None
    if labels is not None:
        codes = _validate_labels(labels, n)
        counts = np.bincount(codes)
        if counts.size == 1:  # one class only: label_error_scores' convention, no distances needed
            label_out = (np.ones(n), np.full(n, np.nan), np.full(n, np.inf))
            codes = None
        else:
            alone = counts[codes] == 1
    pairs = PairRanking(np.empty((0, 2), np.int64), np.empty(0)) if top_k is not None else None
    if k == 0 and codes is None:
        return pairs, label_out
    parts = _run(client, emb, _tasks(row_blocks(n, n_blocks)), k, codes, alone)
    if k > 0:
        ij = np.concatenate([p["pairs"][0] for p in parts], axis=1)
        dd = np.concatenate([p["pairs"][1] for p in parts])
        order = np.lexsort((ij[1], ij[0], dd))[:k]  # every pair lies in one task: no repeats to drop
        pairs = PairRanking(ij[:, order].T.copy(), dd[order])
    if codes is not None:
        d_same, d_diff, far = np.full(n, np.inf), np.full(n, np.inf), np.full(n, -np.inf)
        for p in parts:
            np.minimum.at(d_same, p["idx"], p["same"])
            np.minimum.at(d_diff, p["idx"], p["diff"])
            np.maximum.at(far, p["idx"], p["far"])
        d_same[alone] = far[alone]
        label_out = (ratio_scores(d_same, d_diff), d_same, d_diff)
    return pairs, label_out


def blocked_near_duplicates(emb: Embeddings, top_k: int, client: Any = None, n_blocks: int = 4) -> PairRanking:
    """:func:`rank_near_duplicates` as row-block tasks; equal to it pair for pair (module docstring)."""
    return blocked_rankings(emb, top_k, None, client, n_blocks)[0]


def blocked_label_error_scores(emb: Embeddings, labels: object, client: Any = None, n_blocks: int = 4) -> LabelScores:
    """:func:`label_error_scores` as row-block tasks: the same ``(score, d_same, d_diff)`` (module docstring)."""
    return blocked_rankings(emb, None, labels, client, n_blocks)[1]
