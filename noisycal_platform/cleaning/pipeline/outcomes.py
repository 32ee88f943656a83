"""Behind ``assets/cleaning/outcomes.py``: what the confirmed answers say (Gröger et al. 2023 §3.3-§4.5), each
statistic on
the panel's effective answers (after undos).

Asset -> function: ``cleaning/label_error_prevalence`` ->
:func:`~noisycal_platform.cleaning.pipeline.protocol_tables.label_error_prevalence`; ``cleaning/agreement`` ->
:func:`agreement_table`; ``cleaning/ranking_quality`` -> :func:`ranking_quality_table`;
``cleaning/annotation_speedup`` -> :func:`dataset_speedup`; ``cleaning/stopping_sensitivity`` ->
:func:`sensitivity_table`; ``cleaning/expert_lay_*`` -> :func:`expert_lay_table`; ``cleaning/cleaning_impact`` ->
:func:`cleaning_impact_tables`; ``cleaning/ranking_vs_truth`` -> :func:`ranking_truth_tables`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import polars as pl

from noisycal_platform.cleaning.agreement import agreement_stats
from noisycal_platform.cleaning.expert_lay import expert_lay_differences, expert_lay_tests
from noisycal_platform.cleaning.impact import IMPACT_SCHEMA, cleaning_impact
from noisycal_platform.cleaning.pipeline.embeddings import EMBEDDING_KINDS
from noisycal_platform.cleaning.pipeline.protocol_tables import PANEL_ROLES, check_rule, image_files, panel_answers
from noisycal_platform.cleaning.pipeline.rankings import stored_rankings
from noisycal_platform.cleaning.pipeline.schemas import (
    AGREEMENT_SCHEMA,
    CLEANING_IMPACT_SCHEMA,
    QUALITY_SCHEMA,
    TRUTH_SCHEMA,
)
from noisycal_platform.cleaning.protocol import RULES, effective_answers
from noisycal_platform.cleaning.ranking_quality import (
    TRUTH_FILE,
    ranking_quality_by_annotator,
    ranking_quality_vs_answers,
    ranking_truth_table,
    read_truth,
    speedup_table,
)
from noisycal_platform.cleaning.sensitivity import stopping_sensitivity

__all__ = [
    "TRUTH_FILE",
    "agreement_table",
    "annotator_ranking_quality",
    "cleaning_impact_table",
    "cleaning_impact_tables",
    "dataset_speedup",
    "expert_lay_table",
    "ranking_quality_table",
    "ranking_truth_tables",
    "sensitivity_table",
    "speedup",
]


def agreement_table(
    answers: pl.DataFrame, *, roles: Sequence[str] | None = None, n_boot: int = 1000, seed: int = 0
) -> pl.DataFrame:
    """Krippendorff α and pairwise Cohen κ with bootstrap CIs and bands (``AGREEMENT_SCHEMA``)."""
    eff = panel_answers(answers, roles, None)
    if eff.height == 0:
        return pl.DataFrame(schema=AGREEMENT_SCHEMA)
    return agreement_stats(eff, n_boot=n_boot, seed=seed)


def ranking_quality_table(confirmed: pl.DataFrame) -> pl.DataFrame:
    """Ranking vs unanimous answers on candidates the whole panel answered (``QUALITY_SCHEMA``)."""
    if confirmed.height == 0:
        return pl.DataFrame(schema=QUALITY_SCHEMA)
    return ranking_quality_vs_answers(confirmed)


def annotator_ranking_quality(answers: pl.DataFrame, *, roles: Sequence[str] | None = None) -> pl.DataFrame:
    """Ranking vs each annotator's own answers (``QUALITY_SCHEMA`` + annotator_id, role)."""
    return ranking_quality_by_annotator(panel_answers(answers, roles, None))


def speedup(
    answers: pl.DataFrame, sizes: Mapping[str, int], *, roles: Sequence[str] | None = ("expert",)
) -> pl.DataFrame:
    """Speed-up factors with micro/macro averages (``ranking_quality.SPEEDUP_SCHEMA``); datasets not in
    ``sizes`` are left out."""
    answers = answers.filter(pl.col("dataset").is_in(list(sizes)))
    return speedup_table(panel_answers(answers, roles, None), dict(sizes))


def dataset_speedup(
    answers: pl.DataFrame, dataset: str, n_images: int, *, roles: Sequence[str] | None = PANEL_ROLES
) -> pl.DataFrame:
    """``SPEEDUP_SCHEMA`` rows of one dataset (no averages: :func:`speedup_averages` adds them across
    datasets)."""
    return speedup(answers, {dataset: n_images}, roles=roles).filter(pl.col("dataset") == dataset)


