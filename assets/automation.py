"""Sensors, schedules and jobs: what reruns the graph by itself.

- ``annotation_sensor``: new files in ``inbox/annotations/`` -> one run of ``raw/annotations`` per new content
  hash (run_key = sha256, so a repeated or renamed copy requests nothing); downstream assets follow through
  their eager automation condition.
- ``confirmation_sensor``: the confirmation tool appended answers -> ``raw/confirmations`` reruns.
- ``queue_refill_sensor``: the answers reach deeper into a dataset's near-duplicate ranking than two stopping
  runs before its end -> ``cleaning/rank_near_duplicates`` reruns for that dataset at the depth they need, and
  the confirmation queue follows (the queue extends as annotators go; only the stopping rule or the true end of
  the candidates ends a session).
- ``audit_answers_sensor``: correctness-audit answers (web tool log, annotation CSVs), adjudications or the
  audit sample added or changed -> ``correctness/audit_agreement`` reruns (its consensus file then reloads
  ``raw/audit_labels`` through ``generations_sensor``).
- ``reference_sensor``: ``references/labels.csv`` appeared or changed -> ``raw/reference_labels`` reruns.
- ``model_version_sensor``: a new folder ``models/<version>/`` with predictions -> new ``model_versions``
  partition + a run of ``raw/predictions`` for it; the calibration assets follow for that partition. A
  predictions file replaced in place (new content hash) reruns its partition.
- ``dataset_sensor``: a new dataset folder / registration -> new ``datasets`` partition + ``raw/images`` run.
- ``generations_sensor``: new or changed files under ``correctness/`` -> generations and audit labels reload.
- ``settings_sensor``: ``settings.json`` changed (content hash) -> the calibration assets (and with them their
  checks against the clinic's limits) rerun for every model version; the reports follow.
- ``snapshot_sensor``: after each successful run, the read-only warehouse copy that notebooks and
  ``noisycal query`` read is refreshed (``resources.snapshot``).
- ``quality_monitor``: daily schedule rematerialising the reports and running every asset check.
"""

import hashlib
import json

import dagster as dg

from assets.calibration import CHANNEL_ESTIMATES, NC_ECE_REPORT, RECALIBRATION_REPORT, RECALIBRATORS
from assets.cleaning import RANK_NEAR_DUPLICATES, queue_depths
from assets.correctness import AUDIT_AGREEMENT
from assets.policy import DATASETS, MODEL_VERSIONS
from assets.raw import ANNOTATIONS, AUDIT_LABELS, CONFIRMATIONS, GENERATIONS, IMAGES, PREDICTIONS, REFERENCE_LABELS
from noisycal_platform.correctness.audit_sample import AuditPaths
from noisycal_platform.files import sha256_file
from resources.inbox import InboxResource
from resources.model_registry import ModelRegistryResource
from resources.settings import SettingsResource

__all__ = [
    "DOWNSTREAM_TAG",
    "JOBS",
    "SCHEDULES",
    "SENSORS",
    "annotation_sensor",
    "audit_answers_sensor",
    "automation_sensor",
    "confirmation_sensor",
    "dataset_sensor",
    "downstream_in_one_run",
    "generations_sensor",
    "model_version_sensor",
    "quality_monitor",
    "quality_monitor_job",
    "queue_refill_sensor",
    "reference_sensor",
    "settings_sensor",
    "snapshot_sensor",
]

RUNNING = dg.DefaultSensorStatus.RUNNING
#: Seconds between evaluations of the sensors on the path from a dropped batch to a published report (the drop
#: folders, the model registry, the automation conditions). Dagster's sensor and automation daemons loop every
#: 5 s, so this is the shortest interval that takes effect; each evaluation of these is cheap (a directory
#: listing; one automation evaluation of the graph, about a second). Others keep Dagster's default of 30 s.
FAST_SENSOR_SECONDS = 5

quality_monitor_job = dg.define_asset_job(
    "quality_monitor_job",
    selection=dg.AssetSelection.groups("reports") | dg.AssetSelection.groups("reports").upstream(depth=1).checks(),
    description="Daily: rebuild the reports and run the asset checks of what they summarise.",
)


