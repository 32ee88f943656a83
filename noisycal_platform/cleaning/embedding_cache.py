"""Embedding cache keyed by (dataset content hash, config hash): ``<cache_dir>/<dataset>__<config>.npy``.

Files are float32 N×D ``.npy`` written atomically (temp file in the same folder + ``os.replace``), read
with ``allow_pickle=False``. A file that does not load as a 2-D float32 array is treated as a miss and
rewritten.

The trained encoder is cached the same way: :func:`train_or_reuse_encoder` keeps one index entry per
(dataset content hash, encoder config hash) under ``<artifacts>/index/`` pointing at the content-addressed
weights ``<artifacts>/<sha256>.pt``, and trains only when that entry or its weights are missing.
"""

from __future__ import annotations

import io
import json
import os
import re
import secrets
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from noisycal_platform.files import atomic_write_bytes, atomic_write_text

if TYPE_CHECKING:  # pragma: no cover
    from noisycal_platform.cleaning.encoder import EncoderConfig

__all__ = [
    "TRAIN_SAMPLE",
    "EncoderArtifact",
    "cache_path",
    "cached_embeddings",
    "encoder_index_path",
    "load_cached",
    "save_embeddings",
    "train_or_reuse_encoder",
    "train_sample_rows",
    "writing_npy",
]

_HEX = re.compile(r"^[0-9a-zA-Z_.-]{1,128}$")


def cache_path(cache_dir: str | os.PathLike[str], dataset_hash: str, config_hash: str) -> Path:
    """Path of the cache entry; both keys must be simple tokens (hex digests or short names)."""
    for name, v in (("dataset_hash", dataset_hash), ("config_hash", config_hash)):
        if not isinstance(v, str) or not _HEX.match(v) or v.startswith("."):
            raise ValueError(f"{name}: expected a hex digest / simple token, got {v!r}")
    return Path(cache_dir) / f"{dataset_hash}__{config_hash}.npy"


def _load(path: Path, n_rows: int | None, mmap: bool = False) -> np.ndarray | None:
    try:
        arr = np.load(path, allow_pickle=False, mmap_mode="r" if mmap else None)
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
                n_rows: int | None = None, *, mmap: bool = False) -> np.ndarray | None:
    """The cached array, or None when absent/invalid (or its row count differs from ``n_rows``); with ``mmap``
    memory-mapped read-only instead of read into memory."""
    p = cache_path(cache_dir, dataset_hash, config_hash)
    return _load(p, n_rows, mmap) if p.is_file() else None


@contextmanager
def writing_npy(final: str | os.PathLike[str], shape: tuple[int, int]) -> Iterator[np.memmap]:
    """A float32 ``shape`` memory-mapped ``.npy`` to fill, which becomes ``final`` only when the block ends
    without an exception.

    The rows are written into ``.<final name>.<pid>.<random>.tmp`` beside ``final`` (its ``filename`` is that
    path, so other processes on shared storage can open it with ``np.load(..., mmap_mode="r+")``); on success
    it is flushed, fsynced and renamed onto ``final`` (``os.replace``, atomic on one file system), on an
    exception it is removed. A process killed mid-way leaves only the hidden ``.tmp`` file, never a file
    named like a cache entry, so a later run sees a miss and recomputes.
    """
    final = Path(final)
    n, d = (int(v) for v in shape)
    if n < 1 or d < 1:
        raise ValueError(f"shape: expected positive rows and columns, got {shape!r}")
    final.parent.mkdir(parents=True, exist_ok=True)
    tmp = final.with_name(f".{final.name}.{os.getpid()}.{secrets.token_hex(4)}.tmp")
    try:
        arr = np.lib.format.open_memmap(tmp, mode="w+", dtype=np.float32, shape=(n, d))
        yield arr
        arr.flush()
        del arr
        with open(tmp, "rb+") as fh:
            os.fsync(fh.fileno())
        os.replace(tmp, final)
    finally:
        if tmp.exists():
            tmp.unlink()


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


@dataclass(frozen=True)
class EncoderArtifact:
    """Where the trained weights are (``file`` under the artifacts folder, its ``sha256``), how long training
    took, and whether this call reused an earlier training (``reused``; not stored in the index)."""

    sha256: str
    file: str
    train_seconds: float
    images_per_second: float
    reused: bool = False
    #: images trained on when the dataset was larger than the training sample (None: every image)
    train_images: int | None = None


