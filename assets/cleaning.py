"""Cleaning stage (seed 001, SelfClean protocol), one partition per image dataset.

raw/images -> ssl_encoder -> embeddings -> rank_irrelevant, rank_near_duplicates, rank_label_errors
-> confirmation_queue (exported for the web tool) -> [raw/confirmations] -> confirmed_issues
-> cleaned_file_list, label_error_prevalence, agreement, ranking_quality, annotation_speedup,
   stopping_sensitivity, expert_vs_lay, cleaning_impact; ranking_vs_truth where the dataset ships a truth.json.
Rankings are computed for the DINO embedding and for the non-learned baseline (column ``embedding``); the
queue uses DINO only.
"""

import json
import time
from datetime import UTC, datetime

import dagster as dg
import numpy as np
import polars as pl

from assets.policy import DATASET_COLUMN, DATASETS, DUCKDB_POOL, EAGER_PARTITIONED
from assets.progress import epoch_progress, timed
from assets.raw import CONFIRMATIONS, IMAGES
from noisycal_platform.cleaning import pipeline as cp
from noisycal_platform.cleaning.protocol import stopping_count
from noisycal_platform.io import atomic_write_bytes, atomic_write_text
from resources.compute import ComputeResource
from resources.inbox import InboxResource
from resources.model_registry import ModelRegistryResource
from resources.settings import SettingsResource

STAGE = "cleaning"
SSL_ENCODER = dg.AssetKey([STAGE, "ssl_encoder"])
EMBEDDINGS = dg.AssetKey([STAGE, "embeddings"])
RANK_IRRELEVANT = dg.AssetKey([STAGE, "rank_irrelevant"])
RANK_NEAR_DUPLICATES = dg.AssetKey([STAGE, "rank_near_duplicates"])
RANK_LABEL_ERRORS = dg.AssetKey([STAGE, "rank_label_errors"])
CONFIRMATION_QUEUE = dg.AssetKey([STAGE, "confirmation_queue"])
CONFIRMED_ISSUES = dg.AssetKey([STAGE, "confirmed_issues"])
CLEANED_FILE_LIST = dg.AssetKey([STAGE, "cleaned_file_list"])
RULES = ("unanimous", "majority")
PANEL_ROLES = ("expert",)  # the confirming panel; lay raters enter agreement and expert-vs-lay only

_COMMON = dict(
    key_prefix=STAGE,
    group_name=STAGE,
    pool=DUCKDB_POOL,
    kinds={"polars", "duckdb"},
    partitions_def=DATASETS,
    metadata={"partition_expr": DATASET_COLUMN},
    automation_condition=EAGER_PARTITIONED,
)
EMBEDDING_KINDS = ("dino", "baseline")


def _with_dataset(frame: pl.DataFrame, dataset: str) -> pl.DataFrame:
    if DATASET_COLUMN in frame.columns:
        return frame.with_columns(pl.lit(dataset).alias(DATASET_COLUMN))
    return frame.select(pl.lit(dataset).alias(DATASET_COLUMN), pl.all())


def _files(images: pl.DataFrame) -> pl.DataFrame:
    """``file_name``, ``label`` in embedding-row order (``idx``)."""
    return images.sort("idx").select("file_name", "label")


def _matrix(embeddings: pl.DataFrame, kind: str) -> np.ndarray:
    sub = embeddings.filter(pl.col("embedding_kind") == kind).sort("idx")
    # vectorised List -> fixed-width Array -> 2-D array (no Python loop over images)
    return np.ascontiguousarray(sub["vector"].list.to_array(int(sub["vector"].list.len()[0])).to_numpy(), np.float32)


def _n_stop(settings: SettingsResource) -> int:
    return max(1, stopping_count(settings.p_chance, settings.p_plus))


def _answers_for(confirmations: pl.DataFrame, dataset: str) -> pl.DataFrame:
    return confirmations.filter(pl.col("dataset") == dataset)


