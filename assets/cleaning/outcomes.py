"""Cleaning, last sub-stage: what the confirmed answers say (Gröger et al. 2023 §3.3-§4.5).

confirmed_issues, raw/confirmations, cleaned_file_list -> label_error_prevalence, agreement, ranking_quality,
annotation_speedup, stopping_sensitivity, expert_vs_lay, cleaning_impact; rankings -> ranking_vs_truth where the
dataset ships a truth.json.
"""

import dagster as dg
import polars as pl

from assets._shell import failing_on
from assets.cleaning.keys import (
    AFTER_QUEUE,
    CLEANED_FILE_LIST,
    CONFIRMED_IN,
    CONFIRMED_ISSUES,
    IMAGES_IN,
    RANKINGS_IN,
    answers_of,
)
from assets.policy import CLEANING
from noisycal_platform.cleaning.pipeline import outcomes, protocol_tables
from noisycal_platform.cleaning.pipeline.protocol_tables import PANEL_ROLES, image_files
from noisycal_platform.cleaning.pipeline.schemas import (
    AGREEMENT_SCHEMA,
    CLEANING_IMPACT_SCHEMA,
    DIFF_SCHEMA,
    PREVALENCE_SCHEMA,
    QUALITY_SCHEMA,
    SENSITIVITY_SCHEMA,
    SPEEDUP_SCHEMA,
    TEST_SCHEMA,
    TRUTH_SCHEMA,
)
from noisycal_platform.io import InputError, read_cleaning_scores
from resources.model_registry import ModelRegistryResource
from resources.settings import SettingsResource

__all__ = [
    "agreement",
    "annotation_speedup",
    "cleaning_impact",
    "expert_vs_lay",
    "label_error_prevalence",
    "ranking_quality",
    "ranking_vs_truth",
    "stopping_sensitivity",
]

@CLEANING.asset(
    ins=CONFIRMED_IN,
    schema=PREVALENCE_SCHEMA,
    description="Prevalence of confirmed label errors with a Clopper–Pearson 95% CI (label errors are "
    "reported, not removed: Gröger et al. 2023 §3.4).",
)
def label_error_prevalence(
    context: dg.AssetExecutionContext, images: pl.DataFrame, confirmed_issues: pl.DataFrame
) -> pl.DataFrame:
    return protocol_tables.label_error_prevalence(confirmed_issues, image_files(images), dataset=context.partition_key)


@CLEANING.asset(
    **AFTER_QUEUE,
    schema=AGREEMENT_SCHEMA,
    description="Inter-annotator agreement: Krippendorff's α over all annotators and pairwise Cohen's κ, "
    "95% bootstrap CIs over items, good/questionable/unacceptable bands.",
)
def agreement(context: dg.AssetExecutionContext, confirmations: pl.DataFrame, settings: SettingsResource):
    answers = answers_of(context, confirmations)
    return outcomes.agreement_table(answers, n_boot=settings.n_bootstrap_cleaning, seed=settings.seed)


@CLEANING.asset(
    ins={"confirmed_issues": dg.AssetIn(CONFIRMED_ISSUES)},
    schema=QUALITY_SCHEMA,
    description="Ranking quality against the unanimous answers on the items the whole panel saw: AUROC, "
    "AP and AUPRG with the positive rate as baseline.",
)
def ranking_quality(confirmed_issues: pl.DataFrame) -> pl.DataFrame:
    return outcomes.ranking_quality_table(confirmed_issues)


@CLEANING.asset(
    ins={**IMAGES_IN, **AFTER_QUEUE["ins"]},
    deps=AFTER_QUEUE["deps"],
    schema=SPEEDUP_SCHEMA,
    description="Speed-up factor = 1 / fraction of candidates annotated (pairs out of N(N−1)/2), per issue "
    "type; the report adds the micro and macro averages over datasets.",
)
def annotation_speedup(context: dg.AssetExecutionContext, images: pl.DataFrame, confirmations: pl.DataFrame):
    answers = answers_of(context, confirmations)
    return outcomes.dataset_speedup(answers, context.partition_key, images.height, roles=PANEL_ROLES)


@CLEANING.asset(
    **AFTER_QUEUE,
    schema=SENSITIVITY_SCHEMA,
    description="Stopping-rule sensitivity: issues detected as p_chance and p₊ grow from 0.05 to 1.",
)
def stopping_sensitivity(context: dg.AssetExecutionContext, confirmations: pl.DataFrame) -> pl.DataFrame:
    return outcomes.sensitivity_table(answers_of(context, confirmations), roles=PANEL_ROLES)


@CLEANING.multi_asset(
    {"expert_lay_differences": DIFF_SCHEMA, "expert_lay_tests": TEST_SCHEMA},
    **AFTER_QUEUE,
    description="Expert vs lay raters: per reference expert κ(expert, expert) − κ(expert, lay), one-sided paired "
    "sign test (Gröger et al. 2023 §4.5), with the mean sign-flip permutation test as an extra column.",
)
def expert_vs_lay(context: dg.AssetExecutionContext, confirmations: pl.DataFrame, settings: SettingsResource):
    diffs, tests = outcomes.expert_lay_table(answers_of(context, confirmations), seed=settings.seed)
    yield dg.Output(diffs, output_name="expert_lay_differences")
    yield dg.Output(tests, output_name="expert_lay_tests")


@CLEANING.asset(
    ins={**IMAGES_IN, "cleaned_file_list": dg.AssetIn(CLEANED_FILE_LIST)},
    schema=CLEANING_IMPACT_SCHEMA,
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
    frame = outcomes.cleaning_impact_tables(
        scores, images, cleaned_file_list, dataset=dataset, model_version=version,
        n_boot=settings.n_bootstrap_cleaning, seed=settings.seed,
    )
    if path is None:
        note = f"no model version has scored {dataset} (models/<v>/cleaning/{dataset}.csv)"
        return dg.Output(frame, metadata={"note": note})
    return dg.Output(frame, metadata={"model_version": version, "scores": str(path)})


@CLEANING.asset(
    ins=RANKINGS_IN,
    schema=TRUTH_SCHEMA,
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
    frame = outcomes.ranking_truth_tables(context.partition_key, images, *ranks)
    if frame.height == 0:
        return dg.Output(frame, metadata={"note": f"no {outcomes.TRUTH_FILE} in {images['root'][0]}"})
    md = "\n".join(
        f"- {r['ranking']} / {r['issue_type']}: AUROC {r['auroc']:.3f}, AP {r['ap']:.3f}"
        for r in frame.iter_rows(named=True)
    )
    return dg.Output(frame, metadata={"summary": dg.MetadataValue.md(md)})
