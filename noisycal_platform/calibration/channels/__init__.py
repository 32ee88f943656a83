"""Annotator channel estimation (Hanada and Futami 2026 §4): one estimator per module, `estimate_channels` dispatches.

- `known`: channels supplied by the user.
- `two_group`: closed form, two annotators × two score groups (§4.2, §D.2).
- `dawid_skene`: marginal EM for K ≥ 3 annotators (§4.3, §F.1.1).
- `score_group_em`: shared channels, per-group prevalences (§F.1.2).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from ._base import Channel, ChannelFit, NotIdentifiableError, as_annotation_array
from .dawid_skene import dawid_skene
from .known import as_channels, known_channels
from .score_group_em import score_group_em, score_groups
from .two_group import two_group, two_group_from_moments

__all__ = [
    "METHODS",
    "Channel",
    "ChannelFit",
    "NotIdentifiableError",
    "as_channels",
    "dawid_skene",
    "estimate_channels",
    "known_channels",
    "score_group_em",
    "score_groups",
    "two_group",
    "two_group_from_moments",
]

METHODS = ("auto", "two_group", "dawid_skene", "score_group_em")


def estimate_channels(
    annotations: Any,
    scores: Any = None,
    method: str = "auto",
    groups: Any = None,
    n_groups: int = 2,
    n_starts: int = 10,
    seed: int = 0,
    min_gap: float = 0.05,
) -> ChannelFit:
    """Estimate annotator channels (a_j, b_j) and the prevalence from noisy labels (Hanada and Futami 2026 §4).

    Binary labels only (0/1); class indices with more than two classes are estimated by
    :func:`noisycal_platform.calibration.multiclass.estimate_class_channels`. Which of the two a model version
    uses is decided once, by :func:`noisycal_platform.calibration.versions.version`.

    Parameters
    ----------
    annotations : array (n_items, K); float with NaN = missing, or int with -1 = missing.
    scores : optional predictor scores in [0, 1], shape (n_items,); define quantile score groups.
    method : "auto" (K ≥ 3 → "dawid_skene"; K = 2 with scores or groups → "score_group_em"),
        "two_group", "dawid_skene" or "score_group_em".
    groups : explicit group labels per item; override score-quantile grouping.
    n_groups : number of score-quantile groups when ``groups`` is None.
    n_starts, seed : EM starts and the seed of the random starts.
    min_gap : fits whose smallest estimated gap δ_j is ≤ min_gap are refused.

    Raises
    ------
    NotIdentifiableError
        One annotator; two annotators without usable groups; groups with (nearly) equal prevalences;
        an estimated gap ≈ 0. The message says what would identify the channels.
    """
    if method not in METHODS:
        raise ValueError(f"method must be one of {METHODS}, got {method!r}")
    a = as_annotation_array(annotations)
    n, k = a.shape
    if groups is not None:
        g = np.asarray(groups)
        if g.shape != (n,):
            raise ValueError(f"groups must have shape ({n},), got {g.shape}")
    elif scores is not None:
        s = np.asarray(scores, float)
        if s.shape != (n,):
            raise ValueError(f"scores must have shape ({n},), got {s.shape}")
        if not (np.all(s >= 0) and np.all(s <= 1)):
            raise ValueError("scores must lie in [0, 1] (no NaN)")
        g = score_groups(s, n_groups)
    else:
        g = None
    if method == "auto":
        if k == 1:
            raise NotIdentifiableError(
                "one annotator cannot identify its channel or the calibration error (Hanada and Futami 2026 §D.1: "
                "the same data fit CE 1/8 and 5/32). Add annotators (three, or two with score groups of different "
                "class proportions) or supply the channel as known"
            )
        if k == 2 and g is None:
            raise NotIdentifiableError(
                "two annotators without scores or groups are not identified (Hanada and Futami 2026 §D.1: a continuum "
                "of "
                "channels gives the same joint table). Pass scores or groups whose class proportions differ, "
                "add a third annotator, or supply known channels"
            )
        method = "dawid_skene" if k >= 3 else "score_group_em"
    if method == "dawid_skene":
        return dawid_skene(a, n_starts=n_starts, seed=seed, min_gap=min_gap)
    if g is None:
        raise NotIdentifiableError(
            f"method {method!r} needs scores or groups: pass scores (quantile groups) or explicit groups "
            "whose class proportions differ"
        )
    if method == "two_group":
        if groups is None and n_groups != 2:
            raise ValueError(f"method 'two_group' uses exactly 2 score groups, got n_groups={n_groups}")
        return two_group(a, g, min_gap=min_gap)
    return score_group_em(a, g, n_starts=n_starts, seed=seed, min_gap=min_gap)
