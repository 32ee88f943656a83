"""Raw inputs, validated on the way in: one asset per input the clinic supplies.

Annotations and confirmations arrive in drop folders and are ingested exactly once (ledger keyed by content
hash / answer id); model predictions arrive as registry folders, one dynamic partition per version.
"""

from datetime import UTC, datetime

import dagster as dg
import polars as pl

from assets.policy import (
    DATASET_COLUMN,
    DATASETS,
    DUCKDB_POOL,
    EAGER,
    MODEL_VERSION_COLUMN,
    MODEL_VERSIONS,
    TRANSIENT_RETRY,
)
from noisycal_platform.correctness import pipeline as correctness_pipeline
from noisycal_platform.io import InputError, read_predictions, read_reference_labels
from resources.inbox import InboxResource
from resources.model_registry import ModelRegistryResource

STAGE = "raw"
ANNOTATIONS = dg.AssetKey([STAGE, "annotations"])
PREDICTIONS = dg.AssetKey([STAGE, "predictions"])
REFERENCE_LABELS = dg.AssetKey([STAGE, "reference_labels"])
CONFIRMATIONS = dg.AssetKey([STAGE, "confirmations"])
GENERATIONS = dg.AssetKey([STAGE, "generations"])
AUDIT_LABELS = dg.AssetKey([STAGE, "audit_labels"])


_COMMON = dict(
    key_prefix=STAGE, group_name=STAGE, pool=DUCKDB_POOL, kinds={"polars", "duckdb"}, retry_policy=TRANSIENT_RETRY
)


def _md_list(items: list[dict], keys: tuple[str, ...]) -> str:
    if not items:
        return "none"
    return "\n".join("- " + ", ".join(f"{k}: `{it.get(k)}`" for k in keys if k in it) for it in items)


@dg.asset(
    **_COMMON,
    description="Every accepted annotation (item_id, annotator_id, label 0/1) from inbox/annotations batches; "
    "invalid batches are quarantined with a reason, never half-ingested.",
)
def annotations(context: dg.AssetExecutionContext, inbox: InboxResource) -> dg.Output[pl.DataFrame]:
    report = inbox.ingest_annotations()
    frame = inbox.annotations()
    for q in report.quarantined:
        context.log.warning(f"quarantined {q['file']}: {q['reason']}")
    return dg.Output(
        frame,
        metadata={
            "rows": frame.height,
            "annotators": frame["annotator_id"].n_unique() if frame.height else 0,
            "items": frame["item_id"].n_unique() if frame.height else 0,
            "batches_accepted_now": len(report.accepted),
            "batches_quarantined_now": len(report.quarantined),
            "duplicate_batches_now": len(report.duplicates),
            "quarantined": dg.MetadataValue.md(_md_list(report.quarantined, ("file", "reason"))),
        },
    )


@dg.asset(
    **_COMMON,
    partitions_def=MODEL_VERSIONS,
    metadata={"partition_expr": MODEL_VERSION_COLUMN},
    description="Scores of one model version (models/<version>/predictions.csv|parquet), validated.",
)
def predictions(context: dg.AssetExecutionContext, model_registry: ModelRegistryResource) -> dg.Output[pl.DataFrame]:
    version = context.partition_key
    path = model_registry.predictions_file(version)
    try:
        frame = read_predictions(path)
    except InputError as exc:
        # Fail the step: nothing is written for this version, earlier versions stay as they are.
        raise dg.Failure(description=str(exc), metadata={"file": str(path)}) from None
    registered = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    frame = frame.with_columns(
        pl.lit(version).alias(MODEL_VERSION_COLUMN),
        pl.lit(registered).dt.cast_time_unit("us").alias("registered_at"),
    )
    return dg.Output(
        frame,
        metadata={"rows": frame.height, "file": str(path), "mean_score": float(frame["score"].mean())},
    )


@dg.asset(
    **_COMMON,
    description="Optional clean reference labels (references/labels.csv) used only to score recalibration.",
)
def reference_labels(inbox: InboxResource) -> dg.Output[pl.DataFrame]:
    path = inbox.layout.references
    if not path.is_file():
        frame = pl.DataFrame(schema={"item_id": pl.String, "label": pl.Int8})
        return dg.Output(frame, metadata={"rows": 0, "note": f"no reference labels at {path}"})
    try:
        frame = read_reference_labels(path)
    except InputError as exc:
        raise dg.Failure(description=str(exc), metadata={"file": str(path)}) from None
    return dg.Output(frame, metadata={"rows": frame.height, "file": str(path)})


