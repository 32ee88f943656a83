"""Behind ``assets/cleaning/confirmation.py``: the queue annotators confirm, how deep the near-duplicate queue must
reach, and the cleaned file lists. The panel's verdicts (``cleaning/confirmed_issues``) are
:func:`~noisycal_platform.cleaning.pipeline.protocol_tables.confirmed_issues`, the sessions
(``cleaning/annotation_sessions``) :func:`~noisycal_platform.cleaning.sessions.session_endings`.

Asset -> function: ``cleaning/confirmation_queue`` -> :func:`queue_from_tables` (and :func:`extending_issue_types`);
``cleaning/cleaned_file_list`` -> :func:`cleaned_file_lists` (written by :func:`write_cleaned_file_lists`); the
queue refill (``rank_near_duplicates`` depth) -> :func:`near_duplicate_queue_depths`.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

import polars as pl

from noisycal_platform.cleaning.pipeline.protocol_tables import cleaned_file_list, confirmation_queue, image_files
from noisycal_platform.cleaning.pipeline.rankings import stored_rankings
from noisycal_platform.cleaning.pipeline.schemas import CLEANED_LIST_SCHEMA
from noisycal_platform.cleaning.protocol import RULES, queue_depth
from noisycal_platform.spreadsheet import write_person_csv

__all__ = [
    "cleaned_file_lists",
    "extending_issue_types",
    "near_duplicate_queue_depths",
    "queue_from_tables",
    "write_cleaned_file_lists",
]


def queue_from_tables(
    dataset: str,
    images: pl.DataFrame,
    irrelevant: pl.DataFrame,
    near_dups: pl.DataFrame,
    label_errors: pl.DataFrame,
    *,
    max_per_type: int | None = None,
) -> pl.DataFrame:
    """:func:`confirmation_queue` of the stored DINO rankings (``RANKING_SCHEMA`` / ``PAIR_RANKING_SCHEMA``)."""
    files = image_files(images)
    rankings = stored_rankings("dino", files.height, irrelevant, near_dups, label_errors)
    return confirmation_queue(dataset, *rankings, files, max_per_type=max_per_type)


def extending_issue_types(images: pl.DataFrame, near_dups: pl.DataFrame, max_per_type: int | None) -> list[str]:
    """Issue types whose queue is extended as annotators go (`near_duplicate_queue_depths`): the near-duplicate
    one while its ranking holds fewer than all N(N − 1)/2 pairs and no ``queue_max_per_type`` cap is set. The
    other rankings hold every image already."""
    pairs = near_dups.filter(pl.col("embedding_kind") == "dino").height if near_dups.height else 0
    n = images.height
    return ["near_duplicate"] if max_per_type is None and pairs < n * (n - 1) // 2 else []


def near_duplicate_queue_depths(
    answers: pl.DataFrame, datasets: Sequence[str], *, initial: int, n_stop: int
) -> dict[str, int]:
    """Per dataset, the pairs its near-duplicate ranking must hold so that the queue keeps two stopping runs
    beyond the deepest answer logged so far (`protocol.queue_depth` over the ``answers``, ``ANSWER_SCHEMA``: the
    records of ``inbox/confirmations``, Gröger et al. 2023 §3.3)."""
    return {d: queue_depth(answers, d, "near_duplicate", initial=initial, n_stop=n_stop) for d in datasets}


def cleaned_file_lists(images: pl.DataFrame, confirmed: pl.DataFrame, *, seed: int = 0) -> pl.DataFrame:
    """``CLEANED_LIST_SCHEMA``: :func:`cleaned_file_list` under each rule, stacked with a ``rule`` column."""
    files = image_files(images)
    parts = [
        cleaned_file_list(files, confirmed, rule=rule, seed=seed).with_columns(pl.lit(rule).alias("rule"))
        for rule in RULES
    ]
    return pl.concat(parts).cast(CLEANED_LIST_SCHEMA)


def write_cleaned_file_lists(folder: str | os.PathLike[str], dataset: str, lists: pl.DataFrame) -> dict[str, int]:
    """``<folder>/<dataset>_<rule>.csv`` (one column ``file_name``, spreadsheet-safe) and its exact ``.parquet``
    twin per rule, atomically; returns kept counts."""
    kept = {}
    for rule in RULES:
        part = lists.filter(pl.col("rule") == rule).select("file_name")
        write_person_csv(Path(folder) / f"{dataset}_{rule}.csv", part)
        kept[rule] = part.height
    return kept
