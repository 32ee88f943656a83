"""Layout of ``$NOISYCAL_HOME``: the one place that names every folder the platform reads or writes.

Everything the platform computes lives in ``warehouse.duckdb``; everything a person drops in or takes away
lives in plain folders beside it (see README "Where data lives").
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

__all__ = ["HomeLayout", "default_home"]

HOME_ENV = "NOISYCAL_HOME"


def default_home() -> Path:
    """``$NOISYCAL_HOME`` if set, else ``./.noisycal`` (absolute)."""
    return Path(os.environ.get(HOME_ENV, ".noisycal")).expanduser().resolve()


@dataclass(frozen=True)
class HomeLayout:
    """Named paths under one home folder. Creating the object touches nothing; call :meth:`ensure`."""

    home: Path

    @classmethod
    def at(cls, home: str | Path | None = None) -> HomeLayout:
        return cls(Path(home).expanduser().resolve() if home is not None else default_home())

    # --- the warehouse and binary artifacts ---
    @property
    def warehouse(self) -> Path:
        return self.home / "warehouse.duckdb"

    @property
    def artifacts(self) -> Path:
        return self.home / "artifacts"

    @property
    def cache(self) -> Path:
        return self.home / "cache"

    # --- drop folders (inputs that arrive over time) ---
    @property
    def annotation_inbox(self) -> Path:
        return self.home / "inbox" / "annotations"

    @property
    def confirmation_inbox(self) -> Path:
        return self.home / "inbox" / "confirmations"

    @property
    def quarantine(self) -> Path:
        return self.home / "inbox" / "quarantine"

    @property
    def archive(self) -> Path:
        """Accepted annotation batches, stored once under their content hash."""
        return self.home / "archive" / "annotations"

    @property
    def ledger(self) -> Path:
        """Append-only record of every batch seen: content hash -> accepted/quarantined/duplicate."""
        return self.home / "ledger" / "annotations.jsonl"

    # --- registries ---
    @property
    def models(self) -> Path:
        return self.home / "models"

    @property
    def datasets(self) -> Path:
        return self.home / "datasets"

    @property
    def dataset_registry(self) -> Path:
        return self.home / "datasets.json"

    @property
    def references(self) -> Path:
        return self.home / "references" / "labels.csv"

    @property
    def generations(self) -> Path:
        return self.home / "correctness" / "generations"

    @property
    def audit_labels(self) -> Path:
        return self.home / "correctness" / "audit"

    # --- outputs people take away ---
    @property
    def exports(self) -> Path:
        return self.home / "exports"

    @property
    def queue_exports(self) -> Path:
        return self.exports / "confirmation_queue"

    @property
    def cleaned_lists(self) -> Path:
        return self.exports / "cleaned_file_lists"

    @property
    def recalibrator_exports(self) -> Path:
        return self.exports / "recalibrators"

    @property
    def reports(self) -> Path:
        return self.home / "reports"

    def ensure(self) -> HomeLayout:
        """Create every folder (idempotent)."""
        for p in (
            self.artifacts,
            self.cache,
            self.annotation_inbox,
            self.confirmation_inbox,
            self.quarantine,
            self.archive,
            self.ledger.parent,
            self.models,
            self.datasets,
            self.references.parent,
            self.generations,
            self.audit_labels,
            self.queue_exports,
            self.cleaned_lists,
            self.recalibrator_exports,
            self.reports,
        ):
            p.mkdir(parents=True, exist_ok=True)
        return self

    # --- discovery used by sensors and assets ---
    def model_versions(self) -> list[str]:
        """Folders under ``models/`` holding ``predictions.csv`` or ``predictions.parquet``, sorted by name."""
        if not self.models.is_dir():
            return []
        out = []
        for d in sorted(self.models.iterdir()):
            if d.is_dir() and any((d / f"predictions.{ext}").is_file() for ext in ("csv", "parquet")):
                out.append(d.name)
        return out

    def predictions_file(self, version: str) -> Path:
        for ext in ("parquet", "csv"):
            p = self.models / version / f"predictions.{ext}"
            if p.is_file():
                return p
        raise FileNotFoundError(f"model version {version!r} has no predictions.csv|parquet in {self.models / version}")

    def registered_datasets(self) -> dict[str, Path]:
        """Datasets under ``datasets/<name>/`` plus those registered by path in ``datasets.json``."""
        found: dict[str, Path] = {}
        if self.datasets.is_dir():
            for d in sorted(self.datasets.iterdir()):
                if d.is_dir() and not d.name.startswith("."):
                    found[d.name] = d.resolve()
        if self.dataset_registry.is_file():
            for name, path in json.loads(self.dataset_registry.read_text(encoding="utf-8")).items():
                found[name] = Path(path).resolve()
        return dict(sorted(found.items()))
