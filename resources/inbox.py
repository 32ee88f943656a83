"""The drop folders people write into (annotations, confirmations) and the ledger that makes ingestion exactly-once."""

from __future__ import annotations

import os
from pathlib import Path

import polars as pl

from noisycal_platform.files import sha256_file
from noisycal_platform.ingest import (
    IngestReport,
    accepted_annotations,
    declared_classes,
    ingest_annotation_batches,
    ledger_entries,
    pending_annotation_files,
    read_confirmation_records,
    refused_inbox_entries,
    write_record_quarantine,
)
from resources.home import HomeResource
from resources.settings import load_settings

SETTLE_ENV = "NOISYCAL_INBOX_SETTLE_SECONDS"  # overrides settings.json for scripted drops (tests, the demo)

__all__ = ["InboxResource"]


class InboxResource(HomeResource):
    """Thin shell over :mod:`noisycal_platform.ingest` for one ``$NOISYCAL_HOME``."""

    @property
    def settle_seconds(self) -> float:
        """How long a batch must stay unchanged before it is ingested (``inbox_settle_seconds``)."""
        env = os.environ.get(SETTLE_ENV)
        return float(env) if env else float(load_settings(self.layout.home).inbox_settle_seconds)

    def new_annotation_batches(self) -> list[tuple[Path, str]]:
        """(path, key) of settled inbox files whose content the ledger has not seen as accepted (key = sha256),
        and of links / special files to refuse (key from their name and inode; never opened)."""
        known = {h for h, e in ledger_entries(self.layout).items() if e["status"] == "accepted"}
        out = []
        for path, _why in refused_inbox_entries(self.layout):
            st = os.lstat(path)
            out.append((path, f"refused-{st.st_ino}-{st.st_mtime_ns}"))
        for path in pending_annotation_files(self.layout, self.settle_seconds):
            try:
                digest = sha256_file(path)
            except OSError:  # moved away meanwhile
                continue
            if digest not in known:
                out.append((path, digest))
        return out

    def ingest_annotations(self) -> IngestReport:
        classes = declared_classes(self.layout, load_settings(self.layout.home).classes)
        return ingest_annotation_batches(self.layout, self.settle_seconds, classes)

    def annotations(self) -> pl.DataFrame:
        return accepted_annotations(self.layout)

    def confirmations(self) -> tuple[pl.DataFrame, list[dict]]:
        frame, rejected = read_confirmation_records(self.layout)
        write_record_quarantine(self.layout, "confirmations", rejected)
        return frame, rejected

    def quarantine_records(self, source: str, rejected: list[dict]) -> None:
        write_record_quarantine(self.layout, source, rejected)

    def confirmation_fingerprint(self) -> str:
        """Changes whenever any confirmations file grows or is replaced (name, size, mtime)."""
        folder = self.layout.confirmation_inbox
        if not folder.is_dir():
            return ""
        parts = [f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}" for p in sorted(folder.glob("*.jsonl"))]
        return "|".join(parts)
