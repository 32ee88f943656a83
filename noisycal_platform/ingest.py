"""Drop-folder ingestion with a content-hash ledger: every batch is ingested exactly once, nothing is lost.

Annotation batches (``inbox/annotations/*.csv|parquet``):
- a new, valid batch is stored as ``archive/annotations/<sha256>.parquet`` (validated rows) beside its original
  file and recorded in the ledger as ``accepted``;
- an invalid batch is moved to ``inbox/quarantine/`` with ``<name>.reason.txt`` (file, row, column) and recorded
  as ``quarantined``; earlier accepted data is untouched;
- a byte-identical copy of an accepted batch (same content hash, any name) is moved to
  ``archive/annotations/duplicates/`` and recorded as ``duplicate``: it adds nothing.
Every step is idempotent, so a crash between steps is repaired by the next run.

Confirmation answers (``inbox/confirmations/<annotator>.jsonl``) are append-only files written by the
confirmation tool; they stay in place and are ingested exactly once per ``answer_id``.
"""

from __future__ import annotations

import json
import shutil
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from noisycal_platform.io import (
    SUPPORTED_SUFFIXES,
    InputError,
    atomic_write_bytes,
    atomic_write_text,
    read_annotations,
    sha256_file,
)
from noisycal_platform.paths import HomeLayout

__all__ = [
    "ANSWER_FIELDS",
    "IngestReport",
    "accepted_annotations",
    "ingest_annotation_batches",
    "ledger_entries",
    "pending_annotation_files",
    "read_confirmation_records",
]


@dataclass
class IngestReport:
    accepted: list[dict] = field(default_factory=list)
    quarantined: list[dict] = field(default_factory=list)
    duplicates: list[dict] = field(default_factory=list)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


def pending_annotation_files(layout: HomeLayout) -> list[Path]:
    """Batch files waiting in the annotation inbox (hidden and temp files ignored), sorted by name."""
    inbox = layout.annotation_inbox
    if not inbox.is_dir():
        return []
    return sorted(
        p
        for p in inbox.iterdir()
        if p.is_file() and not p.name.startswith(".") and p.suffix.lower() in SUPPORTED_SUFFIXES
    )


def ledger_entries(layout: HomeLayout) -> dict[str, dict]:
    """Content hash -> last ledger entry (``status`` in accepted / quarantined / duplicate)."""
    entries: dict[str, dict] = {}
    if layout.ledger.is_file():
        for line in layout.ledger.read_text(encoding="utf-8").splitlines():
            if line.strip():
                entry = json.loads(line)
                if entry["status"] == "duplicate" and entry["sha256"] in entries:
                    continue  # a repeated copy never replaces the state of the batch it repeats
                entries[entry["sha256"]] = entry
    return entries


def _append_ledger(layout: HomeLayout, entry: dict) -> None:
    layout.ledger.parent.mkdir(parents=True, exist_ok=True)
    with open(layout.ledger, "a", encoding="utf-8") as fh:
        fh.write(json.dumps(entry, sort_keys=True) + "\n")
        fh.flush()


def _quarantine(layout: HomeLayout, path: Path, reason: str) -> Path:
    layout.quarantine.mkdir(parents=True, exist_ok=True)
    target = layout.quarantine / path.name
    n = 1
    while target.exists():  # never overwrite an earlier quarantined batch of the same name
        target = layout.quarantine / f"{path.stem}.{n}{path.suffix}"
        n += 1
    atomic_write_text(target.with_name(target.name + ".reason.txt"), reason + "\n")
    shutil.move(str(path), target)
    return target


def ingest_annotation_batches(layout: HomeLayout) -> IngestReport:
    """Ingest every pending batch once (see module docstring). Returns what happened to each file."""
    layout.ensure()
    report = IngestReport()
    ledger = ledger_entries(layout)
    accepted_keys = accepted_annotations(layout).select("item_id", "annotator_id", "source_file")
    for path in pending_annotation_files(layout):
        digest = sha256_file(path)
        prior = ledger.get(digest)
        if prior is not None and prior["status"] == "accepted":
            dup_dir = layout.archive / "duplicates"
            dup_dir.mkdir(parents=True, exist_ok=True)
            shutil.move(str(path), dup_dir / f"{digest[:12]}-{path.name}")
            entry = {
                "sha256": digest,
                "file": path.name,
                "status": "duplicate",
                "of": prior["file"],
                "at": _now(),
            }
            _append_ledger(layout, entry)
            report.duplicates.append(entry)
            continue
        try:
            frame = read_annotations(path)
            clash = frame.join(accepted_keys, on=["item_id", "annotator_id"], how="inner")
            if clash.height:
                first = clash.row(0, named=True)
                row = (
                    int(
                        frame.with_row_index("_r").filter(
                            (pl.col("item_id") == first["item_id"]) & (pl.col("annotator_id") == first["annotator_id"])
                        )["_r"][0]
                    )
                    + 1
                )
                raise InputError(
                    path,
                    f"annotator {first['annotator_id']!r} already labelled item {first['item_id']!r} in accepted "
                    f"batch {first['source_file']!r}; {clash.height} row(s) repeat earlier annotations. Send "
                    "corrections as a new batch without the repeated rows, or remove the earlier batch first.",
                    row=row,
                    column="annotator_id",
                )
        except InputError as exc:
            target = _quarantine(layout, path, str(exc))
            entry = {
                "sha256": digest,
                "file": path.name,
                "status": "quarantined",
                "reason": str(exc),
                "quarantined_as": target.name,
                "at": _now(),
            }
            _append_ledger(layout, entry)
            ledger[digest] = entry
            report.quarantined.append(entry)
            continue
        at = _now()
        frame = frame.with_columns(
            pl.lit(path.name).alias("source_file"),
            pl.lit(digest).alias("batch_sha256"),
            pl.lit(datetime.fromisoformat(at)).dt.cast_time_unit("us").alias("ingested_at"),
        )
        buf = _parquet_bytes(frame)
        atomic_write_bytes(layout.archive / f"{digest}.parquet", buf)
        originals = layout.archive / "originals"
        originals.mkdir(parents=True, exist_ok=True)
        shutil.move(str(path), originals / f"{digest}{path.suffix.lower()}")
        entry = {"sha256": digest, "file": path.name, "status": "accepted", "rows": frame.height, "at": at}
        _append_ledger(layout, entry)
        ledger[digest] = entry
        accepted_keys = pl.concat([accepted_keys, frame.select("item_id", "annotator_id", "source_file")])
        report.accepted.append(entry)
    return report


