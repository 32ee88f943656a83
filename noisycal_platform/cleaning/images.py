"""Reading an image dataset (folder + ``labels.csv`` or ImageFolder tree) into a validated frame.

Layouts (``datasets/<name>/`` or a folder registered by path):

* ``<root>/labels.csv`` with columns ``file_name,label`` (file_name relative to root), or
* an ImageFolder tree ``<root>/<label>/<file>`` (used when there is no ``labels.csv``).

Row-level problems (unreadable or truncated image, missing file, empty or unknown label, duplicate row)
exclude the row and are reported in :attr:`ImageDataset.excluded` with file, row and column, unless
``strict=True``, which turns them into one :class:`ImageDatasetError` listing all of them.
Structural problems are always fatal: missing root, unreadable ``labels.csv`` or missing columns, a
path that leaves the dataset root (``..``, absolute, symlink escaping root), one file listed with
conflicting labels, no usable image left.
"""

from __future__ import annotations

import hashlib
import io
import os
from collections.abc import Callable, Iterable, Iterator, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import TYPE_CHECKING, Literal, TypeVar

import numpy as np
import polars as pl
from PIL import Image, ImageFile

if TYPE_CHECKING:  # pragma: no cover
    import torch

IMAGE_EXTENSIONS = frozenset({".png", ".jpg", ".jpeg", ".bmp", ".gif", ".tif", ".tiff", ".webp"})
LABELS_CSV = "labels.csv"
T = TypeVar("T")

FRAME_SCHEMA = {
    "file_name": pl.String,
    "label": pl.String,
    "path": pl.String,
    "width": pl.Int64,
    "height": pl.Int64,
    "sha256": pl.String,
    "file_bytes": pl.Int64,
}
EXCLUDED_SCHEMA = {
    "file_name": pl.String,
    "row": pl.Int64,
    "column": pl.String,
    "reason": pl.String,
}


class ImageDatasetError(ValueError):
    """Fatal problem with an image dataset; the message names every offending file/row/column."""


@dataclass(frozen=True)
class ImageDataset:
    """A validated image dataset.

    ``frame``: one row per usable image, sorted by ``file_name``; columns ``file_name`` (posix path
    relative to ``root``), ``label`` (str), ``path`` (absolute, resolved), ``width``, ``height`` (the decoded
    size), ``sha256`` (of the file bytes), ``file_bytes`` (the file's size). Only this list is kept: the pixels
    are decoded again, a batch at a time, by the step that needs them (:func:`iter_image_batches`).
    ``excluded``: ``file_name``, ``row`` (1-based data row of labels.csv; line = row + 1; null for
    ImageFolder), ``column`` (``file_name``/``label``/null), ``reason``.
    ``content_hash``: :func:`dataset_content_hash` of ``frame``.
    """

    root: Path
    layout: Literal["labels_csv", "image_folder"]
    frame: pl.DataFrame
    excluded: pl.DataFrame
    content_hash: str

    @property
    def labels(self) -> list[str]:
        """Sorted distinct labels."""
        return sorted(self.frame["label"].unique().to_list())

    def __len__(self) -> int:
        return self.frame.height

    def table(self, name: str) -> pl.DataFrame:
        """The stored ``raw/images`` rows of dataset ``name``: ``frame`` with the item index ``idx`` (0..N-1 in
        ``file_name`` order, the index every ranking refers to), ``dataset``, ``dataset_hash`` and ``root``."""
        return self.frame.with_row_index("idx").with_columns(
            pl.col("idx").cast(pl.Int64),
            pl.lit(name).alias("dataset"),
            pl.lit(self.content_hash).alias("dataset_hash"),
            pl.lit(str(self.root)).alias("root"),
        )


def dataset_content_hash(frame: pl.DataFrame) -> str:
    """sha256 over the sorted lines ``file_name\\tsha256\\tlabel\\n`` (order-independent)."""
    missing = {"file_name", "sha256", "label"} - set(frame.columns)
    if missing:
        raise ValueError(f"frame: missing columns {sorted(missing)}")
    rows = sorted(zip(frame["file_name"].to_list(), frame["sha256"].to_list(), frame["label"].to_list(),
                      strict=True))
    h = hashlib.sha256()
    for fn, sha, lab in rows:
        h.update(f"{fn}\t{sha}\t{lab}\n".encode())
    return h.hexdigest()


