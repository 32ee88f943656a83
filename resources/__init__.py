"""Dagster resources. ``build_resources(home)`` serves both ``definitions.py`` and the tests (``tmp_path``)."""

from __future__ import annotations

from pathlib import Path

from noisycal_platform.paths import HomeLayout
from resources.compute import ComputeResource
from resources.inbox import InboxResource
from resources.model_registry import ModelRegistryResource
from resources.settings import SettingsResource, load_settings
from resources.warehouse import warehouse_io_manager, warehouse_resource

__all__ = ["build_resources"]


def _io_manager(layout: HomeLayout, settings: SettingsResource) -> tuple[object, object]:
    """(IO manager, SQL models' connection): the DuckDB warehouse (default) or, with ``"warehouse": "parquet"``,
    Parquet files plus DuckDB views (connections that can read a non-local root)."""
    if settings.warehouse == "parquet":
        from resources.parquet_warehouse import ParquetViewsResource, parquet_warehouse_io_manager

        root = settings.parquet_root(layout.home)
        views = ParquetViewsResource(database=str(layout.warehouse), root=root)
        return parquet_warehouse_io_manager(layout.warehouse, root), views
    return warehouse_io_manager(layout.warehouse), warehouse_resource(layout.warehouse)


def build_resources(home: str | Path) -> dict[str, object]:
    """Every resource the assets use, rooted at one ``$NOISYCAL_HOME`` (created if missing)."""
    layout = HomeLayout.at(home).ensure()
    settings = load_settings(layout.home)
    io_manager, warehouse = _io_manager(layout, settings)
    resources: dict[str, object] = {
        "io_manager": io_manager,
        "warehouse": warehouse,
        "inbox": InboxResource(home=str(layout.home)),
        "model_registry": ModelRegistryResource(home=str(layout.home)),
        "compute": ComputeResource(threads=settings.torch_threads),
    }
    resources["settings"] = settings
    from resources.judge import LocalEndpointJudge, NoJudge

    resources["judge"] = (
        LocalEndpointJudge(base_url=settings.judge_base_url, model=settings.judge_model)
        if settings.judge_base_url
        else NoJudge()
    )
    return resources
