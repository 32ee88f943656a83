"""Readers for the user's files -> validated polars frames (file primitives: :mod:`noisycal_platform.files`).

Every violation raises :class:`InputError` naming the file, the 1-based data row (the header is not counted)
and the column, e.g. ``annotations.csv: row 3, column 'label': label must be 0 or 1 (got '2'); 1 row(s)
affected``. Readers never return a partially valid frame.
"""

from __future__ import annotations

import csv
import errno
import io as _io
import os
import stat
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from noisycal_platform.contracts import (
    BINARY_CLASSES,
    CLASS_PREFIX,
    ITEMS,
    MAX_ID_LENGTH,
    PREDICTIONS,
    PROB_SUM_TOL,
    REFERENCE_LABELS,
    ColumnSpec,
    TableContract,
    annotation_contract,
    class_columns,
)

__all__ = [
    "InputError",
    "RawTable",
    "RowProblem",
    "parse_table",
    "read_annotation_records",
    "read_annotations",
    "read_bytes_safely",
    "read_items",
    "read_model_version",
    "read_predictions",
    "read_reference_label_records",
    "read_reference_labels",
    "read_table",
    "refusal",
    "validate_records",
]

SUPPORTED_SUFFIXES = (".csv", ".parquet")
MAX_FILE_BYTES = 1 << 30  # a user table larger than 1 GiB is refused before it is read
MAX_SHOWN_VALUE = 40  # characters of an offending value quoted in an interactive error (never in quarantine)


class InputError(ValueError):
    """A user file violates its contract. ``file``, ``row`` (1-based data row or None) and ``column``.

    ``str(err)`` may quote a short offending value (``detail``) for the person who owns the file; ``safe``
    never quotes file content and is what quarantine reasons, ledgers and logs record.
    """

    def __init__(
        self,
        file: str | Path,
        problem: str,
        *,
        row: int | None = None,
        column: str | None = None,
        detail: str | None = None,
    ):
        self.file = str(file)
        self.row = row
        self.column = column
        self.problem = problem
        self.detail = detail
        where = ", ".join(
            part for part in (f"row {row}" if row is not None else "", f"column '{column}'" if column else "") if part
        )
        self.safe = f"{self.file}: {where + ': ' if where else ''}{problem}"
        super().__init__(self.safe + (f" ({detail})" if detail else ""))


@dataclass(frozen=True)
class RowProblem:
    """One rejected record: 1-based data row (or JSONL line), the column/field, and why (no content quoted)."""

    row: int
    column: str | None
    reason: str

    def as_dict(self, file: str) -> dict:
        return {"file": file, "row": self.row, "column": self.column, "reason": self.reason}


def _shown(value: object) -> str:
    """A short, printable rendering of an offending value for an interactive message."""
    text = repr(value)
    text = "".join(c if c.isprintable() else "?" for c in text)
    return text if len(text) <= MAX_SHOWN_VALUE else text[: MAX_SHOWN_VALUE - 3] + "..."


def refusal(path: str | Path, st: os.stat_result | None = None) -> str | None:
    """Why ``path`` must not be read (a symlink, FIFO, device, socket, folder), judged by ``lstat``; None
    for a regular file. Nothing is opened."""
    try:
        st = st or os.lstat(path)
    except FileNotFoundError:
        return "file does not exist"
    if stat.S_ISLNK(st.st_mode):
        return "is a symbolic link; links are refused without being read (put the file itself here)"
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file (a FIFO, device, socket or folder); refused without being read"
    return None


def read_bytes_safely(path: str | Path, max_bytes: int = MAX_FILE_BYTES) -> tuple[bytes, os.stat_result]:
    """The bytes of a regular file, opened with ``O_NOFOLLOW | O_NONBLOCK`` so a symlink or FIFO that
    replaced it after a check is refused, never followed or waited on. Returns (data, fstat of the
    opened file)."""
    path = Path(path)
    why = refusal(path)
    if why:
        raise InputError(path, why)
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise InputError(path, "file does not exist") from None
    except OSError as exc:  # ELOOP: a symlink slipped in after the lstat
        raise InputError(path, f"cannot be opened safely ({errno.errorcode.get(exc.errno, exc.errno)})") from None
    try:
        st = os.fstat(fd)
        why = refusal(path, st)
        if why:
            raise InputError(path, why)
        if st.st_size > max_bytes:
            raise InputError(path, f"file is larger than {max_bytes} bytes; refused")
        chunks = []
        while block := os.read(fd, 1 << 20):
            chunks.append(block)
        return b"".join(chunks), st
    finally:
        os.close(fd)