#: Tag of an ingestion run that also builds what lies downstream of the annotations (:func:`downstream_in_one_run`).
DOWNSTREAM_TAG = "noisycal/downstream"
_IN_FLIGHT = [
    dg.DagsterRunStatus.QUEUED,
    dg.DagsterRunStatus.NOT_STARTED,
    dg.DagsterRunStatus.STARTING,
    dg.DagsterRunStatus.STARTED,
]


def _input_ready(instance: dg.DagsterInstance, graph, key: dg.AssetKey, partition: str | None) -> bool:
    """Whether input ``key`` (its ``partition`` when partitioned) is materialised and its latest run succeeded:
    what the eager conditions (`assets.policy`) require of an input before they build what reads it."""
    pdef = graph.get(key).partitions_def
    if pdef is not None:
        if partition is None or pdef != MODEL_VERSIONS:
            return False
        status = instance.get_status_by_partition(key, [partition], pdef) or {}
        return status.get(partition) == dg.AssetPartitionStatus.MATERIALIZED
    (record,) = instance.get_asset_records([key]) or (None,)
    entry = record.asset_entry if record is not None else None
    if entry is None or entry.last_materialization_record is None:
        return False
    planned = entry.last_planned_materialization_run_id
    if planned is None or planned == entry.last_materialization_record.run_id:
        return True
    run = instance.get_run_by_id(planned)
    return run is None or run.status == dg.DagsterRunStatus.SUCCESS


def downstream_in_one_run(context: dg.SensorEvaluationContext) -> tuple[list[dg.AssetKey], str | None]:
    """(assets, partition key) that a new annotation batch's ingestion run also builds: everything downstream of
    ``raw/annotations``, so a dropped batch reaches its report in one run instead of a chain of three (ingestion,
    then the model version's calibration, then the report, each waiting for an automation evaluation and starting
    a process of its own). ``([], None)`` leaves them to the eager automation conditions, as before, whenever
    one run could not build them exactly as those would: the home has no model version or more than one (one
    run holds one partition; the report then waits for every version's chain), an input from outside this set is
    missing or its latest run failed, or a run in progress or queued touches this set or its inputs.

    The eager conditions do not build these assets again: each is updated in the run after its inputs. If a
    step fails, the steps after it in the run are skipped and the automation builds what is left (a failed
    calibration step is then tried once more, by the automation's run)."""
    graph = context.repository_def.asset_graph
    keys = set(dg.AssetSelection.assets(ANNOTATIONS).downstream(include_self=False).resolve(graph))
    if not keys:
        return [], None
    instance = context.instance
    partition = None
    if any(graph.get(k).partitions_def is not None for k in keys):
        versions = instance.get_dynamic_partitions(MODEL_VERSIONS.name)
        if len(versions) != 1:
            return [], None
        (partition,) = versions
    outside = {p for k in keys for p in graph.get(k).parent_keys} - keys - {ANNOTATIONS}
    touched = keys | outside | {ANNOTATIONS}
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=_IN_FLIGHT)):
        if set(record.dagster_run.asset_selection or ()) & touched or record.dagster_run.asset_selection is None:
            return [], None
    if not all(_input_ready(instance, graph, key, partition) for key in sorted(outside, key=str)):
        return [], None
    return sorted(keys, key=lambda k: k.to_user_string()), partition


@dg.sensor(target=[ANNOTATIONS], default_status=RUNNING, minimum_interval_seconds=FAST_SENSOR_SECONDS)
def annotation_sensor(context: dg.SensorEvaluationContext, inbox: InboxResource) -> dg.SensorResult:
    """One RunRequest per new batch content hash; the cursor remembers hashes already requested. A single new
    batch's run also builds what lies downstream of it when one run can (:func:`downstream_in_one_run`)."""
    requested = set(json.loads(context.cursor)) if context.cursor else set()
    new = [(p, h) for p, h in inbox.new_annotation_batches() if h not in requested]
    if not new:
        return dg.SensorResult(skip_reason=dg.SkipReason("no new annotation batches"))
    requested.update(h for _, h in new)
    downstream, partition = downstream_in_one_run(context) if len(new) == 1 else ([], None)
    fold = {DOWNSTREAM_TAG: "true"} if downstream else {}
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=f"annotations-{h}",
                asset_selection=[ANNOTATIONS, *downstream],
                partition_key=partition,
                tags={"noisycal/batch": p.name, "noisycal/sha256": h, **fold},
            )
            for p, h in new
        ],
        cursor=json.dumps(sorted(requested)),
    )


