"""The model registry: ``$NOISYCAL_HOME/models/<version>/`` folders holding each version's score files."""

from __future__ import annotations

from pathlib import Path

from resources.home import HomeResource

__all__ = ["ModelRegistryResource"]


class ModelRegistryResource(HomeResource):
    """The version folders under ``models/`` of one ``$NOISYCAL_HOME``."""

    def versions(self) -> list[str]:
        return self.layout.model_versions()

    def predictions_file(self, version: str) -> Path:
        return self.layout.predictions_file(version)

    def items_file(self, version: str) -> Path | None:
        """The subgroup metadata of ``version``: ``models/<version>/items.csv|parquet``, else the home's
        ``items.csv|parquet``; None when neither exists."""
        for folder in (self.layout.models / version, self.layout.home):
            for ext in ("csv", "parquet"):
                p = folder / f"items.{ext}"
                if p.is_file() or p.is_symlink():
                    return p
        return None

    def cleaning_scores_file(self, dataset: str) -> tuple[str, Path] | None:
        """Newest version folder (by name order) that scored ``dataset``: ``models/<v>/cleaning/<dataset>.csv``.

        A version needs no calibration predictions to take part in the cleaning-impact analysis."""
        if not self.layout.models.is_dir():
            return None
        for folder in sorted(self.layout.models.iterdir(), reverse=True):
            p = folder / "cleaning" / f"{dataset}.csv"
            if folder.is_dir() and p.is_file():
                return folder.name, p
        return None
