"""Known (supplied) channels: validation and a `ChannelFit` wrapper (Hanada and Futami 2026 §3: channels given)."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from ._base import Channel, ChannelFit

__all__ = ["as_channels", "known_channels"]


def as_channels(
    channels: Any, n_annotators: int | None = None, name: str = "channels"
) -> tuple[Channel, ...]:
    """Coerce channels (a ChannelFit, Channels, or (fpr, fnr) pairs) and require every gap δ_j > 0."""
    if isinstance(channels, ChannelFit):
        channels = channels.channels
    if isinstance(channels, Channel):
        channels = (channels,)
    if not isinstance(channels, Sequence) and not isinstance(channels, np.ndarray):
        raise ValueError(f"{name} must be a sequence of Channel, got {type(channels).__name__}")
    out = []
    for j, c in enumerate(channels):
        if not isinstance(c, Channel):
            try:
                fpr, fnr = c
            except (TypeError, ValueError):
                raise ValueError(f"{name}[{j}] must be a Channel or an (fpr, fnr) pair, got {c!r}") from None
            c = Channel(float(fpr), float(fnr))
        if not c.gap > 0:
            raise ValueError(
                f"{name}[{j}] gap 1 − fpr − fnr must be > 0 to invert the channel, got {c.gap!r} "
                f"(fpr={c.fpr}, fnr={c.fnr})"
            )
        out.append(c)
    if n_annotators is not None and len(out) != n_annotators:
        raise ValueError(f"{name} has {len(out)} channels but annotations has {n_annotators} columns")
    return tuple(out)


def known_channels(channels: Any, prevalence: float = float("nan")) -> ChannelFit:
    """Wrap supplied channels as a `ChannelFit` (method "known", converged, no likelihood)."""
    chans = as_channels(channels)
    return ChannelFit(
        chans,
        float(prevalence),
        "known",
        True,
        {
            "log_likelihood": float("nan"),
            "n_iter": 0,
            "n_starts": 0,
            "starts_accepted": 0,
            "min_gap": float(min(c.gap for c in chans)),
            "n_items": 0,
        },
    )
