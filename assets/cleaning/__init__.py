"""Cleaning stage (Gröger et al. 2023, SelfClean protocol), one partition per image dataset; one module per sub-stage.

- ``embeddings``: raw/images -> ssl_encoder -> embeddings
- ``rankings``: -> rank_irrelevant; -> rank_near_duplicates, rank_label_errors (one step, ``neighbour_rankings``)
- ``confirmation``: -> confirmation_queue (exported for the web tool) -> [raw/confirmations] -> confirmed_issues,
  annotation_sessions -> cleaned_file_list
- ``outcomes``: -> label_error_prevalence, agreement, ranking_quality, annotation_speedup, stopping_sensitivity,
  expert_vs_lay, cleaning_impact; ranking_vs_truth where the dataset ships a truth.json.

Each body reads, calls one function of ``noisycal_platform.cleaning.pipeline.<the same module name>`` and
returns; the warehouse adds the ``dataset`` partition column. The assets are re-exported here, so
``dg.load_assets_from_modules`` finds the whole stage in this one module.
"""

from assets.cleaning.confirmation import annotation_sessions, cleaned_file_list, confirmation_queue, confirmed_issues
from assets.cleaning.embeddings import embeddings, ssl_encoder
from assets.cleaning.keys import (
    CLEANED_FILE_LIST,
    CONFIRMATION_QUEUE,
    CONFIRMED_ISSUES,
    EMBEDDINGS,
    RANK_IRRELEVANT,
    RANK_LABEL_ERRORS,
    RANK_NEAR_DUPLICATES,
    SSL_ENCODER,
    n_stop_of,
    queue_depths,
)
from assets.cleaning.outcomes import (
    agreement,
    annotation_speedup,
    cleaning_impact,
    expert_vs_lay,
    label_error_prevalence,
    ranking_quality,
    ranking_vs_truth,
    stopping_sensitivity,
)
from assets.cleaning.rankings import neighbour_rankings, rank_irrelevant

__all__ = [
    "CLEANED_FILE_LIST",
    "CONFIRMATION_QUEUE",
    "CONFIRMED_ISSUES",
    "EMBEDDINGS",
    "RANK_IRRELEVANT",
    "RANK_LABEL_ERRORS",
    "RANK_NEAR_DUPLICATES",
    "SSL_ENCODER",
    "agreement",
    "annotation_sessions",
    "annotation_speedup",
    "cleaned_file_list",
    "cleaning_impact",
    "confirmation_queue",
    "confirmed_issues",
    "embeddings",
    "expert_vs_lay",
    "label_error_prevalence",
    "n_stop_of",
    "neighbour_rankings",
    "queue_depths",
    "rank_irrelevant",
    "ranking_quality",
    "ranking_vs_truth",
    "ssl_encoder",
    "stopping_sensitivity",
]