@dg.asset(
    **_COMMON,
    description="Every answer from the confirmation tool (inbox/confirmations/*.jsonl), once per answer_id; "
    "undo records kept (they cancel, never erase).",
)
def confirmations(context: dg.AssetExecutionContext, inbox: InboxResource) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.cleaning.pipeline import answers_from_records

    raw_frame, rejected = inbox.confirmations()
    frame = answers_from_records(raw_frame.drop("line").to_dicts())
    for r in rejected:
        context.log.warning(f"unusable confirmation line {r['file']}:{r['line']}: {r['reason']}")
    return dg.Output(
        frame,
        metadata={
            "answers": frame.height,
            "annotators": frame["annotator_id"].n_unique() if frame.height else 0,
            "rejected_lines": len(rejected),
            "rejected": dg.MetadataValue.md(_md_list(rejected[:50], ("file", "line", "reason"))),
        },
    )


IMAGES = dg.AssetKey([STAGE, "images"])


@dg.asset(
    **_COMMON,
    partitions_def=DATASETS,
    metadata={"partition_expr": DATASET_COLUMN},
    description="The images of one dataset (folder + labels.csv, or ImageFolder): file name, label, size, sha256. "
    "Unreadable/truncated images and bad labels.csv rows are reported by name and excluded.",
)
def images(context: dg.AssetExecutionContext, inbox: InboxResource) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.cleaning.images import ImageDatasetError, read_image_dataset

    name = context.partition_key
    roots = inbox.layout.registered_datasets()
    if name not in roots:
        raise dg.Failure(description=f"dataset {name!r} is no longer registered (datasets/ or datasets.json)")
    try:
        ds = read_image_dataset(roots[name])
    except ImageDatasetError as exc:
        raise dg.Failure(description=str(exc)) from None
    for row in ds.excluded.iter_rows(named=True):
        context.log.warning(
            f"{name}: excluded {row['file_name']} (row {row['row']}, column {row['column']}): {row['reason']}"
        )
    frame = ds.frame.with_row_index("idx").with_columns(
        pl.col("idx").cast(pl.Int64),
        pl.lit(name).alias(DATASET_COLUMN),
        pl.lit(ds.content_hash).alias("dataset_hash"),
        pl.lit(str(ds.root)).alias("root"),
    )
    return dg.Output(
        frame,
        metadata={
            "images": frame.height,
            "labels": len(ds.labels),
            "layout": ds.layout,
            "root": str(ds.root),
            "excluded": ds.excluded.height,
            "excluded_files": dg.MetadataValue.md(
                _md_list(ds.excluded.head(100).to_dicts(), ("file_name", "row", "column", "reason"))
            ),
        },
    )


def _fail_on_input_error(fn):
    from noisycal_platform.correctness.io import CorrectnessInputError

    try:
        return fn()
    except CorrectnessInputError as exc:
        raise dg.Failure(description=str(exc)) from None


@dg.asset(
    **_COMMON,
    description="Model generations (correctness/generations/*.jsonl), validated; malformed model output is "
    "kept and counted as invalid, never dropped.",
)
def generations(inbox: InboxResource) -> dg.Output[pl.DataFrame]:
    frame = _fail_on_input_error(lambda: correctness_pipeline.raw_generations(inbox.layout.generations))
    return dg.Output(
        frame,
        metadata={
            "predictions": frame.height,
            "malformed_outputs": int(frame["answer"].is_null().sum()) if frame.height else 0,
            "groups": frame.select("dataset", "model").n_unique() if frame.height else 0,
        },
    )


@dg.asset(
    **_COMMON,
    ins={"generations": dg.AssetIn(GENERATIONS)},
    automation_condition=EAGER,
    description="Human audit labels (correctness/audit/*.csv): human_correct, error category, EM stratum, "
    "independent or joint decision; each row matched to exactly one generation.",
)
def audit_labels(generations: pl.DataFrame, inbox: InboxResource) -> dg.Output[pl.DataFrame]:
    frame = _fail_on_input_error(lambda: correctness_pipeline.raw_audit_labels(inbox.layout.audit_labels, generations))
    return dg.Output(frame, metadata={"audited": frame.height})
