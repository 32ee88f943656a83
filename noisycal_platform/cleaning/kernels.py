"""Which kernel computes the near-duplicate pairs, the label-error scores and the embeddings: the
single-process kernels when ``client`` is ``None``, else their data-parallel forms on a Dask client.

- near duplicates: :func:`~.rankings.rank_near_duplicates` or :func:`~.rankings.row_blocks.blocked_near_duplicates`
  (equal pair for pair);
- label errors: :func:`~.rankings.rank_label_errors` or the ranking of
  :func:`~.rankings.row_blocks.blocked_label_error_scores` (the same scores, ordered the same way: ascending,
  ties by index);
- both at once (:func:`near_duplicates_and_label_errors`): on a client one pass of row-block tasks over the
  inner products feeds both (:func:`~.rankings.row_blocks.blocked_rankings`);
- embeddings: :func:`~.encoder.embed` in this process or :func:`~.sharded_embeddings.sharded_embeddings` (images
  sharded over the workers, per-image inference; equal to 1e-5).

``client`` is anything with the ``submit``/``scatter``/``gather`` interface of ``distributed.Client``.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Any

import numpy as np

from noisycal_platform.cleaning.rankings import rank_label_errors, rank_near_duplicates
from noisycal_platform.cleaning.rankings.row_blocks import (
    blocked_label_error_scores,
    blocked_near_duplicates,
    blocked_rankings,
)
from noisycal_platform.cleaning.rankings.types import PairRanking, Ranking
from noisycal_platform.cleaning.sharded_embeddings import sharded_embeddings

__all__ = [
    "ROW_BLOCKS",
    "SHARD_ROWS",
    "dino_embeddings",
    "label_errors",
    "near_duplicates",
    "near_duplicates_and_label_errors",
]

ROW_BLOCKS = 4  # row blocks per ranking on a cluster: 4·5/2 = 10 tasks (B_a × B_b, a <= b)
SHARD_ROWS = 4096  # images per embedding task on a cluster


def near_duplicates(emb: np.ndarray, top_k: int, client: Any = None) -> PairRanking:
    """The exact top-``top_k`` pairs by d = (1 − cos)/2, here or as row-block tasks on ``client``."""
    if client is None:
        return rank_near_duplicates(emb, top_k)
    return blocked_near_duplicates(emb, top_k, client=client, n_blocks=ROW_BLOCKS)


def label_errors(emb: np.ndarray, labels: object, client: Any = None) -> Ranking:
    """Samples by d_diff² / (d_same² + d_diff²) ascending (ties by index), here or as row-block tasks."""
    if client is None:
        return rank_label_errors(emb, labels)
    score, _, _ = blocked_label_error_scores(emb, labels, client=client, n_blocks=ROW_BLOCKS)
    return _ranking(score)


def near_duplicates_and_label_errors(
    emb: np.ndarray, top_k: int, labels: object, client: Any = None
) -> tuple[PairRanking, Ranking]:
    """:func:`near_duplicates` and :func:`label_errors` of the same embeddings; on ``client`` one pass of
    row-block tasks computes both (the same results as the two calls)."""
    if client is None:
        return rank_near_duplicates(emb, top_k), rank_label_errors(emb, labels)
    pairs, (score, _, _) = blocked_rankings(emb, top_k, labels, client=client, n_blocks=ROW_BLOCKS)
    return pairs, _ranking(score)


def _ranking(score: np.ndarray) -> Ranking:
    return Ranking(np.argsort(score, kind="stable"), score)


def dino_embeddings(
    encoder_path: str | Path, sha256: str, images: Any, scratch: str | Path, *, device: str, client: Any = None
) -> np.ndarray:
    """L2-normalised teacher CLS tokens (float32 N×D) of the uint8 N×3×H×W ``images`` (array or tensor) with the
    encoder at ``encoder_path`` (its SHA-256 checked): here on ``device``, or sharded over ``client``'s workers
    (CPU, one torch thread each) into a memory-mapped file in a temporary folder under ``scratch``, which the
    workers must reach (shared storage)."""
    from noisycal_platform.cleaning.encoder import embed, load_encoder

    model = load_encoder(encoder_path, expected_sha256=sha256, device=device if client is None else "cpu")
    if client is None:
        return embed(model, images)
    pixels = np.asarray(images.numpy() if hasattr(images, "numpy") else images, dtype=np.uint8)

    Path(scratch).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".shards-", dir=scratch) as tmp:
        path = sharded_embeddings(encoder_path, sha256, model.dim, pixels, tmp, "shards", "dino", client=client,
                                  shard_rows=SHARD_ROWS)
        return np.load(path)
