"""Cheap non-learned image embedding, the control the learned (Gröger et al. 2023 §3.6) rankings are compared against.

Two blocks, each L2-normalised and weighted 1/√2, then the whole vector L2-normalised:

* thumbnail: RGB area-downsampled to t×t, z-scored per image → cosine = Pearson correlation of thumbnails;
* colour: joint RGB histogram with b³ bins, square-rooted (Hellinger), centred by the dataset mean.

A row with no signal in either block (a single image, or uniform images equal to the mean histogram)
becomes the unit vector e_0, so every row has norm 1 (rankings reject zero rows).
"""

from __future__ import annotations

from typing import Any

import numpy as np

BASELINE_VERSION = "thumb-hist-v1"


def _as_uint8_numpy(images: Any) -> np.ndarray:
    try:
        import torch

        if isinstance(images, torch.Tensor):
            images = images.detach().cpu().numpy()
    except ImportError:  # pragma: no cover
        pass
    ok = isinstance(images, np.ndarray) and images.dtype == np.uint8 and images.ndim == 4
    if not ok or images.shape[1] != 3:
        shape = getattr(images, "shape", None)
        raise ValueError(f"images: expected uint8 N×3×H×W, got {type(images).__name__} shape={shape}")
    if images.shape[0] < 1:
        raise ValueError("images: empty")
    return images


def _area_downsample(x: np.ndarray, t: int) -> np.ndarray:
    """Mean over the pixels of each of t×t cells (cell edges at floor(i·H/t)); float64 N×3×t×t."""
    n, c, h, w = x.shape
    ye = (np.arange(t + 1) * h) // t
    xe = (np.arange(t + 1) * w) // t
    # summed-area table → every cell sum in O(1), vectorised over images and cells
    sat = np.zeros((n, c, h + 1, w + 1), dtype=np.float64)
    sat[:, :, 1:, 1:] = x.astype(np.float64).cumsum(2).cumsum(3)
    s = sat[:, :, ye[1:], :][:, :, :, xe[1:]] - sat[:, :, ye[:-1], :][:, :, :, xe[1:]] \
        - sat[:, :, ye[1:], :][:, :, :, xe[:-1]] + sat[:, :, ye[:-1], :][:, :, :, xe[:-1]]
    area = np.outer(np.diff(ye), np.diff(xe)).astype(np.float64)
    return s / area


def baseline_embedding(images: Any, *, thumb_size: int = 16, bins: int = 4,
                       batch_size: int = 1024) -> np.ndarray:
    """Non-learned features, float32 N×(3·thumb_size² + bins³), rows L2-normalised.

    Parameters
    ----------
    images : uint8 N×3×H×W (torch tensor or numpy array), H, W >= thumb_size.
    """
    x = _as_uint8_numpy(images)
    if thumb_size < 1 or thumb_size > min(x.shape[2:]):
        raise ValueError(f"thumb_size: must be in [1, {min(x.shape[2:])}], got {thumb_size!r}")
    if bins < 1 or bins > 256:
        raise ValueError(f"bins: must be in [1, 256], got {bins!r}")
    n = x.shape[0]
    d_t, d_h = 3 * thumb_size * thumb_size, bins ** 3
    thumb = np.empty((n, d_t), dtype=np.float64)
    hist = np.empty((n, d_h), dtype=np.float64)
    for s in range(0, n, batch_size):
        xb = x[s:s + batch_size]
        nb = xb.shape[0]
        th = _area_downsample(xb, thumb_size).reshape(nb, -1)
        th -= th.mean(1, keepdims=True)
        thumb[s:s + nb] = th
        q = (xb.astype(np.int64) * bins) >> 8  # bin index per channel, 0..bins-1
        idx = (q[:, 0] * bins + q[:, 1]) * bins + q[:, 2]
        flat = idx.reshape(nb, -1) + (np.arange(nb) * d_h)[:, None]
        counts = np.bincount(flat.ravel(), minlength=nb * d_h).reshape(nb, d_h)
        hist[s:s + nb] = np.sqrt(counts / counts.sum(1, keepdims=True))
    hist -= hist.mean(0, keepdims=True)

    def unit(a: np.ndarray) -> np.ndarray:
        norm = np.linalg.norm(a, axis=1, keepdims=True)
        return np.divide(a, norm, out=np.zeros_like(a), where=norm > 0)

    out = unit(np.concatenate([unit(thumb), unit(hist)], axis=1) / np.sqrt(2.0))
    out[np.linalg.norm(out, axis=1) == 0, 0] = 1.0  # featureless rows (e.g. N=1, uniform image): e_0
    return out.astype(np.float32)
