"""A warehouse many writers can share: one Parquet file per asset partition, DuckDB views over them.

Layout under ``root`` (a local path or an fsspec URL such as ``file:///srv/wh`` or ``s3://bucket/wh``)::

    <root>/<stage>/<table>/<partition file>.parquet     one file per partition key (the key percent-encoded)
    <root>/<stage>/<table>/_all.parquet                  an unpartitioned asset

- **atomic**: a file is written under a temporary name that does not end in ``.parquet`` and then renamed onto
  its final name (``os.replace`` locally: atomic on POSIX; an object store's single PUT is atomic too), so a
  writer killed mid-write leaves the previous version of its partition in place and no partial file visible;
- **no writer lock**: writers of different partitions touch different files; a process opens
  ``warehouse.duckdb`` (for a moment) only on its first write of a table, to create the table's view if missing
  ``CREATE VIEW <stage>.<table> AS SELECT * FROM read_parquet('<root>/<stage>/<table>/*.parquet',
  union_by_name = true)``; the glob sees later partitions without a refresh, so the UI, the SQL models,
  the reports and notebooks keep reading ``warehouse.duckdb`` with DuckDB;
- **object stores** (``s3://`` and any other non-local fsspec root): DuckDB reads them through the root's fsspec
  filesystem, registered on the connection (``DuckDBPyConnection.register_filesystem``; :func:`connect_views`
  for readers, :class:`ParquetViewsResource` for the SQL models), so DuckDB's ``httpfs`` extension is not
  needed (it is not installed offline). Registration is per connection, not stored in ``warehouse.duckdb``: a
  reader that opens the file itself registers the filesystem or loads ``httpfs``. Credentials and endpoint come
  from fsspec's usual sources (for S3: ``AWS_ACCESS_KEY_ID`` / ``AWS_SECRET_ACCESS_KEY``, ``AWS_ENDPOINT_URL``
  for a non-AWS endpoint);
- the per-write rules of the DuckDB warehouse (partition column added, declared column order, declared schema
  for missing tables) are the same functions (``resources.warehouse``); tables that are not Parquet-backed
  (the SQL models write DuckDB tables) are read from ``warehouse.duckdb`` as before.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid
from collections.abc import Iterator, Mapping
from pathlib import Path
from urllib.parse import quote

import dagster as dg
import duckdb
import fsspec
import polars as pl
from dagster_duckdb import DuckDBResource

from resources.warehouse import (
    COLUMN_SCHEMA,
    WarehouseIOManager,
    _as_declared,
    _ident,
    _table,
    _with_partition,
    polars_schema,
    table_schema,
)

__all__ = [
    "ParquetViewsResource",
    "ParquetWarehouseIOManager",
    "connect_views",
    "export_parquet",
    "parquet_warehouse_io_manager",
    "partition_columns",
    "partition_file",
    "refresh_views",
    "register_root",
    "write_partition",
]

UNPARTITIONED = "_all.parquet"
_VIEWS_SEEN: set[tuple[str, str, str, str]] = set()  # (database, root, schema, table) known to have their view


def partition_file(key: str | None) -> str:
    """File name of one partition: the key percent-encoded (any character is safe); long keys by SHA-256."""
    if key is None:
        return UNPARTITIONED
    name = "p-" + quote(key, safe="")
    return f"{name}.parquet" if len(name) <= 200 else f"h-{hashlib.sha256(key.encode()).hexdigest()}.parquet"


def _fs(root: str) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, path = fsspec.core.url_to_fs(root)
    return fs, path.rstrip("/")


def _is_local(fs: fsspec.AbstractFileSystem) -> bool:
    return "file" in (fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,))


def register_root(con: duckdb.DuckDBPyConnection, root: str) -> duckdb.DuckDBPyConnection:
    """Let ``con`` read a non-local ``root`` through its fsspec filesystem (module docstring); ``con``."""
    fs, _ = _fs(root)
    if not _is_local(fs) and not set(fs.protocol if isinstance(fs.protocol, tuple) else (fs.protocol,)) & set(
        con.list_filesystems()
    ):
        con.register_filesystem(fs)
    return con


def connect_views(database: str | Path, root: str, read_only: bool = True) -> duckdb.DuckDBPyConnection:
    """A DuckDB connection to ``database`` (``warehouse.duckdb``) whose views can read the files under ``root``."""
    return register_root(duckdb.connect(str(database), read_only=read_only), root)


def _table_dir(root: str, schema: str, table: str) -> tuple[fsspec.AbstractFileSystem, str]:
    fs, base = _fs(root)
    return fs, f"{base}/{schema}/{table}"


def write_partition(root: str, schema: str, table: str, key: str | None, frame: pl.DataFrame) -> str:
    """Write ``frame`` as the file of partition ``key`` (``None``: the whole table) atomically; its path."""
    _ident(schema), _ident(table)
    fs, folder = _table_dir(root, schema, table)
    fs.makedirs(folder, exist_ok=True)
    final = f"{folder}/{partition_file(key)}"
    tmp = f"{final}.tmp-{uuid.uuid4().hex}"
    try:
        if _is_local(fs):
            with open(tmp, "wb") as fh:
                frame.write_parquet(fh)
                fh.flush()
                os.fsync(fh.fileno())
            os.replace(tmp, final)
        else:
            with fs.open(tmp, "wb") as fh:
                frame.write_parquet(fh)
            fs.mv(tmp, final)
    except BaseException:
        if fs.exists(tmp):
            fs.rm(tmp)
        raise
    return final


def _read(fs: fsspec.AbstractFileSystem, path: str) -> pl.DataFrame:
    with fs.open(path, "rb") as fh:
        return pl.read_parquet(fh)


def _glob_sql(root: str, schema: str, table: str) -> str:
    fs, folder = _table_dir(root, schema, table)
    where = folder if _is_local(fs) else fs.unstrip_protocol(folder)
    return f"{where}/*.parquet"


def _create_view(con: duckdb.DuckDBPyConnection, root: str, schema: str, table: str, replace_tables: bool) -> None:
    qualified = f"{_ident(schema)}.{_ident(table)}"
    register_root(con, root)  # binding the view reads the files' schema
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {_ident(schema)}")
    kind = con.execute(
        "SELECT table_type FROM information_schema.tables WHERE table_schema = ? AND table_name = ?", [schema, table]
    ).fetchone()
    if kind is not None and kind[0] != "VIEW":
        if not replace_tables:
            raise ValueError(
                f"warehouse table {schema}.{table} exists as a DuckDB table; move it with `noisycal export parquet "
                "--switch` before writing it as Parquet"
            )
        con.execute(f"DROP TABLE {qualified}")
    glob = _glob_sql(root, schema, table).replace("'", "''")
    con.execute(f"CREATE OR REPLACE VIEW {qualified} AS SELECT * FROM read_parquet('{glob}', union_by_name = true)")


def refresh_views(database: str | Path, root: str, replace_tables: bool = False) -> list[str]:
    """(Re)create a view in ``database`` for every table folder under ``root`` holding Parquet files."""
    fs, base = _fs(root)
    done: list[str] = []
    if not fs.exists(base):
        return done
    with duckdb.connect(str(database)) as con:
        for schema_dir in sorted(fs.ls(base, detail=False)):
            if not fs.isdir(schema_dir):
                continue
            for table_dir in sorted(fs.ls(schema_dir, detail=False)):
                schema, table = schema_dir.rstrip("/").rsplit("/", 1)[1], table_dir.rstrip("/").rsplit("/", 1)[1]
                if fs.isdir(table_dir) and fs.glob(f"{table_dir}/*.parquet"):
                    _create_view(con, root, schema, table, replace_tables)
                    done.append(f"{schema}.{table}")
    return done


def export_parquet(
    database: str | Path, root: str, partition_columns: Mapping[str, str | None], switch: bool = False
) -> dict[str, int]:
    """Write every table of a DuckDB warehouse as the Parquet layout above; files written per table.

    ``partition_columns`` maps ``"<stage>.<table>"`` to the asset's partition column (``None`` or absent:
    one unpartitioned file). With ``switch`` the tables of ``database`` are then replaced by views over the
    files (the settings must select ``"warehouse": "parquet"`` with the same root afterwards).
    """
    written: dict[str, int] = {}
    with duckdb.connect(str(database), read_only=True) as con:
        names = con.execute(
            "SELECT table_schema, table_name FROM information_schema.tables WHERE table_type = 'BASE TABLE' "
            "ORDER BY 1, 2"
        ).fetchall()
        for schema, table in names:
            frame = con.execute(f"SELECT * FROM {_ident(schema)}.{_ident(table)}").pl()
            column = partition_columns.get(f"{schema}.{table}")
            if column is None:
                write_partition(root, schema, table, None, frame)
                written[f"{schema}.{table}"] = 1
                continue
            parts = frame.partition_by(column, as_dict=True, maintain_order=True)
            for (key,), part in parts.items():
                write_partition(root, schema, table, str(key), part)
            written[f"{schema}.{table}"] = len(parts)
    if switch:
        with duckdb.connect(str(database)) as con:
            for name in written:
                _create_view(con, root, *name.split("."), replace_tables=True)
    return written


def partition_columns(defs: dg.Definitions) -> dict[str, str | None]:
    """``"<stage>.<table>"`` -> the partition column (``partition_expr``) of each partitioned warehouse asset."""
    graph = defs.resolve_asset_graph()
    out: dict[str, str | None] = {}
    for key in graph.materializable_asset_keys:
        node = graph.get(key)
        if len(key.path) >= 2 and node.partitions_def is not None:
            column = (node.metadata or {}).get("partition_expr")
            out[f"{key.path[-2]}.{key.path[-1]}"] = str(column) if column is not None else None
    return out


class ParquetWarehouseIOManager(WarehouseIOManager):
    """Parquet-per-partition IO manager with DuckDB views (see module docstring). ``database`` holds the views."""

    root: str

    def _ensure_view(self, schema: str, table: str) -> None:
        known = (self.database, self.root, schema, table)
        if known in _VIEWS_SEEN:  # this process already saw the view: no need to open the DuckDB file
            return
        with self._connect() as con:
            kind = con.execute(
                "SELECT table_type FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
                [schema, table],
            ).fetchone()
            if kind is None or kind[0] != "VIEW":
                _create_view(con, self.root, schema, table, replace_tables=False)
        _VIEWS_SEEN.add(known)

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame) -> None:
        if obj is None:
            return
        if not isinstance(obj, pl.DataFrame):
            raise TypeError(f"{context.asset_key.to_user_string()}: expected a polars DataFrame, got {type(obj)}")
        schema, table, _ = _table(context.asset_key)
        declared = (context.definition_metadata or {}).get(COLUMN_SCHEMA)
        column, keys = None, []
        if context.has_asset_partitions:
            column = str(context.definition_metadata["partition_expr"])
            keys = list(context.asset_partition_keys)
            obj = _with_partition(obj, column, keys)
        if isinstance(declared, dg.TableSchema):
            obj = _as_declared(context.asset_key, obj, [c.name for c in declared.columns])
        if column is None:
            write_partition(self.root, schema, table, None, obj)
        else:
            for key in keys:  # one file per key, also for keys with no rows (an empty partition is a result)
                write_partition(self.root, schema, table, key, obj.filter(pl.col(column) == key))
        self._ensure_view(schema, table)
        context.add_output_metadata(
            {"row_count": obj.height, "dataframe_columns": dg.MetadataValue.table_schema(
                table_schema(obj.schema, context.asset_key))}
        )

    def load_input(self, context: dg.InputContext) -> pl.DataFrame:
        asset_key = context.asset_key
        schema, table, _ = _table(asset_key)
        fs, folder = _table_dir(self.root, schema, table)
        fs.invalidate_cache(folder)  # an object store's listing cache misses other workers' new files
        if not fs.exists(folder):  # not Parquet-backed (a SQL model) or not written yet: the DuckDB rules
            return super().load_input(context)
        upstream = context.upstream_output
        metadata = (upstream.definition_metadata if upstream is not None else None) or {}
        declared = metadata.get(COLUMN_SCHEMA)
        column = metadata.get("partition_expr") if context.has_asset_partitions else None
        if column is None:  # an unpartitioned table, or every partition of a partitioned one
            paths = sorted(fs.glob(f"{folder}/*.parquet"))
        else:
            paths = [p for k in context.asset_partition_keys if fs.exists(p := f"{folder}/{partition_file(k)}")]
        if paths:
            return pl.concat([_read(fs, p) for p in paths], how="vertical_relaxed")
        return pl.DataFrame(schema=polars_schema(declared)) if isinstance(declared, dg.TableSchema) else pl.DataFrame()


def parquet_warehouse_io_manager(database: Path, root: str | Path) -> ParquetWarehouseIOManager:
    """IO manager writing ``root`` (Parquet files) with views in ``database`` (``warehouse.duckdb``)."""
    return ParquetWarehouseIOManager(database=str(database), root=str(root))



class ParquetViewsResource(DuckDBResource):
    """``DuckDBResource`` (the SQL models' ``warehouse``) whose connections can read the views' files under a
    non-local ``root`` (:func:`register_root`)."""

    root: str

    @contextlib.contextmanager
    def get_connection(self) -> Iterator[duckdb.DuckDBPyConnection]:
        with super().get_connection() as con:
            yield register_root(con, self.root)
