"""Embedding cache keyed by (dataset content hash, config hash): ``<cache_dir>/<dataset>__<config>.npy``.

Files are float32 N×D ``.npy`` written atomically (temp file in the same folder + ``os.replace``), read
with ``allow_pickle=False``. A file that does not load as a 2-D float32 array is treated as a miss and
rewritten.
"""

from __future__ import annotations

import io
import os
import re
from collections.abc import Callable
from pathlib import Path

import numpy as np

from noisycal_platform.io import atomic_write_bytes

_HEX = re.compile(r"^[0-9a-zA-Z_.-]{1,128}$")


def cache_path(cache_dir: str | os.PathLike[str], dataset_hash: str, config_hash: str) -> Path:
    """Path of the cache entry; both keys must be simple tokens (hex digests or short names)."""
    for name, v in (("dataset_hash", dataset_hash), ("config_hash", config_hash)):
        if not isinstance(v, str) or not _HEX.match(v) or v.startswith("."):
            raise ValueError(f"{name}: expected a hex digest / simple token, got {v!r}")
    return Path(cache_dir) / f"{dataset_hash}__{config_hash}.npy"


def _load(path: Path, n_rows: int | None) -> np.ndarray | None:
    try:
        arr = np.load(path, allow_pickle=False)
    except (OSError, ValueError):
        return None
    if arr.dtype != np.float32 or arr.ndim != 2 or (n_rows is not None and arr.shape[0] != n_rows):
        return None
    return arr


def save_embeddings(path: str | os.PathLike[str], emb: np.ndarray) -> Path:
    """Atomically write a float32 2-D array to ``path`` (.npy)."""
    if not isinstance(emb, np.ndarray) or emb.ndim != 2:
        raise ValueError(f"emb: expected a 2-D numpy array, got {type(emb).__name__}")
    buf = io.BytesIO()
    np.save(buf, np.ascontiguousarray(emb, dtype=np.float32), allow_pickle=False)
    p = atomic_write_bytes(path, buf.getvalue())
    return p


def load_cached(cache_dir: str | os.PathLike[str], dataset_hash: str, config_hash: str,
                n_rows: int | None = None) -> np.ndarray | None:
    """The cached array, or None when absent/invalid (or its row count differs from ``n_rows``)."""
    p = cache_path(cache_dir, dataset_hash, config_hash)
    return _load(p, n_rows) if p.is_file() else None


def cached_embeddings(cache_dir: str | os.PathLike[str], dataset_hash: str, config_hash: str,
                      compute: Callable[[], np.ndarray], *, n_rows: int | None = None,
                      ) -> tuple[np.ndarray, bool]:
    """Return (embeddings, hit). On a miss call ``compute()`` and store its result atomically."""
    hit = load_cached(cache_dir, dataset_hash, config_hash, n_rows)
    if hit is not None:
        return hit, True
    emb = compute()
    if not isinstance(emb, np.ndarray) or emb.ndim != 2:
        raise ValueError(f"compute: must return a 2-D numpy array, got {type(emb).__name__}")
    if n_rows is not None and emb.shape[0] != n_rows:
        raise ValueError(f"compute: returned {emb.shape[0]} rows, expected n_rows={n_rows}")
    emb = np.ascontiguousarray(emb, dtype=np.float32)
    save_embeddings(cache_path(cache_dir, dataset_hash, config_hash), emb)
    return emb, False