# ----------------------------------------------------------------------------------------------- reading
@dataclass
class RawTable:
    """A file parsed into string (CSV) or typed (Parquet) columns, before the contract.

    ``frame`` has one row per data row (ragged/undecodable CSV rows are all-null there and listed in
    ``problems``); ``rows`` keeps each CSV row's fields as read (for writing rejected rows back out).
    """

    path: Path
    frame: pl.DataFrame
    problems: list[RowProblem]
    header: list[str] | None = None
    rows: list[list[str]] | None = None
    data: bytes = b""


def _csv_error(exc: csv.Error) -> str:
    msg = str(exc)
    if "unexpected end of data" in msg:
        return "unbalanced quote: a quoted field opens here and never closes"
    if "expected after" in msg:
        return "malformed quoting: a quote inside a field must be doubled and the field quoted"
    if "field larger than field limit" in msg:
        return f"a field is larger than {csv.field_size_limit()} characters"
    return "malformed CSV"


def _bad_utf8(value: str) -> int | None:
    """The first byte that was not UTF-8 (decoded with surrogateescape), or None."""
    for c in value:
        if "\udc80" <= c <= "\udcff":
            return ord(c) - 0xDC00
    return None


def _column_label(name: str, k: int) -> str:
    return name if name.isprintable() and 0 < len(name) <= 64 else f"#{k + 1}"


def _parse_csv(path: Path, raw: bytes) -> RawTable:
    """CSV -> string columns with per-row problems (ragged row, undecodable bytes). A broken header, an
    unbalanced quote or an over-long field stops the file (no row after it can be delimited) and names the
    row; duplicate column names are an error."""
    try:
        text = raw.decode("utf-8")
        lossy = False
    except UnicodeDecodeError:
        text = raw.decode("utf-8", errors="surrogateescape")
        lossy = True
    if text.startswith("\ufeff"):
        text = text[1:]
    reader = csv.reader(_io.StringIO(text, newline=""), strict=True)
    try:
        header = next(reader)
    except StopIteration:
        raise InputError(path, "file is empty (no header, no data rows)") from None
    except csv.Error as exc:
        raise InputError(path, f"header: {_csv_error(exc)}") from None
    header = [h.strip() for h in header]
    for k, h in enumerate(header):
        if lossy and _bad_utf8(h) is not None:
            raise InputError(path, f"unreadable encoding in the header (column {k + 1}); save the file as UTF-8")
    seen: dict[str, int] = {}
    for k, h in enumerate(header):
        if h in seen:
            raise InputError(
                path,
                f"duplicate column name: columns {seen[h] + 1} and {k + 1} are both named "
                f"'{_column_label(h, k)}' (which one counts is ambiguous)",
                column=_column_label(h, k),
            )
        seen[h] = k
    n = len(header)
    rows: list[list[str]] = []
    problems: list[RowProblem] = []
    while True:
        try:
            fields = next(reader)
        except StopIteration:
            break
        except csv.Error as exc:
            raise InputError(path, f"{_csv_error(exc)}; no row from here on can be read", row=len(rows) + 1) from None
        if not fields:
            continue  # a blank line is not a row
        rows.append(fields)
        no = len(rows)
        if len(fields) != n:
            problems.append(RowProblem(no, None, f"row has {len(fields)} field(s), the header has {n}"))
            continue
        if lossy:
            for k, v in enumerate(fields):
                b = _bad_utf8(v)
                if b is not None:
                    problems.append(
                        RowProblem(
                            no,
                            _column_label(header[k], k),
                            f"unreadable encoding: byte 0x{b:02x} is not valid UTF-8 (save the file as UTF-8)",
                        )
                    )
                    break
    bad = {p.row for p in problems}
    shaped = [[None] * n if (i + 1) in bad else r for i, r in enumerate(rows)]
    columns = list(zip(*shaped, strict=True)) if shaped else [()] * n
    frame = pl.DataFrame([pl.Series(h, list(c), dtype=pl.String) for h, c in zip(header, columns, strict=True)])
    return RawTable(path, frame, problems, header=header, rows=rows, data=raw)


