"""The DuckDB warehouse: one file, one schema per stage; polars frames in and out."""

from __future__ import annotations

from pathlib import Path

from dagster_duckdb import DuckDBResource
from dagster_duckdb_polars import DuckDBPolarsIOManager

__all__ = ["warehouse_io_manager", "warehouse_resource"]


def warehouse_io_manager(database: Path) -> DuckDBPolarsIOManager:
    """IO manager for every warehouse asset. No ``schema=``: the asset key prefix (the stage) names the schema."""
    return DuckDBPolarsIOManager(database=str(database))


def warehouse_resource(database: Path) -> DuckDBResource:
    """Raw DuckDB connections for the SQL models (held briefly; the assets using it are in the duckdb pool)."""
    return DuckDBResource(database=str(database))
