"""Cleaning, second sub-stage: the three issue rankings per embedding kind (seed 001 §3.3).

embeddings -> rank_irrelevant, rank_near_duplicates, rank_label_errors.
"""

import dagster as dg
import polars as pl

from assets.cleaning.keys import EMBEDDED_IN, n_stop_of
from assets.policy import CLEANING
from noisycal_platform.cleaning import pipeline as cp
from resources.executor import kernel_client
from resources.inbox import InboxResource
from resources.settings import SettingsResource

__all__ = ["rank_irrelevant", "rank_label_errors", "rank_near_duplicates"]


@CLEANING.asset(
    ins=EMBEDDED_IN,
    schema=cp.RANKING_SCHEMA,
    description="Irrelevant-sample ranking: single-linkage clustering, dendrogram-area walk (lower score = "
    "joins late and alone = more suspicious), per embedding kind (seed 001 §3.3).",
)
def rank_irrelevant(images: pl.DataFrame, embeddings: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    frame = cp.irrelevant_table(images, embeddings)
    top = frame.filter(pl.col("embedding_kind") == "dino").head(5)["file_name"].to_list()
    return dg.Output(frame, metadata={"top_dino": ", ".join(top)})


@CLEANING.asset(
    ins=EMBEDDED_IN,
    schema=cp.NEAR_DUPLICATE_SCHEMA,
    description="Near-duplicate ranking: the exact top-k closest pairs by d = (1 − cos)/2, block-wise "
    "(no N×N matrix), per embedding kind (seed 001 §3.3); with near_duplicate_rerank the learned "
    "embedding's exact k-NN candidates re-ranked by SIFT inliers of one similarity transform.",
)
def rank_near_duplicates(context: dg.AssetExecutionContext, images: pl.DataFrame, embeddings: pl.DataFrame,
                         inbox: InboxResource, settings: SettingsResource) -> dg.Output:
    # the queue extends as annotators go: two stopping runs beyond the deepest near-duplicate answered so far
    dataset = context.partition_key
    depth = cp.near_duplicate_queue_depths(inbox.layout, [dataset], initial=settings.near_duplicate_top_k,
                                           n_stop=n_stop_of(settings))[dataset]
    choice = cp.encoder_choice(images, **settings.encoder_keys())
    with kernel_client(settings) as client:
        frame = cp.near_duplicate_rankings(images, embeddings, depth, rerank=choice.rerank, k=choice.k, client=client)
    return dg.Output(frame, metadata={"pairs_per_kind": depth, "reranked": choice.rerank,
                                      "encoder_choice": choice.reason})


@CLEANING.asset(
    ins=EMBEDDED_IN,
    schema=cp.RANKING_SCHEMA,
    description="Label-error ranking: d_diff² / (d_same² + d_diff²) with the nearest same-label and "
    "different-label neighbours, ascending, per embedding kind (seed 001 §3.3).",
)
def rank_label_errors(images: pl.DataFrame, embeddings: pl.DataFrame, settings: SettingsResource) -> pl.DataFrame:
    with kernel_client(settings) as client:
        return cp.label_error_table(images, embeddings, client)
