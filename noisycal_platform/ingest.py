"""Drop-folder ingestion with a content-hash ledger: every batch is ingested exactly once, nothing is lost.

Annotation batches (``inbox/annotations/*.csv|parquet``), record by record:
- the valid rows of a new batch are stored as ``archive/annotations/<sha256>.parquet`` and the batch is
  recorded in the ledger as ``accepted`` (``rows`` landed, ``rejected`` rows); its original file is kept
  under ``archive/annotations/originals/``;
- each bad row (contract violation, duplicate key in the batch, a pair an accepted batch already holds) is
  written back out, in the batch's own format, to ``inbox/quarantine/<stem>.rejected-<sha8><suffix>`` with a
  ``.reason.txt`` naming file, row, column and reason, so it can be corrected and dropped in again;
- a batch with no usable row, or one that cannot be read at all (no header, unbalanced quote, duplicate
  column names, corrupt Parquet), is moved whole to ``inbox/quarantine/`` with its reason (``quarantined``);
- a byte-identical copy of an accepted batch (same content hash, any name) is moved to
  ``archive/annotations/duplicates/`` and recorded as ``duplicate``: it adds nothing;
- symlinks and special files (FIFOs, devices, sockets) are refused by name, never opened, and moved to the
  quarantine as they are (``refused``).
Quarantine reasons never quote file content.

Arrival: a file is taken once it has not changed for ``settle_seconds`` (its mtime). Writers that cannot
wait should write ``.name`` or ``name.tmp`` (ignored) and ``rename`` it into place when complete.

Crash consistency: the ledger line is the commit point. For each batch the order is: read the bytes once
and hash them; write the archive (temp + fsync + rename + fsync of the folder) and any rejected rows;
append the ledger line (one ``write`` + fsync); then rename the original out of the inbox (+ fsync of both
folders). A kill before the ledger line leaves the batch in the inbox and the next run ingests it again
(overwriting the same archive file); a kill after it leaves an accepted batch whose original is still in
the inbox, which the next run moves without a second ledger line. A torn ledger line is not a commit and
is ignored. One ingestion runs at a time per home (``flock`` on ``ledger/.ingest.lock``).

Confirmation answers (``inbox/confirmations/<annotator>.jsonl``) are append-only files written by the
confirmation tool; they stay in place and are ingested exactly once per ``answer_id``; each unusable line is
reported with file, line, field and reason and the other lines are ingested.

Fault injection for tests: ``NOISYCAL_FAULT=<point>[:<n>]`` SIGKILLs the process at the n-th time (default
1st) it reaches ``<point>`` (``after_read``, ``after_archive``, ``after_rejected``, ``after_reason``,
``after_ledger``, ``after_move``; the confirmation tool's answer write: ``answer_before_write``,
``answer_after_fsync``; the warehouse's slice replacement, inside its transaction: ``warehouse_replace``).
"""

from __future__ import annotations

import csv
import errno
import fcntl
import hashlib
import io
import json
import os
import signal
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from noisycal_platform.contracts import CONFIRMATION_FIELDS, confirmation_log_problems, confirmation_problem
from noisycal_platform.files import append_line_durably, atomic_write_bytes, atomic_write_text, fsync_dir, json_lines
from noisycal_platform.io import (
    SUPPORTED_SUFFIXES,
    InputError,
    RawTable,
    RowProblem,
    read_annotation_records,
    read_bytes_safely,
    refusal,
)
from noisycal_platform.paths import HomeLayout

__all__ = [
    "ANSWER_FIELDS",
    "FAULT_ENV",
    "IngestError",
    "IngestReport",
    "accepted_annotations",
    "declared_classes",
    "fault_point",
    "ingest_annotation_batches",
    "ledger_entries",
    "pending_annotation_files",
    "read_confirmation_records",
    "refused_inbox_entries",
    "write_record_quarantine",
]

