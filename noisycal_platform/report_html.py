"""The report kit: one page shell, one stylesheet, one table writer, one set of number formats and one way to
draw and embed a figure, shared by the cleaning, calibration and correctness reports.

Numbers are rounded to what they mean:

* counts are integers with thousands separators (``1,124,250``, never ``1124250.0``);
* proportions, error rates and other measurements keep three significant digits (``0.0708``, ``0.500``);
* an estimate with an interval is rounded to the interval's precision, two significant digits of its width
  (``0.071 (95% CI 0.052–0.090)``), the convention of the ISO Guide to the Expression of Uncertainty in
  Measurement (GUM, JCGM 100:2008 §7.2.6);
* p-values follow the AMA Manual of Style (11th ed., §19.5): two decimals, three below 0.01, ``< 0.001``
  below that.

Figures are ``matplotlib.figure.Figure`` objects on their own Agg canvas (no pyplot, no global backend
switch, safe in worker threads), embedded as base64 PNG; nothing in a page is fetched from elsewhere.
"""

from __future__ import annotations

import base64
import html
import io
import math
import numbers
import re
from collections.abc import Callable, Iterable, Mapping, Sequence
from typing import Any

import polars as pl

__all__ = [
    "CSS",
    "MISSING",
    "ci_verdict",
    "empty_note",
    "esc",
    "figure",
    "figure_png",
    "fmt",
    "fmt_ci",
    "fmt_count",
    "fmt_fixed",
    "fmt_p",
    "fmt_share",
    "fmt_time",
    "html_table",
    "img",
    "page",
]

#: What a cell shows for a missing value (None, NaN).
MISSING = "—"

CSS = """
body{font-family:system-ui,sans-serif;margin:2em auto;max-width:1200px;padding:0 1em;color:#222;line-height:1.4}
h1{font-size:1.6em}h2{font-size:1.25em;margin-top:1.6em;border-bottom:1px solid #ddd}h3{font-size:1.05em}
table{border-collapse:collapse;margin:0.5em 0 1.5em;font-size:0.9em}
th,td{border:1px solid #ccc;padding:3px 8px;text-align:right;white-space:nowrap}
th{background:#f2f2f2;white-space:normal;vertical-align:bottom}td.l,th.l{text-align:left}
.tw{overflow-x:auto;max-width:100%}
img.plot{max-width:100%;border:1px solid #eee;margin:4px 0}
.note{color:#555;font-size:0.9em}.empty{color:#555;font-style:italic}
.banner{background:#fff3cd;border:1px solid #e0c36a;padding:0.6em 1em;margin:1em 0}
.ok{color:#1b5e20}.bad{color:#b71c1c}.unknown{color:#8a6d00}
"""


def esc(x: object) -> str:
    """HTML-escaped ``str(x)``; None is the empty string."""
    return html.escape("" if x is None else str(x))


def _is_missing(v: object) -> bool:
    return v is None or (isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral) and math.isnan(v))


def fmt_count(v: object) -> str:
    """A count as an integer with thousands separators (``1124250.0`` → ``1,124,250``); a non-integer
    value (a mean count), an integer, a boolean and a missing value are formatted by :func:`fmt`."""
    if isinstance(v, numbers.Real) and not isinstance(v, numbers.Integral) and math.isfinite(v) and v == round(v):
        return f"{round(v):,}"
    return fmt(v)


def fmt(v: object, sig: int = 3) -> str:
    """A value for a reader: ints as counts, floats to ``sig`` significant digits (at or above ``10**sig``
    rounded to an integer with separators, below 1e-4 in scientific notation), booleans as yes/no,
    anything else as ``str``. Every formatter returns plain text; :func:`html_table` escapes it."""
    if sig < 1:
        raise ValueError(f"sig must be >= 1, got {sig}")
    if _is_missing(v):
        return MISSING
    if isinstance(v, bool):
        return "yes" if v else "no"
    if isinstance(v, numbers.Integral):
        return f"{int(v):,}"
    if isinstance(v, numbers.Real):
        v = float(v)
        if math.isinf(v):
            return "∞" if v > 0 else "−∞"
        if v == 0:
            return "0"
        a = abs(v)
        if a >= 10**sig:
            return f"{round(v):,}"
        if a < 1e-4:
            return f"{v:.{sig - 1}e}"
        decimals = max(sig - 1 - math.floor(math.log10(a)), 0)
        return f"{v:.{decimals}f}"
    return str(v)


