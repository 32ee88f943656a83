"""Spreadsheet-safe CSV for every file a person opens (OWASP "CSV injection").

A cell that begins with ``=``, ``+``, ``-`` (unless the whole cell is a number), ``@``, tab or carriage return
is run as a formula by spreadsheet programs; :func:`safe_cell` prefixes it with one single quote. A cell that
already begins with ``'`` followed by such a cell gets one more quote, so :func:`unsafe_cell` undoes the rule
exactly (the CSV read back by the platform yields the original values). Programs should read the ``.parquet``
twin written beside each CSV by :func:`write_person_csv`, which holds the exact values.
"""

from __future__ import annotations

import io
from collections.abc import Iterable, Sequence
from pathlib import Path

import polars as pl

__all__ = ["FORMULA_TRIGGERS", "needs_quote", "safe_cell", "safe_csv_text", "unsafe_cell", "write_person_csv"]

#: First characters a spreadsheet treats as the start of a formula (OWASP CSV injection).
FORMULA_TRIGGERS = ("=", "+", "-", "@", "\t", "\r")


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


def write_person_csv(path: str | Path, frame: pl.DataFrame, text: str | None = None) -> Path:
    """Write ``frame`` as a spreadsheet-safe CSV at ``path`` and its exact values at the ``.parquet`` twin,
    each atomically (the twin first, so a CSV on disk always has a twin at least as new). ``text``: the CSV
    text when the caller formats cells itself (already passed through :func:`safe_csv_text`)."""
    from noisycal_platform.files import atomic_write_bytes

    path = Path(path)
    buf = io.BytesIO()
    frame.write_parquet(buf)
    atomic_write_bytes(parquet_twin(path), buf.getvalue())
    if text is None:
        text = safe_csv_text(frame.columns, frame.iter_rows())
    atomic_write_bytes(path, text.encode("utf-8"))
    return path
