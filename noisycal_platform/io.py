"""Readers for the user's files -> validated polars frames, and atomic writers.

Every violation raises :class:`InputError` naming the file, the 1-based data row (the header is not counted)
and the column, e.g. ``annotations.csv: row 3, column 'label': label must be 0 or 1 (got '2'); 1 row(s)
affected``. Readers never return a partially valid frame.
"""

from __future__ import annotations

import hashlib
import io as _io
import os
import tempfile
from pathlib import Path

import polars as pl

from noisycal_platform.contracts import ANNOTATIONS, PREDICTIONS, REFERENCE_LABELS, TableContract

__all__ = [
    "InputError",
    "atomic_write_bytes",
    "atomic_write_text",
    "read_annotations",
    "read_predictions",
    "read_reference_labels",
    "read_table",
    "sha256_file",
]

SUPPORTED_SUFFIXES = (".csv", ".parquet")


class InputError(ValueError):
    """A user file violates its contract. ``file``, ``row`` (1-based data row or None) and ``column``."""

    def __init__(self, file: str | Path, problem: str, *, row: int | None = None, column: str | None = None):
        self.file = str(file)
        self.row = row
        self.column = column
        self.problem = problem
        where = ", ".join(
            part for part in (f"row {row}" if row is not None else "", f"column '{column}'" if column else "") if part
        )
        super().__init__(f"{self.file}: {where + ': ' if where else ''}{problem}")


