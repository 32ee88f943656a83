"""Aggregation weights for corrected labels (Hanada and Futami 2026 §4.4, §C.6, §F.4).

Corrected label of annotator j: Ỹ_j = (A_j − a_j)/δ_j, E[Ỹ_j | X] = η(X) (§3). Any convex combination
Ỹ = Σ_j w_j Ỹ_j stays unbiased. Its residual variance is minimised by inverse corrected-noise-variance
("iv") weights w_j ∝ 1/v̄_j with

    v̄_j = E[Var(Ỹ_j | Y)] = [π·b_j(1 − b_j) + (1 − π)·a_j(1 − a_j)] / δ_j²      (§4.4, §C.6)

under prevalence π. Annotators with v̄_j = 0 (a perfectly reliable channel) share all the weight equally
(§C.6: minimisers use only zero-variance annotators). Alternatives (§F.4): "equal" (w_j ∝ 1),
"gap" (w_j ∝ δ_j), "sqgap" (w_j ∝ δ_j²).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from .channels._base import Channel
from .channels.known import as_channels

__all__ = ["WEIGHT_RULES", "aggregation_weights", "corrected_noise_variance", "resolve_weights"]

WEIGHT_RULES = ("iv", "equal", "gap", "sqgap")
VAR_ZERO = 1e-12  # v̄_j at or below this counts as zero variance


def corrected_noise_variance(channels: Any, prevalence: float) -> np.ndarray:
    """v̄_j = [π b_j(1−b_j) + (1−π) a_j(1−a_j)] / δ_j² for each channel (Hanada and Futami 2026 §4.4)."""
    chans = as_channels(channels)
    if not (isinstance(prevalence, (int, float, np.floating)) and 0.0 <= float(prevalence) <= 1.0):
        raise ValueError(f"prevalence must be a number in [0, 1], got {prevalence!r}")
    a = np.array([c.fpr for c in chans])
    b = np.array([c.fnr for c in chans])
    d = 1.0 - a - b
    pi = float(prevalence)
    return (pi * b * (1.0 - b) + (1.0 - pi) * a * (1.0 - a)) / d**2


def aggregation_weights(channels: Any, prevalence: float | None = None, rule: str = "iv") -> np.ndarray:
    """Convex annotator weights (sum 1) under ``rule`` ∈ {"iv", "equal", "gap", "sqgap"} (§4.4, §F.4).

    "iv" needs ``prevalence``; zero-variance annotators share all the weight (§C.6).
    """
    chans: tuple[Channel, ...] = as_channels(channels)
    if rule not in WEIGHT_RULES:
        raise ValueError(f"rule must be one of {WEIGHT_RULES}, got {rule!r}")
    gaps = np.array([c.gap for c in chans])
    if rule == "equal":
        w = np.ones(len(chans))
    elif rule == "gap":
        w = gaps.copy()
    elif rule == "sqgap":
        w = gaps**2
    else:
        if prevalence is None:
            raise ValueError("prevalence is required for rule='iv' (got None)")
        v = corrected_noise_variance(chans, prevalence)
        zero = v <= VAR_ZERO
        w = zero.astype(float) if zero.any() else 1.0 / v
    return w / w.sum()


def resolve_weights(weights: Any, channels: tuple[Channel, ...], prevalence: float | None) -> np.ndarray:
    """Turn a rule name or an explicit array into normalised weights (validates the array)."""
    if isinstance(weights, str):
        return aggregation_weights(channels, prevalence, rule=weights)
    w = np.asarray(weights, float)
    if w.shape != (len(channels),):
        raise ValueError(f"weights must have shape ({len(channels)},), got {w.shape}")
    if not np.all(np.isfinite(w)) or np.any(w < 0) or w.sum() <= 0:
        raise ValueError(f"weights must be finite, >= 0 and not all zero, got {w.tolist()}")
    return w / w.sum()