FAULT_ENV = "NOISYCAL_FAULT"
_IGNORED_SUFFIXES = (".tmp", ".part", ".partial", "~")


class IngestError(RuntimeError):
    """Ingestion could not finish (e.g. the disk is full); what was committed stays, the rest stays in the
    inbox for the next run."""


@dataclass
class IngestReport:
    accepted: list[dict] = field(default_factory=list)
    quarantined: list[dict] = field(default_factory=list)
    duplicates: list[dict] = field(default_factory=list)
    repaired: list[dict] = field(default_factory=list)
    waiting: list[str] = field(default_factory=list)  # files not yet settled, left for a later run


_FAULT_HITS: dict[str, int] = {}


def fault_point(point: str) -> None:
    """SIGKILL this process at ``point`` when ``NOISYCAL_FAULT`` asks for it (tests of crash consistency)."""
    spec = os.environ.get(FAULT_ENV)
    if not spec:
        return
    name, _, nth = spec.partition(":")
    if name != point:
        return
    _FAULT_HITS[point] = _FAULT_HITS.get(point, 0) + 1
    if _FAULT_HITS[point] == (int(nth) if nth else 1):
        os.kill(os.getpid(), signal.SIGKILL)


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="seconds")


@contextmanager
def _ingest_lock(layout: HomeLayout) -> Iterator[None]:
    layout.ledger.parent.mkdir(parents=True, exist_ok=True)
    fd = os.open(layout.ledger.parent / ".ingest.lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o644)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        yield
    finally:
        os.close(fd)  # releases the lock


def _candidates(layout: HomeLayout) -> Iterator[tuple[Path, os.stat_result]]:
    inbox = layout.annotation_inbox
    if not inbox.is_dir():
        return
    for entry in sorted(os.scandir(inbox), key=lambda e: e.name):
        name = entry.name
        if name.startswith(".") or name.endswith(_IGNORED_SUFFIXES):
            continue
        if Path(name).suffix.lower() not in SUPPORTED_SUFFIXES:
            continue
        try:
            st = entry.stat(follow_symlinks=False)
        except FileNotFoundError:
            continue
        if stat.S_ISDIR(st.st_mode):
            continue
        yield Path(entry.path), st


def pending_annotation_files(layout: HomeLayout, settle_seconds: float = 0.0) -> list[Path]:
    """Regular batch files in the annotation inbox that have not changed for ``settle_seconds``, by name.

    Hidden files, ``*.tmp``/``*.part`` and unsupported suffixes are ignored; links and special files are
    listed by :func:`refused_inbox_entries` instead.
    """
    now = time.time()
    return [
        p
        for p, st in _candidates(layout)
        if stat.S_ISREG(st.st_mode) and now - st.st_mtime >= settle_seconds
    ]


def refused_inbox_entries(layout: HomeLayout) -> list[tuple[Path, str]]:
    """(path, reason) of symlinks and special files in the annotation inbox, judged by ``lstat`` only."""
    out = []
    for p, st in _candidates(layout):
        why = refusal(p, st)
        if why:
            out.append((p, why))
    return out


# ---------------------------------------------------------------------------------------------- ledger
def ledger_entries(layout: HomeLayout) -> dict[str, dict]:
    """Content hash -> last ledger entry (``status`` accepted / quarantined / duplicate / refused).

    A line that does not parse is a write that was cut off by a crash: it never committed and is skipped.
    """
    entries: dict[str, dict] = {}
    try:
        data = layout.ledger.read_bytes()
    except FileNotFoundError:
        return entries
    for entry in json_lines(data):
        key = entry.get("sha256") or entry.get("key")
        if entry.get("status") == "duplicate" and key in entries:
            continue  # a repeated copy never replaces the state of the batch it repeats
        entries[key] = entry
    return entries


def _commit(layout: HomeLayout, entry: dict) -> None:
    try:
        append_line_durably(layout.ledger, json.dumps(entry, sort_keys=True))
    except OSError as exc:
        raise _disk_error(exc, entry.get("file", "?"), "recording the ledger line") from None
    fault_point("after_ledger")


def _disk_error(exc: OSError, name: str, doing: str) -> IngestError:
    what = "the disk is full" if exc.errno in (errno.ENOSPC, errno.EDQUOT) else f"{type(exc).__name__}"
    return IngestError(
        f"{name}: {what} while {doing}; nothing more was recorded for this batch, which stays where it was "
        "(in the inbox unless the ledger already holds it); free space and run the ingestion again"
    )


def _move(src: Path, dst: Path) -> None:
    """Rename within the home (same filesystem) and make both directory entries durable."""
    dst.parent.mkdir(parents=True, exist_ok=True)
    os.replace(src, dst)
    fsync_dir(dst.parent)
    fsync_dir(src.parent)


def _free_name(folder: Path, name: str) -> Path:
    target = folder / name
    stem, suffix = Path(name).stem, Path(name).suffix
    n = 1
    # never overwrite an earlier quarantined batch of the same name (nor its reason file)
    while target.exists() or target.is_symlink():
        target = folder / f"{stem}.{n}{suffix}"
        n += 1
    return target


# ---------------------------------------------------------------------------------------------- batches
def _reason_text(path: Path, problems: list[RowProblem], head: str) -> str:
    lines = [head]
    for p in problems:
        where = f"row {p.row}" + (f", column '{p.column}'" if p.column else "")
        lines.append(f"{path.name}: {where}: {p.reason}")
    return "\n".join(lines) + "\n"


def _rejected_bytes(table: RawTable, rows: list[int]) -> bytes:
    """The rejected data rows (1-based) in the batch's own format: CSV fields as read, or Parquet rows."""
    if table.rows is None:  # Parquet
        buf = io.BytesIO()
        table.frame.with_row_index("_r", offset=1).filter(pl.col("_r").is_in(rows)).drop("_r").write_parquet(buf)
        return buf.getvalue()
    # verbatim, not spreadsheet-safe: the person's own rows handed back to fix and resubmit (a quote would change them)
    out = io.StringIO(newline="")
    writer = csv.writer(out, lineterminator="\n")
    writer.writerow(table.header)
    for r in rows:
        writer.writerow(table.rows[r - 1])
    return out.getvalue().encode("utf-8", errors="surrogateescape")  # undecodable bytes are written back as-is


def _parquet_bytes(frame: pl.DataFrame) -> bytes:
    buf = io.BytesIO()
    frame.write_parquet(buf)
    return buf.getvalue()


def _unchanged(path: Path, st: os.stat_result) -> bool:
    try:
        now = os.lstat(path)
    except FileNotFoundError:
        return False
    return (now.st_ino, now.st_size, now.st_mtime_ns) == (st.st_ino, st.st_size, st.st_mtime_ns)


def _refuse(layout: HomeLayout, path: Path, why: str, report: IngestReport) -> None:
    target = _free_name(layout.quarantine, path.name)
    reason = f"{path.name}: {why}"
    try:
        atomic_write_text(target.with_name(target.name + ".reason.txt"), reason + "\n")
    except OSError as exc:
        raise _disk_error(exc, path.name, "writing the quarantine reason") from None
    digest = hashlib.sha256(f"{path.name}\0{time.time_ns()}".encode()).hexdigest()
    entry = {"key": f"refused-{digest}", "file": path.name, "status": "refused", "reason": reason,
             "quarantined_as": target.name, "at": _now()}
    _commit(layout, entry)
    _move(path, target)  # renames the link / FIFO itself; its target is never opened
    report.quarantined.append(entry)


def _quarantine_whole(layout: HomeLayout, path: Path, digest: str, reason: str, st, report: IngestReport) -> None:
    target = _free_name(layout.quarantine, path.name)
    try:
        atomic_write_text(target.with_name(target.name + ".reason.txt"), reason.rstrip("\n") + "\n")
    except OSError as exc:
        raise _disk_error(exc, path.name, "writing the quarantine reason") from None
    fault_point("after_reason")
    if not _unchanged(path, st):
        report.waiting.append(path.name)
        return
    entry = {"sha256": digest, "file": path.name, "status": "quarantined", "reason": reason.rstrip("\n"),
             "quarantined_as": target.name, "at": _now()}
    _commit(layout, entry)
    _move(path, target)
    fault_point("after_move")
    report.quarantined.append(entry)


def ingest_annotation_batches(
    layout: HomeLayout, settle_seconds: float = 0.0, classes: tuple[str, ...] | None = None
) -> IngestReport:
    """Ingest every pending batch once (see module docstring). Returns what happened to each file.

    ``classes``: the declared class names (`declared_classes`); a label outside them (and outside 0/1) is a
    rejected row. None: labels must be 0 or 1.

    Raises IngestError when a write fails (e.g. a full disk); every batch is then either committed or
    still in the inbox.
    """
    layout.ensure()
    report = IngestReport()
    with _ingest_lock(layout):
        ledger = ledger_entries(layout)
        accepted_keys = accepted_annotations(layout).select("item_id", "annotator_id", "source_file")
        for path, why in refused_inbox_entries(layout):
            _refuse(layout, path, why, report)
        now = time.time()
        for path, st in _candidates(layout):
            if not stat.S_ISREG(st.st_mode):
                continue
            if now - st.st_mtime < settle_seconds:
                report.waiting.append(path.name)
                continue
            try:
                data, st = read_bytes_safely(path)
            except InputError as exc:
                if path.exists() or path.is_symlink():
                    _refuse(layout, path, exc.problem, report)  # swapped for a link or FIFO after the scan
                continue
            digest = hashlib.sha256(data).hexdigest()
            fault_point("after_read")
            originals = layout.archive / "originals"
            original = originals / f"{digest}{path.suffix.lower()}"
            prior = ledger.get(digest)
            if prior is not None and prior["status"] == "accepted":
                if not original.exists():  # the ledger holds it but the crash came before the move: finish
                    _move(path, original)
                    report.repaired.append(prior)
                    continue
                entry = {"sha256": digest, "file": path.name, "status": "duplicate", "of": prior["file"], "at": _now()}
                _commit(layout, entry)
                _move(path, layout.archive / "duplicates" / f"{digest[:12]}-{path.name}")
                report.duplicates.append(entry)
                continue
            if (
                prior is not None
                and prior["status"] == "quarantined"
                and prior.get("file") == path.name
                and not (layout.quarantine / prior["quarantined_as"]).exists()
            ):
                _move(path, layout.quarantine / prior["quarantined_as"])  # crash between ledger and move
                report.repaired.append(prior)
                continue
            try:
                good, table, problems = read_annotation_records(path, data, classes)
            except InputError as exc:
                _quarantine_whole(layout, path, digest, exc.safe, st, report)
                continue
            clash = good.join(accepted_keys, on=["item_id", "annotator_id"], how="inner")
            if clash.height:
                for r, src in zip(clash["row"].to_list(), clash["source_file"].to_list(), strict=True):
                    problems.append(RowProblem(
                        r, "annotator_id",
                        f"this annotator already labelled this item in accepted batch '{src}'; send corrections "
                        "as a new batch without the repeated rows, or remove the earlier batch first",
                    ))
                problems.sort(key=lambda p: p.row)
                good = good.filter(~pl.col("row").is_in(clash["row"].to_list()))
            if good.height == 0:
                head = f"{path.name}: no usable row ({len(problems)} rejected); nothing was ingested"
                _quarantine_whole(layout, path, digest, _reason_text(path, problems, head), st, report)
                continue
            at = _now()
            frame = good.rename({"row": "source_row"}).with_columns(
                pl.lit(path.name).alias("source_file"),
                pl.lit(digest).alias("batch_sha256"),
                pl.lit(datetime.fromisoformat(at)).dt.cast_time_unit("us").alias("ingested_at"),
            )
            entry = {"sha256": digest, "file": path.name, "status": "accepted", "rows": frame.height, "at": at}
            try:
                atomic_write_bytes(layout.archive / f"{digest}.parquet", _parquet_bytes(frame))
                fault_point("after_archive")
                if problems:
                    suffix = path.suffix.lower()
                    target = layout.quarantine / f"{path.stem}.rejected-{digest[:8]}{suffix}"
                    head = (
                        f"{path.name}: {frame.height} row(s) ingested, {len(problems)} rejected and kept in "
                        f"{target.name} (rows renumbered from 1 there); correct them and drop that file in again"
                    )
                    atomic_write_bytes(target, _rejected_bytes(table, [p.row for p in problems]))
                    atomic_write_text(target.with_name(target.name + ".reason.txt"),
                                      _reason_text(path, problems, head))
                    fault_point("after_rejected")
                    entry |= {"rejected": len(problems), "quarantined_as": target.name,
                              "rejected_rows": [p.as_dict(path.name) for p in problems]}
            except OSError as exc:
                raise _disk_error(exc, path.name, "writing the archive") from None
            if not _unchanged(path, st):  # still being written after all: leave it for a later run
                report.waiting.append(path.name)
                continue
            _commit(layout, entry)
            ledger[digest] = entry
            _move(path, original)
            fault_point("after_move")
            accepted_keys = pl.concat([accepted_keys, frame.select("item_id", "annotator_id", "source_file")])
            report.accepted.append(entry)
            if problems:
                report.quarantined.append(entry | {"reason": _reason_text(path, problems, "").strip()})
    return report


ANNOTATION_SCHEMA = {
    "item_id": pl.String,
    "annotator_id": pl.String,
    "label": pl.Int8,
    "label_text": pl.String,
    "timestamp": pl.Datetime("us", "UTC"),
    "source_file": pl.String,
    "source_row": pl.Int64,
    "batch_sha256": pl.String,
    "ingested_at": pl.Datetime("us", "UTC"),
}


def _with_label_text(frame: pl.DataFrame) -> pl.DataFrame:
    """Archives written before class labels existed: ``label_text`` from the 0/1 label, ``source_row`` null."""
    if "label_text" not in frame.columns:
        frame = frame.with_columns(pl.col("label").cast(pl.String).alias("label_text"))
    if "source_row" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Int64).alias("source_row"))
    return frame