# ----------------------------------------------------------------------------------------------- writing
def atomic_write_bytes(path: str | Path, data: bytes) -> Path:
    """Write ``data`` to a temp file in the same folder, fsync, then rename over ``path``."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise
    return path


def atomic_write_text(path: str | Path, text: str) -> Path:
    return atomic_write_bytes(path, text.encode("utf-8"))


def sha256_file(path: str | Path, chunk: int = 1 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        while block := fh.read(chunk):
            h.update(block)
    return h.hexdigest()


# ----------------------------------------------------------------------------------------------- reading
def _decode_csv(path: Path, raw: bytes) -> str:
    """UTF-8 (with or without BOM); an undecodable byte is reported with its data row and column."""
    try:
        return raw.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        before = raw[: exc.start]
        line_no = before.count(b"\n") + 1  # 1-based physical line; line 1 is the header
        line_start = before.rfind(b"\n") + 1
        col_idx = before[line_start:].count(b",")
        header = raw.split(b"\n", 1)[0].decode("utf-8", errors="replace").lstrip("\ufeff").strip().split(",")
        column = header[col_idx].strip() if col_idx < len(header) else None
        raise InputError(
            path,
            f"unreadable encoding: byte 0x{raw[exc.start]:02x} is not valid UTF-8 (save the file as UTF-8)",
            row=line_no - 1 if line_no > 1 else None,
            column=column,
        ) from None


def read_table(path: str | Path) -> pl.DataFrame:
    """Read a CSV (all columns as strings, UTF-8) or Parquet file; empty files raise InputError."""
    path = Path(path)
    if path.suffix.lower() not in SUPPORTED_SUFFIXES:
        raise InputError(path, f"unsupported file type {path.suffix!r}; use .csv or .parquet")
    if not path.is_file():
        raise InputError(path, "file does not exist")
    if path.stat().st_size == 0:
        raise InputError(path, "file is empty (no header, no data rows)")
    if path.suffix.lower() == ".parquet":
        try:
            df = pl.read_parquet(path)
        except Exception as exc:  # polars raises several error types for corrupt parquet
            raise InputError(path, f"unreadable parquet file ({type(exc).__name__}: {exc})") from None
    else:
        text = _decode_csv(path, path.read_bytes())
        try:
            df = pl.read_csv(_io.StringIO(text), infer_schema=False)
        except pl.exceptions.NoDataError:
            raise InputError(path, "file is empty (no header, no data rows)") from None
        except pl.exceptions.ComputeError as exc:
            raise InputError(path, f"malformed CSV ({exc})") from None
        df = df.rename({c: c.strip() for c in df.columns})
    if df.height == 0:
        raise InputError(path, "file is empty (header only, no data rows)")
    return df


def _first_bad(path: Path, mask: pl.Series, df: pl.DataFrame, column: str, problem: str) -> None:
    """Raise for the first True in ``mask`` (row numbers are 1-based data rows)."""
    mask = mask.fill_null(True)
    n_bad = int(mask.sum())
    if n_bad:
        idx = int(mask.arg_true()[0])
        value = df[column][idx]
        raise InputError(path, f"{problem} (got {value!r}); {n_bad} row(s) affected", row=idx + 1, column=column)


def _validate(path: Path, df: pl.DataFrame, contract: TableContract) -> pl.DataFrame:
    missing = [c for c in contract.required if c not in df.columns]
    if missing:
        raise InputError(
            path,
            f"missing required column(s) {missing}; found {df.columns} (contract '{contract.name}' needs "
            f"{list(contract.required)})",
            column=missing[0],
        )
    out: dict[str, pl.Series] = {}
    for spec in contract.columns:
        if spec.name not in df.columns:
            continue
        col = df[spec.name]
        if spec.kind == "id":
            s = col.cast(pl.String, strict=False).str.strip_chars()
            _first_bad(path, s.is_null() | (s.str.len_chars() == 0), df, spec.name, f"{spec.name} must not be empty")
            out[spec.name] = s
        elif spec.kind == "binary":
            if col.dtype == pl.String:
                s = col.str.strip_chars()
                ok = s.is_in(["0", "1"])
                _first_bad(path, ~ok, df, spec.name, f"{spec.name} must be 0 or 1")
                out[spec.name] = (s == "1").cast(pl.Int8)
            else:
                f = col.cast(pl.Float64, strict=False)
                ok = f.is_in([0.0, 1.0])
                _first_bad(path, ~ok, df, spec.name, f"{spec.name} must be 0 or 1")
                out[spec.name] = f.cast(pl.Int8)
        elif spec.kind == "unit_float":
            f = (
                col.str.strip_chars().cast(pl.Float64, strict=False)
                if col.dtype == pl.String
                else col.cast(pl.Float64, strict=False)
            )
            _first_bad(path, f.is_null(), df, spec.name, f"{spec.name} must be a number")
            _first_bad(path, f.is_nan(), df, spec.name, f"{spec.name} must not be NaN")
            _first_bad(path, (f < 0.0) | (f > 1.0), df, spec.name, f"{spec.name} must lie in [0, 1]")
            out[spec.name] = f
        elif spec.kind == "timestamp":
            if col.dtype == pl.String:
                s = col.str.strip_chars()
                empty = s.is_null() | (s.str.len_chars() == 0)
                ts = s.str.to_datetime(time_zone="UTC", strict=False, time_unit="us")
                _first_bad(path, ~empty & ts.is_null(), df, spec.name, f"{spec.name} must be an ISO-8601 date-time")
                out[spec.name] = ts
            elif isinstance(col.dtype, pl.Datetime):
                out[spec.name] = (
                    col.dt.replace_time_zone("UTC") if col.dtype.time_zone is None else col.dt.convert_time_zone("UTC")
                ).dt.cast_time_unit("us")
            else:
                raise InputError(path, f"{spec.name} must be a date-time, got dtype {col.dtype}", column=spec.name)
    frame = pl.DataFrame(out)
    if contract.unique_key:
        dup = frame.select(contract.unique_key).is_duplicated()
        if dup.any():
            first_dups = (
                frame.with_row_index("_row")
                .filter(dup)
                .group_by(list(contract.unique_key), maintain_order=True)
                .agg(pl.col("_row"))
            )
            rows = first_dups["_row"][0].to_list()
            key = {k: first_dups[k][0] for k in contract.unique_key}
            raise InputError(
                path,
                f"duplicate {tuple(contract.unique_key)} {key}: also in data row {rows[0] + 1}; "
                f"{int(dup.sum())} row(s) affected",
                row=rows[1] + 1,
                column=contract.unique_key[-1],
            )
    return frame


def read_annotations(path: str | Path) -> pl.DataFrame:
    """Annotation batch -> ``item_id`` (str), ``annotator_id`` (str), ``label`` (Int8 0/1), ``timestamp``
    (UTC datetime, null when absent). Contract: :data:`noisycal_platform.contracts.ANNOTATIONS`."""
    path = Path(path)
    frame = _validate(path, read_table(path), ANNOTATIONS)
    if "timestamp" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Datetime("us", "UTC")).alias("timestamp"))
    return frame.select("item_id", "annotator_id", "label", "timestamp")


def read_predictions(path: str | Path) -> pl.DataFrame:
    """Model scores -> ``item_id`` (str), ``score`` (Float64 in [0, 1]). Contract: ``PREDICTIONS``."""
    path = Path(path)
    return _validate(path, read_table(path), PREDICTIONS).select("item_id", "score")


def read_reference_labels(path: str | Path) -> pl.DataFrame:
    """Clean reference labels -> ``item_id`` (str), ``label`` (Int8 0/1). Contract: ``REFERENCE_LABELS``."""
    path = Path(path)
    return _validate(path, read_table(path), REFERENCE_LABELS).select("item_id", "label")


# ------------------------------------------------------------------------------------------ cleaning scores
def read_cleaning_scores(path: str | Path) -> pl.DataFrame:
    """Cleaning-impact scores -> ``file_name`` (str), ``score`` (Float64 in [0, 1]), ``target`` (Int8 0/1).
    Contract: :data:`noisycal_platform.contracts.CLEANING_SCORES`."""
    from noisycal_platform.contracts import CLEANING_SCORES

    path = Path(path)
    return _validate(path, read_table(path), CLEANING_SCORES).select("file_name", "score", "target")
