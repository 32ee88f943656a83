"""Cleaning stage (seed 001, SelfClean protocol), one partition per image dataset.

raw/images -> ssl_encoder -> embeddings -> rank_irrelevant, rank_near_duplicates, rank_label_errors
-> confirmation_queue (exported for the web tool) -> [raw/confirmations] -> confirmed_issues, annotation_sessions
-> cleaned_file_list, label_error_prevalence, agreement, ranking_quality, annotation_speedup,
   stopping_sensitivity, expert_vs_lay, cleaning_impact; ranking_vs_truth where the dataset ships a truth.json.
Each body reads, calls one function of ``noisycal_platform.cleaning.pipeline`` and returns; the warehouse adds
the ``dataset`` partition column.
"""

import dagster as dg
import polars as pl

from assets._shell import failing_on
from assets.policy import CLEANING, COMPUTE
from assets.progress import epoch_progress, timed
from assets.raw import CONFIRMATIONS, IMAGES
from noisycal_platform.cleaning import pipeline as cp
from noisycal_platform.cleaning.agreement import AGREEMENT_SCHEMA
from noisycal_platform.cleaning.expert_lay import DIFF_SCHEMA, TEST_SCHEMA
from noisycal_platform.cleaning.protocol import ISSUE_TYPES, RULES, stopping_count
from noisycal_platform.cleaning.sensitivity import SENSITIVITY_SCHEMA
from noisycal_platform.confirm_app.queue import write_snapshot
from noisycal_platform.io import InputError, read_cleaning_scores
from resources.compute import ComputeResource
from resources.executor import kernel_client
from resources.inbox import InboxResource
from resources.model_registry import ModelRegistryResource
from resources.settings import SettingsResource

SSL_ENCODER, EMBEDDINGS = (CLEANING.key(n) for n in ("ssl_encoder", "embeddings"))
RANK_IRRELEVANT, RANK_NEAR_DUPLICATES, RANK_LABEL_ERRORS = (
    CLEANING.key(n) for n in ("rank_irrelevant", "rank_near_duplicates", "rank_label_errors")
)
CONFIRMATION_QUEUE, CONFIRMED_ISSUES, CLEANED_FILE_LIST = (
    CLEANING.key(n) for n in ("confirmation_queue", "confirmed_issues", "cleaned_file_list")
)

IMAGES_IN = {"images": dg.AssetIn(IMAGES)}
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
    """n of the stopping rule (n consecutive "no"), from the clinic's p_chance and p_plus (seed 001 §3.3)."""
    return max(1, stopping_count(settings.p_chance, settings.p_plus))


def _answers(confirmations: pl.DataFrame, dataset: str) -> pl.DataFrame:
    return confirmations.filter(pl.col("dataset") == dataset)


def _counts(frame: pl.DataFrame, column: str, prefix: str) -> dict[str, int]:
    """Metadata ``<prefix>_<value>``: the number of rows per value of ``column`` (a null value reads ``open``)."""
    return {f"{prefix}_{v or 'open'}": n for v, n in frame.group_by(column).len().sort(column).iter_rows()}


