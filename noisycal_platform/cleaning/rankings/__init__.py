"""SelfClean candidate rankings (Gröger et al. 2023 §3.2): irrelevant samples, near duplicates, label errors.

All three use d = (1 - cos)/2 on L2-normalised float32 embeddings, are exact (equal to a float64
brute force on the full distance matrix) and keep memory at O(N·D) plus one tile buffer per worker
thread (float32 GEMM tiles run on a few threads, each with a single-threaded BLAS; ``_kernels``).
"""

from .irrelevant import lad_walk, rank_irrelevant, single_linkage
from .label_errors import label_error_scores, rank_label_errors
from .near_duplicates import rank_near_duplicates
from .types import PairRanking, Ranking

__all__ = [
    "PairRanking",
    "Ranking",
    "label_error_scores",
    "lad_walk",
    "rank_irrelevant",
    "rank_label_errors",
    "rank_near_duplicates",
    "single_linkage",
]
