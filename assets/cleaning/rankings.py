"""Cleaning, second sub-stage: the three issue rankings per embedding kind (Gröger et al. 2023 §3.3).

embeddings -> rank_irrelevant; embeddings -> neighbour_rankings -> rank_near_duplicates, rank_label_errors (one
step: one pass over the nearest neighbours feeds both).
"""

from collections.abc import Iterator

import dagster as dg
import polars as pl

from assets.cleaning.keys import EMBEDDED_IN, RANK_LABEL_ERRORS, RANK_NEAR_DUPLICATES, queue_depths
from assets.policy import CLEANING
from noisycal_platform.cleaning.pipeline import rankings
from noisycal_platform.cleaning.pipeline.embeddings import encoder_choice
from noisycal_platform.cleaning.pipeline.schemas import NEAR_DUPLICATE_SCHEMA, RANKING_SCHEMA
from resources.executor import kernel_client
from resources.inbox import InboxResource
from resources.settings import SettingsResource

__all__ = ["neighbour_rankings", "rank_irrelevant"]


@CLEANING.asset(
    ins=EMBEDDED_IN,
    schema=RANKING_SCHEMA,
    description="Irrelevant-sample ranking: single-linkage clustering, dendrogram-area walk (lower score = "
    "joins late and alone = more suspicious), per embedding kind (Gröger et al. 2023 §3.3).",
)
def rank_irrelevant(images: pl.DataFrame, embeddings: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    frame = rankings.rank_irrelevant(images, embeddings)
    top = frame.filter(pl.col("embedding_kind") == "dino").head(5)["file_name"].to_list()
    return dg.Output(frame, metadata={"top_dino": ", ".join(top)})


#: output names of the one step (its assets' keys are cleaning/<name>)
NEAR_DUPLICATES, LABEL_ERRORS = RANK_NEAR_DUPLICATES.path[-1], RANK_LABEL_ERRORS.path[-1]


@CLEANING.multi_asset(
    {NEAR_DUPLICATES: NEAR_DUPLICATE_SCHEMA, LABEL_ERRORS: RANKING_SCHEMA},
    ins=EMBEDDED_IN,
    can_subset=True,
    descriptions={
        NEAR_DUPLICATES: "Near-duplicate ranking: the exact top-k closest pairs by d = (1 − cos)/2, block-wise "
        "(no N×N matrix), per embedding kind (Gröger et al. 2023 §3.3); with near_duplicate_rerank the learned "
        "embedding's exact k-NN candidates re-ranked by SIFT inliers of one similarity transform.",
        LABEL_ERRORS: "Label-error ranking: d_diff² / (d_same² + d_diff²) with the nearest same-label and "
        "different-label neighbours, ascending, per embedding kind (Gröger et al. 2023 §3.3).",
    },
    description="The near-duplicate and label-error rankings, one step: both read every image's nearest "
    "neighbours, so with the dask executor one pass of row-block tasks feeds both. Either reruns alone (the "
    "queue refill reruns only the near-duplicate ranking).",
)
def neighbour_rankings(context: dg.AssetExecutionContext, images: pl.DataFrame, embeddings: pl.DataFrame,
                       inbox: InboxResource, settings: SettingsResource) -> Iterator[dg.Output]:
    # the queue extends as annotators go: two stopping runs beyond the deepest near-duplicate answered so far
    dataset, selected = context.partition_key, context.op_execution_context.selected_output_names
    depth = queue_depths(inbox, settings, [dataset])[dataset]
    choice = encoder_choice(images, **settings.encoder_keys())
    with kernel_client(settings) as client:
        pairs, errors = rankings.neighbour_rankings(
            images, embeddings, depth, near_duplicates=NEAR_DUPLICATES in selected,
            label_errors=LABEL_ERRORS in selected, rerank=choice.rerank, k=choice.k, client=client,
        )
    if pairs is not None:
        yield dg.Output(pairs, output_name=NEAR_DUPLICATES, metadata={
            "pairs_per_kind": depth, "reranked": choice.rerank, "encoder_choice": choice.reason})
    if errors is not None:
        yield dg.Output(errors, output_name=LABEL_ERRORS)
