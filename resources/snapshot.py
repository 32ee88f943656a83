"""A read-only copy of the warehouse for notebooks, BI tools and ``noisycal query``: readers never hold the
warehouse file, so they never block a write.

``refresh_snapshot`` copies the warehouse with DuckDB's ``COPY FROM DATABASE`` (a consistent copy, WAL
included, taken under a short read-only connection) into a temporary file beside the snapshot and renames
it over ``$NOISYCAL_HOME/snapshot/warehouse.duckdb`` (atomic on POSIX: a reader that has the old snapshot
open keeps reading it). The runner refreshes it after every tick/materialize that ran something; under the
daemon, ``snapshot_sensor`` refreshes it after each successful run.

With the Parquet warehouse the snapshot holds the views (their definitions name the files under the warehouse
root), and ``query`` opens it with the root's fsspec filesystem registered, as the platform's own connections do
(``resources.parquet_warehouse.connect_views``), so an ``s3://`` root needs no DuckDB extension (and DuckDB never
tries to download one).
"""

from __future__ import annotations

import os
from pathlib import Path

import duckdb

from noisycal_platform.paths import HomeLayout
from resources.settings import load_settings

__all__ = ["query", "refresh_snapshot", "snapshot_path"]


def snapshot_path(home: str | Path) -> Path:
    return HomeLayout.at(home).home / "snapshot" / "warehouse.duckdb"


def refresh_snapshot(home: str | Path) -> Path | None:
    """Replace the snapshot with a fresh copy of the warehouse; ``None`` if there is no warehouse yet."""
    layout = HomeLayout.at(home)
    if not layout.warehouse.is_file():
        return None
    target = snapshot_path(home)
    target.parent.mkdir(parents=True, exist_ok=True)
    tmp = target.with_name(f".{target.name}.{os.getpid()}.tmp")
    tmp.unlink(missing_ok=True)
    try:
        with duckdb.connect(":memory:") as con:  # ATTACH takes no parameters: quoted SQL string literals
            src, dst = (str(p).replace("'", "''") for p in (layout.warehouse, tmp))
            con.execute(f"ATTACH '{src}' AS noisycal_warehouse (READ_ONLY)")
            con.execute(f"ATTACH '{dst}' AS noisycal_snapshot")
            con.execute("COPY FROM DATABASE noisycal_warehouse TO noisycal_snapshot")
            con.execute("DETACH noisycal_snapshot")
            con.execute("DETACH noisycal_warehouse")
        os.chmod(tmp, 0o640)
        os.replace(tmp, target)
    finally:
        tmp.unlink(missing_ok=True)
        Path(f"{tmp}.wal").unlink(missing_ok=True)
    return target


def query(home: str | Path, sql: str):
    """Run ``sql`` on the snapshot (read-only) and return a polars frame."""
    path = snapshot_path(home)
    if not path.is_file():
        raise FileNotFoundError(f"no warehouse snapshot at {path} yet: it is written after the first run")
    settings = load_settings(HomeLayout.at(home).home)
    if settings.warehouse == "parquet":
        from resources.parquet_warehouse import connect_views

        connection = connect_views(path, settings.parquet_root(HomeLayout.at(home).home))
    else:
        connection = duckdb.connect(str(path), read_only=True)
    with connection as con:
        return con.execute(sql).pl()
