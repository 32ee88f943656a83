"""A failed check for every asset whose latest run failed: ``latest_run_succeeded``.

One check per materialisable asset (declared in one ``multi_asset_check``, so the UI lists it beside the asset's
other checks). Its state is kept in the evaluations' metadata: ``failed_partitions`` maps each partition whose
latest run failed ("" for an unpartitioned asset) to ``{"run_id", "step", "error"}``.

- A run fails: ``report_run_failure`` (called by ``failed_run_sensor`` under the daemon and by the in-process
  runner) adds each failed step's asset partition with the innermost error and reports the check failed
  (severity ERROR) through ``DagsterInstance.report_runless_asset_event`` (Dagster's public API for check
  results produced outside a run).
- A run succeeds: the check rides along with the asset, as asset checks do, and runs after it; the
  partition it just materialised leaves the map, and the check passes once no partition is left.
A check executed on its own (no materialisation in its run) reports the recorded state unchanged.
"""

from collections.abc import Iterable, Iterator, Mapping, Sequence

import dagster as dg

__all__ = [
    "CHECK_NAME",
    "build_latest_run_checks",
    "failed_partitions",
    "failed_run_sensor",
    "latest_evaluation",
    "report_run_failure",
    "root_message",
]

CHECK_NAME = "latest_run_succeeded"
_T = dg.DagsterEventType
#: Executions looked at for the latest completed one (planned ones of runs in progress come first).
_HISTORY = 20


def root_message(error) -> str:
    """The innermost error of a step failure: its first non-empty line without the exception's class path
    (Dagster wraps user errors once or twice)."""
    while error is not None and error.cause is not None:
        error = error.cause
    if error is None:
        return "unknown error"
    lines = [ln for ln in error.message.strip().splitlines() if ln.strip()]
    if not lines:
        return error.cls_name or "error"
    qualified, sep, rest = lines[0].partition(": ")  # "dagster._core.definitions.events.Failure: <message>"
    return rest if sep and error.cls_name and qualified.split(".")[-1] == error.cls_name and rest else lines[0]


def latest_evaluation(instance: dg.DagsterInstance, asset_key: dg.AssetKey) -> dg.AssetCheckEvaluation | None:
    """The latest completed evaluation of ``asset_key``'s check (planned ones of runs in progress are skipped)."""
    records = instance.event_log_storage.get_asset_check_execution_history(
        dg.AssetCheckKey(asset_key, CHECK_NAME), limit=_HISTORY
    )
    return next((r.evaluation for r in records if isinstance(r.evaluation, dg.AssetCheckEvaluation)), None)


def failed_partitions(instance: dg.DagsterInstance, asset_key: dg.AssetKey) -> dict[str, dict]:
    """The ``failed_partitions`` recorded by the latest completed evaluation (empty: passed, or never ran)."""
    evaluation = latest_evaluation(instance, asset_key)
    value = evaluation.metadata.get("failed_partitions") if evaluation is not None else None
    return dict(value.value) if isinstance(value, dg.JsonMetadataValue) else {}


def _evaluation(asset_key: dg.AssetKey, failed: Mapping[str, dict]) -> dict:
    """Fields shared by the in-run result and the runless evaluation: passed, description, metadata."""
    if not failed:
        return {"passed": True, "description": "the latest run of every partition succeeded",
                "metadata": {"failed_partitions": dg.MetadataValue.json({})}}
    latest_key = next(reversed(failed))
    latest = failed[latest_key]
    where = f"[{latest_key}] " if latest_key else ""
    return {
        "passed": False,
        "description": f"{asset_key.to_user_string()} {where}failed in run {latest['run_id'][:8]}: {latest['error']}",
        "metadata": {
            "failed_partitions": dg.MetadataValue.json(dict(failed)),
            "run_id": latest["run_id"],
            "step": latest["step"],
            "error": latest["error"],
        },
    }


