"""The DuckDB warehouse: one file, one schema per stage; polars frames in and out.

``WarehouseIOManager`` is dagster-duckdb-polars with two fixes that the platform's contracts need:
- **never half-written**: deleting the old slice and writing the new rows happen in one DuckDB transaction
  (the stock manager deletes, then inserts, in autocommit mode);
- **empty results are tables too**: the stock handler skips empty frames, so an asset that legitimately has
  no rows yet (e.g. no confirmations) left no table and every downstream load failed.
An unpartitioned asset replaces its table (so a changed column set replaces the old one); a partitioned asset
replaces its slice and inserts by column name.
"""

from __future__ import annotations

from pathlib import Path

import polars as pl
from dagster import InputContext, MetadataValue, OutputContext, TableColumn, TableSchema
from dagster._core.storage.db_io_manager import DbIOManager, TableSlice
from dagster_duckdb import DuckDBResource
from dagster_duckdb.io_manager import DuckDbClient, _get_cleanup_statement
from dagster_duckdb_polars import DuckDBPolarsIOManager, DuckDBPolarsTypeHandler

__all__ = ["WarehouseIOManager", "warehouse_io_manager", "warehouse_resource"]


def _table_exists(connection, table_slice: TableSlice) -> bool:
    row = connection.execute(
        "SELECT count(*) FROM information_schema.tables WHERE table_schema = ? AND table_name = ?",
        [table_slice.schema, table_slice.table],
    ).fetchone()
    return bool(row and row[0])


def _qualified(table_slice: TableSlice) -> str:
    return f'"{table_slice.schema}"."{table_slice.table}"'


class _TransactionalClient(DuckDbClient):
    """Opens the transaction that ``_AtomicPolarsHandler.handle_output`` commits (DbIOManager calls
    ``delete_table_slice`` and then the handler on the same connection)."""

    @staticmethod
    def delete_table_slice(context: OutputContext, table_slice: TableSlice, connection) -> None:
        connection.execute("BEGIN TRANSACTION")
        if _table_exists(connection, table_slice):
            connection.execute(_get_cleanup_statement(table_slice))


class _AtomicPolarsHandler(DuckDBPolarsTypeHandler):
    def handle_output(self, context: OutputContext, table_slice: TableSlice, obj: pl.DataFrame, connection):
        table = _qualified(table_slice)
        try:
            connection.register("noisycal_frame", obj.to_arrow())
            if not _table_exists(connection, table_slice) or not table_slice.partition_dimensions:
                connection.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM noisycal_frame")
            else:
                existing = [r[0] for r in connection.execute(f"DESCRIBE {table}").fetchall()]
                if existing != obj.columns:
                    remaining = connection.execute(f"SELECT count(*) FROM {table}").fetchone()[0]
                    if remaining:
                        raise ValueError(
                            f"{table_slice.schema}.{table_slice.table}: the asset now returns columns {obj.columns} "
                            f"but the table holds other partitions with columns {existing}; rematerialise every "
                            "partition (or drop the table) after changing an asset's columns"
                        )
                    connection.execute(f"CREATE OR REPLACE TABLE {table} AS SELECT * FROM noisycal_frame")
                else:
                    connection.execute(f"INSERT INTO {table} BY NAME SELECT * FROM noisycal_frame")
            connection.execute("COMMIT")
        except BaseException:
            connection.execute("ROLLBACK")
            raise
        finally:
            connection.unregister("noisycal_frame")
        return {
            "row_count": obj.height,
            "dataframe_columns": MetadataValue.table_schema(
                TableSchema(
                    columns=[TableColumn(name=n, type=str(t)) for n, t in zip(obj.columns, obj.dtypes, strict=True)]
                )
            ),
        }

    def load_input(self, context: InputContext, table_slice: TableSlice, connection) -> pl.DataFrame:
        if table_slice.partition_dimensions and len(context.asset_partition_keys) == 0:
            return pl.DataFrame()
        if not _table_exists(connection, table_slice):
            raise FileNotFoundError(
                f"warehouse table {table_slice.schema}.{table_slice.table} does not exist yet: materialise "
                f"{table_slice.schema}/{table_slice.table} first"
            )
        return connection.sql(DuckDbClient.get_select_statement(table_slice)).pl()


class WarehouseIOManager(DuckDBPolarsIOManager):
    """DuckDB + polars IO manager with transactional slice replacement (see module docstring)."""

    def create_io_manager(self, context) -> DbIOManager:
        return DbIOManager(
            db_client=_TransactionalClient(),
            database=self.database,
            schema=self.schema_,
            type_handlers=[_AtomicPolarsHandler()],
            default_load_type=pl.DataFrame,
            io_manager_name="DuckDBIOManager",
        )


def warehouse_io_manager(database: Path) -> WarehouseIOManager:
    """IO manager for every warehouse asset. No ``schema=``: the asset key prefix (the stage) names the schema."""
    return WarehouseIOManager(database=str(database))


def warehouse_resource(database: Path) -> DuckDBResource:
    """Raw DuckDB connections for the SQL models (held briefly; the assets using it are in the duckdb pool)."""
    return DuckDBResource(database=str(database))
