"""Behind ``assets/cleaning/rankings.py``: the three issue rankings per embedding kind (Gröger et al. 2023 §3.3), and
which
kernel computes them: the single-process rankings of :mod:`noisycal_platform.cleaning.rankings` when ``client`` is
``None``, else their row-block forms on a Dask client (:mod:`~noisycal_platform.cleaning.rankings.row_blocks`,
equal pair for pair and score for score).

Asset -> function: ``cleaning/rank_irrelevant`` -> :func:`rank_irrelevant`; ``cleaning/rank_near_duplicates`` and
``cleaning/rank_label_errors`` (one step, ``neighbour_rankings``) -> :func:`neighbour_rankings`, which is
:func:`rank_near_duplicates` and :func:`rank_label_errors` with one pass of row-block tasks feeding both.
``client`` is anything with the ``submit``/``scatter``/``gather`` interface of ``distributed.Client``.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl

from noisycal_platform.cleaning import rankings as formulas
from noisycal_platform.cleaning.pipeline.embeddings import EMBEDDING_KINDS, embedding_matrix, embedding_source
from noisycal_platform.cleaning.pipeline.protocol_tables import image_files
from noisycal_platform.cleaning.pipeline.schemas import NEAR_DUPLICATE_SCHEMA
from noisycal_platform.cleaning.rankings.row_blocks import (
    blocked_label_error_scores,
    blocked_near_duplicates,
    blocked_rankings,
)
from noisycal_platform.cleaning.rankings.types import PairRanking, Ranking

__all__ = [
    "BLOCK_BYTES",
    "RERANKED_KIND",
    "ROW_BLOCKS",
    "VERIFY_MAX_SIDE",
    "VERIFY_SCALE",
    "label_error_ranking",
    "near_duplicate_pairs",
    "near_duplicates_and_label_errors",
    "neighbour_rankings",
    "rank_irrelevant",
    "rank_label_errors",
    "rank_near_duplicates",
    "row_block_count",
    "stored_rankings",
]


ROW_BLOCKS = 4  # row blocks per ranking on a cluster: 4·5/2 = 10 tasks (B_a × B_b, a <= b)
#: largest row block on a cluster, in bytes of float32 rows: a task holds two blocks (memory-mapped pages and
#: their normalised copy), so more rows or wider vectors get more blocks (the results do not depend on it)
BLOCK_BYTES = 256 * 2**20
#: Longest side images are shrunk to (aspect kept) for SIFT verification.
VERIFY_MAX_SIDE = 512
#: SIFT verification runs on the images resized by this factor after the ``VERIFY_MAX_SIDE`` shrink
#: (``verify.sift_from_files(scale=)``; OpenCV doubles its input first, so 0.5 is about the scale space of the image
#: without that upsampled octave): 0.5, with 96 keypoints (``verify.SIFT_FEATURES``). Rule of
#: benchmarks/bench_ham10000_tune.py, stated there before its grid ran on HAM10000's tuning half: the cheapest
#: setting whose recall@501 is at least the then default's (scale 1, 128 keypoints, k = 5: 0.2993) − 0.005 with no
#: fewer audited pairs (10 of 12), and on all 10,015 images through the platform still 15 of the 20 audited pairs
#: in the top 1,000, else the next-cheapest. Its first pick, 0.5 with 64 keypoints (0.3012, 10 of 12), put 14 of 20
#: there (recall@1000 0.296); the next, 0.5 with 96 (0.2999, 10 of 12), put 15 of 20, recall@1000 0.296, recall@3207
#: 0.307 (0.323 at full size; 2026-12-07, benchmarks/bench_ham10000_platform.py). SIFT CPU seconds on the tuning
#: half: 30.5 against 69.1 at full size with 128 (load 13–18).
VERIFY_SCALE = 0.5
#: the embedding kind whose near-duplicate ranking ``rerank`` replaces by the verified one (the baseline keeps its
#: plain ranking); its plain top-k pairs are then never computed
RERANKED_KIND = "dino"


def rank_irrelevant(images: pl.DataFrame, embeddings: pl.DataFrame) -> pl.DataFrame:
    """``RANKING_SCHEMA`` per embedding kind: single-linkage dendrogram walk (Gröger et al. 2023 §3.3,
    :func:`noisycal_platform.cleaning.rankings.rank_irrelevant`)."""
    files = image_files(images)
    return pl.concat(
        [formulas.rank_irrelevant(embedding_matrix(embeddings, k)).to_frame(files, k) for k in EMBEDDING_KINDS]
    )


def rank_near_duplicates(
    images: pl.DataFrame, embeddings: pl.DataFrame, top_k: int, *, rerank: bool = False, k: int = 10,
    min_inliers: int = 8, combine: str = "rank_sum", client: Any = None,
) -> pl.DataFrame:
    """``NEAR_DUPLICATE_SCHEMA`` per embedding kind: the exact top-k pairs by d = (1 − cos)/2 (Gröger et al. 2023 §3.3;
    :func:`near_duplicate_pairs`, with a Dask ``client`` as row-block tasks on its workers, the same pairs;
    ``inliers``, ``verified`` null), or with ``rerank`` the learned embedding's exact k-NN candidates re-ranked by
    SIFT + geometric verification (:func:`~noisycal_platform.cleaning.rankings.verify.verified_near_duplicates`;
    ``score`` = d = (1 − cos)/2) in place of its top-k ranking (in this process). The baseline kind keeps its
    plain ranking. The near-duplicate half of :func:`neighbour_rankings`."""
    pairs, _ = neighbour_rankings(images, embeddings, top_k, label_errors=False, rerank=rerank, k=k,
                                  min_inliers=min_inliers, combine=combine, client=client)
    assert pairs is not None
    return pairs


def rank_label_errors(images: pl.DataFrame, embeddings: pl.DataFrame, client: Any = None) -> pl.DataFrame:
    """``RANKING_SCHEMA`` per embedding kind: d_diff² / (d_same² + d_diff²), ascending (Gröger et al. 2023 §3.3); with a
    Dask ``client`` as row-block tasks on its workers (:func:`label_error_ranking`, the same ranking)."""
    files = image_files(images)
    labels = files["label"].to_numpy()
    return pl.concat(
        [label_error_ranking(_vectors(embeddings, k, client), labels, client).to_frame(files, k)
         for k in EMBEDDING_KINDS]
    )


def _vectors(embeddings: pl.DataFrame, kind: str, client: Any) -> np.ndarray | str:
    """The ``kind`` vectors for a kernel: the memory-mapped array here, or on a cluster the checked cache
    file's path, which every task opens memory-mapped itself (nothing scattered from this process)."""
    return embedding_matrix(embeddings, kind) if client is None else embedding_source(embeddings, kind)