def fmt_fixed(v: object, decimals: int = 3) -> str:
    """A float with a fixed number of decimals (a column of AUROCs reads best aligned); missing → ``—``."""
    if _is_missing(v):
        return MISSING
    if isinstance(v, int | float) and not isinstance(v, bool):
        return f"{float(v):.{decimals}f}"
    return str(v)


def fmt_p(p: object) -> str:
    """A p-value (AMA Manual of Style §19.5): ``< 0.001``; three decimals below 0.01; else two."""
    if _is_missing(p):
        return MISSING
    p = float(p)  # type: ignore[arg-type]
    if not 0.0 <= p <= 1.0:
        raise ValueError(f"p-value must be in [0, 1], got {p}")
    if p < 0.001:
        return "< 0.001"
    return f"{p:.3f}" if p < 0.01 else f"{p:.2f}"


def _interval_decimals(lo: float, hi: float) -> int | None:
    """Decimals that keep two significant digits of the interval width ``hi - lo`` (None if width is 0)."""
    width = abs(hi - lo)
    if not math.isfinite(width) or width == 0:
        return None
    return max(1 - math.floor(math.log10(width)), 0)


def fmt_ci(v: object, lo: object, hi: object, *, level: float = 0.95, decimals: int | None = None) -> str:
    """``value (95% CI low–high)``, all three rounded to the interval's precision (two significant digits of
    its width, GUM §7.2.6) unless ``decimals`` is given; without an interval, just the value. Negative
    numbers take the minus sign (U+2212) so that ``−0.011–0.002`` cannot be read as a range of hyphens."""
    if _is_missing(v):
        return MISSING
    if _is_missing(lo) or _is_missing(hi):
        return fmt(v)
    v, lo, hi = float(v), float(lo), float(hi)  # type: ignore[arg-type]
    d = decimals if decimals is not None else _interval_decimals(lo, hi)
    if d is None:
        return f"{fmt(v)} (exact)" if lo == hi == v else fmt(v)

    def r(x: float) -> str:
        return f"{x:.{d}f}".replace("-", "−")

    return f"{r(v)} ({100 * level:g}% CI {r(lo)}–{r(hi)})"


def fmt_time(iso: str | None) -> str:
    """An ISO 8601 UTC time for a reader: ``2026-12-01T17:46:27+00:00`` → ``2026-12-01 17:46:27 UTC``."""
    if not iso:
        return "none yet"
    text = str(iso).replace("T", " ", 1)
    for utc in ("+00:00", "Z"):
        if text.endswith(utc):
            return text.removesuffix(utc) + " UTC"
    return text


def fmt_share(k: int, n: int) -> str:
    """``k of n (p%)`` with the percentage to three significant digits (``12 of 1,500 (0.800%)``)."""
    if n <= 0:
        return f"{k:,} of {n:,}"
    return f"{k:,} of {n:,} ({fmt(100.0 * k / n)}%)"


def ci_verdict(value: float | None, lo: float | None, hi: float | None, limit: float) -> str:
    """Plain-language comparison of an error estimate with a limit (lower is better): ``within`` when the
    whole interval lies at or below ``limit``, ``above`` when the whole interval lies above it, else
    ``not enough evidence`` (also without an estimate or an interval)."""
    if any(_is_missing(x) for x in (value, lo, hi)):
        return "not enough evidence"
    if float(hi) <= limit:  # type: ignore[arg-type]
        return "within"
    if float(lo) > limit:  # type: ignore[arg-type]
        return "above"
    return "not enough evidence"


