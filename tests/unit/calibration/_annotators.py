"""Simulated annotators with known channels, for tests whose truth is drawn by hand (Hanada and Futami 2026 §2)."""

from __future__ import annotations

import numpy as np

from noisycal_platform.calibration import Channel


def channels(fpr: np.ndarray, fnr: np.ndarray) -> list[Channel]:
    """One `Channel` (a_j, b_j) per annotator j."""
    return [Channel(f, b) for f, b in zip(fpr, fnr, strict=True)]


def noisy_labels(rng: np.random.Generator, y: np.ndarray, fpr: np.ndarray, fnr: np.ndarray) -> np.ndarray:
    """(n, K) float 0/1 labels of true classes ``y``: annotator j says 1 with probability 1 − b_j when y = 1 and
    a_j when y = 0, independently given y. Draws the y = 1 uniforms, then the y = 0 uniforms, each (n, K)."""
    shape = (np.size(y), np.size(fpr))
    return np.where(np.asarray(y)[:, None], rng.random(shape) >= fnr, rng.random(shape) < fpr).astype(float)
