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
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

import numpy as np

from noisycal_platform.cleaning.embedding_cache import cache_path

__all__ = ["sharded_embeddings"]


def _images(images: np.ndarray | str | Path) -> np.ndarray:
    return np.load(images, mmap_mode="r") if isinstance(images, (str, Path)) else images


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


def sharded_embeddings(
    encoder_path: str | Path,
    sha256: str,
    embed_dim: int,
    images: np.ndarray | str | Path,
    cache_dir: str | Path,
    dataset_hash: str,
    config_hash: str,
    client: Any = None,
    shard_rows: int = 4096,
    torch_threads: int = 1,
) -> Path:
    """Write the embeddings of ``images`` to the cache entry (``dataset_hash``, ``config_hash``); its path."""
    final = cache_path(cache_dir, dataset_hash, config_hash)
    n = int(_images(images).shape[0])
    if n < 1:
        raise ValueError("images: empty")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.tmp")
    np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, int(embed_dim))).flush()
    shards = [(lo, min(lo + shard_rows, n)) for lo in range(0, n, shard_rows)]
    if client is not None and isinstance(images, np.ndarray):
        images = client.scatter(images, broadcast=True, hash=False)
    args = (str(encoder_path), sha256, images, str(tmp))
    try:
        if client is None:
            for lo, hi in shards:
                _shard(*args, lo, hi, torch_threads)
        else:
            client.gather([client.submit(_shard, *args, lo, hi, torch_threads, pure=False) for lo, hi in shards])
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()
    return final
