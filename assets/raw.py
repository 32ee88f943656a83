"""Raw inputs, validated on the way in: one asset per input the clinic supplies.

Annotations and confirmations arrive in drop folders and are ingested exactly once (ledger keyed by content
hash / answer id); model predictions arrive as registry folders, one dynamic partition per version.
"""

from datetime import UTC, datetime

import dagster as dg
import polars as pl

from assets._shell import failing_on
from assets.policy import BY_DATASET, BY_MODEL_VERSION, EAGER, MODEL_VERSION_COLUMN, RAW
from noisycal_platform.cleaning.images import FRAME_SCHEMA as IMAGE_FILE_SCHEMA
from noisycal_platform.cleaning.protocol import ANSWER_SCHEMA
from noisycal_platform.correctness import pipeline as correctness_pipeline
from noisycal_platform.correctness.io import AUDIT_SCHEMA, GENERATIONS_SCHEMA, CorrectnessInputError
from noisycal_platform.ingest import ANNOTATION_SCHEMA, IngestError
from noisycal_platform.io import MODEL_VERSION_COLUMNS, InputError, read_model_version, read_reference_label_records
from resources.inbox import InboxResource
from resources.model_registry import ModelRegistryResource
from resources.settings import SettingsResource

ANNOTATIONS, PREDICTIONS, REFERENCE_LABELS, CONFIRMATIONS, GENERATIONS, AUDIT_LABELS, IMAGES = (
    RAW.key(n)
    for n in ("annotations", "predictions", "reference_labels", "confirmations", "generations", "audit_labels",
              "images")
)

#: raw/predictions (`read_model_version`, then the version and its registration time): one row per scored item
PREDICTIONS_SCHEMA = {
    **MODEL_VERSION_COLUMNS, MODEL_VERSION_COLUMN: pl.String, "registered_at": pl.Datetime("us", "UTC"),
}
#: raw/reference_labels (`read_reference_label_records`)
REFERENCE_LABELS_SCHEMA = {"item_id": pl.String, "label": pl.Int8}
#: raw/images (`ImageDataset.table`): the item index, the file's columns, then the dataset's name, hash and root
IMAGES_SCHEMA = {
    "idx": pl.Int64,
    **IMAGE_FILE_SCHEMA,
    "dataset": pl.String,
    "dataset_hash": pl.String,
    "root": pl.String,
}


def _md_list(items: list[dict], keys: tuple[str, ...]) -> str:
    if not items:
        return "none"
    return "\n".join("- " + ", ".join(f"{k}: `{it.get(k)}`" for k in keys if k in it) for it in items)


def _rejected_metadata(context: dg.AssetExecutionContext, rejected: list[dict], place: str, what: str) -> dict:
    """Log each rejected record (file, ``place`` = row or line, column, reason) and return the metadata:
    ``rejected_<place>s`` (how many) and ``rejected`` (the first 50)."""
    for r in rejected:
        context.log.warning(f"rejected {what} {r['file']} {place} {r[place]} ({r.get('column')}): {r['reason']}")
    return {
        f"rejected_{place}s": len(rejected),
        "rejected": dg.MetadataValue.md(_md_list(rejected[:50], ("file", place, "column", "reason"))),
    }


@RAW.asset(
    schema=ANNOTATION_SCHEMA,
    description="Every accepted annotation (item_id, annotator_id, label 0/1) from inbox/annotations batches; "
    "each bad row is quarantined with file, row, column and reason while the good rows of its batch land.",
)
def annotations(context: dg.AssetExecutionContext, inbox: InboxResource) -> dg.Output[pl.DataFrame]:
    with failing_on(IngestError):
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
            "batches_waiting_to_settle": len(report.waiting),
            "quarantined": dg.MetadataValue.md(_md_list(report.quarantined, ("file", "reason"))),
        },
    )


@RAW.asset(
    **BY_MODEL_VERSION,
    schema=PREDICTIONS_SCHEMA,
    description="Scores of one model version (models/<version>/predictions.csv|parquet: a score, or one p_<class> "
    "column per class), validated, with each item's subgroups from items.csv (the version's folder or the home).",
)
def predictions(
    context: dg.AssetExecutionContext, model_registry: ModelRegistryResource, settings: SettingsResource
) -> dg.Output[pl.DataFrame]:
    version = context.partition_key
    path = model_registry.predictions_file(version)
    # nothing is written for this version, earlier ones stay as they are; the error names its file (or items.csv)
    with failing_on(InputError, file_of_error=True):
        frame = read_model_version(path, model_registry.items_file(version), tuple(settings.classes) or None)
    registered = datetime.fromtimestamp(path.stat().st_mtime, UTC)
    frame = frame.with_columns(
        pl.lit(version).alias(MODEL_VERSION_COLUMN),
        pl.lit(registered).dt.cast_time_unit("us").alias("registered_at"),
    )
    return dg.Output(
        frame,
        metadata={
            "rows": frame.height,
            "file": str(path),
            "n_classes": int(frame["n_classes"][0]),
            "mean_score": float(frame["score"].mean()),
            "items_with_subgroups": int((frame["subgroups"].list.len() > 0).sum()),
        },
    )