# ------------------------------------------------------------------------------------------- embeddings
@CLEANING.asset(
    **COMPUTE,
    ins=IMAGES_IN,
    schema=cp.ENCODER_SCHEMA,
    description="The dataset's encoder, chosen from its images (encoder: auto; the choice and why in the metadata): "
    "a frozen ImageNet EfficientNet-Lite for real photographs, or for tiny images a DINO ViT trained from random "
    "initialisation on the dataset's own images (seed 001 §3.6), weights in artifacts/<sha256>.pt (loaded with "
    "weights_only=True), reused while the dataset content and the configuration are unchanged.",
)
def ssl_encoder(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    inbox: InboxResource,
    compute: ComputeResource,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    config = cp.encoder_config(
        settings.encoder_preset, settings.encoder_overrides, device=compute.torch_device(), seed=settings.seed
    )
    compute.apply_threads()
    choice = cp.encoder_choice(images, **settings.encoder_keys())
    frame = cp.ssl_encoder_table(
        images,
        config,
        preset=settings.encoder_preset,
        artifacts=inbox.layout.artifacts,
        choice=choice,
        progress=epoch_progress(context, "ssl_encoder"),
    )
    row = frame.row(0, named=True)
    return dg.Output(
        frame,
        metadata={
            "sha256": row["sha256"],
            "weights": row["artifact"],
            "preset": row["preset"],
            "reused_cached_weights": row["reused"],
            "train_seconds": row["train_seconds"],
            "images_per_second": row["images_per_second"],
            **choice.metadata(),
        },
    )


@CLEANING.asset(
    **COMPUTE,
    ins={**IMAGES_IN, "ssl_encoder": dg.AssetIn(SSL_ENCODER)},
    schema=cp.EMBEDDINGS_SCHEMA,
    description="One row per image and embedding kind: the L2-normalised teacher CLS token (dino) and the "
    "non-learned baseline (downsampled pixels + colour histogram), cached by content hash.",
)
def embeddings(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    ssl_encoder: pl.DataFrame,
    inbox: InboxResource,
    compute: ComputeResource,
    settings: SettingsResource,
):
    encoder = ssl_encoder.row(0, named=True)
    compute.apply_threads()  # torch intra-op threads of the frozen encoder's forward pass (0 = torch default)
    with kernel_client(settings) as client:
        frame, hit = cp.embeddings_table(
            images,
            encoder,
            inbox.layout.cache / "embeddings",
            device=compute.torch_device(),
            timed=lambda label, n, fn: timed(context, label, n, fn),
            client=client,
        )
    dims = {f"dim_{k}": cp.embedding_matrix(frame, k).shape[1] for k in cp.EMBEDDING_KINDS}
    meta = {"images": images.height, **dims, "cache_hit": hit, "encoder": encoder["preset"],
            "encoder_sha256": encoder["sha256"]}
    return dg.Output(frame, metadata=meta)


# ------------------------------------------------------------------------------------------- rankings
_EMBEDDED_IN = {**IMAGES_IN, "embeddings": dg.AssetIn(EMBEDDINGS)}


@CLEANING.asset(
    ins=_EMBEDDED_IN,
    schema=cp.RANKING_SCHEMA,
    description="Irrelevant-sample ranking: single-linkage clustering, dendrogram-area walk (lower score = "
    "joins late and alone = more suspicious), per embedding kind (seed 001 §3.3).",
)
def rank_irrelevant(images: pl.DataFrame, embeddings: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    frame = cp.irrelevant_table(images, embeddings)
    top = frame.filter(pl.col("embedding_kind") == "dino").head(5)["file_name"].to_list()
    return dg.Output(frame, metadata={"top_dino": ", ".join(top)})


@CLEANING.asset(
    ins=_EMBEDDED_IN,
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
    ins=_EMBEDDED_IN,
    schema=cp.RANKING_SCHEMA,
    description="Label-error ranking: d_diff² / (d_same² + d_diff²) with the nearest same-label and "
    "different-label neighbours, ascending, per embedding kind (seed 001 §3.3).",
)
def rank_label_errors(images: pl.DataFrame, embeddings: pl.DataFrame, settings: SettingsResource) -> pl.DataFrame:
    with kernel_client(settings) as client:
        return cp.label_error_table(images, embeddings, client)


# ------------------------------------------------------------------------------------------- confirmation
@CLEANING.asset(
    ins=RANKINGS_IN,
    schema=cp.QUEUE_SCHEMA,
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
    queue = cp.queue_from_tables(
        dataset, images, rank_irrelevant, rank_near_duplicates, rank_label_errors,
        max_per_type=settings.queue_max_per_type,
    )
    meta = write_snapshot(
        exports, dataset, queue, dataset_root=str(images["root"][0]), stopping_count=n_stop_of(settings),
        p_chance=settings.p_chance, p_plus=settings.p_plus,
        extending=cp.extending_issue_types(images, rank_near_duplicates, settings.queue_max_per_type),
    )
    return dg.Output(
        queue,
        metadata={
            "stopping_count": meta["stopping_count"],
            "exported": str(exports / f"{dataset}.parquet"),
            **_counts(queue, "issue_type", "candidates"),
        },
    )


@CLEANING.asset(
    ins=ANSWERS_IN,
    schema=cp.CONFIRMED_SCHEMA,
    description="Per candidate: yes/no counts of the expert panel after undos, and whether the panel "
    "confirmed it unanimously and by majority (seed 001 §3.3).",
)
def confirmed_issues(
    context: dg.AssetExecutionContext,
    confirmations: pl.DataFrame,
    confirmation_queue: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    answers = _answers(confirmations, context.partition_key)
    frame = cp.confirmed_issues(answers, confirmation_queue, roles=cp.PANEL_ROLES, n_stop=n_stop_of(settings))
    meta = {
        f"{rule}_{t}": int(frame.filter(pl.col(rule) & (pl.col("issue_type") == t)).height)
        for rule in RULES
        for t in ISSUE_TYPES
    }
    return dg.Output(frame, metadata={"answers": answers.height, **meta})


@CLEANING.asset(
    ins=ANSWERS_IN,
    schema=cp.SESSION_ENDINGS_SCHEMA,
    description="Per annotator and issue type: candidates answered along the queue, yes count, and whether the "
    "stopping rule or the end of the candidates ended the session (null = still open; seed 001 Figure 9).",
)
def annotation_sessions(
    context: dg.AssetExecutionContext,
    confirmations: pl.DataFrame,
    confirmation_queue: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    answers = _answers(confirmations, context.partition_key)
    frame = cp.session_endings_table(answers, confirmation_queue, n_stop=n_stop_of(settings))
    return dg.Output(frame, metadata={"sessions": frame.height, **_counts(frame, "ended_by", "ended_by")})


@CLEANING.asset(
    ins=CONFIRMED_IN,
    schema=cp.CLEANED_LIST_SCHEMA,
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
    lists = cp.cleaned_file_lists(images, confirmed_issues, seed=settings.seed)
    kept = cp.write_cleaned_file_lists(inbox.layout.cleaned_lists, context.partition_key, lists)
    return dg.Output(lists, metadata={"images": images.height, **{f"kept_{r}": n for r, n in kept.items()}})


# ------------------------------------------------------------------------------------------- statistics
@CLEANING.asset(
    ins=CONFIRMED_IN,
    schema=cp.PREVALENCE_SCHEMA,
    description="Prevalence of confirmed label errors with a Clopper–Pearson 95% CI (label errors are "
    "reported, not removed: seed 001 §3.4).",
)
def label_error_prevalence(
    context: dg.AssetExecutionContext, images: pl.DataFrame, confirmed_issues: pl.DataFrame
) -> pl.DataFrame:
    return cp.label_error_prevalence(confirmed_issues, cp.image_files(images), dataset=context.partition_key)


@CLEANING.asset(
    **AFTER_QUEUE,
    schema=AGREEMENT_SCHEMA,
    description="Inter-annotator agreement: Krippendorff's α over all annotators and pairwise Cohen's κ, "
    "95% bootstrap CIs over items, good/questionable/unacceptable bands.",
)
def agreement(context: dg.AssetExecutionContext, confirmations: pl.DataFrame, settings: SettingsResource):
    answers = _answers(confirmations, context.partition_key)
    return cp.agreement_table(answers, n_boot=settings.n_bootstrap_cleaning, seed=settings.seed)


@CLEANING.asset(
    ins={"confirmed_issues": dg.AssetIn(CONFIRMED_ISSUES)},
    schema=cp.QUALITY_SCHEMA,
    description="Ranking quality against the unanimous answers on the items the whole panel saw: AUROC, "
    "AP and AUPRG with the positive rate as baseline.",
)
def ranking_quality(confirmed_issues: pl.DataFrame) -> pl.DataFrame:
    return cp.ranking_quality_table(confirmed_issues)


@CLEANING.asset(
    ins={**IMAGES_IN, **AFTER_QUEUE["ins"]},
    deps=AFTER_QUEUE["deps"],
    schema=cp.SPEEDUP_SCHEMA,
    description="Speed-up factor = 1 / fraction of candidates annotated (pairs out of N(N−1)/2), per issue "
    "type; the report adds the micro and macro averages over datasets.",
)
def annotation_speedup(context: dg.AssetExecutionContext, images: pl.DataFrame, confirmations: pl.DataFrame):
    dataset = context.partition_key
    return cp.dataset_speedup(_answers(confirmations, dataset), dataset, images.height, roles=cp.PANEL_ROLES)


@CLEANING.asset(
    **AFTER_QUEUE,
    schema=SENSITIVITY_SCHEMA,
    description="Stopping-rule sensitivity: issues detected as p_chance and p₊ grow from 0.05 to 1.",
)
def stopping_sensitivity(context: dg.AssetExecutionContext, confirmations: pl.DataFrame) -> pl.DataFrame:
    return cp.sensitivity_table(_answers(confirmations, context.partition_key), roles=cp.PANEL_ROLES)


@CLEANING.multi_asset(
    {"expert_lay_differences": DIFF_SCHEMA, "expert_lay_tests": TEST_SCHEMA},
    **AFTER_QUEUE,
    description="Expert vs lay raters: per reference expert κ(expert, expert) − κ(expert, lay), one-sided paired "
    "sign test (seed 001 §4.5), with the mean sign-flip permutation test as an extra column.",
)
def expert_vs_lay(context: dg.AssetExecutionContext, confirmations: pl.DataFrame, settings: SettingsResource):
    diffs, tests = cp.expert_lay_table(_answers(confirmations, context.partition_key), seed=settings.seed)
    yield dg.Output(diffs, output_name="expert_lay_differences")
    yield dg.Output(tests, output_name="expert_lay_tests")


@CLEANING.asset(
    ins={**IMAGES_IN, "cleaned_file_list": dg.AssetIn(CLEANED_FILE_LIST)},
    schema=cp.CLEANING_IMPACT_SCHEMA,
    description="Effect of cleaning on a model's evaluation (scores from models/<version>/cleaning/"
    "<dataset>.csv): AUROC, AP, AUPRG before vs after, paired bootstrap median and 95% CI of the "
    "difference; * when 0 lies outside the CI, ° when a bound is exactly 0.",
)
def cleaning_impact(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    cleaned_file_list: pl.DataFrame,
    model_registry: ModelRegistryResource,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    dataset = context.partition_key
    version, path = model_registry.cleaning_scores_file(dataset) or (None, None)
    with failing_on(InputError, file=path):  # fails this dataset with the file, row and column; others go on
        scores = read_cleaning_scores(path) if path is not None else None
    frame = cp.cleaning_impact_tables(
        scores, images, cleaned_file_list, dataset=dataset, model_version=version,
        n_boot=settings.n_bootstrap_cleaning, seed=settings.seed,
    )
    if path is None:
        note = f"no model version has scored {dataset} (models/<v>/cleaning/{dataset}.csv)"
        return dg.Output(frame, metadata={"note": note})
    return dg.Output(frame, metadata={"model_version": version, "scores": str(path)})


@CLEANING.asset(
    ins=RANKINGS_IN,
    schema=cp.TRUTH_SCHEMA,
    description="Where the dataset folder holds truth.json (known contamination, e.g. the demo): AUROC, AP, "
    "AUPRG and recall@k of each ranking against it, DINO vs the non-learned baseline.",
)
def ranking_vs_truth(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    rank_irrelevant: pl.DataFrame,
    rank_near_duplicates: pl.DataFrame,
    rank_label_errors: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    ranks = (rank_irrelevant, rank_near_duplicates, rank_label_errors)
    frame = cp.ranking_truth_tables(context.partition_key, images, *ranks)
    if frame.height == 0:
        return dg.Output(frame, metadata={"note": f"no {cp.TRUTH_FILE} in {images['root'][0]}"})
    md = "\n".join(
        f"- {r['ranking']} / {r['issue_type']}: AUROC {r['auroc']:.3f}, AP {r['ap']:.3f}"
        for r in frame.iter_rows(named=True)
    )
    return dg.Output(frame, metadata={"summary": dg.MetadataValue.md(md)})
