"""Materialise a selection of the real definitions against a home in tmp_path, and read its warehouse."""

from __future__ import annotations

from collections.abc import Iterable
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl

from definitions import build_definitions
from orchestration.runner import instance_for


def asset_keys(names: Iterable[str]) -> list[dg.AssetKey]:
    """``"cleaning/embeddings"`` -> ``AssetKey(["cleaning", "embeddings"])``."""
    return [dg.AssetKey(n.split("/")) for n in names]


def materialize(home: Path, names: Iterable[str], partition: str | None = None, *, checks: bool = True,
                defs: dg.Definitions | None = None, instance: dg.DagsterInstance | None = None):
    """One in-process run of ``names`` (and, with ``checks``, every asset check); failures are returned, not raised."""
    defs = defs if defs is not None else build_definitions(home)
    return dg.materialize(
        [*defs.assets, *(defs.asset_checks if checks else [])],
        selection=asset_keys(names),
        partition_key=partition,
        instance=instance if instance is not None else instance_for(home),
        resources=defs.resources,
        raise_on_error=False,
    )


def sql(home: Path, query: str) -> pl.DataFrame:
    """``query`` on the home's warehouse, opened read-only."""
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        return con.execute(query).pl()