@RAW.asset(
    schema=REFERENCE_LABELS_SCHEMA,
    description="Optional clean reference labels (references/labels.csv) used only to score recalibration; "
    "each bad row is quarantined (file, row, column, reason), the others land.",
)
def reference_labels(context: dg.AssetExecutionContext, inbox: InboxResource) -> dg.Output[pl.DataFrame]:
    path = inbox.layout.references
    if not path.is_file() and not path.is_symlink():
        frame = pl.DataFrame(schema=REFERENCE_LABELS_SCHEMA)
        return dg.Output(frame, metadata={"rows": 0, "note": f"no reference labels at {path}"})
    with failing_on(InputError, file=path, safe=True):
        frame, problems = read_reference_label_records(path)
    rejected = [p.as_dict(path.name) for p in problems]
    inbox.quarantine_records("reference_labels", rejected)
    return dg.Output(
        frame,
        metadata={
            "rows": frame.height,
            "file": str(path),
            **_rejected_metadata(context, rejected, "row", "reference label"),
        },
    )


@RAW.asset(
    schema=ANSWER_SCHEMA,
    description="Every answer from the confirmation tool (inbox/confirmations/*.jsonl), once per answer_id; "
    "undo records kept (they cancel, never erase).",
)
def confirmations(context: dg.AssetExecutionContext, inbox: InboxResource) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.cleaning.protocol import answers_from_records

    raw_frame, rejected = inbox.confirmations()
    frame = answers_from_records(raw_frame.drop("line").to_dicts())
    return dg.Output(
        frame,
        metadata={
            "answers": frame.height,
            "annotators": frame["annotator_id"].n_unique() if frame.height else 0,
            **_rejected_metadata(context, rejected, "line", "confirmation"),
        },
    )


@RAW.asset(
    **BY_DATASET,
    schema=IMAGES_SCHEMA,
    description="The file list of one dataset (folder + labels.csv, or ImageFolder): file name, label, path, decoded "
    "width and height, sha256 and file size; never the pixels (the embedding step decodes them a batch at a time). "
    "Unreadable/truncated images and bad labels.csv rows are reported by name and excluded.",
)
def images(context: dg.AssetExecutionContext, inbox: InboxResource) -> dg.Output[pl.DataFrame]:
    from noisycal_platform.cleaning.images import ImageDatasetError, read_image_dataset

    name = context.partition_key
    roots = inbox.layout.registered_datasets()
    if name not in roots:
        raise dg.Failure(
            description=f"dataset {name!r} is no longer registered (datasets/ or datasets.json)", allow_retries=False
        )
    with failing_on(ImageDatasetError):
        ds = read_image_dataset(roots[name])
    for row in ds.excluded.iter_rows(named=True):
        context.log.warning(
            f"{name}: excluded {row['file_name']} (row {row['row']}, column {row['column']}): {row['reason']}"
        )
    frame = ds.table(name)
    return dg.Output(
        frame,
        metadata={
            "images": frame.height,
            "bytes": int(frame["file_bytes"].sum()),
            "labels": len(ds.labels),
            "layout": ds.layout,
            "root": str(ds.root),
            "excluded": ds.excluded.height,
            "excluded_files": dg.MetadataValue.md(
                _md_list(ds.excluded.head(100).to_dicts(), ("file_name", "row", "column", "reason"))
            ),
        },
    )


@RAW.asset(
    schema=GENERATIONS_SCHEMA,
    description="Model generations (correctness/generations/*.jsonl), validated; malformed model output is "
    "kept and counted as invalid, never dropped.",
)
def generations(context: dg.AssetExecutionContext, inbox: InboxResource) -> dg.Output[pl.DataFrame]:
    rejected: list[dict] = []
    with failing_on(CorrectnessInputError):
        frame = correctness_pipeline.raw_generations(inbox.layout.generations, rejected)
    inbox.quarantine_records("generations", rejected)
    return dg.Output(
        frame,
        metadata={
            "predictions": frame.height,
            **_rejected_metadata(context, rejected, "line", "generation"),
            "malformed_outputs": int(frame["answer"].is_null().sum()) if frame.height else 0,
            "groups": frame.select("dataset", "model").n_unique() if frame.height else 0,
        },
    )


@RAW.asset(
    ins={"generations": dg.AssetIn(GENERATIONS)},
    automation_condition=EAGER,
    schema=AUDIT_SCHEMA,
    description="Human audit labels (correctness/audit/*.csv): human_correct, error category, EM stratum, "
    "independent or joint decision; each row matched to exactly one generation.",
)
def audit_labels(
    context: dg.AssetExecutionContext, generations: pl.DataFrame, inbox: InboxResource
) -> dg.Output[pl.DataFrame]:
    rejected: list[dict] = []
    with failing_on(CorrectnessInputError):
        frame = correctness_pipeline.raw_audit_labels(inbox.layout.audit_labels, generations, rejected)
    inbox.quarantine_records("audit_labels", rejected)
    return dg.Output(
        frame,
        metadata={
            "audited": frame.height,
            **_rejected_metadata(context, rejected, "row", "audit label"),
        },
    )
