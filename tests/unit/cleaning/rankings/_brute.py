"""Data makers and brute-force references for the ranking tests (dense N×N, small N only)."""

from __future__ import annotations

import numpy as np
from scipy.spatial.distance import pdist, squareform


def unit32(x: np.ndarray) -> np.ndarray:
    """The canonical embedding the rankings use: L2-normalised in float64, stored as float32."""
    x = np.asarray(x, dtype=np.float64)
    return (x / np.linalg.norm(x, axis=1, keepdims=True)).astype(np.float32)


def dense_dist(x: np.ndarray) -> np.ndarray:
    """Brute-force float64 distance matrix d = min(||x_i - x_j||² / 4, 1) = (1 - cos)/2 for unit rows."""
    x64 = unit32(x).astype(np.float64)
    return np.minimum(squareform(pdist(x64, "sqeuclidean")) / 4.0, 1.0)


def clustered(n: int, dim: int = 24, n_clusters: int = 12, sigma: float = 0.6, seed: int = 0) -> np.ndarray:
    """Gaussian clusters around random unit centres plus a few uniform background points."""
    rng = np.random.default_rng(seed)
    c = rng.standard_normal((n_clusters, dim))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    lab = rng.integers(0, n_clusters, n)
    x = c[lab] + sigma * rng.standard_normal((n, dim)) / np.sqrt(dim)
    n_bg = max(1, n // 40)
    x[:n_bg] = rng.standard_normal((n_bg, dim))
    return x[rng.permutation(n)]
