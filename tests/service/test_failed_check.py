"""A partition whose latest run failed shows as a failed ``latest_run_succeeded`` check with the reason (run id,
step, error); the next successful materialisation of that partition makes the check pass again."""

import dagster as dg

from assets.service_checks import build_latest_run_checks, failed_run_sensor, latest_evaluation
from orchestration.instance import instance_for
from orchestration.runner import materialize_everything

PARTS = dg.DynamicPartitionsDefinition(name="toy_versions")
SCORES = dg.AssetKey("scores")


def _defs(failing: set[str]) -> dg.Definitions:
    @dg.asset(partitions_def=PARTS)
    def scores(context: dg.AssetExecutionContext) -> None:
        if context.partition_key in failing:
            raise dg.Failure(f"bad predictions file for {context.partition_key}", allow_retries=False)

    @dg.asset
    def summary() -> None:
        return None

    return dg.Definitions(
        assets=[scores, summary],
        asset_checks=[build_latest_run_checks([SCORES, dg.AssetKey("summary")])],
        sensors=[failed_run_sensor],
    )


def _latest(instance: dg.DagsterInstance) -> dg.AssetCheckEvaluation:
    return latest_evaluation(instance, SCORES)


def test_a_failed_partition_fails_the_check_with_the_reason_until_it_succeeds(tmp_path):
    home = tmp_path / "home"
    instance = instance_for(home)
    instance.add_dynamic_partitions(PARTS.name, ["v1", "v2"])

    report = materialize_everything(home, defs=_defs(failing={"v2"}))  # the in-process runner reports it
    (failed_run,) = [r for r in report.runs if not r["success"]]
    evaluation = _latest(instance)
    assert not evaluation.passed and evaluation.severity == dg.AssetCheckSeverity.ERROR
    assert evaluation.metadata["run_id"].value == failed_run["run_id"]
    assert evaluation.metadata["step"].value == "scores"
    assert evaluation.metadata["error"].value == "bad predictions file for v2"
    assert "[v2]" in evaluation.description and "bad predictions file for v2" in evaluation.description
    assert set(evaluation.metadata["failed_partitions"].value) == {"v2"}
    # the unpartitioned asset and the good partition passed in their own runs
    assert latest_evaluation(instance, dg.AssetKey("summary")).passed

    # a later run of the good partition leaves the failed one failing
    defs = _defs(failing=set())
    assets = [*defs.assets, *defs.asset_checks]
    assert dg.materialize(assets, selection=[SCORES], partition_key="v1", instance=instance).success
    assert not _latest(instance).passed and set(_latest(instance).metadata["failed_partitions"].value) == {"v2"}

    # the next successful materialisation of v2 makes the check pass
    assert dg.materialize(assets, selection=[SCORES], partition_key="v2", instance=instance).success
    assert _latest(instance).passed
    assert _latest(instance).metadata["failed_partitions"].value == {}


def test_the_daemons_failure_sensor_reports_the_failed_partition(tmp_path):
    """Under the daemon the runs are not the runner's: ``failed_run_sensor`` reports them."""
    instance = instance_for(tmp_path / "home")
    instance.add_dynamic_partitions(PARTS.name, ["v1"])
    defs = _defs(failing={"v1"})
    result = dg.materialize(
        [*defs.assets, *defs.asset_checks], selection=[SCORES], partition_key="v1", instance=instance,
        raise_on_error=False,
    )
    assert not result.success
    assert _latest(instance) is None  # the check was skipped with its asset: nothing reported the failure yet
    run = instance.get_run_by_id(result.run_id)
    (failure_event,) = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
    context = dg.build_run_status_sensor_context(
        sensor_name="failed_run_sensor",
        dagster_instance=instance,
        dagster_run=run,
        dagster_event=failure_event.dagster_event,
        repository_def=defs.get_repository_def(),
    ).for_run_failure()
    failed_run_sensor(context)
    evaluation = _latest(instance)
    assert not evaluation.passed
    assert evaluation.metadata["run_id"].value == run.run_id
    assert evaluation.metadata["error"].value == "bad predictions file for v1"
