"""In-process orchestration over one ``$NOISYCAL_HOME``: the same sensors and automation conditions the daemon
runs, evaluated once (``tick``), so cron jobs, the demo and the tests exercise the real automation path.

State lives in ``$NOISYCAL_HOME/dagster/`` (``DAGSTER_HOME``: run history, partitions) plus ``tick_state.json``
(sensor cursors, the automation cursor and the run keys already executed, mirroring the daemon's dedup).
"""

import json
from collections import defaultdict
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import dagster as dg

from assets.service_checks import CHECK_NAME, report_run_failure, root_message
from noisycal_platform.files import atomic_write_text
from noisycal_platform.paths import HomeLayout
from orchestration.errors import HomeBusy
from orchestration.instance import (
    DEFAULT_LOCK_TIMEOUT_SECONDS,
    daemon_running,
    dagster_home,
    home_lock,
    instance_for,
    process_tags,
    recover,
    wait_for_pools,
)
from orchestration.run_queue import submit, wait

__all__ = ["STAGES", "Stage", "TickReport", "dagster_home", "instance_for", "materialize_everything", "tick"]

_T = dg.DagsterEventType
_QUIET_LOGS = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}


@dataclass(frozen=True)
class Stage:
    """A stage of the platform, its root input asset, and where its inputs are looked for."""

    name: str
    root: dg.AssetKey
    inputs: str  # said when there are none

    def has_inputs(self, layout: HomeLayout) -> bool:
        if self.name == "calibration":
            return bool(layout.model_versions())
        if self.name == "cleaning":
            return bool(layout.registered_datasets())
        return layout.generations.is_dir() and any(layout.generations.glob("*.jsonl"))


#: Every stage is optional: `materialize` skips the root asset of a stage without inputs and everything downstream
#: of it (its reports included), and says so. Raw inputs shared by no stage's root (annotations, confirmations,
#: reference labels) are always read: they are empty, not missing, until files arrive.
STAGES = (
    Stage("calibration", dg.AssetKey(["raw", "predictions"]), "no model version (models/<version>/predictions.*)"),
    Stage("cleaning", dg.AssetKey(["raw", "images"]), "no image dataset (datasets/<name>/ or `noisycal datasets add`)"),
    Stage("correctness", dg.AssetKey(["raw", "generations"]), "no generations (correctness/generations/*.jsonl)"),
)


def _stages_without_inputs(home: str | Path, graph) -> dict[str, tuple[str, set[dg.AssetKey]]]:
    """{stage: (what is missing, the asset keys skipped)} for the stages of ``home`` that have no inputs."""
    layout = HomeLayout.at(home)
    missing: dict[str, tuple[str, set[dg.AssetKey]]] = {}
    for stage in STAGES:
        if stage.root not in graph.materializable_asset_keys or stage.has_inputs(layout):
            continue
        skipped, todo = set(), [stage.root]
        while todo:
            key = todo.pop()
            if key not in skipped:
                skipped.add(key)
                todo.extend(graph.get(key).child_keys)
        missing[stage.name] = (stage.inputs, skipped)
    return missing


@dataclass
class TickReport:
    runs: list[dict] = field(default_factory=list)
    partitions_added: dict[str, list[str]] = field(default_factory=dict)
    rounds: int = 0
    recovered: list[dict] = field(default_factory=list)
    #: (asset key, partition key or None) that failed or were not run in this tick
    failed: set = field(default_factory=set)
    home: str = ""
    snapshot: str | None = None
    #: runs go through the daemon's run queue (a daemon serves the home) instead of running in this process
    queued: bool = False
    #: said instead of running anything (tick under a daemon)
    note: str = ""
    #: stages that had no inputs: {stage: what is missing} (materialize skipped them)
    no_inputs: dict[str, str] = field(default_factory=dict)

    @property
    def n_runs(self) -> int:
        return len(self.runs)


def _state_path(home: str | Path) -> Path:
    return dagster_home(home) / "tick_state.json"


def _load_state(home: str | Path) -> dict:
    p = _state_path(home)
    if p.is_file():
        return json.loads(p.read_text(encoding="utf-8"))
    return {"sensor_cursors": {}, "run_keys": [], "automation_cursor": None}


def _all_assets(defs: dg.Definitions) -> list:
    return [*defs.assets, *(defs.asset_checks or [])]