@dg.sensor(target=[CONFIRMATIONS], default_status=RUNNING, minimum_interval_seconds=FAST_SENSOR_SECONDS)
def confirmation_sensor(context: dg.SensorEvaluationContext, inbox: InboxResource) -> dg.SensorResult:
    """Rerun ``raw/confirmations`` when any answer file changed (ingestion dedups by answer_id)."""
    fingerprint = inbox.confirmation_fingerprint()
    if not fingerprint or fingerprint == (context.cursor or ""):
        return dg.SensorResult(skip_reason=dg.SkipReason("no new confirmation answers"))
    key = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"confirmations-{key}", asset_selection=[CONFIRMATIONS])],
        cursor=fingerprint,
    )


def _stored_depth(instance: dg.DagsterInstance, dataset: str) -> int | None:
    """``pairs_per_kind`` of the latest ``rank_near_duplicates[dataset]`` materialisation (None: never built)."""
    filt = dg.AssetRecordsFilter(asset_key=RANK_NEAR_DUPLICATES, asset_partitions=[dataset])
    records = instance.fetch_materializations(filt, limit=1).records
    if not records or records[0].asset_materialization is None:
        return None
    value = records[0].asset_materialization.metadata.get("pairs_per_kind")
    return int(value.value) if value is not None else None


@dg.sensor(target=[RANK_NEAR_DUPLICATES], default_status=RUNNING)
def queue_refill_sensor(
    context: dg.SensorEvaluationContext, inbox: InboxResource, settings: SettingsResource
) -> dg.SensorResult:
    """Rerun a dataset's near-duplicate ranking when its answers need more pairs than it holds
    (`assets.cleaning.queue_depths`); a dataset never ranked is left to its first build. The
    cursor is the answer files' fingerprint once every queue reaches past them, so unchanged answers are not
    read again every evaluation (requests are repeated until the reruns they ask for have landed)."""
    fingerprint = inbox.confirmation_fingerprint()
    if not fingerprint or fingerprint == (context.cursor or ""):
        return dg.SensorResult(skip_reason=dg.SkipReason("no new confirmation answers"))
    stored = {d: _stored_depth(context.instance, d) for d in context.instance.get_dynamic_partitions(DATASETS.name)}
    built = [d for d, depth in stored.items() if depth is not None]
    need = queue_depths(inbox, settings, built) if built else {}
    deeper = {d: n for d, n in need.items() if n > stored[d]}
    if not deeper:
        return dg.SensorResult(skip_reason=dg.SkipReason("every near-duplicate queue reaches past its answers"),
                               cursor=fingerprint)
    return dg.SensorResult(run_requests=[
        dg.RunRequest(run_key=f"queue-{d}-{n}", partition_key=d, asset_selection=[RANK_NEAR_DUPLICATES])
        for d, n in sorted(deeper.items())
    ])


def _folder_fingerprint(*folders) -> str:
    parts = []
    for folder in folders:
        if folder.is_dir():
            parts += [
                f"{p.name}:{p.stat().st_size}:{p.stat().st_mtime_ns}"
                for p in sorted(folder.iterdir())
                if p.is_file() and not p.name.startswith(".")
            ]
    return "|".join(parts)


@dg.sensor(target=[GENERATIONS, AUDIT_LABELS], default_status=RUNNING, minimum_interval_seconds=60)
def generations_sensor(context: dg.SensorEvaluationContext, inbox: InboxResource) -> dg.SensorResult:
    """Model generations or audit labels were added or changed -> reload both (correctness reruns)."""
    fingerprint = _folder_fingerprint(inbox.layout.generations, inbox.layout.audit_labels)
    if not fingerprint or fingerprint == (context.cursor or ""):
        return dg.SensorResult(skip_reason=dg.SkipReason("no new generations or audit labels"))
    key = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"generations-{key}", asset_selection=[GENERATIONS, AUDIT_LABELS])],
        cursor=fingerprint,
    )