# ------------------------------------------------------------------------------------------- embeddings
@dg.asset(
    **_COMMON,
    ins={"images": dg.AssetIn(IMAGES)},
    description="DINO ViT trained from random initialisation on this dataset's own images (seed 001 §3.6); "
    "weights in artifacts/<sha256>.pt (loaded with weights_only=True), reused while the "
    "dataset content and the configuration are unchanged.",
)
def ssl_encoder(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    inbox: InboxResource,
    compute: ComputeResource,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.cleaning.encoder import PRESETS, save_encoder, train_encoder
    from noisycal_platform.cleaning.images import load_images

    layout = inbox.layout
    preset = PRESETS[settings.encoder_preset]
    overrides = {k: type(getattr(preset, k))(v) for k, v in settings.encoder_overrides.items()}
    config = preset.replace(**{"device": compute.torch_device(), "seed": settings.seed, **overrides})
    dataset_hash = str(images["dataset_hash"][0])
    index = layout.artifacts / "index" / f"encoder-{dataset_hash[:16]}-{config.config_hash[:16]}.json"
    reused = False
    if index.is_file() and (layout.artifacts / json.loads(index.read_text())["file"]).is_file():
        entry = json.loads(index.read_text())
        reused = True
    else:
        compute.apply_threads()
        pixels = load_images(images.sort("idx")["path"].to_list(), config.image_size)
        start = time.perf_counter()
        encoder = train_encoder(pixels, config, progress=epoch_progress(context, "ssl_encoder"))
        seconds = time.perf_counter() - start
        sha, path = save_encoder(encoder, layout.artifacts)
        entry = {
            "sha256": sha,
            "file": path.name,
            "train_seconds": round(seconds, 3),
            "images_per_second": round(len(pixels) * config.epochs / max(seconds, 1e-9), 2),
        }
        atomic_write_text(index, json.dumps(entry, sort_keys=True))
    frame = pl.DataFrame(
        [
            {
                "dataset_hash": dataset_hash,
                "config_hash": config.config_hash,
                "preset": settings.encoder_preset,
                "config_json": json.dumps(config.to_dict(), sort_keys=True),
                "sha256": entry["sha256"],
                "artifact": str(layout.artifacts / entry["file"]),
                "n_images": images.height,
                "train_seconds": float(entry["train_seconds"]),
                "images_per_second": float(entry["images_per_second"]),
                "reused": reused,
            }
        ]
    )
    return dg.Output(
        _with_dataset(frame, context.partition_key),
        metadata={
            "sha256": entry["sha256"],
            "preset": settings.encoder_preset,
            "reused_cached_weights": reused,
            "train_seconds": float(entry["train_seconds"]),
            "images_per_second": float(entry["images_per_second"]),
        },
    )


@dg.asset(
    **_COMMON,
    ins={"images": dg.AssetIn(IMAGES), "ssl_encoder": dg.AssetIn(SSL_ENCODER)},
    description="One row per image and embedding kind: the L2-normalised teacher CLS token (dino) and the "
    "non-learned baseline (downsampled pixels + colour histogram), cached by content hash.",
)
def embeddings(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    ssl_encoder: pl.DataFrame,
    inbox: InboxResource,
    compute: ComputeResource,
) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.cleaning.baseline import baseline_embedding
    from noisycal_platform.cleaning.embedding_cache import cached_embeddings
    from noisycal_platform.cleaning.encoder import EncoderConfig, embed, load_encoder
    from noisycal_platform.cleaning.images import load_images

    enc = ssl_encoder.row(0, named=True)
    config = EncoderConfig.from_dict(json.loads(enc["config_json"]))
    ordered = images.sort("idx")
    cache = inbox.layout.cache / "embeddings"
    pixels = None

    def pixels_once():
        nonlocal pixels
        if pixels is None:
            pixels = load_images(ordered["path"].to_list(), config.image_size)
        return pixels

    def dino() -> np.ndarray:
        encoder = load_encoder(enc["artifact"], expected_sha256=enc["sha256"], device=compute.torch_device())
        return timed(context, "embeddings (dino)", ordered.height, lambda: embed(encoder, pixels_once()))

    dataset_hash = str(ordered["dataset_hash"][0])
    emb, hit = cached_embeddings(cache, dataset_hash, f"dino-{enc['sha256'][:32]}", dino, n_rows=ordered.height)
    base, _ = cached_embeddings(
        cache, dataset_hash, "baseline-v1", lambda: baseline_embedding(pixels_once()), n_rows=ordered.height
    )
    parts = []
    for kind, matrix in (("dino", emb), ("baseline", base)):
        parts.append(
            ordered.select("idx", "file_name", "label").with_columns(
                pl.lit(kind).alias("embedding_kind"),
                pl.Series("vector", np.ascontiguousarray(matrix, np.float32)).cast(pl.List(pl.Float32)),
            )
        )
    frame = _with_dataset(pl.concat(parts), context.partition_key)
    return dg.Output(
        frame,
        metadata={
            "images": ordered.height,
            "dim_dino": int(emb.shape[1]),
            "dim_baseline": int(base.shape[1]),
            "cache_hit": hit,
        },
    )


# ------------------------------------------------------------------------------------------- rankings
def _ranking_frame(ranking, files: pl.DataFrame, kind: str) -> pl.DataFrame:
    order = np.asarray(ranking.order, dtype=np.int64)
    return pl.DataFrame(
        {
            "embedding_kind": kind,
            "rank": np.arange(len(order), dtype=np.int64),
            "idx": order,
            "file_name": files["file_name"].gather(order),
            "label": files["label"].gather(order),
            "score": np.asarray(ranking.scores, dtype=np.float64)[order],
        }
    )


@dg.asset(
    **_COMMON,
    ins={"images": dg.AssetIn(IMAGES), "embeddings": dg.AssetIn(EMBEDDINGS)},
    description="Irrelevant-sample ranking: single-linkage clustering, dendrogram-area walk (lower score = "
    "joins late and alone = more suspicious), per embedding kind (seed 001 §3.3).",
)
def rank_irrelevant(
    context: dg.AssetExecutionContext, images: pl.DataFrame, embeddings: pl.DataFrame
) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.cleaning.rankings import rank_irrelevant as rank

    files = _files(images)
    frame = pl.concat([_ranking_frame(rank(_matrix(embeddings, k)), files, k) for k in EMBEDDING_KINDS])
    top = frame.filter(pl.col("embedding_kind") == "dino").head(5)["file_name"].to_list()
    return dg.Output(_with_dataset(frame, context.partition_key), metadata={"top_dino": ", ".join(top)})


@dg.asset(
    **_COMMON,
    ins={"images": dg.AssetIn(IMAGES), "embeddings": dg.AssetIn(EMBEDDINGS)},
    description="Near-duplicate ranking: the exact top-k closest pairs by d = (1 − cos)/2, block-wise "
    "(no N×N matrix), per embedding kind (seed 001 §3.3).",
)
def rank_near_duplicates(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    embeddings: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.cleaning.rankings import rank_near_duplicates as rank

    files = _files(images)
    parts = []
    for kind in EMBEDDING_KINDS:
        r = rank(_matrix(embeddings, kind), settings.near_duplicate_top_k)
        pairs = np.asarray(r.pairs, dtype=np.int64)
        parts.append(
            pl.DataFrame(
                {
                    "embedding_kind": kind,
                    "rank": np.arange(len(pairs), dtype=np.int64),
                    "idx_1": pairs[:, 0],
                    "idx_2": pairs[:, 1],
                    "file_name_1": files["file_name"].gather(pairs[:, 0]),
                    "file_name_2": files["file_name"].gather(pairs[:, 1]),
                    "score": np.asarray(r.scores, dtype=np.float64),
                }
            )
        )
    frame = pl.concat(parts)
    return dg.Output(
        _with_dataset(frame, context.partition_key),
        metadata={"pairs_per_kind": settings.near_duplicate_top_k},
    )


@dg.asset(
    **_COMMON,
    ins={"images": dg.AssetIn(IMAGES), "embeddings": dg.AssetIn(EMBEDDINGS)},
    description="Label-error ranking: d_diff² / (d_same² + d_diff²) with the nearest same-label and "
    "different-label neighbours, ascending, per embedding kind (seed 001 §3.3).",
)
def rank_label_errors(
    context: dg.AssetExecutionContext, images: pl.DataFrame, embeddings: pl.DataFrame
) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.cleaning.rankings import rank_label_errors as rank

    files = _files(images)
    labels = files["label"].to_numpy()
    frame = pl.concat([_ranking_frame(rank(_matrix(embeddings, k), labels), files, k) for k in EMBEDDING_KINDS])
    return dg.Output(_with_dataset(frame, context.partition_key))


class _Ranking:
    """A ranking rebuilt from its table (order + per-item scores), the shape the protocol functions read."""

    def __init__(self, table: pl.DataFrame, n: int):
        t = table.sort("rank")
        self.order = t["idx"].to_numpy()
        self.scores = np.full(n, np.nan)
        self.scores[self.order] = t["score"].to_numpy()


class _PairRanking:
    def __init__(self, table: pl.DataFrame):
        t = table.sort("rank")
        self.pairs = np.stack([t["idx_1"].to_numpy(), t["idx_2"].to_numpy()], axis=1)
        self.scores = t["score"].to_numpy()


def _dino(frame: pl.DataFrame) -> pl.DataFrame:
    return frame.filter(pl.col("embedding_kind") == "dino")


# ------------------------------------------------------------------------------------------- confirmation
@dg.asset(
    **_COMMON,
    ins={
        "images": dg.AssetIn(IMAGES),
        "rank_irrelevant": dg.AssetIn(RANK_IRRELEVANT),
        "rank_near_duplicates": dg.AssetIn(RANK_NEAR_DUPLICATES),
        "rank_label_errors": dg.AssetIn(RANK_LABEL_ERRORS),
    },
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
    import hashlib
    import io

    dataset = context.partition_key
    files = _files(images)
    queue = cp.confirmation_queue(
        dataset,
        _Ranking(_dino(rank_irrelevant), files.height),
        _PairRanking(_dino(rank_near_duplicates)),
        _Ranking(_dino(rank_label_errors), files.height),
        files,
        max_per_type=settings.queue_max_per_type,
    )
    buf = io.BytesIO()
    queue.write_parquet(buf)
    data = buf.getvalue()
    exports = inbox.layout.queue_exports
    meta = {
        "dataset": dataset,
        "dataset_root": str(images["root"][0]),
        "stopping_count": _n_stop(settings),
        "p_chance": settings.p_chance,
        "p_plus": settings.p_plus,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "queue_version": hashlib.sha256(data).hexdigest(),
    }
    atomic_write_bytes(exports / f"{dataset}.parquet", data)
    atomic_write_text(exports / f"{dataset}.meta.json", json.dumps(meta, indent=1, sort_keys=True))
    counts = queue.group_by("issue_type").len().sort("issue_type")
    return dg.Output(
        _with_dataset(queue, dataset),
        metadata={
            "stopping_count": meta["stopping_count"],
            "exported": str(exports / f"{dataset}.parquet"),
            **{f"candidates_{r['issue_type']}": int(r["len"]) for r in counts.iter_rows(named=True)},
        },
    )


@dg.asset(
    **_COMMON,
    ins={"confirmations": dg.AssetIn(CONFIRMATIONS), "confirmation_queue": dg.AssetIn(CONFIRMATION_QUEUE)},
    description="Per candidate: yes/no counts of the expert panel after undos, and whether the panel "
    "confirmed it unanimously and by majority (seed 001 §3.3).",
)
def confirmed_issues(
    context: dg.AssetExecutionContext,
    confirmations: pl.DataFrame,
    confirmation_queue: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    dataset = context.partition_key
    answers = _answers_for(confirmations, dataset)
    frame = cp.confirmed_issues(answers, confirmation_queue, roles=PANEL_ROLES, n_stop=_n_stop(settings))
    counts = {
        f"{rule}_{t}": int(frame.filter(pl.col(rule) & (pl.col("issue_type") == t)).height)
        for rule in RULES
        for t in ("irrelevant", "near_duplicate", "label_error")
    }
    return dg.Output(_with_dataset(frame, dataset), metadata={"answers": answers.height, **counts})


@dg.asset(
    **_COMMON,
    ins={"images": dg.AssetIn(IMAGES), "confirmed_issues": dg.AssetIn(CONFIRMED_ISSUES)},
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
    dataset = context.partition_key
    files = _files(images)
    parts, meta = [], {}
    for rule in RULES:
        kept = cp.cleaned_file_list(files, confirmed_issues, rule=rule, seed=settings.seed)
        atomic_write_bytes(
            inbox.layout.cleaned_lists / f"{dataset}_{rule}.csv",
            kept.select("file_name").write_csv().encode(),
        )
        parts.append(kept.select("file_name").with_columns(pl.lit(rule).alias("rule")))
        meta[f"kept_{rule}"] = kept.height
    return dg.Output(_with_dataset(pl.concat(parts), dataset), metadata={"images": files.height, **meta})


@dg.asset(
    **_COMMON,
    ins={"images": dg.AssetIn(IMAGES), "confirmed_issues": dg.AssetIn(CONFIRMED_ISSUES)},
    description="Prevalence of confirmed label errors with a Clopper–Pearson 95% CI (label errors are "
    "reported, not removed: seed 001 §3.4).",
)
def label_error_prevalence(
    context: dg.AssetExecutionContext, images: pl.DataFrame, confirmed_issues: pl.DataFrame
) -> dg.Output[pl.DataFrame]:
    frame = cp.label_error_prevalence(confirmed_issues, _files(images), dataset=context.partition_key)
    return dg.Output(_with_dataset(frame, context.partition_key))


@dg.asset(
    **_COMMON,
    ins={"confirmations": dg.AssetIn(CONFIRMATIONS), "confirmation_queue": dg.AssetIn(CONFIRMATION_QUEUE)},
    description="Inter-annotator agreement: Krippendorff's α over all annotators and pairwise Cohen's κ, "
    "95% bootstrap CIs over items, good/questionable/unacceptable bands.",
)
def agreement(
    context: dg.AssetExecutionContext,
    confirmations: pl.DataFrame,
    confirmation_queue: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    answers = _answers_for(confirmations, context.partition_key)
    frame = cp.agreement_table(answers, n_boot=settings.n_bootstrap_cleaning, seed=settings.seed)
    return dg.Output(_with_dataset(frame, context.partition_key))


@dg.asset(
    **_COMMON,
    ins={"confirmed_issues": dg.AssetIn(CONFIRMED_ISSUES)},
    description="Ranking quality against the unanimous answers on the items the whole panel saw: AUROC, "
    "AP and AUPRG with the positive rate as baseline.",
)
def ranking_quality(context: dg.AssetExecutionContext, confirmed_issues: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    return dg.Output(_with_dataset(cp.ranking_quality_table(confirmed_issues), context.partition_key))


@dg.asset(
    **_COMMON,
    ins={
        "images": dg.AssetIn(IMAGES),
        "confirmations": dg.AssetIn(CONFIRMATIONS),
        "confirmation_queue": dg.AssetIn(CONFIRMATION_QUEUE),
    },
    description="Speed-up factor = 1 / fraction of candidates annotated (pairs out of N(N−1)/2), per issue "
    "type with micro and macro averages.",
)
def annotation_speedup(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    confirmations: pl.DataFrame,
    confirmation_queue: pl.DataFrame,
) -> dg.Output[pl.DataFrame]:
    dataset = context.partition_key
    frame = cp.speedup(_answers_for(confirmations, dataset), {dataset: images.height}, roles=PANEL_ROLES)
    return dg.Output(
        frame.with_columns(pl.lit(dataset).alias("partition"))
        .rename({"dataset": "scope"})
        .rename({"partition": DATASET_COLUMN})
    )


@dg.asset(
    **_COMMON,
    ins={"confirmations": dg.AssetIn(CONFIRMATIONS), "confirmation_queue": dg.AssetIn(CONFIRMATION_QUEUE)},
    description="Stopping-rule sensitivity: issues detected as p_chance and p₊ grow from 0.05 to 1.",
)
def stopping_sensitivity(
    context: dg.AssetExecutionContext, confirmations: pl.DataFrame, confirmation_queue: pl.DataFrame
) -> dg.Output[pl.DataFrame]:
    answers = _answers_for(confirmations, context.partition_key)
    return dg.Output(_with_dataset(cp.sensitivity_table(answers, roles=PANEL_ROLES), context.partition_key))


@dg.multi_asset(
    outs={
        name: dg.AssetOut(
            key_prefix=STAGE,
            metadata={"partition_expr": DATASET_COLUMN},
            automation_condition=EAGER_PARTITIONED,
            kinds={"polars", "duckdb"},
        )
        for name in ("expert_lay_differences", "expert_lay_tests")
    },
    ins={"confirmations": dg.AssetIn(CONFIRMATIONS), "confirmation_queue": dg.AssetIn(CONFIRMATION_QUEUE)},
    group_name=STAGE,
    pool=DUCKDB_POOL,
    partitions_def=DATASETS,
    description="Expert vs lay raters: per reference expert κ(expert, expert) − κ(expert, lay), one-sided paired "
    "sign-flip permutation test.",
)
def expert_vs_lay(
    context: dg.AssetExecutionContext,
    confirmations: pl.DataFrame,
    confirmation_queue: pl.DataFrame,
    settings: SettingsResource,
):
    dataset = context.partition_key
    diffs, tests = cp.expert_lay_table(_answers_for(confirmations, dataset), seed=settings.seed)
    yield dg.Output(_with_dataset(diffs, dataset), output_name="expert_lay_differences")
    yield dg.Output(_with_dataset(tests, dataset), output_name="expert_lay_tests")


@dg.asset(
    **_COMMON,
    ins={"images": dg.AssetIn(IMAGES), "cleaned_file_list": dg.AssetIn(CLEANED_FILE_LIST)},
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
    found = model_registry.cleaning_scores_file(dataset)
    if found is None:
        from noisycal_platform.cleaning.impact import IMPACT_SCHEMA

        return dg.Output(
            _with_dataset(pl.DataFrame(schema=IMPACT_SCHEMA), dataset),
            metadata={"note": f"no model version has scored {dataset} (models/<v>/cleaning/{dataset}.csv)"},
        )
    version, path = found
    predictions = pl.read_csv(path, schema_overrides={"file_name": pl.String})
    parts = [
        cp.cleaning_impact_table(
            predictions,
            _files(images),
            cleaned_file_list.filter(pl.col("rule") == rule).select("file_name"),
            dataset=dataset,
            model_version=version,
            rule=rule,
            n_boot=settings.n_bootstrap_cleaning,
            seed=settings.seed,
        )
        for rule in RULES
    ]
    frame = pl.concat(parts)
    return dg.Output(_with_dataset(frame, dataset), metadata={"model_version": version, "scores": str(path)})


@dg.asset(
    **_COMMON,
    ins={
        "images": dg.AssetIn(IMAGES),
        "rank_irrelevant": dg.AssetIn(RANK_IRRELEVANT),
        "rank_near_duplicates": dg.AssetIn(RANK_NEAR_DUPLICATES),
        "rank_label_errors": dg.AssetIn(RANK_LABEL_ERRORS),
    },
    description="Where the dataset folder holds truth.json (known contamination, e.g. the demo): AUROC, AP, "
    "AUPRG and recall@k of each ranking against it, DINO vs the non-learned baseline.",
)
def ranking_vs_truth(
    context: dg.AssetExecutionContext,
    images: pl.DataFrame,
    rank_irrelevant: pl.DataFrame,
    rank_near_duplicates: pl.DataFrame,
    rank_label_errors: pl.DataFrame,
    inbox: InboxResource,
) -> dg.Output[pl.DataFrame]:
    from pathlib import Path

    from noisycal_platform.cleaning.demo_data import TRUTH_FILE, load_demo_truth
    from noisycal_platform.cleaning.simulate import Truth

    dataset = context.partition_key
    root = Path(str(images["root"][0]))
    files = _files(images)
    if not (root / TRUTH_FILE).is_file():
        frame = pl.DataFrame(schema=cp.TRUTH_SCHEMA)
        return dg.Output(_with_dataset(frame, dataset), metadata={"note": f"no {TRUTH_FILE} in {root}"})
    truth = Truth.from_demo(load_demo_truth(root))
    parts = []
    for kind in EMBEDDING_KINDS:

        def pick(f: pl.DataFrame, k: str = kind) -> pl.DataFrame:
            return f.filter(pl.col("embedding_kind") == k)

        parts.append(
            cp.ranking_truth_table(
                dataset,
                files,
                truth,
                irrelevant=_Ranking(pick(rank_irrelevant), files.height),
                near_dups=_PairRanking(pick(rank_near_duplicates)),
                label_errors=_Ranking(pick(rank_label_errors), files.height),
                name=kind,
            )
        )
    frame = pl.concat(parts)
    md = "\n".join(
        f"- {r['ranking']} / {r['issue_type']}: AUROC {r['auroc']:.3f}, AP {r['ap']:.3f}"
        for r in frame.iter_rows(named=True)
    )
    return dg.Output(_with_dataset(frame, dataset), metadata={"summary": dg.MetadataValue.md(md)})
