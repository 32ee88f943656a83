"""Consistent snapshots of a home (``noisycal backup`` / ``restore`` / ``verify-backup``), no Dagster here.

A snapshot is a folder holding a copy of every file of the home plus ``MANIFEST.json``:

- the warehouse is copied after DuckDB's ``CHECKPOINT`` while this process holds the DuckDB file open (so no
  other process writes it) and while the caller's home lock (the runner lock) and the ingest lock are held;
- append-only logs (``*.jsonl``: ledger, confirmation answers) are copied up to their last complete line, i.e.
  what the writer had fsynced as whole records; SQLite files (the Dagster instance history) through SQLite's
  own online backup; every other file is written atomically by the platform, so a plain copy is whole;
- ``MANIFEST.json`` (relative path, size, SHA-256 of every file; row count and content hash of every
  warehouse table) is written LAST, to a temp file then renamed: a backup killed midway has no manifest and
  :func:`restore_home` refuses it.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import shutil
import sqlite3
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MANIFEST",
    "BackupError",
    "BackupReport",
    "backup_home",
    "restore_home",
    "table_digests",
    "verify_home_against",
    "verify_snapshot",
]

MANIFEST = "MANIFEST.json"
FORMAT = 1
#: Never copied: locks, the holder note, temp files of atomic writes, the read-only query snapshot (rebuilt).
_SKIP_NAMES = {"runner.lock", "runner.holder", "instance.lock", ".ingest.lock"}
_SKIP_DIRS = {"snapshot"}


class BackupError(ValueError):
    """A snapshot that cannot be made, trusted or restored; the message says which file and why."""


@dataclass(frozen=True)
class BackupReport:
    dest: Path
    n_files: int
    n_bytes: int
    n_tables: int
    seconds: float


def _sha256(path: Path) -> str:
    h = hashlib.sha256()
    with path.open("rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()


def _fsync_dir(folder: Path) -> None:
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def _skipped(rel: Path) -> bool:
    name = rel.name
    return (
        name in _SKIP_NAMES
        or (name.startswith(".") and name.endswith(".tmp"))
        or name.endswith((".duckdb.wal", "-journal", "-wal", "-shm"))
        or (len(rel.parts) > 1 and rel.parts[0] in _SKIP_DIRS)
    )


def _home_files(home: Path) -> Iterator[Path]:
    for root, dirs, files in os.walk(home):
        dirs.sort()
        for f in sorted(files):
            p = Path(root) / f
            rel = p.relative_to(home)
            if not p.is_symlink() and p.is_file() and not _skipped(rel):
                yield rel


def _copy_jsonl(src: Path, dst: Path) -> None:
    """Copy up to the last newline: a record being appended right now is left for the next backup."""
    data = src.read_bytes()
    cut = data.rfind(b"\n") + 1
    dst.write_bytes(data[:cut])


def _is_sqlite(path: Path) -> bool:
    with path.open("rb") as fh:
        return fh.read(16) == b"SQLite format 3\x00"


def _copy_sqlite(src: Path, dst: Path) -> None:
    with contextlib.closing(sqlite3.connect(f"file:{src}?mode=ro", uri=True, timeout=60)) as s, \
            contextlib.closing(sqlite3.connect(dst)) as d:
        s.backup(d)


def table_digests(warehouse: Path) -> dict[str, dict[str, object]]:
    """``schema.table`` -> {rows, hash}: the row count and an order-free content hash (sum of DuckDB's row
    hashes) of every base table of the DuckDB file, opened read-only."""
    import duckdb

    if not warehouse.is_file():
        return {}
    con = duckdb.connect(str(warehouse), read_only=True)
    try:
        tables = con.execute(
            "select schema_name, table_name from duckdb_tables() where not temporary order by 1, 2"
        ).fetchall()
        out: dict[str, dict[str, object]] = {}
        for schema, table in tables:
            ident = f'"{schema.replace(chr(34), chr(34) * 2)}"."{table.replace(chr(34), chr(34) * 2)}"'
            sql = f"select count(*), coalesce(sum(hash(t)::hugeint), 0)::varchar from {ident} t"
            n, h = con.execute(sql).fetchone()
            out[f"{schema}.{table}"] = {"rows": int(n), "hash": str(h)}
        return out
    finally:
        con.close()


def _copy_warehouse(src: Path, dst: Path) -> None:
    import duckdb

    con = duckdb.connect(str(src))  # holds DuckDB's file lock: no other process writes while we copy
    try:
        con.execute("CHECKPOINT")
        shutil.copyfile(src, dst)
    finally:
        con.close()


def backup_home(
    home: str | Path,
    dest: str | Path,
    *,
    lock: Callable[[], AbstractContextManager[object]] = contextlib.nullcontext,
    package_version: str = "",
) -> BackupReport:
    """Snapshot ``home`` into the new folder ``dest`` (refused if it exists and is not empty).

    ``lock``: the home's writer lock (the shell passes the runner lock); held for the whole copy, together with
    the ingest lock, so the warehouse, ledger and archive are one consistent state."""
    from noisycal_platform.ingest import _ingest_lock, fault_point
    from noisycal_platform.paths import HomeLayout

    t0 = time.perf_counter()
    layout = HomeLayout.at(home)
    src, dest = layout.home, Path(dest).expanduser().resolve()
    if not src.is_dir():
        raise BackupError(f"no home at {src}")
    if dest.is_relative_to(src):
        raise BackupError(f"the backup folder {dest} must lie outside the home {src}")
    if dest.exists() and (not dest.is_dir() or any(dest.iterdir())):
        raise BackupError(f"{dest} exists and is not empty; give a new folder")
    dest.mkdir(parents=True, exist_ok=True)
    files: list[dict[str, object]] = []
    with lock(), _ingest_lock(layout):
        for rel in _home_files(src):
            s, d = src / rel, dest / rel
            d.parent.mkdir(parents=True, exist_ok=True)
            if s == layout.warehouse:
                _copy_warehouse(s, d)
            elif s.suffix == ".jsonl":
                _copy_jsonl(s, d)
            elif _is_sqlite(s):
                _copy_sqlite(s, d)
            else:
                shutil.copyfile(s, d)
            with d.open("rb") as fh:
                os.fsync(fh.fileno())
            files.append({"path": rel.as_posix(), "size": d.stat().st_size, "sha256": _sha256(d)})
            fault_point("backup_file")
    tables = table_digests(dest / layout.warehouse.relative_to(src))
    manifest = {
        "format": FORMAT,
        "source_home": str(src),
        "package_version": package_version,
        "created": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "files": files,
        "tables": tables,
    }
    for folder in {dest / Path(f["path"]).parent for f in files}:  # type: ignore[arg-type]
        _fsync_dir(folder)
    tmp = dest / f".{MANIFEST}.tmp"
    with tmp.open("w", encoding="utf-8") as fh:
        json.dump(manifest, fh, indent=1, sort_keys=True)
        fh.flush()
        os.fsync(fh.fileno())
    fault_point("backup_manifest")
    os.replace(tmp, dest / MANIFEST)
    _fsync_dir(dest)
    n_bytes = sum(int(f["size"]) for f in files)  # type: ignore[call-overload]
    return BackupReport(dest, len(files), n_bytes, len(tables), time.perf_counter() - t0)


def _read_manifest(src: Path) -> dict:
    path = src / MANIFEST
    if not path.is_file():
        raise BackupError(f"{src} is not a complete backup: {MANIFEST} is missing (was the backup interrupted?)")
    try:
        manifest = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as exc:
        raise BackupError(f"{path}: unreadable manifest ({exc})") from None
    if not isinstance(manifest, dict) or manifest.get("format") != FORMAT or not isinstance(
        manifest.get("files"), list
    ):
        raise BackupError(f"{path}: not a noisycal backup manifest of format {FORMAT}")
    return manifest


def verify_snapshot(src: str | Path) -> dict:
    """The manifest of the backup ``src`` after checking every listed file's size and SHA-256 and every
    table's row count and content hash; raises BackupError naming the first file or table that differs."""
    src = Path(src).expanduser().resolve()
    manifest = _read_manifest(src)
    _check_files(src, manifest, f"backup {src}")
    _check_tables(src, manifest, f"backup {src}")
    return manifest