def declared_classes(layout: HomeLayout, settings_classes: list[str] | tuple[str, ...] = ()) -> tuple[str, ...] | None:
    """The class names annotations may use beside 0/1: ``settings.json`` ``classes`` and the ``p_<class>``
    columns of every model version's predictions header (only the header is read). None when there are none
    (binary labels only, the contract as before)."""
    from noisycal_platform.contracts import class_columns

    names = list(settings_classes)
    for version in layout.model_versions():
        path = layout.predictions_file(version)
        try:
            if path.suffix.lower() == ".parquet":
                header = pl.read_parquet_schema(path).keys()
            else:
                with open(path, encoding="utf-8", errors="replace", newline="") as fh:
                    header = next(csv.reader(fh), [])
        except (OSError, StopIteration, pl.exceptions.PolarsError):
            continue  # an unreadable file fails its own raw/predictions partition, with its reason
        names += class_columns([h.strip().lstrip("\ufeff") for h in header])
    return tuple(dict.fromkeys(names)) or None


def accepted_annotations(layout: HomeLayout) -> pl.DataFrame:
    """All accepted annotation rows, in ledger order, with ``label_text`` (the label as written),
    ``source_file``, ``source_row`` (1-based data row in it), ``batch_sha256``, ``ingested_at``."""
    ledger = ledger_entries(layout)
    frames = []
    for h, e in ledger.items():
        if e["status"] != "accepted":
            continue
        p = layout.archive / f"{h}.parquet"
        if not p.is_file():  # written and fsync'd before its ledger line: missing means it was removed
            raise IngestError(f"ledger entry for {e['file']} ({h[:12]}) has no archive file {p.name}")
        frames.append(_with_label_text(pl.read_parquet(p)))
    if not frames:
        return pl.DataFrame(schema=ANNOTATION_SCHEMA)
    return pl.concat([f.cast(ANNOTATION_SCHEMA) for f in frames], how="vertical").select(list(ANNOTATION_SCHEMA))


