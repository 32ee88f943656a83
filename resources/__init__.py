"""Dagster resources. ``build_resources(home)`` serves both ``definitions.py`` and the tests (``tmp_path``)."""

from __future__ import annotations

from pathlib import Path

from noisycal_platform.paths import HomeLayout
from resources.compute import ComputeResource
from resources.inbox import InboxResource
from resources.model_registry import ModelRegistryResource
from resources.settings import load_settings
from resources.warehouse import warehouse_io_manager, warehouse_resource

__all__ = ["build_resources"]


def build_resources(home: str | Path) -> dict[str, object]:
    """Every resource the assets use, rooted at one ``$NOISYCAL_HOME`` (created if missing)."""
    layout = HomeLayout.at(home).ensure()
    resources: dict[str, object] = {
        "io_manager": warehouse_io_manager(layout.warehouse),
        "warehouse": warehouse_resource(layout.warehouse),
        "inbox": InboxResource(home=str(layout.home)),
        "model_registry": ModelRegistryResource(home=str(layout.home)),
        "compute": ComputeResource(),
    }
    settings = load_settings(layout.home)
    resources["settings"] = settings
    from resources.judge import LocalEndpointJudge, NoJudge

    resources["judge"] = (
        LocalEndpointJudge(base_url=settings.judge_base_url, model=settings.judge_model)
        if settings.judge_base_url
        else NoJudge()
    )
    return resources
