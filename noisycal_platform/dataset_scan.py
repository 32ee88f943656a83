"""Up-front check of an image folder for ``noisycal datasets add``: what the image reader would refuse later,
counted once, before the folder is registered.

Symlink policy: the dataset path itself may be a symlink (its resolved target is registered). Inside the
folder, a symlink (file or folder) is followed only if it resolves inside the folder; one that points out of
it is refused, as are special files (FIFOs, sockets, devices) and files the service cannot read. Nothing is
opened beyond an ``os.access`` check, so no content of a refused file is ever read or printed.
"""

from __future__ import annotations

import json
import os
import stat
from dataclasses import dataclass, field
from pathlib import Path

from noisycal_platform.cleaning.images import IMAGE_EXTENSIONS
from noisycal_platform.files import atomic_write_text
from noisycal_platform.paths import HomeLayout, validate_name

__all__ = ["FolderScan", "Registration", "register_dataset", "scan_dataset_folder"]


@dataclass
class FolderScan:
    root: Path
    images: int = 0
    out_of_root: list[str] = field(default_factory=list)
    unreadable: list[str] = field(default_factory=list)
    special: list[str] = field(default_factory=list)

    @property
    def refused(self) -> int:
        return len(self.out_of_root) + len(self.unreadable) + len(self.special)

    def summary(self) -> str:
        """One line: the counts, and the first few names of each kind (names only, never content)."""
        parts = []
        for label, names in (
            ("symlink(s) pointing outside the folder", self.out_of_root),
            ("unreadable file(s)", self.unreadable),
            ("special file(s)", self.special),
        ):
            if names:
                shown = ", ".join(names[:3]) + (", ..." if len(names) > 3 else "")
                parts.append(f"{len(names)} {label} ({shown})")
        return f"{self.root}: {self.images} readable image(s); refused: " + ("; ".join(parts) or "none")


def scan_dataset_folder(root: str | Path) -> FolderScan:
    """Walk ``root`` (following only symlinks that stay inside it) and classify every entry."""
    root = Path(root).resolve()
    scan = FolderScan(root=root)
    stack = [root]
    seen_dirs = {root}
    while stack:
        folder = stack.pop()
        try:
            entries = sorted(os.scandir(folder), key=lambda e: e.name)
        except OSError:
            scan.unreadable.append(str(folder.relative_to(root)) or ".")
            continue
        for entry in entries:
            path = Path(entry.path)
            rel = str(path.relative_to(root))
            if entry.is_symlink():
                target = path.resolve()
                if not target.is_relative_to(root):
                    scan.out_of_root.append(rel)
                    continue
            try:
                st = path.stat()
            except OSError:
                scan.unreadable.append(rel)  # a dangling link or a vanished file
                continue
            if stat.S_ISDIR(st.st_mode):
                real = path.resolve()
                if real not in seen_dirs:
                    seen_dirs.add(real)
                    stack.append(path)
            elif not stat.S_ISREG(st.st_mode):
                scan.special.append(rel)
            elif not os.access(path, os.R_OK):
                scan.unreadable.append(rel)
            elif path.suffix.lower() in IMAGE_EXTENSIONS:
                scan.images += 1
    return scan


@dataclass(frozen=True)
class Registration:
    """The outcome of :func:`register_dataset`: ``problem`` is None when ``name`` now maps to ``path``."""

    path: Path
    scan: FolderScan | None = None
    problem: str | None = None


def register_dataset(layout: HomeLayout, name: str, folder: str | Path) -> Registration:
    """Register the image folder ``folder`` under ``name`` in ``datasets.json`` (images are not copied) once the
    up-front scan finds at least one readable image and nothing to refuse; the registry is rewritten atomically.
    Raises :class:`~noisycal_platform.paths.InvalidName` for a bad name."""
    validate_name(name, "dataset")
    path = Path(folder).expanduser().resolve()
    if not path.is_dir():
        return Registration(path, problem=f"not a folder: {path}")
    scan = scan_dataset_folder(path)
    if scan.refused or scan.images == 0:
        return Registration(path, scan, problem=f"not registered: {scan.summary()}")
    registry = json.loads(layout.dataset_registry.read_text("utf-8")) if layout.dataset_registry.is_file() else {}
    registry[name] = str(path)
    atomic_write_text(layout.dataset_registry, json.dumps(registry, indent=1, sort_keys=True))
    return Registration(path, scan)
