"""Which release wrote a home, and whether this one may open it (``home.json`` at the home's root).

``home.json`` holds ``schema_version`` (the home layout/table version, an integer) and ``package_version``
(the noisycal-platform release that last wrote the record). Opening a home (:func:`open_home`):

- a home of a **newer** schema version is refused, naming both releases and both schema versions;
- a table missing a column this release needs and cannot add (``REQUIRED_COLUMNS``) is refused, naming the
  table and the column;
- an **older** home (no ``home.json``: schema 1, releases before the record existed) is backed up first
  (``noisycal_platform.backup``) and then migrated in place, one ``MIGRATIONS`` step per version;
- a home without a record whose tables need no migration (new, or built by this release before the record
  existed) just gets the record.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path

from noisycal_platform.paths import HomeLayout

__all__ = [
    "HOME_FILE",
    "HOME_SCHEMA_VERSION",
    "REQUIRED_COLUMNS",
    "HomeRecord",
    "IncompatibleHome",
    "open_home",
    "package_version",
    "read_record",
    "record_home",
]

HOME_FILE = "home.json"
#: 1: homes written before ``home.json`` existed (``raw.annotations`` without ``label_text``); 2: this layout.
HOME_SCHEMA_VERSION = 2
#: Columns this release reads and cannot invent: a table that has rows but lacks one is refused.
REQUIRED_COLUMNS: dict[str, tuple[str, ...]] = {
    "raw.annotations": ("item_id", "annotator_id", "label"),
}


class IncompatibleHome(ValueError):
    """This release cannot open the home; the message names the versions, or the table and column."""


@dataclass(frozen=True)
class HomeRecord:
    schema_version: int
    package_version: str


def package_version() -> str:
    """The installed noisycal-platform release (``importlib.metadata``); ``unknown`` when not installed."""
    try:
        return metadata.version("noisycal-platform")
    except metadata.PackageNotFoundError:
        return "unknown"


def read_record(home: str | Path) -> HomeRecord | None:
    path = HomeLayout.at(home).home / HOME_FILE
    if not path.is_file():
        return None
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
        return HomeRecord(int(raw["schema_version"]), str(raw.get("package_version", "unknown")))
    except (ValueError, KeyError, TypeError) as exc:
        raise IncompatibleHome(
            f"{path}: unreadable home record ({exc}); this release cannot tell which release wrote it"
        ) from None


def record_home(home: str | Path) -> HomeRecord:
    """Write ``home.json`` for this release into a home being created."""
    path = HomeLayout.at(home).home
    path.mkdir(parents=True, exist_ok=True)
    return _write_record(path)


def _write_record(home: Path) -> HomeRecord:
    from noisycal_platform.files import atomic_write_text

    rec = HomeRecord(HOME_SCHEMA_VERSION, package_version())
    body = {**rec.__dict__, "written": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    atomic_write_text(home / HOME_FILE, json.dumps(body, indent=1, sort_keys=True) + "\n")
    return rec


def _columns(con, table: str) -> set[str] | None:
    schema, name = table.split(".")
    rows = con.execute(
        "select column_name from information_schema.columns where table_schema = ? and table_name = ?",
        [schema, name],
    ).fetchall()
    return {r[0] for r in rows} or None


def _check_tables(warehouse: Path) -> None:
    import duckdb

    if not warehouse.is_file():
        return
    try:
        con = duckdb.connect(str(warehouse), read_only=True)
    except duckdb.IOException:  # a writer holds the file right now: the tables were checked when it opened
        return
    try:
        for table, needed in REQUIRED_COLUMNS.items():
            have = _columns(con, table)
            for col in needed if have is not None else ():
                if col not in have:
                    raise IncompatibleHome(
                        f"{warehouse}: table {table} has no column {col!r}, which this release "
                        f"(noisycal-platform {package_version()}) needs and cannot add; restore a backup or "
                        "rebuild the home"
                    )
    finally:
        con.close()


def _needs_1_to_2(warehouse: Path) -> bool:
    import duckdb

    if not warehouse.is_file():
        return False
    try:
        con = duckdb.connect(str(warehouse), read_only=True)
    except duckdb.IOException:  # held by a running writer of this release (an old home cannot be served)
        return False
    try:
        have = _columns(con, "raw.annotations")
    finally:
        con.close()
    return have is not None and "label_text" not in have


def _migrate_1_to_2(warehouse: Path) -> None:
    """Schema 1 -> 2: ``raw.annotations.label_text`` (the label as written; 0/1 homes: the digit)."""
    import duckdb

    if not warehouse.is_file():
        return
    con = duckdb.connect(str(warehouse))
    try:
        have = _columns(con, "raw.annotations")
        if have is not None and "label_text" not in have:
            con.execute("begin")
            con.execute("alter table raw.annotations add column label_text varchar")
            con.execute("update raw.annotations set label_text = cast(label as varchar)")
            con.execute("commit")
    finally:
        con.close()


#: ``from_version -> step`` taking the warehouse path; run in order from the home's version up.
MIGRATIONS: dict[int, Callable[[Path], None]] = {1: _migrate_1_to_2}


def open_home(
    home: str | Path, *, backup: Callable[[Path, Path], object] | None = None
) -> tuple[HomeRecord, Path | None]:
    """Check that this release may open ``home``; migrate an older one (after ``backup(home, dest)``; default
    ``noisycal_platform.backup.backup_home``). Returns the record and the backup folder made (or None)."""
    layout = HomeLayout.at(home)
    rec = read_record(layout.home)
    ours = package_version()
    if rec is not None and rec.schema_version > HOME_SCHEMA_VERSION:
        raise IncompatibleHome(
            f"{layout.home} was written by noisycal-platform {rec.package_version} (home schema "
            f"{rec.schema_version}); this release, noisycal-platform {ours}, reads home schema "
            f"{HOME_SCHEMA_VERSION} and older; upgrade noisycal-platform to open it"
        )
    _check_tables(layout.warehouse)
    if rec is not None and rec.schema_version == HOME_SCHEMA_VERSION:
        return rec, None
    if rec is None and (not layout.home.exists() or not any(p.is_file() for p in layout.home.rglob("*"))):
        return HomeRecord(HOME_SCHEMA_VERSION, ours), None  # nothing there yet: whoever creates it records it
    if rec is None and not _needs_1_to_2(layout.warehouse):
        return _write_record(layout.home), None  # new, or already in this layout: nothing to migrate
    old = rec.schema_version if rec is not None else 1
    if backup is None:
        from noisycal_platform.backup import backup_home

        def backup(src: Path, dest: Path) -> object:
            return backup_home(src, dest, package_version=ours)

    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    dest = layout.home.parent / f"{layout.home.name}.backup-schema{old}-{stamp}"
    backup(layout.home, dest)
    for v in range(old, HOME_SCHEMA_VERSION):
        MIGRATIONS[v](layout.warehouse)
    return _write_record(layout.home), dest