def sensitivity_table(answers: pl.DataFrame, *, roles: Sequence[str] | None = ("expert",)) -> pl.DataFrame:
    """Stopping-rule sensitivity (``sensitivity.SENSITIVITY_SCHEMA``)."""
    return stopping_sensitivity(effective_answers(answers), roles=roles)


def expert_lay_table(
    answers: pl.DataFrame, *, n_perm: int = 10_000, seed: int = 0, by_reference: bool = False
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(differences κ(ref, expert) − κ(ref, lay), sign-flip tests) — see ``expert_lay``."""
    diffs = expert_lay_differences(effective_answers(answers))
    return diffs, expert_lay_tests(diffs, n_perm=n_perm, seed=seed, by_reference=by_reference)


def cleaning_impact_table(
    predictions: pl.DataFrame,
    files: pl.DataFrame,
    cleaned: pl.DataFrame,
    *,
    dataset: str,
    model_version: str,
    rule: str = "unanimous",
    n_boot: int = 1000,
    seed: int = 0,
) -> pl.DataFrame:
    """A model's AUROC/AP/AUPRG before vs after cleaning, paired bootstrap of the difference.

    ``predictions``: file_name, score in [0, 1], target in {0, 1} (models/<version>/cleaning/<dataset>.csv);
    every file_name must be in ``files``. ``cleaned``: the kept file_name list. Columns: dataset,
    model_version, rule + ``impact.IMPACT_SCHEMA``.
    """
    check_rule(rule)
    missing = [c for c in ("file_name", "score", "target") if c not in predictions.columns]
    if missing:
        raise ValueError(f"predictions: missing columns {missing}")
    unknown = predictions.filter(~pl.col("file_name").is_in(files["file_name"].to_list()))
    if unknown.height:
        raise ValueError(
            f"predictions: file_name not in dataset {dataset!r}: {unknown['file_name'].head(5).to_list()}"
        )
    if predictions["file_name"].n_unique() != predictions.height:
        raise ValueError(f"predictions: file_name must be unique for dataset {dataset!r}")
    keep = predictions["file_name"].is_in(cleaned["file_name"].to_list()).to_numpy()
    res = cleaning_impact(
        predictions["target"].to_numpy(), predictions["score"].to_numpy(), keep, n_boot=n_boot, seed=seed
    )
    return res.select(
        pl.lit(dataset).alias("dataset"),
        pl.lit(model_version).alias("model_version"),
        pl.lit(rule).alias("rule"),
        *IMPACT_SCHEMA,
    ).cast(CLEANING_IMPACT_SCHEMA)


def cleaning_impact_tables(
    scores: pl.DataFrame | None,
    images: pl.DataFrame,
    cleaned: pl.DataFrame,
    *,
    dataset: str,
    model_version: str | None,
    n_boot: int = 1000,
    seed: int = 0,
) -> pl.DataFrame:
    """``CLEANING_IMPACT_SCHEMA``: :func:`cleaning_impact_table` under each rule; no rows when no model version
    scored the dataset (``scores`` None), so datasets with and without scores share one table."""
    if scores is None or model_version is None:
        return pl.DataFrame(schema=CLEANING_IMPACT_SCHEMA)
    files = image_files(images)
    parts = [
        cleaning_impact_table(
            scores,
            files,
            cleaned.filter(pl.col("rule") == rule).select("file_name"),
            dataset=dataset,
            model_version=model_version,
            rule=rule,
            n_boot=n_boot,
            seed=seed,
        )
        for rule in RULES
    ]
    return pl.concat(parts)


def ranking_truth_tables(
    dataset: str,
    images: pl.DataFrame,
    irrelevant: pl.DataFrame,
    near_dups: pl.DataFrame,
    label_errors: pl.DataFrame,
) -> pl.DataFrame:
    """``TRUTH_SCHEMA``: :func:`ranking_truth_table` per embedding kind against ``<root>/truth.json``; no rows
    when the dataset ships no truth."""
    truth = read_truth(str(images["root"][0])) if images.height else None
    if truth is None:
        return pl.DataFrame(schema=TRUTH_SCHEMA)
    files = image_files(images)
    parts = []
    for k in EMBEDDING_KINDS:
        irr, nd, le = stored_rankings(k, files.height, irrelevant, near_dups, label_errors)
        parts.append(ranking_truth_table(dataset, files, truth, irrelevant=irr, near_dups=nd, label_errors=le, name=k))
    return pl.concat(parts)
