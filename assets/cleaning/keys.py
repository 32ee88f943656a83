"""What the cleaning sub-stages share: their asset keys, their input maps, the partition's answers and the
near-duplicate queue's depth (read here from ``inbox/confirmations``: the library takes frames)."""

from collections.abc import Sequence

import dagster as dg
import polars as pl

from assets.policy import CLEANING
from assets.raw import CONFIRMATIONS, IMAGES
from noisycal_platform.cleaning.pipeline.confirmation import near_duplicate_queue_depths
from noisycal_platform.cleaning.protocol import answers_from_records, stopping_count
from noisycal_platform.ingest import read_confirmation_records
from resources.inbox import InboxResource
from resources.settings import SettingsResource

__all__ = [
    "AFTER_QUEUE",
    "ANSWERS_IN",
    "CLEANED_FILE_LIST",
    "CONFIRMATION_QUEUE",
    "CONFIRMED_IN",
    "CONFIRMED_ISSUES",
    "EMBEDDED_IN",
    "EMBEDDINGS",
    "IMAGES_IN",
    "RANKINGS_IN",
    "RANK_IRRELEVANT",
    "RANK_LABEL_ERRORS",
    "RANK_NEAR_DUPLICATES",
    "SSL_ENCODER",
    "answers_of",
    "counts",
    "n_stop_of",
    "queue_depths",
]

SSL_ENCODER, EMBEDDINGS = (CLEANING.key(n) for n in ("ssl_encoder", "embeddings"))
RANK_IRRELEVANT, RANK_NEAR_DUPLICATES, RANK_LABEL_ERRORS = (
    CLEANING.key(n) for n in ("rank_irrelevant", "rank_near_duplicates", "rank_label_errors")
)
CONFIRMATION_QUEUE, CONFIRMED_ISSUES, CLEANED_FILE_LIST = (
    CLEANING.key(n) for n in ("confirmation_queue", "confirmed_issues", "cleaned_file_list")
)

IMAGES_IN = {"images": dg.AssetIn(IMAGES)}
EMBEDDED_IN = {**IMAGES_IN, "embeddings": dg.AssetIn(EMBEDDINGS)}
RANKINGS_IN = {
    **IMAGES_IN,
    "rank_irrelevant": dg.AssetIn(RANK_IRRELEVANT),
    "rank_near_duplicates": dg.AssetIn(RANK_NEAR_DUPLICATES),
    "rank_label_errors": dg.AssetIn(RANK_LABEL_ERRORS),
}
ANSWERS_IN = {"confirmations": dg.AssetIn(CONFIRMATIONS), "confirmation_queue": dg.AssetIn(CONFIRMATION_QUEUE)}
CONFIRMED_IN = {**IMAGES_IN, "confirmed_issues": dg.AssetIn(CONFIRMED_ISSUES)}
#: For the statistics over the answers alone: the queue is upstream (lineage, automation) but not loaded.
AFTER_QUEUE = {"ins": {"confirmations": dg.AssetIn(CONFIRMATIONS)}, "deps": [CONFIRMATION_QUEUE]}


def n_stop_of(settings: SettingsResource) -> int:
    """n of the stopping rule (n consecutive "no"), from the clinic's p_chance and p_plus (Gröger et al. 2023 §3.3)."""
    return max(1, stopping_count(settings.p_chance, settings.p_plus))


def answers_of(context: dg.AssetExecutionContext, confirmations: pl.DataFrame) -> pl.DataFrame:
    """The confirmation answers of the partition's dataset."""
    return confirmations.filter(pl.col("dataset") == context.partition_key)


def counts(frame: pl.DataFrame, column: str, prefix: str) -> dict[str, int]:
    """Metadata ``<prefix>_<value>``: the number of rows per value of ``column`` (a null value reads ``open``)."""
    return {f"{prefix}_{v or 'open'}": n for v, n in frame.group_by(column).len().sort(column).iter_rows()}


def queue_depths(inbox: InboxResource, settings: SettingsResource, datasets: Sequence[str]) -> dict[str, int]:
    """Per dataset, the pairs its near-duplicate ranking must hold: two stopping runs beyond the deepest answer in
    ``inbox/confirmations`` (:func:`~noisycal_platform.cleaning.pipeline.confirmation.near_duplicate_queue_depths`)."""
    answers = answers_from_records(read_confirmation_records(inbox.layout)[0].drop("line").to_dicts())
    return near_duplicate_queue_depths(answers, datasets, initial=settings.near_duplicate_top_k,
                                       n_stop=n_stop_of(settings))