def _blocked_by_failure(graph, keys, partition_key, failed: set) -> set:
    """Keys whose parent failed (or was skipped) earlier in this tick for the same partition, or whose
    unpartitioned parent failed, and the keys of the selection downstream of those (a run may hold several
    levels of a chain). A failed partition of a fan-in input never blocks an unpartitioned target."""
    blocked: set = set()
    changed = True
    while changed:  # to a fixed point: a selection holds a few levels at most
        changed = False
        for key in keys:
            if key in blocked:
                continue
            for parent in graph.get(key).parent_keys:
                if (parent, None) in failed or parent in blocked or (
                    partition_key is not None and (parent, partition_key) in failed
                ):
                    blocked.add(key)
                    changed = True
                    break
    return blocked


def _execute(defs, instance, selection, partition_key, tags, report: TickReport, reason: str) -> None:
    graph = defs.resolve_asset_graph()
    blocked = _blocked_by_failure(graph, selection, partition_key, report.failed)
    if blocked:
        report.failed.update((k, partition_key) for k in blocked)
        report.runs.append(_skipped_entry(reason, blocked, partition_key, None))
        selection = [k for k in selection if k not in blocked]
        if not selection:
            return
    tags = {k: str(v) for k, v in (tags or {}).items()}
    if report.queued:  # a daemon serves the home: its run queue launches the run (orchestration.run_queue)
        run_id = submit(report.home, list(selection), partition_key, tags)  # its worker is the daemon's
        wait(instance, run_id)
    else:
        tags.update(process_tags())  # recover() marks the run failed if this process dies
        wait_for_pools(report.home, instance)
        result = dg.materialize(
            _all_assets(defs), selection=selection, partition_key=partition_key, instance=instance,
            resources=defs.resources, tags=tags, run_config=_QUIET_LOGS, raise_on_error=False,
        )
        run_id = result.run_id
    _record_run(defs, instance, run_id, selection, partition_key, report, reason)


#: The report's line for assets not run because an asset they read failed earlier in the tick or in their run.
UPSTREAM_FAILED = "not run: an upstream asset failed in this tick"


def _skipped_entry(reason: str, keys, partition_key, run_id: str | None) -> dict:
    return {
        "reason": reason,
        "assets": sorted(k.to_user_string() for k in keys),
        "partition": partition_key,
        "success": True,
        "skipped": True,
        "run_id": run_id,
        "errors": [UPSTREAM_FAILED],
    }


def _record_run(defs, instance, run_id: str, selection, partition_key, report: TickReport, reason: str) -> None:
    """What a finished run did, from its event log: success, materialised assets, blocking check failures. The
    assets of the run that Dagster did not execute because an asset they read failed in the same run are listed
    apart, as the assets of a later run would be (``UPSTREAM_FAILED``)."""
    run = instance.get_run_by_id(run_id)
    success = run.status == dg.DagsterRunStatus.SUCCESS
    materialized = {e.dagster_event.asset_key for e in instance.all_logs(run_id, of_type=_T.ASSET_MATERIALIZATION)}
    evaluations = [
        e.dagster_event.event_specific_data for e in instance.all_logs(run_id, of_type=_T.ASSET_CHECK_EVALUATION)
    ]
    failed_checks = {
        e.asset_key for e in evaluations if not e.passed and e.blocking and e.severity == dg.AssetCheckSeverity.ERROR
    }
    not_done = {k for k in selection if k not in materialized or k in failed_checks}
    graph = defs.resolve_asset_graph()
    below = {k for k in not_done if any(p in not_done for p in graph.get(k).parent_keys)}
    report.runs.append(
        {
            "reason": reason,
            "assets": sorted(k.to_user_string() for k in selection if k not in below),
            "partition": partition_key,
            "success": success,
            "run_id": run_id,
        }
    )
    report.failed.update((k, partition_key) for k in not_done)
    if not success:
        if not report.queued:  # under the daemon, failed_run_sensor reports the failed check
            checked = {k.asset_key for k in graph.asset_check_keys if k.name == CHECK_NAME}
            report_run_failure(instance, run, checked)
        report.runs[-1]["errors"] = [
            f"{e.step_key}: {root_message(e.dagster_event.event_specific_data.error)}"
            for e in instance.all_logs(run_id, of_type=_T.STEP_FAILURE)
        ]
    if below:
        report.runs.append(_skipped_entry(reason, below, partition_key, run_id))