@dg.sensor(target=[AUDIT_AGREEMENT], default_status=RUNNING, minimum_interval_seconds=60)
def audit_answers_sensor(context: dg.SensorEvaluationContext, inbox: InboxResource) -> dg.SensorResult:
    """Audit answers, adjudications or the audit sample changed -> recompute agreement and the consensus labels
    (Rethinking Correctness 2026 §2.4: two annotators, then a joint decision on their disagreements)."""
    paths = AuditPaths(inbox.layout.home)
    sample = paths.sample
    fingerprint = _folder_fingerprint(paths.web_answers, paths.annotation_csvs, paths.adjudications) + (
        f"|sample:{sample.stat().st_size}:{sample.stat().st_mtime_ns}" if sample.is_file() else ""
    )
    if not fingerprint or fingerprint == (context.cursor or ""):
        return dg.SensorResult(skip_reason=dg.SkipReason("no new audit answers or decisions"))
    key = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"audit-{key}", asset_selection=[AUDIT_AGREEMENT])],
        cursor=fingerprint,
    )


@dg.sensor(target=[REFERENCE_LABELS], default_status=RUNNING, minimum_interval_seconds=60)
def reference_sensor(context: dg.SensorEvaluationContext, inbox: InboxResource) -> dg.SensorResult:
    """(Re)load ``raw/reference_labels`` when ``references/labels.csv`` appears or changes (or on first run)."""
    path = inbox.layout.references
    fingerprint = f"{path.stat().st_size}:{path.stat().st_mtime_ns}" if path.is_file() else "absent"
    if fingerprint == context.cursor:
        return dg.SensorResult(skip_reason=dg.SkipReason("reference labels unchanged"))
    key = hashlib.sha256(fingerprint.encode()).hexdigest()[:16]
    return dg.SensorResult(
        run_requests=[dg.RunRequest(run_key=f"references-{key}", asset_selection=[REFERENCE_LABELS])],
        cursor=fingerprint,
    )


def _load_version_cursor(cursor: str | None) -> dict[str, dict[str, str]]:
    if not cursor:
        return {}
    data = json.loads(cursor)
    return data if isinstance(data, dict) else {}


@dg.sensor(target=[PREDICTIONS], default_status=RUNNING, minimum_interval_seconds=FAST_SENSOR_SECONDS)
def model_version_sensor(context: dg.SensorEvaluationContext, model_registry: ModelRegistryResource) -> dg.SensorResult:
    """A new ``models/<version>/`` folder becomes a ``model_versions`` partition and its predictions are loaded;
    a predictions file replaced in place (new content hash) is loaded again for its version.

    The cursor maps version -> {"stat": size:mtime, "sha256": content hash}; a file is hashed only when its
    size or mtime changed, and a new hash (not a new mtime alone) requests a run."""
    seen = _load_version_cursor(context.cursor)
    known = set(context.instance.get_dynamic_partitions(MODEL_VERSIONS.name))
    new_versions: list[str] = []
    requests: list[dg.RunRequest] = []
    for v in model_registry.versions():
        path = model_registry.predictions_file(v)
        try:
            st = path.stat()
        except OSError:
            continue
        stat = f"{st.st_size}:{st.st_mtime_ns}"
        entry = seen.get(v)
        if v not in known:
            new_versions.append(v)
            requests.append(dg.RunRequest(run_key=f"model-{v}", partition_key=v, asset_selection=[PREDICTIONS]))
            seen[v] = {"stat": stat, "sha256": sha256_file(path)}
        elif entry is None:
            seen[v] = {"stat": stat, "sha256": sha256_file(path)}  # a cursor from before hashes were kept
        elif entry["stat"] != stat:
            digest = sha256_file(path)
            if digest != entry["sha256"]:
                requests.append(
                    dg.RunRequest(
                        run_key=f"model-{v}-{digest[:16]}",
                        partition_key=v,
                        asset_selection=[PREDICTIONS],
                        tags={"noisycal/reason": "predictions replaced in place", "noisycal/sha256": digest},
                    )
                )
            seen[v] = {"stat": stat, "sha256": digest}
    cursor = json.dumps(seen, sort_keys=True)
    if not requests:
        return dg.SensorResult(skip_reason=dg.SkipReason("no new or changed model versions"), cursor=cursor)
    return dg.SensorResult(
        dynamic_partitions_requests=[MODEL_VERSIONS.build_add_request(new_versions)] if new_versions else [],
        run_requests=requests,
        cursor=cursor,
    )