def _check_files(root: Path, manifest: dict, what: str) -> None:
    for f in manifest["files"]:
        rel = Path(str(f["path"]))
        if rel.is_absolute() or ".." in rel.parts:
            raise BackupError(f"{what}: manifest path {f['path']!r} leaves the folder")
        p = root / rel
        if not p.is_file():
            raise BackupError(f"{what}: {rel} is missing")
        if p.stat().st_size != f["size"]:
            raise BackupError(f"{what}: {rel} has {p.stat().st_size} bytes, the manifest says {f['size']}")
        if _sha256(p) != f["sha256"]:
            raise BackupError(f"{what}: {rel} has SHA-256 {_sha256(p)[:12]}…, the manifest says {f['sha256'][:12]}…")


def _check_tables(root: Path, manifest: dict, what: str) -> None:
    from noisycal_platform.paths import HomeLayout

    got = table_digests(HomeLayout.at(root).warehouse)
    want = manifest.get("tables", {})
    for name in sorted(set(got) | set(want)):
        if got.get(name) != want.get(name):
            raise BackupError(f"{what}: table {name} is {got.get(name)}, the manifest says {want.get(name)}")


def verify_home_against(home: str | Path, src: str | Path) -> dict:
    """Check that ``home`` (e.g. just restored) holds the backup ``src``'s tables (row counts and content
    hashes) and its files (reports, ledgers, logs: size and SHA-256); raises BackupError on the first miss."""
    from noisycal_platform.paths import HomeLayout

    manifest = _read_manifest(Path(src).expanduser().resolve())
    home = HomeLayout.at(home).home
    _check_files(home, manifest, f"home {home}")
    _check_tables(home, manifest, f"home {home}")
    return manifest


def restore_home(src: str | Path, home: str | Path) -> dict:
    """Restore the backup ``src`` into ``home``, which must not exist or be empty; checks the manifest's hashes
    first (nothing is written when a file differs), copies into a temp folder beside ``home`` and renames it
    into place, then verifies the restored home against the manifest. Returns the manifest."""
    src = Path(src).expanduser().resolve()
    home = Path(home).expanduser().resolve()
    if home.exists() and (not home.is_dir() or any(home.iterdir())):
        raise BackupError(f"{home} is not empty; restore only into a new or empty folder")
    manifest = verify_snapshot(src)
    home.parent.mkdir(parents=True, exist_ok=True)
    staging = home.parent / f".{home.name}.restoring-{os.getpid()}"
    shutil.rmtree(staging, ignore_errors=True)
    staging.mkdir()
    try:
        for f in manifest["files"]:
            d = staging / str(f["path"])
            d.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src / str(f["path"]), d)
            with d.open("rb") as fh:
                os.fsync(fh.fileno())
        if home.exists():
            home.rmdir()
        os.replace(staging, home)
        _fsync_dir(home.parent)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    verify_home_against(home, src)
    return manifest
