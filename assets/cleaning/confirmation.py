"""Cleaning, third sub-stage: the queue annotators confirm, the panel's verdicts and the cleaned file lists.

rankings -> confirmation_queue (exported for the web tool) -> [raw/confirmations] -> confirmed_issues,
annotation_sessions -> cleaned_file_list.
"""

from collections.abc import Callable, Mapping
from functools import partial

import dagster as dg
import polars as pl

from assets.cleaning.keys import ANSWERS_IN, CONFIRMED_IN, RANKINGS_IN, answers_of, counts, n_stop_of
from assets.policy import CLEANING
from noisycal_platform.cleaning.pipeline import protocol_tables
from noisycal_platform.cleaning.pipeline.confirmation import (
    cleaned_file_lists,
    extending_issue_types,
    queue_from_tables,
    write_cleaned_file_lists,
)
from noisycal_platform.cleaning.pipeline.schemas import (
    CLEANED_LIST_SCHEMA,
    CONFIRMED_SCHEMA,
    QUEUE_SCHEMA,
    SESSION_ENDINGS_SCHEMA,
)
from noisycal_platform.cleaning.protocol import ISSUE_TYPES, RULES
from noisycal_platform.cleaning.sessions import session_endings
from noisycal_platform.confirm_app.queue import write_snapshot
from resources.inbox import InboxResource
from resources.settings import SettingsResource

__all__ = ["annotation_sessions", "cleaned_file_list", "confirmation_queue", "confirmed_issues"]


@CLEANING.asset(
    ins=RANKINGS_IN,
    schema=QUEUE_SCHEMA,
    description="The candidates annotators confirm, in ranking order per issue type (rank never shown). "
    "Also exported atomically to exports/confirmation_queue/<dataset>.parquet + .meta.json "
    "for the confirmation web tool.",
)
def confirmation_queue(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    rank_irrelevant: pl.DataFrame,
    rank_near_duplicates: pl.DataFrame,
    rank_label_errors: pl.DataFrame,
    inbox: InboxResource,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    dataset, exports = context.partition_key, inbox.layout.queue_exports
    queue = queue_from_tables(
        dataset, images, rank_irrelevant, rank_near_duplicates, rank_label_errors,
        max_per_type=settings.queue_max_per_type,
    )
    meta = write_snapshot(
        exports, dataset, queue, dataset_root=str(images["root"][0]), stopping_count=n_stop_of(settings),
        p_chance=settings.p_chance, p_plus=settings.p_plus,
        extending=extending_issue_types(images, rank_near_duplicates, settings.queue_max_per_type),
    )
    return dg.Output(
        queue,
        metadata={
            "stopping_count": meta["stopping_count"],
            "exported": str(exports / f"{dataset}.parquet"),
            **counts(queue, "issue_type", "candidates"),
        },
    )


def _along_queue(
    name: str,
    schema: Mapping[str, pl.DataType],
    description: str,
    table: Callable[..., pl.DataFrame],
    metadata: Callable[[pl.DataFrame, pl.DataFrame], dict[str, int]],
) -> dg.AssetsDefinition:
    """An asset of the partition's answers read along its confirmation queue with the stopping rule's n:
    ``table(answers, queue, n_stop=n)``, with ``metadata(answers, frame)`` on the output."""

    @CLEANING.asset(name=name, ins=ANSWERS_IN, schema=schema, description=description)
    def _asset(
        context: dg.AssetExecutionContext,
        confirmations: pl.DataFrame,
        confirmation_queue: pl.DataFrame,
        settings: SettingsResource,
    ) -> dg.Output[pl.DataFrame]:
        answers = answers_of(context, confirmations)
        frame = table(answers, confirmation_queue, n_stop=n_stop_of(settings))
        return dg.Output(frame, metadata=metadata(answers, frame))

    return _asset


def _verdict_counts(answers: pl.DataFrame, frame: pl.DataFrame) -> dict[str, int]:
    """The answers read, and ``<rule>_<issue type>``: the candidates each aggregation rule confirms."""
    confirmed = {
        f"{rule}_{t}": int(frame.filter(pl.col(rule) & (pl.col("issue_type") == t)).height)
        for rule in RULES
        for t in ISSUE_TYPES
    }
    return {"answers": answers.height, **confirmed}


def _session_counts(answers: pl.DataFrame, frame: pl.DataFrame) -> dict[str, int]:
    """The sessions, and ``ended_by_<reason>``: how many the stopping rule, the queue's end or nothing ended."""
    return {"sessions": frame.height, **counts(frame, "ended_by", "ended_by")}


confirmed_issues = _along_queue(
    "confirmed_issues",
    CONFIRMED_SCHEMA,
    "Per candidate: yes/no counts of the expert panel after undos, and whether the panel "
    "confirmed it unanimously and by majority (Gröger et al. 2023 §3.3).",
    partial(protocol_tables.confirmed_issues, roles=protocol_tables.PANEL_ROLES),
    _verdict_counts,
)
annotation_sessions = _along_queue(
    "annotation_sessions",
    SESSION_ENDINGS_SCHEMA,
    "Per annotator and issue type: candidates answered along the queue, yes count, and whether the "
    "stopping rule or the end of the candidates ended the session (null = still open; Gröger et al. 2023 Figure 9).",
    session_endings,
    _session_counts,
)


@CLEANING.asset(
    ins=CONFIRMED_IN,
    schema=CLEANED_LIST_SCHEMA,
    description="The cleaned file list per aggregation rule: confirmed irrelevant samples dropped, one image "
    "kept per confirmed near-duplicate group (seeded); label errors are not removed. Exported as "
    "exports/cleaned_file_lists/<dataset>_<rule>.csv (one column file_name).",
)
def cleaned_file_list(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    confirmed_issues: pl.DataFrame,
    inbox: InboxResource,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    lists = cleaned_file_lists(images, confirmed_issues, seed=settings.seed)
    kept = write_cleaned_file_lists(inbox.layout.cleaned_lists, context.partition_key, lists)
    return dg.Output(lists, metadata={"images": images.height, **{f"kept_{r}": n for r, n in kept.items()}})
