"""Simulation with known truth for the multi-class tests: a latent class, a miscalibrated predictor and
annotators answering through asymmetric confusion matrices."""

from __future__ import annotations

import numpy as np


def asymmetric_confusions(n_classes: int = 5, accuracy: tuple[float, float] = (0.62, 0.85)) -> np.ndarray:
    """Three asymmetric (K=3, C, C) confusion matrices: errors drift to the next class, to the previous
    class, and towards class 0, with class-dependent accuracy."""
    c = n_classes
    acc = np.linspace(accuracy[0], accuracy[1], c)
    t = np.zeros((3, c, c))
    for y in range(c):
        rest = 1 - acc[y]
        nxt, prv = (y + 1) % c, (y - 1) % c
        t[0, y, y] = acc[y]
        t[0, y, nxt] += 0.7 * rest
        t[0, y, prv] += 0.3 * rest
        t[1, y, y] = acc[::-1][y]
        t[1, y, prv] += 0.8 * (1 - acc[::-1][y])
        t[1, y, (y + 2) % c] += 0.2 * (1 - acc[::-1][y])
        t[2, y, y] = 0.75
        others = [a for a in range(c) if a != y]
        share = np.array([3.0 if a == 0 else 1.0 for a in others])
        t[2, y, others] = 0.25 * share / share.sum()
    return t


def draw_annotations(rng: np.random.Generator, y: np.ndarray, t: np.ndarray, missing: float = 0.0) -> np.ndarray:
    """(n, K) float class indices drawn through T_j[y, ·]; a ``missing`` share set to NaN."""
    n, k = len(y), t.shape[0]
    cum = np.cumsum(t[:, y, :], axis=2)  # (K, n, C)
    u = rng.random((k, n, 1))
    a = (u > cum).sum(axis=2).T.astype(float)
    np.minimum(a, t.shape[1] - 1, out=a)
    if missing:
        a[rng.random(a.shape) < missing] = np.nan
    return a


def simulate(n: int, seed: int, n_classes: int = 5, missing: float = 0.0, accuracy: tuple[float, float] = (0.62, 0.85)):
    """Returns (probs (n, C) of a miscalibrated predictor, true labels, annotations, true confusions)."""
    rng = np.random.default_rng(seed)
    c = n_classes
    g = rng.normal(0.0, 1.3, size=(n, c)) + np.linspace(0.4, -0.4, c)
    eta = np.exp(g - g.max(axis=1, keepdims=True))
    eta /= eta.sum(axis=1, keepdims=True)
    y = (rng.random((n, 1)) > np.cumsum(eta, axis=1)).sum(axis=1)
    y = np.minimum(y, c - 1)
    h = 1.7 * g + np.linspace(-0.3, 0.3, c)  # overconfident and biased
    p = np.exp(h - h.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    t = asymmetric_confusions(c, accuracy)
    return p, y, draw_annotations(rng, y, t, missing), t
