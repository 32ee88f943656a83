"""Near-duplicate and label-error rankings split into row-block tasks (for Dask workers), merged exactly.

The rows are cut into ``m`` blocks B_0..B_{m-1}; task (a, b), a < b, runs the exact single-process kernel
(:func:`rank_near_duplicates`, :func:`label_error_scores`) on the rows B_a ∪ B_b (in index order), so every
pair of samples lies in at least one task. Each row is normalised by itself and every distance is a float64
function of the two rows only (``_kernels``), so a pair has the same distance in every task that holds it and
in the single-process run; the merges are therefore exact:

- near duplicates: the ranking order is (d, i, j) and the index maps of a task are increasing, so a pair of the
  global top k is in the top k of any task holding it (the pairs ranked before it in the task are ranked before
  it globally); the merge keeps the first k distinct pairs of all task lists in (d, i, j) order;
- label errors: d_diff(i) = min over tasks of the task's nearest other-label distance; d_same(i) = min over the
  tasks where i's class has another member (a task with one class gets one extra row of another label so that
  the kernel computes same-label distances, and its d_diff is ignored); for a class with one member overall,
  d_same(i) = max over tasks of the task's farthest other-label distance (the kernel's convention).

The arithmetic is about twice the single-process kernel's (intra-block pairs are recomputed in m - 1 tasks);
memory per task is O(|B_a ∪ B_b| · D). The embeddings reach the tasks as a path to a ``.npy`` file that each
task memory-maps (shared storage), or as an in-memory array. ``client`` is anything with the
``submit``/``gather`` interface of ``distributed.Client``; ``None`` runs the tasks here, one after another.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from .label_errors import label_error_scores
from .near_duplicates import rank_near_duplicates
from .types import PairRanking

__all__ = ["blocked_label_error_scores", "blocked_near_duplicates", "row_blocks"]

Embeddings = np.ndarray | str | Path


def row_blocks(n: int, n_blocks: int) -> list[tuple[int, int]]:
    """``n_blocks`` contiguous row ranges [lo, hi) covering 0..n (sizes differ by at most one)."""
    cuts = np.linspace(0, n, max(1, min(n_blocks, n)) + 1).round().astype(int)
    return [(int(a), int(b)) for a, b in itertools.pairwise(cuts.tolist())]


def _tasks(blocks: list[tuple[int, int]]) -> list[tuple[tuple[int, int], tuple[int, int]]]:
    if len(blocks) == 1:
        return [(blocks[0], (blocks[0][1], blocks[0][1]))]
    return [(blocks[a], blocks[b]) for a, b in itertools.combinations(range(len(blocks)), 2)]


def _rows(emb: Embeddings, a: tuple[int, int], b: tuple[int, int]) -> tuple[np.ndarray, np.ndarray]:
    """Global indices and rows of B_a ∪ B_b (memory-mapped when ``emb`` is a path)."""
    x = np.load(emb, mmap_mode="r") if isinstance(emb, (str, Path)) else emb
    idx = np.r_[np.arange(*a), np.arange(*b)]
    return idx, np.concatenate([np.asarray(x[a[0] : a[1]]), np.asarray(x[b[0] : b[1]])])


def _pairs_task(emb: Embeddings, a: tuple[int, int], b: tuple[int, int], top_k: int) -> tuple[np.ndarray, ...]:
    idx, x = _rows(emb, a, b)
    if x.shape[0] < 2:
        return np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)
    r = rank_near_duplicates(x, top_k)
    return idx[r.pairs[:, 0]], idx[r.pairs[:, 1]], r.scores


def _run(client: Any, fn: Callable, emb: Embeddings, tasks: list, *extra: Any) -> list:
    if client is None:
        return [fn(emb, a, b, *extra) for a, b in tasks]
    data = emb if isinstance(emb, (str, Path)) else client.scatter(emb, broadcast=True, hash=False)
    futures = [client.submit(fn, data, a, b, *extra, pure=False) for a, b in tasks]
    return client.gather(futures)


def _n_rows(emb: Embeddings) -> int:
    return int((np.load(emb, mmap_mode="r") if isinstance(emb, (str, Path)) else np.asarray(emb)).shape[0])


def blocked_near_duplicates(emb: Embeddings, top_k: int, client: Any = None, n_blocks: int = 4) -> PairRanking:
    """:func:`rank_near_duplicates` as row-block tasks; equal to it pair for pair (module docstring)."""
    n = _n_rows(emb)
    if n < 2:
        return rank_near_duplicates(np.load(emb) if isinstance(emb, (str, Path)) else emb, top_k)
    k = int(min(int(top_k), n * (n - 1) // 2))
    parts = _run(client, _pairs_task, emb, _tasks(row_blocks(n, n_blocks)), top_k)
    ii = np.concatenate([p[0] for p in parts])
    jj = np.concatenate([p[1] for p in parts])
    dd = np.concatenate([p[2] for p in parts])
    order = np.lexsort((jj, ii, dd))
    ii, jj, dd = ii[order], jj[order], dd[order]
    first = np.r_[True, (ii[1:] != ii[:-1]) | (jj[1:] != jj[:-1])]  # a pair from several tasks, same d
    ii, jj, dd = ii[first][:k], jj[first][:k], dd[first][:k]
    return PairRanking(np.stack([ii, jj], axis=1), dd)


def _labels_task(
    emb: Embeddings, a: tuple[int, int], b: tuple[int, int], codes: np.ndarray
) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """(global idx, d_same, d_diff, farthest) of one task; inf/-inf where the task tells nothing."""
    idx, x = _rows(emb, a, b)
    lab = codes[idx]
    single_class = np.unique(lab).size == 1
    if single_class:  # one row of another label makes the kernel compute same-label distances
        x = np.concatenate([x, x[:1]])
        lab = np.r_[lab, lab[0] + 1]
    _, d_same, d_diff = label_error_scores(x, lab)
    d_same, d_diff, lab = d_same[: idx.size], d_diff[: idx.size], lab[: idx.size]
    alone = np.bincount(lab)[lab] == 1  # the kernel's d_same is then the farthest other-label distance
    same = np.where(alone, np.inf, d_same)
    far = np.where(alone & ~single_class, d_same, -np.inf)
    diff = np.full(idx.size, np.inf) if single_class else d_diff
    return idx, same, diff, far


def blocked_label_error_scores(
    emb: Embeddings, labels: object, client: Any = None, n_blocks: int = 4
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """:func:`label_error_scores` as row-block tasks: the same ``(score, d_same, d_diff)`` (module docstring)."""
    n = _n_rows(emb)
    lab = np.asarray(labels)
    if lab.ndim != 1 or lab.shape[0] != n:
        raise ValueError(f"labels must be 1-D with one entry per embedding row ({n}), got shape {lab.shape}")
    codes = np.unique(lab, return_inverse=True)[1].astype(np.int64).ravel()
    counts = np.bincount(codes)
    if counts.size == 1 or n_blocks <= 1 or n < 4:
        return label_error_scores(np.load(emb) if isinstance(emb, (str, Path)) else emb, labels)
    d_same, d_diff, far = np.full(n, np.inf), np.full(n, np.inf), np.full(n, -np.inf)
    for idx, s, d, f in _run(client, _labels_task, emb, _tasks(row_blocks(n, n_blocks)), codes):
        np.minimum.at(d_same, idx, s)
        np.minimum.at(d_diff, idx, d)
        np.maximum.at(far, idx, f)
    alone = counts[codes] == 1
    d_same[alone] = far[alone]
    num = d_diff * d_diff  # score = d_diff² / (d_same² + d_diff²), 0/0 -> 0.5 (rank_label_errors)
    den = d_same * d_same + num
    with np.errstate(invalid="ignore", divide="ignore"):
        score = np.where(den > 0.0, num / np.where(den > 0.0, den, 1.0), 0.5)
    return score, d_same, d_diff