def _probe_image(path: Path) -> tuple[int, int, str, int] | str:
    """Decode fully (catches truncation), keeping no pixels; return (width, height, sha256, file size in bytes)
    or an error string."""
    if ImageFile.LOAD_TRUNCATED_IMAGES:  # someone switched Pillow's global tolerance on
        return "Pillow LOAD_TRUNCATED_IMAGES is enabled; refusing to validate images"
    try:
        data = path.read_bytes()
    except OSError as exc:
        return f"unreadable file: {exc.__class__.__name__}: {exc}"
    try:
        with Image.open(io.BytesIO(data)) as im:
            im.load()
            width, height = im.size
    except Exception as exc:  # Pillow raises many types (OSError, SyntaxError, DecompressionBombError...)
        return f"unreadable or truncated image: {exc.__class__.__name__}: {exc}"
    if width < 1 or height < 1:
        return "image has zero size"
    return width, height, hashlib.sha256(data).hexdigest(), len(data)


def _check_relative(name: str, root: Path) -> tuple[str, Path] | str:
    """Normalise ``name`` (posix, relative) and resolve it under ``root``; error string if it escapes."""
    raw = name.replace("\\", "/")
    if raw.startswith("/") or (len(raw) > 1 and raw[1] == ":"):
        return "absolute path is not allowed (must be relative to the dataset root)"
    parts = [p for p in PurePosixPath(raw).parts if p not in ("", ".")]
    if any(p == ".." for p in parts):
        return "path leaves the dataset root ('..')"
    if not parts:
        return "empty file name"
    rel = "/".join(parts)
    try:
        resolved = (root / rel).resolve()
    except (OSError, ValueError, RuntimeError) as exc:  # NUL byte, name too long; 3.11: loop=RuntimeError
        return f"invalid path: {exc}"
    if not resolved.is_relative_to(root):
        return f"path leaves the dataset root (resolves to {resolved}, e.g. through a symlink)"
    return rel, resolved


def _read_labels_csv(root: Path, csv_path: Path, excluded: list[dict]) -> list[tuple[int, str, str | None]]:
    """Rows of ``labels.csv`` read with the platform's CSV reader (``io.parse_table``: a link or special file
    is refused unread, duplicate column names and unbalanced quotes are errors naming the row, reasons never
    quote content). A ragged or undecodable row is excluded with its row number; the others are returned."""
    from noisycal_platform.io import InputError, parse_table

    try:
        table = parse_table(csv_path, allow_no_rows=True)
    except InputError as exc:
        raise ImageDatasetError(f"{exc.safe}") from None
    cols = table.frame.columns
    missing = [c for c in ("file_name", "label") if c not in cols]
    if missing:
        raise ImageDatasetError(f"{csv_path}: missing column(s) {missing}")
    bad = {p.row: p for p in table.problems}
    for p in table.problems:
        excluded.append({"file_name": f"<row {p.row}>", "row": p.row, "column": p.column, "reason": p.reason})
    names = table.frame["file_name"].to_list()
    labels = table.frame["label"].to_list()
    pairs = zip(names, labels, strict=True)
    return [(i + 1, n if n is not None else "", lab) for i, (n, lab) in enumerate(pairs) if (i + 1) not in bad]


def _walk_image_folder(root: Path) -> tuple[list[tuple[None, str, str]], list[dict]]:
    rows: list[tuple[None, str, str]] = []
    excluded: list[dict] = []
    for dirpath, dirnames, filenames in os.walk(root, followlinks=False):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("."))
        rel_dir = Path(dirpath).relative_to(root)
        for fn in sorted(filenames):
            if fn.startswith(".") or Path(fn).suffix.lower() not in IMAGE_EXTENSIONS:
                continue
            rel = (rel_dir / fn).as_posix()
            if len(rel_dir.parts) != 1:
                excluded.append({"file_name": rel, "row": None, "column": None,
                                 "reason": "ImageFolder layout expects <label>/<file>; "
                                           "file is not one level deep"})
                continue
            rows.append((None, rel, rel_dir.parts[0]))
        # os.walk does not follow symlinked directories; a symlinked <label>/ folder is listed here and
        # its files are checked against the root like any other (escape -> fatal error).
        for d in list(dirnames):
            sub = Path(dirpath) / d
            if sub.is_symlink():
                dirnames.remove(d)
                if rel_dir.parts or not sub.is_dir():
                    continue
                rows.extend((None, f"{d}/{f.name}", d) for f in sorted(sub.iterdir())
                            if f.suffix.lower() in IMAGE_EXTENSIONS and not f.name.startswith("."))
    return rows, excluded