def parse_table(path: str | Path, data: bytes | None = None, *, allow_no_rows: bool = False) -> RawTable:
    """Read a CSV (all columns as strings, UTF-8) or Parquet file into a :class:`RawTable`. File-level
    problems (unsupported type, not a regular file, empty, unreadable Parquet, broken CSV structure)
    raise InputError; row-level ones are listed in ``problems``."""
    path = Path(path)
    if path.suffix.lower() not in SUPPORTED_SUFFIXES:
        raise InputError(path, f"unsupported file type {_shown(path.suffix)}; use .csv or .parquet")
    if data is None:
        data, _ = read_bytes_safely(path)
    if not data:
        raise InputError(path, "file is empty (no header, no data rows)")
    if path.suffix.lower() == ".parquet":
        try:
            df = pl.read_parquet(_io.BytesIO(data))
        except Exception as exc:  # polars raises several error types for corrupt parquet
            raise InputError(path, f"unreadable parquet file ({type(exc).__name__})") from None
        table = RawTable(path, df, [], data=data)
    else:
        table = _parse_csv(path, data)
    if table.frame.height == 0 and not allow_no_rows:
        raise InputError(path, "file is empty (header only, no data rows)")
    return table


def read_table(path: str | Path) -> pl.DataFrame:
    """Read a CSV (all columns as strings, UTF-8) or Parquet file; any problem raises InputError."""
    table = parse_table(path)
    if table.problems:
        p = table.problems[0]
        raise InputError(table.path, p.reason, row=p.row, column=p.column)
    return table.frame


_CONTROL = r"[\p{Cc}\p{Cf}]"
LABEL_TEXT = "label_text"  # the label as written, beside ``label`` (0/1 or null): see contracts.BINARY_CLASSES


def _label_text(col: pl.Series) -> pl.Series:
    """A label column as text: strings stripped, integers (and integral floats) in decimal; other types are an
    unsupported type (TypeError)."""
    if col.dtype == pl.String:
        return col.str.strip_chars()
    if col.dtype.is_integer():
        return col.cast(pl.String)
    if col.dtype.is_float():
        integral = col.is_finite() & (col == col.floor())
        as_int = col.cast(pl.Int64, strict=False).cast(pl.String)
        return pl.select(pl.when(integral).then(as_int).otherwise(col.cast(pl.String))).to_series().alias(col.name)
    raise TypeError


