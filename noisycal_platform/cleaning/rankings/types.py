"""Result types of the SelfClean candidate rankings (seed 001 §3.2).

Both are frozen dataclasses holding read-only numpy arrays, so a ranking can be cached and shared
without defensive copies.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

__all__ = ["PairRanking", "Ranking"]


def _frozen(a: np.ndarray, dtype: type, ndim: int, name: str) -> np.ndarray:
    arr = np.array(a, dtype=dtype, copy=True)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    arr.setflags(write=False)
    return arr


@dataclass(frozen=True, eq=False)
class Ranking:
    """Per-item ranking.

    Attributes
    ----------
    order : int64 array (N,)
        Item indices, most suspicious first (a permutation of ``0..N-1``).
    scores : float64 array (N,)
        Score of each item, **indexed by item** (``scores[i]`` belongs to item ``i``); lower = more
        suspicious, so ``scores[order]`` is non-decreasing.
    """

    order: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        order = _frozen(self.order, np.int64, 1, "order")
        scores = _frozen(self.scores, np.float64, 1, "scores")
        if order.shape != scores.shape:
            raise ValueError(f"order and scores differ in length: {order.shape} vs {scores.shape}")
        object.__setattr__(self, "order", order)
        object.__setattr__(self, "scores", scores)

    def __len__(self) -> int:
        return int(self.order.shape[0])


@dataclass(frozen=True, eq=False)
class PairRanking:
    """Ranking of item pairs.

    Attributes
    ----------
    pairs : int64 array (k, 2)
        Item index pairs with ``i < j`` in each row, most suspicious (closest) first.
    scores : float64 array (k,)
        Distance of each pair (row-aligned with ``pairs``), ascending.
    """

    pairs: np.ndarray
    scores: np.ndarray

    def __post_init__(self) -> None:
        pairs = _frozen(np.reshape(self.pairs, (-1, 2)), np.int64, 2, "pairs")
        scores = _frozen(self.scores, np.float64, 1, "scores")
        if pairs.shape[0] != scores.shape[0]:
            raise ValueError(f"pairs and scores differ in length: {pairs.shape[0]} vs {scores.shape[0]}")
        object.__setattr__(self, "pairs", pairs)
        object.__setattr__(self, "scores", scores)

    def __len__(self) -> int:
        return int(self.pairs.shape[0])