def row_block_count(n: int, dim: int) -> int:
    """Row blocks for N×``dim`` float32 rows: :data:`ROW_BLOCKS`, or more so that no block exceeds
    :data:`BLOCK_BYTES`."""
    return max(ROW_BLOCKS, -(-(n * dim * 4) // BLOCK_BYTES))


def _shape(emb: np.ndarray | str) -> tuple[int, int]:
    if isinstance(emb, str):
        return tuple(np.load(emb, mmap_mode="r").shape)  # type: ignore[return-value]
    return emb.shape  # type: ignore[return-value]


def neighbour_rankings(
    images: pl.DataFrame, embeddings: pl.DataFrame, top_k: int, *, near_duplicates: bool = True,
    label_errors: bool = True, rerank: bool = False, k: int = 10, min_inliers: int = 8, combine: str = "rank_sum",
    client: Any = None,
) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """(:func:`rank_near_duplicates`, :func:`rank_label_errors`) of the same embeddings, each only when asked
    for (``None`` otherwise): both rankings read the nearest neighbours of every image, so when both are asked
    for with a Dask ``client`` one pass of row-block tasks per embedding kind feeds both
    (:func:`near_duplicates_and_label_errors`), half the inner products of two passes. The tables equal the two
    functions' (pair for pair, score for score)."""
    files = image_files(images)
    labels = files["label"].to_numpy()
    # with ``rerank`` the verified ranking replaces the DINO kind's plain one, which is then not computed
    plain_kinds = [kind for kind in EMBEDDING_KINDS if not (rerank and kind == RERANKED_KIND)]
    if near_duplicates and label_errors:
        plain_parts, error_parts = [], []
        for kind in EMBEDDING_KINDS:
            emb = _vectors(embeddings, kind, client)
            if kind in plain_kinds:
                pairs, ranking = near_duplicates_and_label_errors(emb, top_k, labels, client)
                plain_parts.append(pairs.to_frame(files, kind))
            else:
                ranking = label_error_ranking(emb, labels, client)
            error_parts.append(ranking.to_frame(files, kind))
        plain, errors = pl.concat(plain_parts), pl.concat(error_parts)
    else:
        plain = pl.concat(
            [near_duplicate_pairs(_vectors(embeddings, kind, client), top_k, client).to_frame(files, kind)
             for kind in plain_kinds]
        ) if near_duplicates else None
        errors = rank_label_errors(images, embeddings, client) if label_errors else None
    if plain is None:
        return None, errors
    return _verified(images, embeddings, plain, rerank=rerank, k=k, min_inliers=min_inliers, combine=combine), errors


# ------------------------------------------------------------------ which kernel: this process or row blocks
def near_duplicate_pairs(emb: np.ndarray | str, top_k: int, client: Any = None) -> PairRanking:
    """The exact top-``top_k`` pairs by d = (1 − cos)/2 of an N×D matrix:
    :func:`~noisycal_platform.cleaning.rankings.rank_near_duplicates` here, or
    :func:`~noisycal_platform.cleaning.rankings.row_blocks.blocked_near_duplicates` on ``client`` (equal pair for
    pair). ``emb`` may be the path of a ``.npy`` file (memory-mapped)."""
    if client is None:
        return formulas.rank_near_duplicates(_array(emb), top_k)
    return blocked_near_duplicates(emb, top_k, client=client, n_blocks=row_block_count(*_shape(emb)))


def label_error_ranking(emb: np.ndarray | str, labels: object, client: Any = None) -> Ranking:
    """Samples by d_diff² / (d_same² + d_diff²) ascending (ties by index):
    :func:`~noisycal_platform.cleaning.rankings.rank_label_errors` here, or the ranking of
    :func:`~noisycal_platform.cleaning.rankings.row_blocks.blocked_label_error_scores` on ``client`` (the same
    scores, ordered the same way)."""
    if client is None:
        return formulas.rank_label_errors(_array(emb), labels)
    score, _, _ = blocked_label_error_scores(emb, labels, client=client, n_blocks=row_block_count(*_shape(emb)))
    return _ranking(score)


def near_duplicates_and_label_errors(
    emb: np.ndarray | str, top_k: int, labels: object, client: Any = None
) -> tuple[PairRanking, Ranking]:
    """:func:`near_duplicate_pairs` and :func:`label_error_ranking` of the same embeddings; on ``client`` one pass
    of row-block tasks computes both (:func:`~noisycal_platform.cleaning.rankings.row_blocks.blocked_rankings`,
    the same results as the two calls)."""
    if client is None:
        x = _array(emb)
        return formulas.rank_near_duplicates(x, top_k), formulas.rank_label_errors(x, labels)
    pairs, (score, _, _) = blocked_rankings(emb, top_k, labels, client=client,
                                            n_blocks=row_block_count(*_shape(emb)))
    return pairs, _ranking(score)


def _array(emb: np.ndarray | str) -> np.ndarray:
    return np.load(emb, mmap_mode="r") if isinstance(emb, str) else emb


def _ranking(score: np.ndarray) -> Ranking:
    return Ranking(np.argsort(score, kind="stable"), score)


def _verified(
    images: pl.DataFrame, embeddings: pl.DataFrame, plain: pl.DataFrame, *, rerank: bool, k: int,
    min_inliers: int, combine: str,
) -> pl.DataFrame:
    """``NEAR_DUPLICATE_SCHEMA`` of the plain pair table (``PAIR_RANKING_SCHEMA``; with ``rerank`` it holds only the
    kinds other than :data:`RERANKED_KIND`), and with ``rerank`` the DINO kind's SIFT-verified ranking first
    (:func:`rank_near_duplicates`)."""
    plain = plain.with_columns(pl.lit(None, pl.Int64).alias("inliers"), pl.lit(None, pl.Boolean).alias("verified"))
    if not rerank:
        return plain.cast(NEAR_DUPLICATE_SCHEMA)
    from noisycal_platform.cleaning.rankings.verify import sift_from_files, verified_near_duplicates

    files = image_files(images)
    feats = sift_from_files(images.sort("idx")["path"].to_list(), max_side=VERIFY_MAX_SIDE,
                            scale=VERIFY_SCALE)
    vp = verified_near_duplicates(embedding_matrix(embeddings, RERANKED_KIND), feats, k=k, min_inliers=min_inliers,
                                  combine=combine)
    verified = PairRanking(vp.pairs, vp.dist).to_frame(files, RERANKED_KIND).with_columns(
        pl.Series("inliers", vp.inliers, pl.Int64), pl.Series("verified", vp.verified, pl.Boolean)
    )
    return pl.concat([verified.cast(NEAR_DUPLICATE_SCHEMA), plain.cast(NEAR_DUPLICATE_SCHEMA)])


def _kind(table: pl.DataFrame, kind: str) -> pl.DataFrame:
    return table.filter(pl.col("embedding_kind") == kind)


def stored_rankings(
    kind: str, n: int, irrelevant: pl.DataFrame, near_dups: pl.DataFrame, label_errors: pl.DataFrame
) -> tuple[Ranking, PairRanking, Ranking]:
    """The three rankings of one embedding ``kind`` over ``n`` items, from their stored tables
    (``RANKING_SCHEMA`` / ``PAIR_RANKING_SCHEMA``), validated by ``from_frame``."""
    return (
        Ranking.from_frame(_kind(irrelevant, kind), n),
        PairRanking.from_frame(_kind(near_dups, kind)),
        Ranking.from_frame(_kind(label_errors, kind), n),
    )