def _column_checks(path: Path, df: pl.DataFrame, contract: TableContract) -> tuple[dict, list]:
    """Converted columns, and the checks in contract order: (mask of bad rows, column, problem)."""
    missing = [c for c in contract.required if c not in df.columns]
    if missing:
        raise InputError(
            path,
            f"missing required column(s) {missing} (contract '{contract.name}' needs {list(contract.required)})",
            column=missing[0],
            detail=f"found {len(df.columns)} column(s)",
        )
    out: dict[str, pl.Series] = {}
    checks: list[tuple[pl.Series, str, str]] = []
    for spec in contract.columns:
        if spec.name not in df.columns:
            continue
        col = df[spec.name]
        try:
            if spec.kind == "id":
                if not (col.dtype == pl.String or col.dtype.is_integer() or col.dtype == pl.Categorical):
                    raise TypeError
                s = col.cast(pl.String, strict=False).str.strip_chars()
                checks.append((s.is_null() | (s.str.len_chars() == 0), spec.name, f"{spec.name} must not be empty"))
                checks.append(
                    (s.str.len_chars() > MAX_ID_LENGTH, spec.name, f"{spec.name} is longer than {MAX_ID_LENGTH} "
                     "characters")
                )
                checks.append((s.str.contains(_CONTROL), spec.name, f"{spec.name} contains control characters"))
                out[spec.name] = s
            elif spec.kind == "binary":
                if col.dtype == pl.String:
                    s = col.str.strip_chars()
                    checks.append((~s.is_in(["0", "1"]), spec.name, f"{spec.name} must be 0 or 1"))
                    out[spec.name] = (s == "1").cast(pl.Int8)
                elif col.dtype.is_numeric() or col.dtype == pl.Boolean:
                    f = col.cast(pl.Float64, strict=False)
                    checks.append((~f.is_in([0.0, 1.0]), spec.name, f"{spec.name} must be 0 or 1"))
                    out[spec.name] = f.fill_nan(None).cast(pl.Int8, strict=False)
                else:
                    raise TypeError
            elif spec.kind == "class_label":
                text = _label_text(col)
                allowed = list(spec.values)
                empty = text.is_null() | (text.str.len_chars() == 0)
                checks.append((empty, spec.name, f"{spec.name} must not be empty"))
                checks.append((~text.is_in(allowed), spec.name, f"{spec.name} must be one of the declared classes "
                               f"{allowed} (settings.json 'classes' or the p_<class> columns of the predictions)"))
                binary = dict(zip(BINARY_CLASSES, (0, 1), strict=True))
                out[spec.name] = text.replace_strict(binary, default=None, return_dtype=pl.Int8)
                out[LABEL_TEXT] = text
            elif spec.kind == "unit_float":
                if col.dtype == pl.String:
                    f = col.str.strip_chars().cast(pl.Float64, strict=False)
                elif col.dtype.is_numeric():
                    f = col.cast(pl.Float64, strict=False)
                else:
                    raise TypeError
                checks.append((f.is_null(), spec.name, f"{spec.name} must be a number"))
                checks.append((f.is_nan(), spec.name, f"{spec.name} must not be NaN"))
                checks.append(((f < 0.0) | (f > 1.0), spec.name, f"{spec.name} must lie in [0, 1]"))
                out[spec.name] = f
            elif spec.kind == "timestamp":
                if col.dtype == pl.String:
                    s = col.str.strip_chars()
                    empty = s.is_null() | (s.str.len_chars() == 0)
                    ts = s.str.to_datetime(time_zone="UTC", strict=False, time_unit="us")
                    checks.append((~empty & ts.is_null(), spec.name, f"{spec.name} must be an ISO-8601 date-time"))
                    out[spec.name] = ts
                elif isinstance(col.dtype, pl.Datetime):
                    out[spec.name] = (
                        col.dt.replace_time_zone("UTC")
                        if col.dtype.time_zone is None
                        else col.dt.convert_time_zone("UTC")
                    ).dt.cast_time_unit("us")
                else:
                    raise TypeError
        except (TypeError, pl.exceptions.PolarsError):
            raise InputError(
                path, f"{spec.name} has unsupported type {col.dtype} (contract kind '{spec.kind}')", column=spec.name
            ) from None
    return out, checks


def _validate(path: Path, df: pl.DataFrame, contract: TableContract) -> pl.DataFrame:
    """All-or-nothing: the first violation (contract order, then row) raises InputError."""
    out, checks = _column_checks(path, df, contract)
    for mask, column, problem in checks:
        mask = mask.fill_null(True)
        n_bad = int(mask.sum())
        if n_bad:
            idx = int(mask.arg_true()[0])
            raise InputError(
                path, f"{problem}; {n_bad} row(s) affected", row=idx + 1, column=column,
                detail=f"got {_shown(df[column][idx])}",
            )
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
                f"duplicate {tuple(contract.unique_key)}: also in data row {rows[0] + 1}; "
                f"{int(dup.sum())} row(s) affected",
                row=rows[1] + 1,
                column=contract.unique_key[-1],
                detail=_shown(key),
            )
    return frame


def validate_records(table: RawTable, contract: TableContract) -> tuple[pl.DataFrame, list[RowProblem]]:
    """Record-level: (the valid rows with their 1-based data row in ``row``, one problem per bad row).

    A row is bad when its parse failed, any contract check fails on it, or its unique key occurs more than
    once in the file (every occurrence is rejected: which one is right is the author's call).
    """
    df = table.frame
    out, checks = _column_checks(table.path, df, contract)
    first: dict[int, RowProblem] = {p.row: p for p in table.problems}
    for mask, column, problem in checks:
        for idx in mask.fill_null(True).arg_true().to_list():
            first.setdefault(idx + 1, RowProblem(idx + 1, column, problem))
    frame = pl.DataFrame(out).with_row_index("row", offset=1).with_columns(pl.col("row").cast(pl.Int64))
    if contract.unique_key:
        ok = frame.filter(~pl.col("row").is_in(list(first)))
        dup = ok.filter(ok.select(contract.unique_key).is_duplicated())
        groups = dup.group_by(list(contract.unique_key), maintain_order=True).agg(pl.col("row"))
        for rows in groups["row"].to_list():
            where = ", ".join(str(r) for r in rows)
            for r in rows:
                why = f"duplicate {tuple(contract.unique_key)}: in data rows {where}"
                first.setdefault(r, RowProblem(r, contract.unique_key[-1], why))
    good = frame.filter(~pl.col("row").is_in(list(first)))
    return good, [first[r] for r in sorted(first)]


