"""The drop folders people write into (annotations, confirmations) and the ledger that makes ingestion exactly-once."""

from __future__ import annotations

from pathlib import Path

import dagster as dg
import polars as pl

from noisycal_platform.ingest import (
    IngestReport,
    accepted_annotations,
    ingest_annotation_batches,
    ledger_entries,
    pending_annotation_files,
    read_confirmation_records,
)
from noisycal_platform.io import sha256_file
from noisycal_platform.paths import HomeLayout

__all__ = ["InboxResource"]


class InboxResource(dg.ConfigurableResource):
    """Thin shell over :mod:`noisycal_platform.ingest` for one ``$NOISYCAL_HOME``."""

    home: str

    @property
    def layout(self) -> HomeLayout:
        return HomeLayout.at(self.home)

    def new_annotation_batches(self) -> list[tuple[Path, str]]:
        """(path, sha256) of inbox files whose content the ledger has not seen as accepted."""
        known = {h for h, e in ledger_entries(self.layout).items() if e["status"] == "accepted"}
        out = []
        for path in pending_annotation_files(self.layout):
            digest = sha256_file(path)
            if digest not in known:
                out.append((path, digest))
        return out

    def ingest_annotations(self) -> IngestReport:
        return ingest_annotation_batches(self.layout)

    def annotations(self) -> pl.DataFrame:
        return accepted_annotations(self.layout)

    def confirmations(self) -> tuple[pl.DataFrame, list[dict]]:
        return read_confirmation_records(self.layout)

    def confirmation_fingerprint(self) -> str:
        """Changes whenever any confirmations file grows or is replaced (name, size, mtime)."""
        folder = self.layout.confirmation_inbox
        if not folder.is_dir():
            return ""
        parts = [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(folder.glob("*.jsonl"))]
        return "|".join(parts)