def read_image_dataset(
    root: str | os.PathLike[str],
    *,
    allowed_labels: Iterable[str] | None = None,
    strict: bool = False,
) -> ImageDataset:
    """Read and validate an image dataset (the ``raw/images`` asset).

    Parameters
    ----------
    root : dataset folder; ``labels.csv`` inside selects that layout, else ImageFolder.
    allowed_labels : if given, a label outside this set is "unknown" (row excluded, or error if strict).
    strict : raise :class:`ImageDatasetError` listing every row-level problem instead of excluding.
    """
    root_p = Path(root)
    if not root_p.is_dir():
        raise ImageDatasetError(f"root: dataset folder {str(root)!r} does not exist or is not a directory")
    root_p = root_p.resolve()
    allowed = None if allowed_labels is None else {str(a) for a in allowed_labels}

    csv_path = root_p / LABELS_CSV
    excluded: list[dict] = []
    if csv_path.is_file() or csv_path.is_symlink():
        layout: Literal["labels_csv", "image_folder"] = "labels_csv"
        entries: Sequence[tuple[int | None, str, str | None]] = _read_labels_csv(root_p, csv_path, excluded)
    else:
        layout = "image_folder"
        entries, excluded = _walk_image_folder(root_p)
        if not entries and not excluded:
            raise ImageDatasetError(
                f"root: {root_p} has neither {LABELS_CSV} nor <label>/<image> sub-folders with images")

    fatal: list[str] = []
    seen: dict[str, tuple[int | None, str]] = {}
    candidates: list[tuple[str, str, Path]] = []
    where = "labels.csv " if layout == "labels_csv" else ""
    for row, name, label in entries:
        loc = f"{where}row {row} (line {row + 1}) " if row is not None else ""
        checked = _check_relative(name, root_p)
        if isinstance(checked, str):
            fatal.append(f"{loc}column file_name={name!r}: {checked}")
            continue
        rel, resolved = checked
        lab = "" if label is None else str(label).strip()
        if not lab:
            excluded.append({"file_name": rel, "row": row, "column": "label", "reason": "empty label"})
            continue
        if allowed is not None and lab not in allowed:
            excluded.append({"file_name": rel, "row": row, "column": "label",
                             "reason": f"unknown label {lab!r} (allowed: {sorted(allowed)})"})
            continue
        if rel in seen:
            prev_row, prev_lab = seen[rel]
            if prev_lab != lab:
                fatal.append(f"{loc}column file_name={rel!r}: listed again with label {lab!r}, "
                             f"row {prev_row} has {prev_lab!r}")
            else:
                excluded.append({"file_name": rel, "row": row, "column": "file_name",
                                 "reason": f"duplicate of row {prev_row}"})
            continue
        seen[rel] = (row, lab)
        if not resolved.is_file():
            excluded.append({"file_name": rel, "row": row, "column": "file_name",
                             "reason": "not a regular file" if resolved.exists() else "file does not exist"})
            continue
        candidates.append((rel, lab, resolved))
    if fatal:
        raise ImageDatasetError(f"{root_p}: {len(fatal)} fatal problem(s):\n  " + "\n  ".join(fatal))

    rows_ok: list[dict] = []
    for rel, lab, resolved in candidates:
        probe = _probe_image(resolved)
        if isinstance(probe, str):
            excluded.append({"file_name": rel, "row": seen[rel][0], "column": None, "reason": probe})
            continue
        w, h, sha, size = probe
        rows_ok.append({"file_name": rel, "label": lab, "path": str(resolved), "width": w, "height": h,
                        "sha256": sha, "file_bytes": size})

    excluded_df = pl.DataFrame(excluded, schema=EXCLUDED_SCHEMA).sort("file_name")
    if strict and excluded_df.height:
        lines = [f"{r['file_name']!r} (row {r['row']}, column {r['column']}): {r['reason']}"
                 for r in excluded_df.iter_rows(named=True)]
        raise ImageDatasetError(f"{root_p}: {len(lines)} problem(s) (strict):\n  " + "\n  ".join(lines))
    frame = pl.DataFrame(rows_ok, schema=FRAME_SCHEMA).sort("file_name")
    if frame.height == 0:
        raise ImageDatasetError(f"{root_p}: no usable image ({excluded_df.height} excluded)")
    return ImageDataset(root=root_p, layout=layout, frame=frame, excluded=excluded_df,
                        content_hash=dataset_content_hash(frame))


