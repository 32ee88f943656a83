"""Result types of the SelfClean candidate rankings (Gröger et al. 2023 §3.2).

Both are frozen dataclasses holding read-only numpy arrays, so a ranking can be cached and shared
without defensive copies. ``to_frame`` / ``from_frame`` convert to and from the stored table (one row per
rank, items named by ``file_name``); ``from_frame`` validates through the constructor.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import polars as pl

__all__ = ["PAIR_RANKING_SCHEMA", "RANKING_SCHEMA", "PairRanking", "Ranking"]

#: Stored per-item ranking: ``rank`` 0 = most suspicious, ``idx`` = item index, ``score`` of that item.
RANKING_SCHEMA: dict[str, pl.DataType] = {
    "embedding_kind": pl.String(),
    "rank": pl.Int64(),
    "idx": pl.Int64(),
    "file_name": pl.String(),
    "label": pl.String(),
    "score": pl.Float64(),
}
#: Stored pair ranking: ``rank`` 0 = closest pair, ``idx_1``/``idx_2`` its items, ``score`` its distance.
PAIR_RANKING_SCHEMA: dict[str, pl.DataType] = {
    "embedding_kind": pl.String(),
    "rank": pl.Int64(),
    "idx_1": pl.Int64(),
    "idx_2": pl.Int64(),
    "file_name_1": pl.String(),
    "file_name_2": pl.String(),
    "score": pl.Float64(),
}


def _need(table: pl.DataFrame, columns: tuple[str, ...], what: str) -> pl.DataFrame:
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise ValueError(f"{what} table: missing columns {missing}, found {table.columns}")
    return table.sort("rank")


def _frozen(a: np.ndarray, dtype: type, ndim: int, name: str) -> np.ndarray:
    arr = np.array(a, dtype=dtype, copy=True)
    if arr.ndim != ndim:
        raise ValueError(f"{name} must be {ndim}-D, got shape {arr.shape}")
    arr.setflags(write=False)
    return arr


class _Scored:
    """What both rankings share: one float64 ``scores`` entry per ranked element, stored read-only together
    with the element array (``order`` or ``pairs``) once their lengths agree."""

    scores: np.ndarray

    def _store(self, name: str, elements: np.ndarray) -> None:
        scores = _frozen(self.scores, np.float64, 1, "scores")
        if elements.shape[0] != scores.shape[0]:
            raise ValueError(f"{name} and scores differ in length: {elements.shape[0]} vs {scores.shape[0]}")
        object.__setattr__(self, name, elements)
        object.__setattr__(self, "scores", scores)

    def __len__(self) -> int:
        return int(self.scores.shape[0])


@dataclass(frozen=True, eq=False)
class Ranking(_Scored):
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
        self._store("order", _frozen(self.order, np.int64, 1, "order"))

    def to_frame(self, files: pl.DataFrame, kind: str) -> pl.DataFrame:
        """One row per rank (``RANKING_SCHEMA``); ``files`` (file_name, label) rows are in item-index order."""
        if files.height != len(self):
            raise ValueError(f"files has {files.height} rows, the ranking {len(self)} items")
        return pl.DataFrame(
            {
                "embedding_kind": kind,
                "rank": np.arange(len(self), dtype=np.int64),
                "idx": self.order,
                "file_name": files["file_name"].gather(self.order),
                "label": files["label"].cast(pl.String).gather(self.order),
                "score": self.scores[self.order],
            },
            schema=RANKING_SCHEMA,
        )

    @classmethod
    def from_frame(cls, table: pl.DataFrame, n: int | None = None) -> Ranking:
        """The ranking a :meth:`to_frame` table holds (columns ``rank``, ``idx``, ``score``).

        ``n`` (default: the row count) is the number of items; the table must rank each of them exactly once.
        """
        t = _need(table, ("rank", "idx", "score"), "ranking")
        order = t["idx"].to_numpy()
        n = t.height if n is None else n
        if order.size and (order.min() < 0 or order.max() >= n):
            raise ValueError(f"ranking table: idx must lie in [0, {n}), got {order.min()}..{order.max()}")
        if order.size != n or np.unique(order).size != n:
            raise ValueError(f"ranking table: must rank each of the {n} items once, got {order.size} rows")
        scores = np.empty(n)
        scores[order] = t["score"].to_numpy()
        return cls(order=order, scores=scores)


@dataclass(frozen=True, eq=False)
class PairRanking(_Scored):
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
        self._store("pairs", _frozen(np.reshape(self.pairs, (-1, 2)), np.int64, 2, "pairs"))

    def to_frame(self, files: pl.DataFrame, kind: str) -> pl.DataFrame:
        """One row per ranked pair (``PAIR_RANKING_SCHEMA``); ``files`` rows are in item-index order."""
        if self.pairs.size and self.pairs.max() >= files.height:
            raise ValueError(f"pairs index item {self.pairs.max()}, files has {files.height} rows")
        return pl.DataFrame(
            {
                "embedding_kind": kind,
                "rank": np.arange(len(self), dtype=np.int64),
                "idx_1": self.pairs[:, 0],
                "idx_2": self.pairs[:, 1],
                "file_name_1": files["file_name"].gather(self.pairs[:, 0]),
                "file_name_2": files["file_name"].gather(self.pairs[:, 1]),
                "score": self.scores,
            },
            schema=PAIR_RANKING_SCHEMA,
        )

    @classmethod
    def from_frame(cls, table: pl.DataFrame) -> PairRanking:
        """The pair ranking a :meth:`to_frame` table holds (columns ``rank``, ``idx_1``, ``idx_2``, ``score``)."""
        t = _need(table, ("rank", "idx_1", "idx_2", "score"), "pair ranking")
        pairs = np.stack([t["idx_1"].to_numpy(), t["idx_2"].to_numpy()], axis=1)
        return cls(pairs=pairs, scores=t["score"].to_numpy())
