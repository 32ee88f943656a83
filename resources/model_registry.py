"""The model registry: ``$NOISYCAL_HOME/models/<version>/`` folders holding each version's score files."""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from noisycal_platform.paths import HomeLayout

__all__ = ["ModelRegistryResource"]


class ModelRegistryResource(dg.ConfigurableResource):
    home: str

    @property
    def layout(self) -> HomeLayout:
        return HomeLayout.at(self.home)

    def versions(self) -> list[str]:
        return self.layout.model_versions()

    def predictions_file(self, version: str) -> Path:
        return self.layout.predictions_file(version)

    def cleaning_scores_file(self, dataset: str) -> tuple[str, Path] | None:
        """Newest version (by name order) that scored ``dataset``: ``models/<v>/cleaning/<dataset>.csv``."""
        for version in reversed(self.versions()):
            p = self.layout.models / version / "cleaning" / f"{dataset}.csv"
            if p.is_file():
                return version, p
        return None
