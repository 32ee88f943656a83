"""Serve dataset images confined to the dataset root, as cached thumbnails.

Confinement: the requested name must be relative, contain no ``..`` part and no NUL; the joined path is
``resolve``d (following every symlink) and must stay ``is_relative_to`` the resolved root, so neither
``../`` nor an absolute path nor a symlink pointing outside the root is ever opened. Thumbnails are made
with Pillow on first request and cached under ``cache/thumbnails/`` keyed by sha256(path, size, mtime, side),
so nothing is precomputed for the whole dataset.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path, PurePosixPath

__all__ = ["SIZES", "PathRefused", "ThumbnailCache", "confine"]

SIZES = {"m": 768, "l": 1600}
MAX_NAME = 1024


class PathRefused(Exception):
    """The requested name points outside the dataset root (HTTP 403) or is not a file there (404)."""

    def __init__(self, status: int, reason: str) -> None:
        super().__init__(reason)
        self.status = status
        self.reason = reason


def confine(root: Path, name: str) -> Path:
    """The real path of ``name`` inside ``root``; raises PathRefused(403) for anything that escapes it and
    PathRefused(404) for a name that is not a regular file inside it."""
    if not name or len(name) > MAX_NAME or "\x00" in name:
        raise PathRefused(403, "malformed image name")
    pure = PurePosixPath(name)
    if pure.is_absolute() or name.startswith(("/", "\\")) or (len(name) > 1 and name[1] == ":"):
        raise PathRefused(403, "absolute paths are refused")
    if any(part == ".." for part in pure.parts) or any(part == ".." for part in name.split("\\")):
        raise PathRefused(403, "'..' is refused")
    try:
        root_real = root.resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError, RuntimeError) as err:
        raise PathRefused(404, "dataset root is missing") from err
    try:
        real = (root_real / pure).resolve(strict=True)
    except (FileNotFoundError, NotADirectoryError):
        raise PathRefused(404, "no such image") from None
    except (RuntimeError, OSError):  # symlink loop, name too long
        raise PathRefused(403, "unresolvable path") from None
    if not real.is_relative_to(root_real):
        raise PathRefused(403, "path leaves the dataset root")
    if not real.is_file():
        raise PathRefused(404, "not a file")
    return real


class ThumbnailCache:
    def __init__(self, home: Path) -> None:
        self.folder = Path(home) / "cache" / "thumbnails"

    def get(self, real: Path, size: str) -> Path:
        """Path of the cached JPEG thumbnail of ``real`` (made now if missing). Raises ValueError when the
        file cannot be decoded as an image."""
        side = SIZES[size]
        st = real.stat()
        key = hashlib.sha256(f"{real}\0{st.st_size}\0{st.st_mtime_ns}\0{side}".encode()).hexdigest()
        out = self.folder / f"{key}.jpg"
        if out.is_file():
            return out
        from PIL import Image, ImageOps

        from noisycal_platform.cleaning.images import to_rgb8

        try:
            with Image.open(real) as im:
                im.draft("RGB", (side, side))  # JPEG: decode at reduced scale (no-op for other formats)
                im = ImageOps.exif_transpose(im)
                im = to_rgb8(im)  # 16-bit radiographs scaled, not clipped
                im.thumbnail((side, side), Image.Resampling.LANCZOS)
                self.folder.mkdir(parents=True, exist_ok=True)
                fd, tmp = tempfile.mkstemp(prefix=".thumb.", suffix=".jpg", dir=self.folder)
                try:
                    with os.fdopen(fd, "wb") as f:
                        im.save(f, format="JPEG", quality=88)
                    os.replace(tmp, out)
                except BaseException:
                    Path(tmp).unlink(missing_ok=True)
                    raise
        except Exception as err:  # Pillow raises OSError, ValueError, SyntaxError, DecompressionBombError...
            raise ValueError(f"cannot decode image: {type(err).__name__}: {err}") from err
        return out