# ------------------------------------------------------------------------------------------- confirmations
# the confirmation record's fields (defined once in contracts) as read from JSONL: text, except the rank
ANSWER_FIELDS = {k: (pl.Int64 if k == "position" else pl.String) for k in CONFIRMATION_FIELDS}


def read_confirmation_records(layout: HomeLayout) -> tuple[pl.DataFrame, list[dict]]:
    """Parse every ``inbox/confirmations/*.jsonl``; one row per distinct ``answer_id`` (first occurrence wins).

    Each line is checked with the confirmation contract (``contracts.confirmation_problem``) and the lines
    together with ``contracts.confirmation_log_problems``. Returns ``(answers, rejected)``: ``rejected``
    lists each unusable line with file, line, column (field) and reason; the other lines are returned. A
    final line without its newline is an answer still being written: it is left for the next run. Links and
    special files are refused by name (line None) without being read.
    """
    records: list[dict] = []
    where: list[tuple[str, int]] = []
    rejected: list[dict] = []
    folder = layout.confirmation_inbox
    entries = sorted(os.scandir(folder), key=lambda e: e.name) if folder.is_dir() else []
    for entry in entries:
        if not entry.name.endswith(".jsonl") or entry.name.startswith("."):
            continue
        path = Path(entry.path)
        try:
            data, _ = read_bytes_safely(path)
        except InputError as exc:
            if path.exists() or path.is_symlink():
                rejected.append({"file": path.name, "line": None, "column": None, "reason": exc.problem})
            continue
        complete = data.split(b"\n")[:-1]  # the piece after the last newline is incomplete (or empty)
        for no, raw in enumerate(complete, start=1):
            if not raw.strip():
                continue
            try:
                rec = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
                rejected.append({"file": path.name, "line": no, "column": None, "reason": "malformed JSON"})
                continue
            problem = confirmation_problem(rec)
            if problem:
                rejected.append({"file": path.name, "line": no, "column": problem.field, "reason": str(problem)})
                continue
            records.append(rec)
            where.append((path.name, no))
    bad = confirmation_log_problems(records)
    rows = []
    for i, rec in enumerate(records):
        file, no = where[i]
        if i in bad:
            rejected.append({"file": file, "line": no, "column": bad[i].field, "reason": str(bad[i])})
            continue
        rows.append({k: rec.get(k) for k in ANSWER_FIELDS} | {"source_file": file, "line": no})
    schema = ANSWER_FIELDS | {"source_file": pl.String, "line": pl.Int64}
    frame = pl.DataFrame(rows, schema=schema) if rows else pl.DataFrame(schema=schema)
    frame = frame.unique(subset=["answer_id"], keep="first", maintain_order=True)
    rejected.sort(key=lambda r: (r["file"], r["line"] or 0))
    return frame, rejected


def write_record_quarantine(layout: HomeLayout, source: str, rejected: list[dict]) -> Path:
    """Replace ``inbox/quarantine/<source>.rejected.jsonl`` with the records now rejected from files that stay
    in place (confirmations, generations, audit labels, reference labels): file, line/row, column, reason."""
    path = layout.quarantine / f"{source}.rejected.jsonl"
    text = "".join(json.dumps(r, sort_keys=True, ensure_ascii=False) + "\n" for r in rejected)
    if not rejected and not path.exists():
        return path
    atomic_write_text(path, text)
    return path
