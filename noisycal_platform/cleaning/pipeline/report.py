"""Behind ``reports/cleaning``: the cleaning report page over every registered dataset, drawn by
:func:`~noisycal_platform.cleaning.report.render_cleaning_report`.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

import polars as pl

from noisycal_platform.cleaning.encoder.auto import CHOICE_SCHEMA
from noisycal_platform.cleaning.pipeline.protocol_tables import issue_table
from noisycal_platform.cleaning.pipeline.schemas import CONFIRMED_SCHEMA
from noisycal_platform.cleaning.ranking_quality import speedup_averages
from noisycal_platform.cleaning.report import cleaning_status_line, render_cleaning_report

__all__ = ["REPORT_INPUTS", "CleaningReport", "cleaning_report"]


#: The cleaning tables ``reports/cleaning`` reads besides ``raw/images``, by asset name (all datasets stacked).
REPORT_INPUTS = (
    "ssl_encoder",
    "confirmation_queue",
    "confirmed_issues",
    "label_error_prevalence",
    "agreement",
    "ranking_quality",
    "ranking_vs_truth",
    "annotation_speedup",
    "cleaning_impact",
    "stopping_sensitivity",
    "expert_lay_tests",
    "annotation_sessions",
)


def _choices(encoders: pl.DataFrame | None) -> pl.DataFrame:
    """The ``CHOICE_SCHEMA`` columns of the stored encoder rows, one row per dataset (none before any is built)."""
    if encoders is None or not {"dataset", *CHOICE_SCHEMA} <= set(encoders.columns):
        return pl.DataFrame(schema={"dataset": pl.String(), **CHOICE_SCHEMA})
    return encoders.select("dataset", *CHOICE_SCHEMA).sort("dataset")


@dataclass(frozen=True)
class CleaningReport:
    """The cleaning report page: ``html``, the ``datasets`` it covers (sorted) and the index page's ``verdict``."""

    html: str
    datasets: list[str]
    verdict: str


def cleaning_report(images: pl.DataFrame, tables: Mapping[str, pl.DataFrame], *, created: str) -> CleaningReport:
    """:func:`render_cleaning_report` over every registered dataset: Table 1 from ``confirmed_issues`` and the
    dataset sizes (Gröger et al. 2023 Table 1), the speed-up with its micro and macro averages (Table 4), thumbnails
    from
    each dataset's root, and the encoder chosen per dataset (``ssl_encoder``, optional). ``tables`` holds each of
    ``REPORT_INPUTS``; a table never built may have no columns."""
    registered = "dataset" in images.columns and images.height > 0
    sizes = dict(images.group_by("dataset").len().iter_rows()) if registered else {}
    roots = dict(images.select("dataset", "root").unique().iter_rows()) if registered else {}
    confirmed = tables["confirmed_issues"]
    if "dataset" not in confirmed.columns:
        confirmed = pl.DataFrame(schema=CONFIRMED_SCHEMA)
    html = render_cleaning_report(
        issues=issue_table(confirmed, sizes),
        prevalence=tables["label_error_prevalence"],
        agreement=tables["agreement"],
        ranking_quality=tables["ranking_quality"],
        ranking_truth=tables["ranking_vs_truth"],
        speedup=speedup_averages(tables["annotation_speedup"]),
        impact=tables["cleaning_impact"],
        sensitivity=tables["stopping_sensitivity"],
        expert_lay=tables["expert_lay_tests"],
        sessions=tables["annotation_sessions"],
        encoders=_choices(tables.get("ssl_encoder")),
        queue=tables["confirmation_queue"],
        confirmed=confirmed,
        dataset_roots=roots,
        dataset_sizes=sizes,
        created=created,
    )
    verdict = cleaning_status_line(tables["confirmation_queue"], confirmed) if sizes else "no dataset registered yet"
    return CleaningReport(html, sorted(sizes), verdict)
