"""File primitives: atomic writes, durable appends, fsync helpers, JSON lines and the one file SHA-256.

The readers of the user's tables live in :mod:`noisycal_platform.io`; everything that writes a file, or hashes one,
imports from here.
"""

from __future__ import annotations

import hashlib
import json
import os
import tempfile
from pathlib import Path

__all__ = [
    "append_line_durably",
    "atomic_write_bytes",
    "atomic_write_text",
    "fsync_dir",
    "json_lines",
    "read_json_lines",
    "sha256_file",
]


def fsync_dir(folder: str | Path) -> None:
    """fsync a directory so that a rename or a new entry in it survives a power loss."""
    fd = os.open(folder, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to a temp file in the same folder, fsync, rename over ``path``, fsync the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    fsync_dir(path.parent)
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def append_line_durably(path: str | Path, line: str) -> None:
    """Append one line with a single ``write`` and fsync it (and the folder when the file is new).

    A torn last line left by an earlier crash is ended first, so a record is never glued onto it.
    """
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(path, os.O_RDWR | os.O_APPEND | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        size = os.fstat(fd).st_size
        payload = line.rstrip("\n").encode("utf-8") + b"\n"
        if size and os.pread(fd, 1, size - 1) != b"\n":
            payload = b"\n" + payload
        view = memoryview(payload)
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)
    if size == 0:
        fsync_dir(path.parent)


def json_lines(data: bytes) -> list[dict]:
    """The JSON objects of ``data``, one a line, as :func:`append_line_durably` writes them. Blank lines, lines that
    do not parse (a torn last line a crash left: it never committed) and values that are not objects are skipped."""
    out = []
    for line in data.splitlines():
        if not line.strip():
            continue
        try:
            value = json.loads(line)
        except (json.JSONDecodeError, UnicodeDecodeError):
            continue
        if isinstance(value, dict):
            out.append(value)
    return out


def read_json_lines(path: str | Path) -> list[dict]:
    """:func:`json_lines` of the file at ``path`` (none if it does not exist). A torn last line (power loss
    mid-write) is skipped, never repaired in place."""
    try:
        data = Path(path).read_bytes()
    except FileNotFoundError:
        return []
    return json_lines(data)


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    """Hex SHA-256 of the file at ``path``, read in ``chunk``-byte blocks (the one file hash of the package)."""
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()