def _run_sensors(defs, instance, state, report: TickReport) -> int:
    executed = 0
    for sensor in defs.sensors or []:
        if isinstance(sensor, (dg.AutomationConditionSensorDefinition, dg.RunStatusSensorDefinition)):
            continue  # the automation conditions are evaluated below; run-status sensors are the daemon's
        # only the resources the sensor declares: building all seven for each evaluation cost about 27 ms of CPU
        # per sensor against 4 ms (nine sensors per round, one or more rounds per tick)
        ctx = dg.build_sensor_context(
            instance=instance,
            cursor=state["sensor_cursors"].get(sensor.name),
            definitions=defs,
            sensor_name=sensor.name,
            resources={k: v for k, v in defs.resources.items() if k in sensor.required_resource_keys},
        )
        result = sensor(ctx)
        if not isinstance(result, dg.SensorResult):
            continue
        for req in result.dynamic_partitions_requests or []:
            if isinstance(req, dg.AddDynamicPartitionsRequest):
                instance.add_dynamic_partitions(req.partitions_def_name, list(req.partition_keys))
                report.partitions_added.setdefault(req.partitions_def_name, []).extend(req.partition_keys)
        for rr in result.run_requests or []:
            if rr.run_key and rr.run_key in state["run_keys"]:
                continue  # the daemon dedups run keys per sensor the same way
            _execute(
                defs,
                instance,
                list(rr.asset_selection or []),
                rr.partition_key,
                rr.tags,
                report,
                f"sensor {sensor.name}",
            )
            executed += 1
            if rr.run_key:
                state["run_keys"].append(rr.run_key)
        if ctx.cursor is not None or result.cursor is not None:
            state["sensor_cursors"][sensor.name] = result.cursor if result.cursor is not None else ctx.cursor
    return executed


def _topological_levels(defs) -> dict[dg.AssetKey, int]:
    graph = defs.resolve_asset_graph()
    level: dict[dg.AssetKey, int] = {}
    for key in graph.toposorted_asset_keys:
        parents = graph.get(key).parent_keys
        level[key] = 1 + max((level.get(p, 0) for p in parents), default=-1)
    return level


@contextmanager
def _dynamic_partitions_snapshot(instance: dg.DagsterInstance) -> Iterator[None]:
    """Within one automation evaluation, read each dynamic partitions definition's keys once.

    ``dg.evaluate_automation_conditions`` serialises every condition's subsets against the instance itself, and
    each serialisation re-reads the partition keys from the event-log database (thousands of identical
    queries per evaluation: most of a tick's time). Nothing adds partitions during the evaluation (sensors run
    before it), so a snapshot taken on first read is exact; the instance's own method is restored after.
    """
    read = instance.get_dynamic_partitions
    seen: dict[str, list[str]] = {}

    def snapshot(partitions_def_name: str) -> list[str]:
        if partitions_def_name not in seen:
            seen[partitions_def_name] = list(read(partitions_def_name))
        return list(seen[partitions_def_name])

    shadowed = vars(instance).get("get_dynamic_partitions")  # normally None: the class's method
    instance.get_dynamic_partitions = snapshot  # an instance attribute: shadows the method, for this block only
    try:
        yield
    finally:
        if shadowed is None:
            del instance.get_dynamic_partitions
        else:
            instance.get_dynamic_partitions = shadowed


#: The tick's automation cursor as an object while the tick runs (``state["automation_cursor"]`` holds it
#: serialised, as written to tick_state.json): serialising the platform's cursor takes about 0.25 CPU s.
_CURSOR_OBJECT = "_automation_cursor_object"


def _run_automation(defs, instance, state, report: TickReport) -> int:
    cursor = state.get(_CURSOR_OBJECT)
    if cursor is None and state.get("automation_cursor"):
        cursor = dg.deserialize_value(state["automation_cursor"])
    with _dynamic_partitions_snapshot(instance):
        result = dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)
    state[_CURSOR_OBJECT] = result.cursor
    if result.total_requested == 0:
        return 0
    graph = defs.resolve_asset_graph()
    levels = _topological_levels(defs)
    # group by (topological level, partitions definition, partition key): each group is one in-process run
    groups: dict[tuple, list[dg.AssetKey]] = defaultdict(list)
    for key in graph.materializable_asset_keys:
        if result.get_num_requested(key) == 0:
            continue
        pdef = graph.get(key).partitions_def
        pname = getattr(pdef, "name", None) if pdef is not None else None
        for pk in result.get_requested_partitions(key) or [None]:
            groups[(levels[key], pname or "", pk or "")].append(key)
    executed = 0
    for pk, keys in _plan_runs(graph, groups):
        _execute(defs, instance, keys, pk or None, {"noisycal/trigger": "automation"}, report, "automation (eager)")
        executed += 1
    return executed