def to_rgb8(im: Image.Image) -> Image.Image:
    """An 8-bit RGB image of any Pillow mode, scaling high bit depths instead of clipping them.

    ``convert("RGB")`` clips the 16-bit (``I;16*``), 32-bit integer (``I``) and float (``F``) modes at 255,
    which turns most of a radiograph white. Here a 16-bit image is scaled by its nominal range
    (v · 255 / 65535, rounded); ``I``/``F`` values already in [0, 255] are kept, values in [0, 65535] are
    scaled as 16 bit, and any other range is stretched linearly from its min to its max (a constant image
    maps to 0). Every other mode goes through Pillow's own conversion (palette, CMYK, alpha, 8-bit grey).
    """
    if im.mode.startswith("I;16") or im.mode in ("I", "F"):
        a = np.asarray(im, dtype=np.float64)
        if a.ndim == 3:  # some 16-bit readers give a trailing channel axis
            a = a[..., 0]
        finite = np.isfinite(a)
        a = np.where(finite, a, 0.0)
        lo, hi = (float(a.min()), float(a.max())) if a.size else (0.0, 0.0)
        if im.mode.startswith("I;16") or (lo >= 0 and 255 < hi <= 65535):
            scaled = a * (255.0 / 65535.0)
        elif lo >= 0 and hi <= 255:
            scaled = a
        else:
            scaled = (a - lo) * (255.0 / (hi - lo)) if hi > lo else np.zeros_like(a)
        grey = Image.fromarray(np.clip(np.rint(scaled), 0, 255).astype(np.uint8))  # 2-D uint8 -> mode "L"
        return grey.convert("RGB")
    return im.convert("RGB")


def _decode_resized(path: str, size: int) -> np.ndarray:
    with Image.open(path) as im:
        im = to_rgb8(im)
        if im.size != (size, size):
            im = im.resize((size, size), Image.Resampling.BICUBIC)
        return np.asarray(im, dtype=np.uint8)


def _check_size(size: int, batch_size: int) -> None:
    if int(size) != size or size < 1:
        raise ValueError(f"size: must be a positive int, got {size!r}")
    if int(batch_size) != batch_size or batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size!r}")


def _decode_checked(path: str, size: int) -> np.ndarray:
    try:
        return _decode_resized(path, size)
    except Exception as exc:  # Pillow raises many types; the file changed or vanished after raw/images read it
        raise ImageDatasetError(f"{path}: cannot decode image ({exc.__class__.__name__}: {exc}); "
                                "was it changed or removed after raw/images was read?") from exc


def _decode_batch(paths: Sequence[str], size: int) -> np.ndarray:
    """uint8 B×3×size×size (C-contiguous) of ``paths`` (B >= 1), decoded one file at a time."""
    return np.ascontiguousarray(np.stack([_decode_checked(p, size) for p in paths]).transpose(0, 3, 1, 2))


