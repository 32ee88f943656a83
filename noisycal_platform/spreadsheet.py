"""Spreadsheet-safe CSV for every file a person opens (OWASP "CSV injection").

A cell that begins with ``=``, ``+``, ``-`` (unless the whole cell is a number), ``@``, tab or carriage return
is run as a formula by spreadsheet programs; :func:`safe_cell` prefixes it with one single quote. A cell that
already begins with ``'`` followed by such a cell gets one more quote, so :func:`unsafe_cell` undoes the rule
exactly (the CSV read back by the platform yields the original values). Programs should read the ``.parquet``
twin written beside each CSV by :func:`write_person_csv`, which holds the exact values; :func:`exact_twin`
returns it only while it belongs to the CSV on disk (the twin records the CSV's SHA-256), so a CSV edited in a
spreadsheet, or one from a home written before the twins, is read from the CSV itself.
"""

from __future__ import annotations

import hashlib
import io
from collections.abc import Iterable, Sequence
from pathlib import Path

import polars as pl

__all__ = [
    "FORMULA_TRIGGERS",
    "TWIN_CSV_SHA256",
    "exact_twin",
    "needs_quote",
    "parquet_twin",
    "safe_cell",
    "safe_csv_text",
    "safe_frame",
    "unsafe_cell",
    "write_person_csv",
]

#: First characters a spreadsheet treats as the start of a formula (OWASP CSV injection).
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")
#: Parquet key-value metadata of a twin: the SHA-256 (hex) of the CSV bytes written with it.
TWIN_CSV_SHA256 = "noisycal.csv_sha256"


def _is_number(text: str) -> bool:
    try:
        float(text)
    except ValueError:
        return False
    return text.strip() == text  # "-1.5" is a number; " -1" or "-1\t" are not left to the spreadsheet


def needs_quote(cell: str) -> bool:
    """Whether :func:`safe_cell` prefixes ``cell`` with a quote."""
    if not cell:
        return False
    if cell[0] in FORMULA_TRIGGERS:
        return not (cell[0] in "+-" and _is_number(cell))
    return cell[0] == "'" and needs_quote(cell[1:])


def safe_cell(value: object) -> object:
    """``value`` with a leading ``'`` when it is a string a spreadsheet would run as a formula."""
    if isinstance(value, str) and needs_quote(value):
        return "'" + value
    return value


def unsafe_cell(value: str) -> str:
    """The inverse of :func:`safe_cell` on strings: ``unsafe_cell(safe_cell(s)) == s`` for every ``s``."""
    if value.startswith("'") and needs_quote(value[1:]):
        return value[1:]
    return value


def _field(value: object) -> str:
    """One RFC 4180 field: quoted when it holds a comma, a quote, LF or CR (Python's csv module leaves a lone CR
    unquoted when the line end is LF, which splits the row on reading)."""
    text = str(value)
    if any(c in text for c in ',"\n\r'):
        return '"' + text.replace('"', '""') + '"'
    return text


def safe_csv_text(header: list[str], rows: Iterable[Sequence[object]]) -> str:
    """CSV text (``\\n`` line ends) with every cell passed through :func:`safe_cell`; None is written empty."""
    lines = [",".join(_field(safe_cell(h)) for h in header)]
    lines += [",".join("" if v is None else _field(safe_cell(v)) for v in r) for r in rows]
    return "\n".join(lines) + "\n"


def parquet_twin(path: str | Path) -> Path:
    """``x.csv`` -> ``x.parquet``: where the exact values of a person's CSV live."""
    return Path(path).with_suffix(".parquet")


def safe_frame(frame: pl.DataFrame) -> pl.DataFrame:
    """``frame`` with :func:`safe_cell` applied to its column names and every String cell (other types, whose
    text is a number, a date or a boolean, are left alone): for ``frame.write_csv()`` shown to a person."""
    cols = [c for c, t in frame.schema.items() if t == pl.String]
    out = frame.with_columns(pl.Series(c, [safe_cell(v) for v in frame[c].to_list()], dtype=pl.String) for c in cols)
    return out.rename({c: str(safe_cell(c)) for c in out.columns})


def _sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_person_csv(path: str | Path, frame: pl.DataFrame, text: str | None = None) -> Path:
    """Write ``frame`` as a spreadsheet-safe CSV at ``path`` and its exact values at the ``.parquet`` twin,
    each atomically (the twin first, so a CSV on disk always has a twin at least as new; the twin records the
    CSV's SHA-256 for :func:`exact_twin`). ``text``: the CSV text when the caller formats cells itself
    (already passed through :func:`safe_csv_text`)."""
    from noisycal_platform.files import atomic_write_bytes

    path = Path(path)
    if text is None:
        text = safe_csv_text(frame.columns, frame.iter_rows())
    data = text.encode("utf-8")
    buf = io.BytesIO()
    frame.write_parquet(buf, metadata={TWIN_CSV_SHA256: _sha256(data)})
    atomic_write_bytes(parquet_twin(path), buf.getvalue())
    atomic_write_bytes(path, data)
    return path


def exact_twin(path: str | Path, data: bytes | None = None) -> pl.DataFrame | None:
    """The exact values of the person's CSV at ``path`` (``data``: its bytes, when already read): its
    ``.parquet`` twin, when the twin was written with exactly this CSV. None when there is no twin, it is
    unreadable, or the CSV changed since (edited in a spreadsheet; a home written before the twins): the
    caller then reads the CSV itself, undoing the quotes with :func:`unsafe_cell`."""
    twin = parquet_twin(path)
    try:
        if data is None:
            data = Path(path).read_bytes()
        raw = twin.read_bytes()
        meta = pl.read_parquet_metadata(io.BytesIO(raw))
        if meta.get(TWIN_CSV_SHA256) != _sha256(data):
            return None
        return pl.read_parquet(io.BytesIO(raw))
    except (OSError, pl.exceptions.PolarsError):
        return None