def _plan_runs(graph, groups: dict[tuple, list[dg.AssetKey]]) -> list[tuple[str, list[dg.AssetKey]]]:
    """The runs for ``groups`` ((topological level, partitions definition, partition key) -> keys), in order.

    Groups are taken level by level; a group joins the last run of its partition when every parent of its keys
    that is planned here runs in that run or before it (Dagster orders the steps inside a run and skips those
    downstream of a failed step or a failed blocking check); otherwise it starts a run of its own after the
    others. A partition's chain thus runs as one run unless another partition's step must run in between. Each
    run costs about 0.3-0.5 s of Dagster's own work (run creation, its event database, planned-materialisation
    events) however small its steps."""
    runs: list[tuple[str, list[dg.AssetKey]]] = []
    last_run_of: dict[tuple[str, str], int] = {}  # partition -> index of its last run
    ran_in: dict[tuple[dg.AssetKey, str], int] = {}  # (key, partition key) -> index of its run
    ran_in_any: dict[dg.AssetKey, int] = {}  # key -> index of the last run that holds it, any partition

    def after(parent: dg.AssetKey, pname: str, pk: str) -> int:
        """The run a step of partition ``pk`` must follow for ``parent``: the same partition of a parent with
        the same partitions definition, every planned partition of any other parent."""
        pdef = graph.get(parent).partitions_def
        if pname and getattr(pdef, "name", None) == pname:
            return ran_in.get((parent, pk), -1)
        return ran_in_any.get(parent, -1)

    for (_, pname, pk), keys in sorted(groups.items(), key=lambda kv: kv[0]):
        needed = max((after(p, pname, pk) for k in keys for p in graph.get(k).parent_keys), default=-1)
        index = last_run_of.get((pname, pk))
        if index is None or needed > index:
            runs.append((pk, []))
            index = len(runs) - 1
        runs[index][1].extend(keys)
        last_run_of[(pname, pk)] = index
        for k in keys:
            ran_in[(k, pk)] = index
            ran_in_any[k] = max(ran_in_any.get(k, -1), index)
    return runs


@contextmanager
def _runner_session(
    home: str | Path,
    defs: dg.Definitions | None,
    what: str,
    lock_timeout: float,
    *,
    queue: bool = False,
    instance: dg.DagsterInstance | None = None,
) -> Iterator[tuple[dg.Definitions, dg.DagsterInstance, TickReport]]:
    """What every runner holds while it runs: the definitions (built for the home unless given), the instance
    (opened here unless given: one per runner, since opening one checks every storage's schema, about 0.2 CPU s)
    and a report. Without a daemon: the home lock, and the report lists the recovered runs. With a daemon
    serving the home: ``queue`` runners submit their runs to its run queue (``report.queued``); others are
    refused (they would evaluate the daemon's sensors with cursors of their own)."""
    if defs is None:
        from definitions import build_definitions

        defs = build_definitions(home)
    report = TickReport(home=str(home))
    instance = instance or instance_for(home)
    if queue and daemon_running(instance):
        report.queued = True
        yield defs, instance, report
        return
    with home_lock(home, what, timeout=lock_timeout):
        _refuse_under_daemon(instance, what)
        report.recovered = recover(home, instance)
        yield defs, instance, report


DAEMON_TICKS = (
    "a dagster-daemon serves this home (noisycal serve / noisycal ui): it evaluates the sensors and the "
    "automation every few seconds and launches their runs through its run queue; nothing to do"
)


