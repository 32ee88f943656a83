"""Every cleaning table's columns, defined once: the ``schema=`` of each ``cleaning/*`` asset and the frames the
functions of this package return. The tables whose rules live in another module (the rankings, the answers, the
statistics) take their schema from there and are listed here as well, so one module names them all.
"""

from __future__ import annotations

import polars as pl

from noisycal_platform.cleaning.agreement import AGREEMENT_SCHEMA
from noisycal_platform.cleaning.encoder.auto import CHOICE_SCHEMA
from noisycal_platform.cleaning.expert_lay import DIFF_SCHEMA, TEST_SCHEMA
from noisycal_platform.cleaning.impact import IMPACT_SCHEMA
from noisycal_platform.cleaning.protocol import ANSWER_SCHEMA
from noisycal_platform.cleaning.ranking_quality import QUALITY_SCHEMA, SPEEDUP_SCHEMA, TRUTH_SCHEMA
from noisycal_platform.cleaning.rankings.types import PAIR_RANKING_SCHEMA, RANKING_SCHEMA
from noisycal_platform.cleaning.sensitivity import SENSITIVITY_SCHEMA
from noisycal_platform.cleaning.sessions import SESSION_ENDINGS_SCHEMA

__all__ = [
    "AGREEMENT_SCHEMA",
    "ANSWER_SCHEMA",
    "CLEANED_LIST_SCHEMA",
    "CLEANING_IMPACT_SCHEMA",
    "CONFIRMED_SCHEMA",
    "DIFF_SCHEMA",
    "EMBEDDINGS_SCHEMA",
    "ENCODER_SCHEMA",
    "ISSUE_TABLE_SCHEMA",
    "NEAR_DUPLICATE_SCHEMA",
    "PAIR_RANKING_SCHEMA",
    "PREVALENCE_SCHEMA",
    "QUALITY_SCHEMA",
    "QUEUE_SCHEMA",
    "RANKING_SCHEMA",
    "SENSITIVITY_SCHEMA",
    "SESSION_ENDINGS_SCHEMA",
    "SPEEDUP_SCHEMA",
    "TEST_SCHEMA",
    "TRUTH_SCHEMA",
]


QUEUE_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "issue_type": pl.String(),
    "position": pl.Int64(),
    "item_id": pl.String(),
    "item_id_2": pl.String(),
    "label": pl.String(),
}


CONFIRMED_SCHEMA: dict[str, pl.DataType] = {
    **QUEUE_SCHEMA,  # position null for answered candidates no longer in the queue
    "n_yes": pl.Int64(),
    "n_no": pl.Int64(),
    "n_annotators": pl.Int64(),
    "n_panel": pl.Int64(),
    "seen_by_all": pl.Boolean(),
    "unanimous": pl.Boolean(),
    "majority": pl.Boolean(),
}


PREVALENCE_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "rule": pl.String(),
    "n_label_errors": pl.Int64(),
    "n_items": pl.Int64(),
    "prevalence": pl.Float64(),
    "ci_low": pl.Float64(),
    "ci_high": pl.Float64(),
}


ISSUE_TABLE_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "size": pl.Int64(),
    "rule": pl.String(),
    "issue_type": pl.String(),
    "n_issues": pl.Int64(),  # pairs for near_duplicate
    "percent": pl.Float64(),  # 100 · n_issues / size (as in Gröger et al. 2023 Table 1)
}


ENCODER_SCHEMA: dict[str, pl.DataType] = {
    "dataset_hash": pl.String(),
    "config_hash": pl.String(),
    "preset": pl.String(),
    "config_json": pl.String(),
    "sha256": pl.String(),
    "artifact": pl.String(),
    "n_images": pl.Int64(),
    "train_seconds": pl.Float64(),
    "images_per_second": pl.Float64(),
    "reused": pl.Boolean(),
    **CHOICE_SCHEMA,  # the encoder and near-duplicate search chosen for the dataset, and why (``encoder_choice``)
}


#: ``cleaning/embeddings``: a manifest, one row per embedding kind, naming the cache entry (float32 ``.npy``, rows
#: in ``idx`` order) that holds the vectors; the vectors stay in that file (4 kB per image: 4 GB at a million)
EMBEDDINGS_SCHEMA: dict[str, pl.DataType] = {
    "embedding_kind": pl.String(),
    "dataset_hash": pl.String(),
    "cache_key": pl.String(),
    "cache_file": pl.String(),
    "n_rows": pl.Int64(),
    "dim": pl.Int64(),
    "file_bytes": pl.Int64(),
    "sha256": pl.String(),
}


CLEANED_LIST_SCHEMA: dict[str, pl.DataType] = {"file_name": pl.String(), "rule": pl.String()}


CLEANING_IMPACT_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "model_version": pl.String(),
    "rule": pl.String(),
    **IMPACT_SCHEMA,
}


#: The near-duplicate table: the pair ranking plus the verification columns (null where not verified).
NEAR_DUPLICATE_SCHEMA: dict[str, pl.DataType] = {**PAIR_RANKING_SCHEMA, "inliers": pl.Int64(), "verified": pl.Boolean()}