def _parquet_bytes(frame: pl.DataFrame) -> bytes:
    import io

    buf = io.BytesIO()
    frame.write_parquet(buf)
    return buf.getvalue()


ANNOTATION_SCHEMA = {
    "item_id": pl.String,
    "annotator_id": pl.String,
    "label": pl.Int8,
    "timestamp": pl.Datetime("us", "UTC"),
    "source_file": pl.String,
    "batch_sha256": pl.String,
    "ingested_at": pl.Datetime("us", "UTC"),
}


def accepted_annotations(layout: HomeLayout) -> pl.DataFrame:
    """All accepted annotation rows, in ledger order, with ``source_file``, ``batch_sha256``, ``ingested_at``."""
    ledger = ledger_entries(layout)
    frames = [
        pl.read_parquet(layout.archive / f"{h}.parquet")
        for h, e in ledger.items()
        if e["status"] == "accepted" and (layout.archive / f"{h}.parquet").is_file()
    ]
    if not frames:
        return pl.DataFrame(schema=ANNOTATION_SCHEMA)
    return pl.concat([f.cast(ANNOTATION_SCHEMA) for f in frames], how="vertical").select(list(ANNOTATION_SCHEMA))


# ------------------------------------------------------------------------------------------- confirmations
ANSWER_FIELDS = {
    "answer_id": pl.String,
    "dataset": pl.String,
    "issue_type": pl.String,
    "item_id": pl.String,
    "item_id_2": pl.String,
    "annotator_id": pl.String,
    "role": pl.String,
    "answer": pl.String,
    "undoes": pl.String,
    "position": pl.Int64,
    "timestamp": pl.String,
}
_ISSUE_TYPES = {"irrelevant", "near_duplicate", "label_error"}
_ANSWERS = {"yes", "no", "undo"}


def _check_record(rec: object) -> str | None:
    """Return why a confirmation record is invalid, or None."""
    if not isinstance(rec, dict):
        return "not a JSON object"
    for key in ("answer_id", "dataset", "issue_type", "item_id", "annotator_id", "answer", "timestamp"):
        if not isinstance(rec.get(key), str) or not rec[key]:
            return f"field '{key}' missing or empty"
    if rec["issue_type"] not in _ISSUE_TYPES:
        return f"issue_type must be one of {sorted(_ISSUE_TYPES)}"
    if rec["answer"] not in _ANSWERS:
        return f"answer must be one of {sorted(_ANSWERS)}"
    if rec["answer"] == "undo" and not rec.get("undoes"):
        return "an undo must name the answer it undoes ('undoes')"
    if not isinstance(rec.get("position"), int):
        return "field 'position' must be an integer"
    return None


def read_confirmation_records(layout: HomeLayout) -> tuple[pl.DataFrame, list[dict]]:
    """Parse every ``inbox/confirmations/*.jsonl``; one row per distinct ``answer_id`` (first occurrence wins).

    Returns ``(answers, rejected)``: ``rejected`` lists lines that could not be used, with file, line and reason.
    A final line without its newline is an answer still being written: it is left for the next run, not rejected.
    """
    rows: list[dict] = []
    rejected: list[dict] = []
    folder = layout.confirmation_inbox
    files = sorted(folder.glob("*.jsonl")) if folder.is_dir() else []
    for path in files:
        data = path.read_bytes()
        lines = data.split(b"\n")
        complete = lines[:-1]  # the piece after the last newline is incomplete (or empty)
        for no, raw in enumerate(complete, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError) as exc:
                rejected.append({"file": path.name, "line": no, "reason": f"malformed JSON: {exc}"})
                continue
            why = _check_record(rec)
            if why:
                rejected.append({"file": path.name, "line": no, "reason": why})
                continue
            rows.append({k: rec.get(k) for k in ANSWER_FIELDS} | {"source_file": path.name, "line": no})
    schema = ANSWER_FIELDS | {"source_file": pl.String, "line": pl.Int64}
    frame = pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)
    frame = frame.unique(subset=["answer_id"], keep="first", maintain_order=True)
    return frame, rejected