def tick(
    home: str | Path,
    defs: dg.Definitions | None = None,
    max_rounds: int = 20,
    *,
    sensors: bool = True,
    automation: bool = True,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT_SECONDS,
) -> TickReport:
    """Evaluate every sensor once and run what it requests, then the automation conditions, until quiet.

    The very first automation evaluation of a home only records a baseline (Dagster's eager condition never
    fires on it), exactly as the daemon's first tick does. One runner per home at a time (``home_lock``);
    runs of runners that died are marked failed and their pool slots freed first (``recover``). While a daemon
    serves the home it does all this itself, every few seconds, through its run queue: ``tick`` then runs
    nothing and says so (``report.note``).
    """
    instance = instance_for(home)
    if daemon_running(instance):
        return TickReport(home=str(home), note=DAEMON_TICKS)
    with _runner_session(home, defs, "noisycal tick", lock_timeout, instance=instance) as (defs, instance, report):
        state = _load_state(home)
        try:
            if automation and state.get("automation_cursor") is None:
                _run_automation(defs, instance, state, report)  # the first evaluation only sets the baseline
            for _ in range(max_rounds):
                report.rounds += 1
                n = _run_sensors(defs, instance, state, report) if sensors else 0
                n += _run_automation(defs, instance, state, report) if automation else 0
                if n == 0 or not automation:
                    break
        finally:
            cursor = state.pop(_CURSOR_OBJECT, None)
            if cursor is not None:
                state["automation_cursor"] = dg.serialize_value(cursor)
            atomic_write_text(_state_path(home), json.dumps(state, indent=1))
        _refresh_snapshot(report)
    return report


def _refuse_under_daemon(instance: dg.DagsterInstance, what: str) -> None:
    """The daemon runs the sensors, the automation and the run queue: a second, in-process runner beside it
    would evaluate the same sensors with its own cursors and bypass the queue."""
    if daemon_running(instance):
        raise HomeBusy(
            f"a dagster-daemon is running for this home (noisycal serve / noisycal ui): it already runs the "
            f"sensors and automation; `{what}` would bypass its run queue. Launch runs from the UI "
            "(Assets -> Materialize), or stop the service first"
        )


def _refresh_snapshot(report: TickReport) -> None:
    """Refresh the read-only warehouse copy after a tick/materialize that ran something (resources.snapshot)."""
    if report.queued or not any(r["success"] and not r.get("skipped") for r in report.runs):
        return  # under the daemon, snapshot_sensor refreshes it after each successful run
    from resources.snapshot import refresh_snapshot

    try:
        path = refresh_snapshot(report.home)
    except Exception as exc:  # a busy warehouse: the next run refreshes it
        report.runs.append(
            {
                "reason": "snapshot",
                "assets": [],
                "partition": None,
                "success": False,
                "run_id": None,
                "errors": [f"warehouse snapshot not refreshed: {exc}"],
            }
        )
        return
    report.snapshot = str(path) if path else None


def materialize_everything(
    home: str | Path,
    defs: dg.Definitions | None = None,
    lock_timeout: float = DEFAULT_LOCK_TIMEOUT_SECONDS,
    *,
    select: list[str] | None = None,
) -> TickReport:
    """Materialise every asset for every known partition (used after a tick to fill anything still missing).

    ``select`` (keys such as ``"raw/annotations"``) keeps only those assets. While a daemon serves the home,
    each run is submitted to its run queue and waited for, in the same order."""
    with _runner_session(home, defs, "noisycal materialize", lock_timeout, queue=True) as (defs, instance, report):
        graph = defs.resolve_asset_graph()
        levels = _topological_levels(defs)
        groups: dict[tuple, list[dg.AssetKey]] = defaultdict(list)
        keys = graph.materializable_asset_keys
        if select is not None:
            wanted = {dg.AssetKey.from_user_string(k) for k in select}
            unknown = wanted - keys
            if unknown:
                raise ValueError(f"no such asset(s): {', '.join(sorted(k.to_user_string() for k in unknown))}")
            keys = wanted
        for stage, (why, skipped) in _stages_without_inputs(home, graph).items():
            if keys & skipped:
                report.no_inputs[stage] = why
                keys = keys - skipped
        for key in keys:
            pdef = graph.get(key).partitions_def
            if pdef is None:
                groups[(levels[key], "", "")].append(key)
                continue
            for pk in instance.get_dynamic_partitions(pdef.name):
                groups[(levels[key], pdef.name, pk)].append(key)
        for pk, keys in _plan_runs(graph, groups):
            _execute(defs, instance, keys, pk or None, {"noisycal/trigger": "materialize_everything"}, report, "full")
        _refresh_snapshot(report)
    return report