_COUNT = re.compile(r"^(n|num|count|size)$|^n_|_count$|^n[A-Z]")
_PVALUE = re.compile(r"^p$|p_value$|^pvalue$")  # not p_chance / p_plus (parameters, not p-values)


def _formatter(name: str, dtype: pl.DataType) -> Callable[[object], str]:
    if dtype.is_integer() or (_COUNT.search(name) and dtype.is_numeric()):
        return fmt_count
    if _PVALUE.search(name) and dtype.is_float():
        return fmt_p
    return fmt


def empty_note(what_fills: str) -> str:
    """The paragraph an empty section shows: what is missing and which data would fill it (``what_fills`` is
    HTML written by the report's code, inserted as is)."""
    return f"<p class='empty'>Nothing to show yet (no rows): {what_fills}</p>"


def html_table(
    df: pl.DataFrame | None,
    columns: Sequence[str] | None = None,
    *,
    left: Iterable[str] = (),
    formats: Mapping[str, Callable[[object], str]] | None = None,
    empty: str = "this table has no rows for the inputs given.",
    labels: Mapping[str, str] | None = None,
) -> str:
    """An HTML table of ``df`` (the ``columns`` present, in that order). Cells are formatted per column:
    ``formats[col]`` if given, else counts (integer columns, ``n_*``, ``size``) by :func:`fmt_count`,
    p-values (``p``, ``*p_value``) by :func:`fmt_p`, everything else by :func:`fmt`; every cell is then
    escaped. An empty frame gives :func:`empty_note` of ``empty`` (say which data would fill the table).
    """
    if df is None or df.height == 0 or df.width == 0:
        return empty_note(empty)
    cols = [c for c in (columns or df.columns) if c in df.columns]
    left = set(left)
    formats = formats or {}
    labels = labels or {}
    fns = [formats.get(c) or _formatter(c, df.schema[c]) for c in cols]
    cls = ["l" if c in left or df.schema[c] == pl.String else "" for c in cols]
    head = "".join(f"<th class='{k}'>{esc(labels.get(c, c))}</th>" for c, k in zip(cols, cls, strict=True))
    body = []
    for row in df.select(cols).iter_rows():
        tds = "".join(f"<td class='{k}'>{esc(f(v))}</td>" for v, f, k in zip(row, fns, cls, strict=True))
        body.append(f"<tr>{tds}</tr>")
    return f"<div class='tw'><table><thead><tr>{head}</tr></thead><tbody>{''.join(body)}</tbody></table></div>"


def page(title: str, body: str | Iterable[str], *, created: str | None = None, extra_css: str = "") -> str:
    """A complete, self-contained HTML document: ``<h1>title</h1>``, the build time, then ``body``."""
    parts = [body] if isinstance(body, str) else list(body)
    stamp = f"<p class='note'>Built {esc(fmt_time(created))}.</p>" if created else ""
    return (
        "<!doctype html>\n<html lang='en'><head><meta charset='utf-8'>"
        "<meta name='viewport' content='width=device-width, initial-scale=1'>"
        f"<title>{esc(title)}</title><style>{CSS}{extra_css}</style></head>\n<body><h1>{esc(title)}</h1>{stamp}\n"
        + "\n".join(parts)
        + "\n</body></html>\n"
    )


def figure(figsize: tuple[float, float] = (6.0, 4.0), **kwargs: Any):
    """A new ``matplotlib.figure.Figure`` on its own Agg canvas (nothing global is touched)."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=figsize, **kwargs)
    FigureCanvasAgg(fig)
    return fig


def figure_png(fig: Any, *, dpi: int = 90) -> str:
    """``data:image/png;base64,...`` of ``fig`` (tight bounding box, no software tag: same figure, same bytes)."""
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=dpi, bbox_inches="tight", metadata={"Software": None})
    return "data:image/png;base64," + base64.b64encode(buf.getvalue()).decode("ascii")


def img(uri: str, alt: str, cls: str = "plot") -> str:
    """An ``<img>`` for a data URI (``alt`` escaped)."""
    return f"<img class='{esc(cls)}' src='{uri}' alt='{esc(alt)}'>"
