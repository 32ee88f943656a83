"""The DuckDB warehouse: one file, one schema per stage; polars frames in and out.

``WarehouseIOManager`` is a public ``dagster.ConfigurableIOManager`` that owns each write's transaction:
- **never half-written**: the old slice is deleted and the new rows are written in one DuckDB transaction,
  opened, committed (or rolled back) in :meth:`WarehouseIOManager.handle_output`;
- **empty results are tables too**: an asset that legitimately has no rows yet still leaves its table;
- **partition column**: a partitioned asset's frame gets the partition column (``partition_expr`` metadata) set
  to the partition key when it lacks it;
- **declared schema**: an upstream table that does not exist yet loads as an empty frame with the columns the
  asset declares (``dagster/column_schema`` definition metadata, see :func:`table_schema`), so no downstream
  body probes columns. Without a declared schema a missing table is an error naming it.
An unpartitioned asset replaces its table (so a changed column set replaces the old one); a partitioned asset
replaces its slice and inserts by column name. Partition keys and values are bound as ``?`` parameters, never
spliced into the SQL text; only identifiers that the code defines (stage, asset name, partition column) are.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
from dagster_duckdb import DuckDBResource

from noisycal_platform.column_docs import describe
from noisycal_platform.ingest import fault_point

__all__ = [
    "COLUMN_SCHEMA",
    "WarehouseIOManager",
    "polars_schema",
    "table_exists",
    "table_schema",
    "warehouse_io_manager",
    "warehouse_resource",
]

#: Dagster's standard definition-metadata key for an asset's column schema (shown in the UI's Columns tab).
COLUMN_SCHEMA = "dagster/column_schema"
_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_WRAPPED = re.compile(r"^(List|Array)\((.+)\)$")
_STRUCT = re.compile(r"^Struct\(\{(.*)\}\)$")
_DATETIME = re.compile(r"^Datetime\(time_unit='(ns|us|ms)', time_zone=(None|'[^']*')\)$")


def table_schema(
    schema: Mapping[str, pl.DataType | type[pl.DataType]], key: dg.AssetKey | str | None = None
) -> dg.TableSchema:
    """A polars schema as Dagster's ``TableSchema`` (column types spelled as polars prints them). With the
    table's ``key`` (``<stage>/<name>``) each column carries its description from
    :mod:`noisycal_platform.column_docs` (empty where the glossary has none; ``tests/test_column_docs.py``
    requires one for every declared column)."""
    table = key.to_user_string() if isinstance(key, dg.AssetKey) else key
    return dg.TableSchema(columns=[
        dg.TableColumn(name=n, type=str(t), description=(describe(table, n) or None) if table else None)
        for n, t in schema.items()
    ])


def _fields(body: str) -> list[str]:
    """Split ``'a': String, 'b': List(Int64)`` at the commas outside brackets."""
    parts, depth, start = [], 0, 0
    for i, ch in enumerate(body):
        depth += 1 if ch in "({[" else -1 if ch in ")}]" else 0
        if ch == "," and depth == 0:
            parts.append(body[start:i])
            start = i + 1
    parts.append(body[start:])
    return [p.strip() for p in parts if p.strip()]


def _dtype(name: str) -> pl.DataType:
    wrapped = _WRAPPED.match(name)
    if wrapped and wrapped.group(1) == "List":
        return pl.List(_dtype(wrapped.group(2)))
    struct = _STRUCT.match(name)
    if struct:
        fields = {}
        for field in _fields(struct.group(1)):
            label, _, inner = field.partition(":")
            fields[label.strip().strip("'")] = _dtype(inner.strip())
        return pl.Struct(fields)
    stamp = _DATETIME.match(name)
    if stamp:
        zone = None if stamp.group(2) == "None" else stamp.group(2).strip("'")
        return pl.Datetime(stamp.group(1), zone)
    found = getattr(pl, name, None) if _IDENT.match(name) else None
    if isinstance(found, type) and issubclass(found, pl.DataType):
        return found()
    raise ValueError(f"column type {name!r} is not a polars type this warehouse stores")


def polars_schema(schema: dg.TableSchema) -> dict[str, pl.DataType]:
    """Inverse of :func:`table_schema`."""
    return {c.name: _dtype(c.type) for c in schema.columns}


def _ident(name: str) -> str:
    if not _IDENT.match(name):
        raise ValueError(f"warehouse identifier {name!r}: letters, digits and _ only")
    return f'"{name}"'


def _table(asset_key: dg.AssetKey) -> tuple[str, str, str]:
    """(schema, table, quoted "schema"."table") of an asset key ``<stage>/<name>``."""
    if len(asset_key.path) < 2:
        raise ValueError(f"asset {asset_key.to_user_string()}: a warehouse key is <stage>/<name>")
    schema, table = asset_key.path[-2], asset_key.path[-1]
    return schema, table, f"{_ident(schema)}.{_ident(table)}"


def table_exists(con: duckdb.DuckDBPyConnection, schema: str, table: str) -> bool:
    """Whether ``schema.table`` exists (names bound as parameters)."""
    query = "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?"
    return bool(con.execute(query, [schema, table]).fetchone()[0])


class FrameShapeError(ValueError, dg.Failure):
    """A frame whose columns do not fit its table (not the declared set, or no partition column to split several
    partitions by): a ValueError naming both, and a Dagster Failure the step retry policy does not retry (the same
    step gives the same frame again; before, the two retries added about 3 s to every such failure)."""

    def __init__(self, message: str) -> None:
        ValueError.__init__(self, message)
        dg.Failure.__init__(self, description=message, allow_retries=False)


def _with_partition(obj: pl.DataFrame, column: str, keys: Sequence[str]) -> pl.DataFrame:
    if column in obj.columns:
        return obj
    if len(keys) != 1:
        raise FrameShapeError(f"the frame has no {column!r} column to tell its {len(keys)} partitions apart")
    return obj.select(pl.lit(keys[0], dtype=pl.String).alias(column), pl.all())


def _as_declared(asset_key: dg.AssetKey, obj: pl.DataFrame, names: list[str]) -> pl.DataFrame:
    """``obj`` in the declared column order; a frame with other columns is an error naming both sets (every
    partition of a table has one column set, whatever optional inputs its partition had)."""
    if sorted(obj.columns) != sorted(names):
        raise FrameShapeError(
            f"{asset_key.to_user_string()}: the frame has columns {obj.columns}, the asset declares {names}"
        )
    return obj.select(names)


def _replace(
    con: duckdb.DuckDBPyConnection, asset_key: dg.AssetKey, obj: pl.DataFrame, column: str | None, keys: list[str]
) -> None:
    """Replace the table (unpartitioned) or the ``keys`` slice of ``column`` with ``obj``; caller commits.
    A partitioned table whose asset gained columns (an upgrade) gets them added, NULL in its other partitions;
    any other change of columns while other partitions are stored is an error."""
    schema, table, qualified = _table(asset_key)
    con.execute(f"CREATE SCHEMA IF NOT EXISTS {_ident(schema)}")
    con.register("noisycal_frame", obj.to_arrow())
    try:
        if column is None or not table_exists(con, schema, table):
            con.execute(f"CREATE OR REPLACE TABLE {qualified} AS SELECT * FROM noisycal_frame")
            return
        con.execute(f"DELETE FROM {qualified} WHERE {_ident(column)} IN (SELECT unnest(?))", [keys])
        existing = [r[0] for r in con.execute(f"DESCRIBE {qualified}").fetchall()]
        if existing == obj.columns:
            con.execute(f"INSERT INTO {qualified} BY NAME SELECT * FROM noisycal_frame")
            return
        if set(existing) < set(obj.columns):  # columns added by an upgrade: older partitions read them as NULL
            types = dict(con.execute("SELECT column_name, column_type FROM (DESCRIBE SELECT * FROM noisycal_frame)")
                         .fetchall())
            for name in (c for c in obj.columns if c not in existing):
                con.execute(f"ALTER TABLE {qualified} ADD COLUMN {_ident(name)} {types[name]}")
            con.execute(f"INSERT INTO {qualified} BY NAME SELECT * FROM noisycal_frame")
            return
        if con.execute(f"SELECT count(*) FROM {qualified}").fetchone()[0]:
            raise ValueError(
                f"{schema}.{table}: the asset now returns columns {obj.columns} but the table holds other "
                f"partitions with columns {existing}; rematerialise every partition (or drop the table) after "
                "changing an asset's columns"
            )
        con.execute(f"CREATE OR REPLACE TABLE {qualified} AS SELECT * FROM noisycal_frame")
    finally:
        con.unregister("noisycal_frame")


class WarehouseIOManager(dg.ConfigurableIOManager):
    """DuckDB + polars IO manager with transactional slice replacement (see module docstring)."""

    database: str

    def _connect(self):
        """A connection that retries while another process holds DuckDB's file lock (``DuckDBResource``)."""
        return DuckDBResource(database=self.database).get_connection()

    def handle_output(self, context: dg.OutputContext, obj: pl.DataFrame) -> None:
        if obj is None:
            return
        if not isinstance(obj, pl.DataFrame):
            raise TypeError(f"{context.asset_key.to_user_string()}: expected a polars DataFrame, got {type(obj)}")
        column, keys = None, []
        if context.has_asset_partitions:
            if "partition_expr" not in (context.definition_metadata or {}):
                raise ValueError(f"{context.asset_key.to_user_string()}: partitioned, but no partition_expr metadata")
            column = str(context.definition_metadata["partition_expr"])
            keys = list(context.asset_partition_keys)
            obj = _with_partition(obj, column, keys)
        declared = (context.definition_metadata or {}).get(COLUMN_SCHEMA)
        if isinstance(declared, dg.TableSchema):
            obj = _as_declared(context.asset_key, obj, [c.name for c in declared.columns])
        with self._connect() as con:
            con.execute("BEGIN TRANSACTION")
            try:
                _replace(con, context.asset_key, obj, column, keys)
                fault_point("warehouse_replace")  # tests: SIGKILL with the slice replaced but not committed
                con.execute("COMMIT")
            except BaseException:
                con.execute("ROLLBACK")
                raise
        context.add_output_metadata(
            {"row_count": obj.height, "dataframe_columns": dg.MetadataValue.table_schema(
                table_schema(obj.schema, context.asset_key))}
        )

    def load_input(self, context: dg.InputContext) -> pl.DataFrame:
        upstream = context.upstream_output
        asset_key = context.asset_key
        metadata = (upstream.definition_metadata if upstream is not None else None) or {}
        declared = metadata.get(COLUMN_SCHEMA)
        empty = pl.DataFrame(schema=polars_schema(declared)) if isinstance(declared, dg.TableSchema) else None
        schema, table, qualified = _table(asset_key)
        column = metadata.get("partition_expr") if context.has_asset_partitions else None
        keys = list(context.asset_partition_keys) if column is not None else []
        if column is not None and not keys:
            return empty if empty is not None else pl.DataFrame()
        with self._connect() as con:
            if not table_exists(con, schema, table):
                if empty is not None:
                    return empty
                raise MissingTableError(
                    f"warehouse table {schema}.{table} does not exist yet: materialise {schema}/{table} first"
                )
            if column is None:
                return con.execute(f"SELECT * FROM {qualified}").pl()
            query = f"SELECT * FROM {qualified} WHERE {_ident(str(column))} IN (SELECT unnest(?))"
            return con.execute(query, [keys]).pl()


class MissingTableError(FileNotFoundError, dg.Failure):
    """An input table that was never materialised: a FileNotFoundError naming it, and a Dagster Failure that
    the step retry policy does not retry (waiting cannot create the table)."""

    def __init__(self, message: str) -> None:
        FileNotFoundError.__init__(self, message)
        dg.Failure.__init__(self, description=message, allow_retries=False)


def warehouse_io_manager(database: Path) -> WarehouseIOManager:
    """IO manager for every warehouse asset. The asset key prefix (the stage) names the schema."""
    return WarehouseIOManager(database=str(database))


def warehouse_resource(database: Path) -> DuckDBResource:
    """Raw DuckDB connections for the SQL models (held briefly; the assets using it are in the duckdb pool)."""
    return DuckDBResource(database=str(database))