#: default ``train_sample`` of :func:`train_or_reuse_encoder` (settings ``encoder_train_sample``): a dataset with
#: more images trains its DINO encoder on a seeded sample of this many (pixels O(sample), not O(N); the
#: embeddings are still computed for every image). 20,000 keeps HAM10000 (10,015 images) whole.
TRAIN_SAMPLE = 20_000


def train_sample_rows(n: int, sample: int, seed: int) -> np.ndarray:
    """The rows (sorted) DINO trains on for a dataset of ``n`` images: all of them when ``n <= sample``, else
    ``sample`` drawn without replacement by ``numpy.random.default_rng(seed)``."""
    if isinstance(sample, bool) or int(sample) != sample or sample < 2:
        raise ValueError(f"encoder_train_sample: must be an int >= 2, got {sample!r}")
    if n <= sample:
        return np.arange(n)
    return np.sort(np.random.default_rng(seed).choice(n, size=int(sample), replace=False))


def _sampled_key(config_hash: str, sample: int) -> str:
    """The index key of an encoder trained on a sample: the configuration and the sample size."""
    import hashlib

    return hashlib.sha256(f"{config_hash}:train_sample={int(sample)}".encode()).hexdigest()


def encoder_index_path(artifacts: str | os.PathLike[str], dataset_hash: str, config_hash: str) -> Path:
    """``<artifacts>/index/encoder-<dataset_hash[:16]>-<config_hash[:16]>.json``."""
    cache_path(artifacts, dataset_hash, config_hash)  # validates both keys as simple tokens
    return Path(artifacts) / "index" / f"encoder-{dataset_hash[:16]}-{config_hash[:16]}.json"


def _read_index(index: Path, artifacts: Path) -> EncoderArtifact | None:
    try:
        entry = json.loads(index.read_text(encoding="utf-8"))
        found = EncoderArtifact(
            sha256=str(entry["sha256"]),
            file=str(entry["file"]),
            train_seconds=float(entry["train_seconds"]),
            images_per_second=float(entry["images_per_second"]),
            reused=True,
            train_images=int(entry["train_images"]) if "train_images" in entry else None,
        )
    except (OSError, ValueError, KeyError, TypeError):
        return None
    return found if (artifacts / found.file).is_file() else None


def train_or_reuse_encoder(
    image_paths: Sequence[str],
    dataset_hash: str,
    config: EncoderConfig,
    artifacts: str | os.PathLike[str],
    progress: Callable[[dict], None] | None = None,
    *,
    train_sample: int = TRAIN_SAMPLE,
) -> EncoderArtifact:
    """The dataset's encoder: the indexed weights when (dataset_hash, config.config_hash) was trained before and
    its file exists, else DINO trained from random initialisation (Gröger et al. 2023 §3.6) on ``image_paths`` (in
    embedding-row order), stored content-addressed and indexed. ``images_per_second`` = N·epochs / seconds.
    ``progress`` is passed to ``train_encoder`` (one call per epoch).

    A dataset of more than ``train_sample`` images trains on ``train_sample`` of them
    (:func:`train_sample_rows`, seeded by ``config.seed``, kept in row order), decoded in batches into one
    array of the sample only, so memory is bounded whatever N is; its index entry is keyed by the
    configuration and the sample size and records ``train_images``. Up to ``train_sample`` images nothing
    changes: every image, the same index entry, the same weights.
    """
    from noisycal_platform.cleaning.encoder import save_encoder, train_encoder
    from noisycal_platform.cleaning.images import load_images

    artifacts = Path(artifacts)
    rows = train_sample_rows(len(image_paths), train_sample, getattr(config, "seed", 0))
    sampled = rows.size < len(image_paths)
    key = _sampled_key(config.config_hash, train_sample) if sampled else config.config_hash
    index = encoder_index_path(artifacts, dataset_hash, key)
    found = _read_index(index, artifacts) if index.is_file() else None
    if found is not None:
        return found
    paths = [image_paths[int(i)] for i in rows] if sampled else list(image_paths)
    pixels = load_images(paths, config.image_size)
    start = time.perf_counter()
    encoder = train_encoder(pixels, config, progress=progress)
    seconds = time.perf_counter() - start
    sha, path = save_encoder(encoder, artifacts)
    trained = EncoderArtifact(
        sha256=sha,
        file=path.name,
        train_seconds=round(seconds, 3),
        images_per_second=round(len(pixels) * config.epochs / max(seconds, 1e-9), 2),
        train_images=len(pixels) if sampled else None,
    )
    entry = {k: v for k, v in asdict(trained).items() if k != "reused" and v is not None}
    atomic_write_text(index, json.dumps(entry, sort_keys=True))
    return trained