@dg.sensor(target=[IMAGES], default_status=RUNNING, minimum_interval_seconds=60)
def dataset_sensor(context: dg.SensorEvaluationContext, inbox: InboxResource) -> dg.SensorResult:
    """A new folder under ``datasets/`` (or a ``noisycal datasets add``) becomes a ``datasets`` partition."""
    known = set(context.instance.get_dynamic_partitions(DATASETS.name))
    new = [name for name in inbox.layout.registered_datasets() if name not in known]
    if not new:
        return dg.SensorResult(skip_reason=dg.SkipReason("no new datasets"))
    return dg.SensorResult(
        dynamic_partitions_requests=[DATASETS.build_add_request(new)],
        run_requests=[dg.RunRequest(run_key=f"dataset-{d}", partition_key=d, asset_selection=[IMAGES]) for d in new],
    )


CALIBRATION_ASSETS = [CHANNEL_ESTIMATES, NC_ECE_REPORT, RECALIBRATORS, RECALIBRATION_REPORT]


@dg.sensor(target=CALIBRATION_ASSETS, default_status=RUNNING, minimum_interval_seconds=30)
def settings_sensor(context: dg.SensorEvaluationContext, inbox: InboxResource) -> dg.SensorResult:
    """A changed ``settings.json`` (thresholds, bins, bootstrap size) reruns what depends on it, per version.

    The first evaluation records the current content hash; later ones request a run per model version when
    it changes (run key = hash + version, so an edit back and forth is requested again)."""
    path = inbox.layout.home / "settings.json"
    digest = sha256_file(path) if path.is_file() else "absent"
    if context.cursor is None or digest == context.cursor:
        return dg.SensorResult(skip_reason=dg.SkipReason("settings unchanged"), cursor=digest)
    versions = context.instance.get_dynamic_partitions(MODEL_VERSIONS.name)
    stamp = f"{context.cursor[:8]}-{digest[:16]}"
    return dg.SensorResult(
        run_requests=[
            dg.RunRequest(
                run_key=f"settings-{stamp}-{v}",
                partition_key=v,
                asset_selection=CALIBRATION_ASSETS,
                tags={"noisycal/reason": "settings.json changed"},
            )
            for v in versions
        ],
        skip_reason=None if versions else dg.SkipReason("settings changed; no model version to rerun yet"),
        cursor=digest,
    )


@dg.run_status_sensor(
    run_status=dg.DagsterRunStatus.SUCCESS, default_status=RUNNING, minimum_interval_seconds=30, name="snapshot_sensor"
)
def snapshot_sensor(context: dg.RunStatusSensorContext, inbox: InboxResource):
    """Refresh the read-only warehouse snapshot after a successful run (readers never hold the warehouse)."""
    from resources.snapshot import refresh_snapshot

    path = refresh_snapshot(inbox.layout.home)
    return dg.SkipReason(f"snapshot refreshed: {path}" if path else "no warehouse yet")


quality_monitor = dg.ScheduleDefinition(
    name="quality_monitor",
    job=quality_monitor_job,
    cron_schedule="0 6 * * *",
    default_status=dg.DefaultScheduleStatus.RUNNING,
    description="Daily data-quality monitoring: reports and checks.",
)

#: Runs the eager automation conditions (downstream reruns). Default RUNNING, unlike Dagster's default.
automation_sensor = dg.AutomationConditionSensorDefinition(
    "automation",
    target=dg.AssetSelection.all(),
    default_status=RUNNING,
    minimum_interval_seconds=FAST_SENSOR_SECONDS,
)

SENSORS = [
    annotation_sensor,
    audit_answers_sensor,
    confirmation_sensor,
    queue_refill_sensor,
    reference_sensor,
    model_version_sensor,
    dataset_sensor,
    generations_sensor,
    automation_sensor,
    settings_sensor,
    snapshot_sensor,
]
SCHEDULES = [quality_monitor]
JOBS = [quality_monitor_job]