def read_annotations(path: str | Path, classes: tuple[str, ...] | None = None) -> pl.DataFrame:
    """Annotation batch -> ``item_id`` (str), ``annotator_id`` (str), ``label`` (Int8 0/1), ``timestamp``
    (UTC datetime, null when absent). Contract: :data:`noisycal_platform.contracts.ANNOTATIONS`; with declared
    ``classes`` (`contracts.annotation_contract`) also ``label_text``, and ``label`` is null for a class name."""
    path = Path(path)
    frame = _validate(path, read_table(path), annotation_contract(classes))
    if "timestamp" not in frame.columns:
        frame = frame.with_columns(pl.lit(None, dtype=pl.Datetime("us", "UTC")).alias("timestamp"))
    return frame.select("item_id", "annotator_id", "label", *([LABEL_TEXT] if classes else []), "timestamp")


def read_annotation_records(
    path: str | Path, data: bytes | None = None, classes: tuple[str, ...] | None = None
) -> tuple[pl.DataFrame, RawTable, list]:
    """Record-level reading of an annotation batch: (valid rows as :func:`read_annotations` plus ``label_text``
    and their data ``row``, the parsed table, one :class:`RowProblem` per bad row). ``classes``: the declared
    class names (labels 0/1 stay valid; see `contracts.annotation_contract`); None = binary labels only.
    File-level problems raise InputError."""
    table = parse_table(path, data)
    good, problems = validate_records(table, annotation_contract(classes))
    if "timestamp" not in good.columns:
        good = good.with_columns(pl.lit(None, dtype=pl.Datetime("us", "UTC")).alias("timestamp"))
    if LABEL_TEXT not in good.columns:
        good = good.with_columns(pl.col("label").cast(pl.String).alias(LABEL_TEXT))
    return good.select("item_id", "annotator_id", "label", LABEL_TEXT, "timestamp", "row"), table, problems


def read_reference_label_records(path: str | Path) -> tuple[pl.DataFrame, list[RowProblem]]:
    """Record-level reading of ``references/labels.csv``: (valid ``item_id``, ``label`` rows, bad rows)."""
    table = parse_table(path)
    good, problems = validate_records(table, REFERENCE_LABELS)
    return good.select("item_id", "label"), problems


def read_predictions(path: str | Path, classes: tuple[str, ...] | None = None) -> pl.DataFrame:
    """Model scores -> ``item_id`` (str), ``score`` (Float64 in [0, 1]). Contract: ``PREDICTIONS``.

    A file with ``p_<class>`` columns instead of ``score`` is a multi-class model: -> ``item_id``, ``score`` (the
    top-label confidence max_c p_c) and one Float64 ``p_<class>`` column per class, in the order of ``classes``
    (settings.json) when given, else of the header. Each p_ column lies in [0, 1] and every row sums to 1 within
    ``PROB_SUM_TOL``; a declared class without its column, or a column for an undeclared class, is an error."""
    path = Path(path)
    raw = read_table(path)
    found = class_columns(raw.columns)
    if not found and not classes:
        return _validate(path, raw, PREDICTIONS).select("item_id", "score")
    if "score" in raw.columns:
        raise InputError(path, "has both a 'score' column and p_<class> columns; use one or the other",
                         column="score")
    names = tuple(classes) if classes else found
    for c in names:
        if c not in found:
            raise InputError(path, f"missing probability column for declared class {c!r}",
                             column=f"{CLASS_PREFIX}{c}")
    extra = [c for c in found if c not in names]
    if extra:
        raise InputError(path, f"probability column for class {extra[0]!r}, which settings.json 'classes' does not "
                         f"declare ({list(names)})", column=f"{CLASS_PREFIX}{extra[0]}")
    if len(names) < 2:
        raise InputError(path, "a multi-class predictions file needs at least two p_<class> columns",
                         column=f"{CLASS_PREFIX}{names[0]}")
    cols = [f"{CLASS_PREFIX}{c}" for c in names]
    contract = TableContract(
        PREDICTIONS.name,
        (PREDICTIONS.columns[0], *(ColumnSpec(c, "unit_float") for c in cols)),
        PREDICTIONS.unique_key,
    )
    frame = _validate(path, raw, contract).select("item_id", *cols)
    dev = (frame.select(pl.sum_horizontal(cols)).to_series() - 1.0).abs()
    bad = dev > PROB_SUM_TOL
    if bad.any():
        idx = int(bad.arg_true()[0])
        raise InputError(
            path, f"probabilities do not sum to 1 (tolerance {PROB_SUM_TOL}); {int(bad.sum())} row(s) affected",
            row=idx + 1, column=f"{cols[0]}..{cols[-1]}", detail=f"sum {1.0 + float(dev[idx]):.9g}",
        )
    return frame.select("item_id", pl.max_horizontal(cols).alias("score"), *cols)


