"""Embeddings larger than memory, computed by sharding the images over workers (inference only).

The result is the embedding cache entry of today (``embedding_cache.cache_path``: ``<dataset hash>__<config
hash>.npy``, float32 N×D), but written as a memory-mapped ``.npy``: the driver creates the file under a
temporary name, each shard task (one Dask task per ``shard_rows`` images) loads the content-addressed encoder
weights (its SHA-256 checked), embeds its rows with ``torch_threads`` torch threads and writes them into its
rows of the memory map; when every shard is done the file is renamed onto the cache path (a crash leaves no
entry). Inference is per image (batch statistics play no part), so the rows equal a single-process
:func:`embed` up to the float rounding of other batch shapes.

``images`` is a uint8 N×3×H×W array or the path of one saved as ``.npy`` (memory-mapped by each task);
``client`` has the ``submit``/``gather`` interface of ``distributed.Client`` (``None``: run the shards here).

``images`` may also be the list of the image files (the ``path`` column of ``raw/images``, in row order): each
task is then given only its shard of the list, decodes those files itself from shared storage
(:func:`~noisycal_platform.cleaning.images.iter_image_batches`, ``batch_size`` at a time at the encoder's
``image_size``) and writes their rows, so no pixels travel from the client and no process holds more than a
batch of them. With ``shard_rows`` a multiple of ``batch_size`` every forward pass sees the same images as
:func:`embed` in one process, so the rows are equal bit for bit.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from noisycal_platform.cleaning.embedding_cache import cache_path, writing_npy

__all__ = ["sharded_embeddings"]


def _is_file_list(images: object) -> bool:
    return isinstance(images, (list, tuple))


def _images(images: np.ndarray | str | Path) -> np.ndarray:
    return np.load(images, mmap_mode="r") if isinstance(images, (str, Path)) else images


def _count(images: np.ndarray | str | Path | Sequence[str]) -> int:
    return len(images) if _is_file_list(images) else int(_images(images).shape[0])  # type: ignore[arg-type]


def _shard(
    encoder_path: str, sha256: str, images: np.ndarray | str | Path, out: str, lo: int, hi: int, threads: int
) -> tuple[int, int]:
    """Embed rows [lo, hi) into the memory-mapped ``out`` (runs on a worker)."""
    import torch

    from noisycal_platform.cleaning.encoder import embed, load_encoder

    torch.set_num_threads(threads)
    encoder = load_encoder(encoder_path, expected_sha256=sha256, device="cpu")
    rows = embed(encoder, np.ascontiguousarray(_images(images)[lo:hi]))
    target = np.load(out, mmap_mode="r+")
    target[lo:hi] = rows
    target.flush()
    del target
    return lo, hi


def _file_shard(
    encoder_path: str, sha256: str, files: list[str], out: str, lo: int, threads: int, batch_size: int
) -> tuple[int, int]:
    """Decode ``files`` (rows lo, lo+1, ...) batch by batch and embed them into the memory-mapped ``out``
    (runs on a worker)."""
    import torch

    from noisycal_platform.cleaning.encoder import embed_batches, load_encoder
    from noisycal_platform.cleaning.images import iter_image_batches

    torch.set_num_threads(threads)
    encoder = load_encoder(encoder_path, expected_sha256=sha256, device="cpu")
    target = np.load(out, mmap_mode="r+")
    hi = lo + len(files)
    embed_batches(encoder, iter_image_batches(files, encoder.config.image_size, batch_size), target[lo:hi])
    target.flush()
    del target
    return lo, hi


def sharded_embeddings(
    encoder_path: str | Path,
    sha256: str,
    embed_dim: int,
    images: np.ndarray | str | Path | Sequence[str],
    cache_dir: str | Path,
    dataset_hash: str,
    config_hash: str,
    client: Any = None,
    shard_rows: int = 4096,
    torch_threads: int = 1,
    *,
    batch_size: int = 256,
) -> Path:
    """Write the embeddings of ``images`` to the cache entry (``dataset_hash``, ``config_hash``); its path.

    ``images``: a uint8 N×3×H×W array, the path of one saved as ``.npy``, or a list of N image files
    (decoded by the tasks, ``batch_size`` per forward pass)."""
    final = cache_path(cache_dir, dataset_hash, config_hash)
    n = _count(images)
    if n < 1:
        raise ValueError("images: empty")
    if shard_rows < 1:
        raise ValueError(f"shard_rows: must be >= 1, got {shard_rows!r}")
    shards = [(lo, min(lo + shard_rows, n)) for lo in range(0, n, shard_rows)]
    with writing_npy(final, (n, int(embed_dim))) as target:
        tmp = str(target.filename)
        target.flush()
        del target
        if _is_file_list(images):
            files = [str(p) for p in images]  # type: ignore[union-attr]
            tasks = [(_file_shard, str(encoder_path), sha256, files[lo:hi], tmp, lo, torch_threads, batch_size)
                     for lo, hi in shards]
        else:
            if client is not None and isinstance(images, np.ndarray):
                images = client.scatter(images, broadcast=True, hash=False)
            tasks = [(_shard, str(encoder_path), sha256, images, tmp, lo, hi, torch_threads) for lo, hi in shards]
        if client is None:
            for fn, *args in tasks:
                fn(*args)
        else:
            client.gather([client.submit(fn, *args, pure=False) for fn, *args in tasks])
    return final