def _failed_steps(instance: dg.DagsterInstance, run: dg.DagsterRun) -> dict[dg.AssetKey, tuple[str, str]]:
    """asset key -> (step key, innermost error) for each failed asset step of ``run``; when the run failed
    without a step failure (its worker crashed), every selected asset with the run's failure message."""
    steps: dict[dg.AssetKey, tuple[str, str]] = {}
    for event in instance.all_logs(run.run_id, of_type=_T.STEP_FAILURE):
        step = event.step_key or ""
        error = root_message(event.dagster_event.event_specific_data.error)
        steps[dg.AssetKey(step.split("__"))] = (step, error)
    if not steps:
        failures = instance.all_logs(run.run_id, of_type=_T.RUN_FAILURE)
        message = (failures[-1].dagster_event.message if failures else None) or "run failed"
        steps = {key: ("", message) for key in run.asset_selection or ()}
    return steps


def report_run_failure(
    instance: dg.DagsterInstance, run: dg.DagsterRun, checked: Iterable[dg.AssetKey]
) -> list[dg.AssetCheckEvaluation]:
    """Report ``latest_run_succeeded`` failed for each asset of ``checked`` whose step failed in ``run``."""
    checked = set(checked)
    partition = run.tags.get("dagster/partition") or ""
    evaluations = []
    for key, (step, error) in _failed_steps(instance, run).items():
        if key not in checked:
            continue  # a check step, or an asset of another code location
        failed = failed_partitions(instance, key)
        failed.pop(partition, None)  # re-inserted last: the latest failure
        failed[partition] = {"run_id": run.run_id, "step": step, "error": error}
        evaluation = dg.AssetCheckEvaluation(
            asset_key=key, check_name=CHECK_NAME, severity=dg.AssetCheckSeverity.ERROR, **_evaluation(key, failed)
        )
        instance.report_runless_asset_event(evaluation)
        evaluations.append(evaluation)
    return evaluations


def build_latest_run_checks(asset_keys: Sequence[dg.AssetKey]) -> dg.AssetChecksDefinition:
    """``latest_run_succeeded`` for every key of ``asset_keys`` (module docstring)."""

    @dg.multi_asset_check(
        name="latest_run_succeeded",
        specs=[
            dg.AssetCheckSpec(
                CHECK_NAME,
                asset=key,
                description="Fails with the reason (run, step, error) while the latest run of a partition of "
                "this asset failed; passes after the next successful materialisation.",
            )
            for key in asset_keys
        ],
        can_subset=True,
    )
    def _latest_run_succeeded(context: dg.AssetCheckExecutionContext) -> Iterator[dg.AssetCheckResult]:
        events = context.instance.all_logs(context.run.run_id, of_type=_T.ASSET_MATERIALIZATION)
        materialised = {e.dagster_event.asset_key for e in events}
        partition = context.run.tags.get("dagster/partition") or ""
        for check_key in context.selected_asset_check_keys:
            failed = failed_partitions(context.instance, check_key.asset_key)
            if check_key.asset_key in materialised:
                failed.pop(partition, None)  # the check runs after its asset: that partition just materialised
            yield dg.AssetCheckResult(
                asset_key=check_key.asset_key, check_name=CHECK_NAME, **_evaluation(check_key.asset_key, failed)
            )

    return _latest_run_succeeded


@dg.run_failure_sensor(name="failed_run_sensor", default_status=dg.DefaultSensorStatus.RUNNING,
                       minimum_interval_seconds=5)
def failed_run_sensor(context: dg.RunFailureSensorContext) -> None:
    """Report ``latest_run_succeeded`` failed, with the reason, for the assets whose steps failed in the run."""
    repository = context.repository_def
    if repository is None:
        return
    checked = {key.asset_key for key in repository.asset_graph.asset_check_keys if key.name == CHECK_NAME}
    report_run_failure(context.instance, context.dagster_run, checked)