def read_items(path: str | Path) -> pl.DataFrame:
    """``items.csv``: ``item_id`` plus metadata columns -> long ``item_id``, ``subgroup_column``,
    ``subgroup_value`` (text; an empty or null value puts the item in no subgroup of that column). Contract
    ``ITEMS``: a repeated ``item_id`` is an error naming both rows."""
    path = Path(path)
    raw = read_table(path)
    ids = _validate(path, raw.select(ITEMS.required), ITEMS)
    meta = [c for c in raw.columns if c != "item_id"]
    if not meta:
        raise InputError(path, "has no metadata column besides item_id (nothing to report subgroups of)")
    wide = ids.with_columns(
        (_label_text(raw[c]) if raw[c].dtype == pl.String or raw[c].dtype.is_numeric() else raw[c].cast(pl.String))
        .alias(c)
        for c in meta
    )
    return (
        wide.unpivot(index="item_id", on=meta, variable_name="subgroup_column", value_name="subgroup_value")
        .filter(pl.col("subgroup_value").is_not_null() & (pl.col("subgroup_value") != ""))
        .sort("subgroup_column", "subgroup_value", "item_id")
    )


#: ``raw.predictions`` beyond item_id and score: binary files keep ``score`` and leave ``classes``/``probabilities``
#: null; ``subgroups`` holds the item's (column, value) pairs from items.csv (empty without one).
SUBGROUP_TYPE = pl.List(pl.Struct({"column": pl.String, "value": pl.String}))
MODEL_VERSION_COLUMNS = {
    "item_id": pl.String,
    "score": pl.Float64,
    "n_classes": pl.Int64,
    "classes": pl.List(pl.String),
    "probabilities": pl.List(pl.Float64),
    "subgroups": SUBGROUP_TYPE,
}


def read_model_version(
    predictions: str | Path, items: str | Path | None = None, classes: tuple[str, ...] | None = None
) -> pl.DataFrame:
    """One model version as stored in ``raw.predictions`` (columns ``MODEL_VERSION_COLUMNS``): the validated
    predictions (:func:`read_predictions`; ``n_classes`` 2 for a ``score`` file) joined with the subgroups of
    ``items`` (:func:`read_items`). Any violation in either file raises InputError (nothing is returned)."""
    frame = read_predictions(predictions, classes)
    cols = [c for c in frame.columns if c.startswith(CLASS_PREFIX)]
    if cols:
        names = [c[len(CLASS_PREFIX):] for c in cols]
        frame = frame.select(
            "item_id", "score", pl.lit(len(cols), dtype=pl.Int64).alias("n_classes"),
            pl.lit(names, dtype=pl.List(pl.String)).alias("classes"),
            pl.concat_list(cols).alias("probabilities"),
        )
    else:
        frame = frame.with_columns(
            pl.lit(2, dtype=pl.Int64).alias("n_classes"),
            pl.lit(None, dtype=pl.List(pl.String)).alias("classes"),
            pl.lit(None, dtype=pl.List(pl.Float64)).alias("probabilities"),
        )
    if items is None:
        groups = pl.DataFrame(schema={"item_id": pl.String, "subgroups": SUBGROUP_TYPE})
    else:
        groups = (
            read_items(items)
            .group_by("item_id")
            .agg(pl.struct(column="subgroup_column", value="subgroup_value").alias("subgroups"))
        )
    frame = frame.join(groups, on="item_id", how="left", maintain_order="left")
    return frame.with_columns(pl.col("subgroups").fill_null(pl.lit([], dtype=SUBGROUP_TYPE))).cast(
        MODEL_VERSION_COLUMNS
    ).select(list(MODEL_VERSION_COLUMNS))


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