def iter_image_batches(
    paths: Sequence[str | os.PathLike[str]], size: int, batch_size: int = 256, *, prefetch: bool = True
) -> Iterator[np.ndarray]:
    """The images of ``paths``, in order, as uint8 numpy batches B×3×size×size (RGB, squashed to a square with
    bicubic; the pixels of :func:`load_images`): batch k holds ``paths[k·batch_size:(k+1)·batch_size]``.

    Only the current batch (and, with ``prefetch``, the next one, decoded in a background thread while the
    caller works on this one) is in memory, so a consumer that keeps no batch holds O(batch_size) pixels
    whatever ``len(paths)`` is. Nothing is yielded for an empty list.
    """
    _check_size(size, batch_size)
    names = [str(p) for p in paths]
    chunks = [names[s:s + batch_size] for s in range(0, len(names), batch_size)]
    if not prefetch:
        for chunk in chunks:
            yield _decode_batch(chunk, size)
        return
    yield from _prefetched(chunks, lambda chunk: _decode_batch(chunk, size))


def _prefetched(chunks: Sequence[Sequence[str]], decode: Callable[[Sequence[str]], T]) -> Iterator[T]:
    """``decode(chunk)`` for each chunk in order, the next chunk decoded in a background thread while the caller
    works on this one (Pillow releases the GIL while it decodes)."""
    with ThreadPoolExecutor(max_workers=1) as pool:
        ahead = pool.submit(decode, chunks[0]) if chunks else None
        for c in range(len(chunks)):
            assert ahead is not None
            batch = ahead.result()
            ahead = pool.submit(decode, chunks[c + 1]) if c + 1 < len(chunks) else None
            yield batch


def _decode_sizes_checked(path: str, sizes: Sequence[int]) -> list[np.ndarray]:
    """One decode of ``path`` (Pillow, :func:`to_rgb8`), squashed to each size of ``sizes`` (bicubic): the
    arrays :func:`_decode_resized` gives for each size, from one read and one decode of the file."""
    try:
        with Image.open(path) as im:
            rgb = to_rgb8(im)
            return [np.asarray(rgb if rgb.size == (s, s) else rgb.resize((s, s), Image.Resampling.BICUBIC),
                               dtype=np.uint8) for s in sizes]
    except Exception as exc:  # Pillow raises many types; the file changed or vanished after raw/images read it
        raise ImageDatasetError(f"{path}: cannot decode image ({exc.__class__.__name__}: {exc}); "
                                "was it changed or removed after raw/images was read?") from exc


def _decode_batch_sizes(paths: Sequence[str], sizes: Sequence[int]) -> tuple[np.ndarray, ...]:
    per = [_decode_sizes_checked(p, sizes) for p in paths]
    return tuple(np.ascontiguousarray(np.stack([im[k] for im in per]).transpose(0, 3, 1, 2))
                 for k in range(len(sizes)))


def iter_image_batches_sizes(
    paths: Sequence[str | os.PathLike[str]], sizes: Sequence[int], batch_size: int = 256
) -> Iterator[tuple[np.ndarray, ...]]:
    """:func:`iter_image_batches` at several sizes from one decode per image: batch k is a tuple, one uint8
    B×3×s×s array per size s of ``sizes`` (each equal to ``iter_image_batches(paths, s, batch_size)``'s batch
    k), the next batch decoded in a background thread while the caller works on this one."""
    sizes = [int(s) for s in sizes]
    if not sizes:
        raise ValueError("sizes: no size given")
    for s in sizes:
        _check_size(s, batch_size)
    names = [str(p) for p in paths]
    chunks = [names[s:s + batch_size] for s in range(0, len(names), batch_size)]
    yield from _prefetched(chunks, lambda chunk: _decode_batch_sizes(chunk, sizes))


def load_images(paths: Sequence[str | os.PathLike[str]], size: int, *, batch_size: int = 512) -> torch.Tensor:
    """Decode images to a ``uint8`` tensor N×3×size×size (RGB, squashed to a square with bicubic).

    Decoding goes through Pillow one file at a time (no vectorised decoder exists) and is copied into a
    preallocated array in batches of ``batch_size`` (:func:`iter_image_batches`). This holds all N images;
    the embedding step streams them with :func:`iter_image_batches` instead.
    """
    import torch

    _check_size(size, batch_size)
    out = np.empty((len(paths), 3, size, size), dtype=np.uint8)
    start = 0
    for block in iter_image_batches(paths, size, batch_size, prefetch=False):
        out[start:start + block.shape[0]] = block
        start += block.shape[0]
    return torch.from_numpy(out)
