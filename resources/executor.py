"""Which Dagster executor runs a run's steps, chosen in ``settings.json`` (``"executor"``).

- ``in_process`` (default): every step in the run's own process, one after another (the embedded set-up);
- ``multiprocess``: one child process per step on this host (``dagster.multiprocess_executor``);
- ``dask``: one Dask task per step (``dagster_dask.dask_executor``), on the scheduler at ``dask_scheduler``
  (``"tcp://host:port"``); when that is empty, on the cluster of ``noisycal serve`` for the home (one
  ``distributed.LocalCluster`` of ``dask_workers`` single-threaded worker processes per service, recorded in
  ``$DAGSTER_HOME/dask_cluster.json``: :func:`service_scheduler`, ``orchestration.dask_cluster``), found when
  the run starts; without a live one, on a ``LocalCluster`` that the run starts and stops. A cluster per run
  cost each run a scheduler, two worker processes and two imports of the code location (about 30 s on a
  2-core box, the bulk of the 5x the executor cost there on the demo home); the service's workers import it
  once. Steps hand data over through the warehouse
  IO manager, never through memory, so the workers must reach the same warehouse (the Parquet warehouse on
  shared storage for more than one host).

``dagster-dask`` and ``distributed`` are the optional ``scale`` extra: imported only when ``dask`` is chosen.

:func:`kernel_client` hands a step's data-parallel kernels (near duplicates, label errors, embeddings) a Dask
client only with ``dask``: inside a step on a worker, ``distributed.worker_client`` (the step's task secedes
from the worker's thread pool while its kernel tasks run, so two steps waiting on kernel tasks cannot starve
the cluster); outside a worker, a client of ``dask_scheduler`` when one is set; otherwise none (the
single-process kernels).

The executor is dagster-dask 0.29.27's ``DaskExecutor`` with its own ``execute``; what it changes, each found on
the demo home (``benchmarks/bench_executor.py``; the task function is :func:`run_steps_on_worker`):
(1) the run record goes to ``Client.submit`` as :class:`_OpaqueRun`: dask's task spec (2024.12 and later) walks
every tuple argument, while the run (a named tuple) holds a Dagster record that forbids iteration, so every run
failed before its first step; the wrapper is not a tuple and unpickles as the run itself on the worker.
(2) Task keys are ``<job name>-<run id>.<step key>``: with dagster-dask's ``<job name>.<step key>`` two runs of
one job at once on a shared scheduler (two partitions) got the same keys, and Dask gave the second run the
first run's results without running its steps.
(3) A task executes the run's own job, with its asset selection; dagster-dask's task re-subset the job by op
selection only, which dropped the asset selection, so a multi-asset or multi-check step executed every one of
its outputs: the ``latest_run_succeeded`` check step evaluated the checks of all 40+ assets in every run (about
5 s of SQLite event writes per run on a loaded 2-core box, against 0.2 s in process), and a
``rank_near_duplicates`` refill would compute the label-error ranking too (a multi-asset step computes what the
job selects).
(4) A worker process opens the Dagster instance once (dagster-dask: once per task), keeps each run's job (its
asset subset) for the run's tasks, and never re-imports the code location (the worker preload of
``orchestration.dask_cluster`` does, once); :func:`worker_stats` counts all three, which
``tests/scale/test_dask_executor.py`` checks. Dagster's plan API (``create_execution_plan``, ``execute_plan``)
is imported from ``dagster_dask.executor``, where dagster-dask's own task imports it, so this shell names no
private Dagster module (``tests/test_definitions.py``).
(5) A step whose upstream step failed, or was itself not executed, is not executed: its task finds that in its
upstream tasks' events and returns :class:`NotExecuted`, and the run logs Dagster's own "Dependencies for step
... Not executing." line. dagster-dask ran it anyway: its task only waited for the upstream tasks, and the step
then read the upstream asset's *previous* table through the IO manager and materialised a new version of
itself from stale data in a failed run (``tests/scale/test_dask_executor.py``).
(6) With the DuckDB warehouse, a step's pool (``duckdb``, ``compute``: one slot each in ``dagster.yaml``) is held
across the cluster (:func:`_pool_slot`), as Dagster's own executors hold it; dagster-dask ignores pools, and two
warehouse steps on two workers met on DuckDB's file lock and its exponential back-off. With the Parquet
warehouse the pools are not held: its writers never wait on each other.
"""

from __future__ import annotations

import collections
import contextlib
import copy
import json
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg

from noisycal_platform.files import atomic_write_text
from resources.settings import SettingsResource

__all__ = [
    "CLUSTER_POOLS",
    "CLUSTER_STEPS",
    "EXECUTORS",
    "SERVICE_CLUSTER_FILE",
    "NoisycalDaskExecutor",
    "NotExecuted",
    "dask_cluster_config",
    "executor_for",
    "forget_service_cluster",
    "kernel_client",
    "needs_cluster",
    "record_service_cluster",
    "run_steps_on_worker",
    "service_scheduler",
    "worker_stats",
]

EXECUTORS = ("in_process", "multiprocess", "dask")

#: where ``noisycal serve`` records its cluster, under ``$NOISYCAL_HOME/dagster`` (``DAGSTER_HOME``)
SERVICE_CLUSTER_FILE = "dask_cluster.json"


def _cluster_file(home: str | Path) -> Path:
    return Path(home) / "dagster" / SERVICE_CLUSTER_FILE


def record_service_cluster(home: str | Path, address: str, pid: int) -> Path:
    """Record the home's service cluster: its scheduler ``address``, served while process ``pid`` lives."""
    path = _cluster_file(home)
    path.parent.mkdir(parents=True, exist_ok=True)
    atomic_write_text(path, json.dumps({"address": address, "pid": pid}) + "\n")
    return path


def forget_service_cluster(home: str | Path) -> None:
    _cluster_file(home).unlink(missing_ok=True)


def service_scheduler(home: str | Path | None) -> str:
    """The scheduler address of the live service cluster of ``home``, or ``""`` (none recorded, or its process
    is gone: a service killed without removing the file)."""
    if home is None:
        return ""
    path = _cluster_file(home)
    try:
        entry = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return ""
    try:
        os.kill(int(entry["pid"]), 0)
    except ProcessLookupError:
        return ""
    except PermissionError:
        pass
    return str(entry["address"])


def dask_cluster_config(settings: SettingsResource, home: str | Path | None = None) -> dict[str, dict]:
    """The ``cluster`` block of ``dask_executor``'s config: ``dask_scheduler``, else the home's live service
    cluster, else a local cluster for the run (read when the run starts)."""
    address = settings.dask_scheduler or service_scheduler(home)
    if address:
        return {"existing": {"address": address}}
    return {
        "local": {
            "n_workers": settings.dask_workers,
            "threads_per_worker": 1,
            "processes": True,
            "dashboard_address": None,
        }
    }


class _OpaqueRun:
    """The run record behind an object that is not a tuple; pickles as (and reads like) the record."""

    def __init__(self, run: object) -> None:
        self._run = run

    def __getattr__(self, name: str) -> object:
        return getattr(self._run, name)

    @property
    def job_name(self) -> str:
        """Unique per run: the executor builds Dask task keys from it (module docstring)."""
        return f"{self._run.job_name}-{self._run.run_id}"

    def __reduce__(self) -> tuple:
        return copy.copy, (self._run,)


#: What this process did as a Dask worker (:func:`run_steps_on_worker`): ``tasks`` run, ``instances_opened``,
#: ``code_location_loads`` (the code location's module executed during a task: none after the worker preload
#: of ``orchestration.dask_cluster``), ``jobs_built`` (the run's job subset built: once per run and worker) and
#: ``pool_waits`` (tasks that found their pool's slot taken). Read with ``client.run(worker_stats)``.
WORKER_STATS: collections.Counter[str] = collections.Counter()
_WORKER_INSTANCES: dict[str, dg.DagsterInstance] = {}
_WORKER_JOBS: collections.OrderedDict[object, dg.JobDefinition] = collections.OrderedDict()
_WORKER_JOBS_KEPT = 8  # runs whose job subsets a worker keeps (runs in progress at once, with room)
_WORKER_LOCK = threading.Lock()


def worker_stats() -> dict[str, int]:
    """This process's :data:`WORKER_STATS` (a copy)."""
    return dict(WORKER_STATS)


def _worker_instance(instance_ref) -> dg.DagsterInstance:
    """The run's Dagster instance, opened once per worker process (not once per task as dagster-dask does)."""
    key = dg.serialize_value(instance_ref)
    with _WORKER_LOCK:
        instance = _WORKER_INSTANCES.get(key)
        if instance is None:
            instance = _WORKER_INSTANCES[key] = dg.DagsterInstance.from_ref(instance_ref)
            WORKER_STATS["instances_opened"] += 1
    return instance


def _worker_job(recon_job) -> dg.JobDefinition:
    """The run's job (its asset subset), built once per worker process and run (Dagster's own cache keeps one
    job per process, so two runs whose tasks alternate on a worker rebuilt it for every task)."""
    with _WORKER_LOCK:
        job = _WORKER_JOBS.get(recon_job)
        if job is not None:
            _WORKER_JOBS.move_to_end(recon_job)
            return job
    job = recon_job.get_definition()
    with _WORKER_LOCK:
        _WORKER_JOBS[recon_job] = job
        WORKER_STATS["jobs_built"] += 1
        while len(_WORKER_JOBS) > _WORKER_JOBS_KEPT:
            _WORKER_JOBS.popitem(last=False)
    return job


def _code_module(recon_job) -> str | None:
    """The module name the job's code pointer imports (``definitions`` for ``workspace.yaml``'s file)."""
    pointer = recon_job.repository.pointer
    if getattr(pointer, "python_file", None):
        return Path(pointer.python_file).stem
    return getattr(pointer, "module", None)


@contextlib.contextmanager
def _pool_slot(pool: str | None, limit: int | None) -> Iterator[None]:
    """Hold one of ``limit`` cluster-wide leases of ``pool`` (a ``distributed.Semaphore``) while the step runs.

    Dagster's own executors enforce an instance's pools (``dagster.yaml``: one slot each); dagster-dask does
    not, so two DuckDB-warehouse steps on two workers met on DuckDB's file lock, where ``DuckDBResource``
    backs off exponentially (0.1, 0.2, ... 51.2 s: a waiter sleeps up to twice the holder's time). A task
    that waits for the lease secedes from its worker's thread pool meanwhile (the worker runs other tasks,
    e.g. the kernel tasks of the step that holds the lease)."""
    if pool is None or not limit:
        yield
        return
    import distributed

    semaphore = distributed.Semaphore(max_leases=limit, name=f"noisycal-pool-{pool}")
    if semaphore.acquire(timeout=0):
        acquired = True
    else:
        WORKER_STATS["pool_waits"] += 1
        distributed.secede()
        try:
            acquired = semaphore.acquire()
        finally:
            distributed.rejoin()
    try:
        yield
    finally:
        if acquired:
            semaphore.release()


class NotExecuted:
    """What a task returns instead of events when an upstream step did not succeed: ``blocked`` names those steps."""

    def __init__(self, step_keys: list[str], blocked: list[str]) -> None:
        self.step_keys, self.blocked = list(step_keys), list(blocked)

    def message(self) -> str:
        return f"Dependencies for step {', '.join(self.step_keys)} did not succeed: {self.blocked}. Not executing."


def _blocked_dependencies(dependencies: list[tuple[str, object]]) -> list[str]:
    """The upstream step keys whose task result holds no ``STEP_SUCCESS`` of that step (failed, skipped, or
    :class:`NotExecuted` itself)."""
    return [
        key for key, result in dependencies
        if isinstance(result, NotExecuted) or not any(e.is_step_success and e.step_key == key for e in result)
    ]


def run_steps_on_worker(
    dependencies: list[tuple[str, object]], recon_job, dagster_run, run_config, step_keys: list[str], instance_ref,
    known_state, pool: str | None = None, pool_limit: int | None = None,
) -> list | NotExecuted:
    """One Dask task: execute ``step_keys`` of the run on this worker; the step's events, or :class:`NotExecuted`
    when an upstream step did not succeed.

    ``dependencies``: (upstream step key, that step's task result) pairs; Dask passes the results once the
    upstream tasks finish. Differences from dagster-dask's
    ``query_on_dask_worker``, each measured on the demo home (``benchmarks/bench_executor.py``): the job is the
    run's own asset subset as the run process built it (dagster-dask re-subsets it by op selection only, which
    drops the asset selection: a multi-check step such as ``latest_run_succeeded`` then evaluated the checks
    of every asset of the code location, 40+ events of SQLite writes, in every run); the instance is opened
    once per worker process; the run's pool is held cluster-wide (:func:`_pool_slot`)."""
    # Dagster's plan API, as dagster-dask's own task calls it (imported from there: this shell names no private
    # Dagster module; tests/test_definitions.py)
    from dagster_dask.executor import create_execution_plan, execute_plan

    WORKER_STATS["tasks"] += 1
    blocked = _blocked_dependencies(dependencies)
    if blocked:
        return NotExecuted(step_keys, blocked)
    module = _code_module(recon_job)
    loaded = sys.modules.get(module) if module else None
    job = _worker_job(recon_job)
    if module and sys.modules.get(module) is not loaded:
        WORKER_STATS["code_location_loads"] += 1
    instance = _worker_instance(instance_ref)
    plan = create_execution_plan(job, run_config=run_config, step_keys_to_execute=step_keys, known_state=known_state)
    with _pool_slot(pool, pool_limit):
        return execute_plan(plan, recon_job, instance, dagster_run, run_config=run_config)


#: Steps that run on the cluster's workers even when the run's other steps may not (see :class:`NoisycalDaskExecutor`):
#: those of the ``compute`` pool (encoder training, the embeddings' forward pass) and the one step whose kernel splits
#: into row-block tasks on the cluster (``cleaning/rank_near_duplicates`` + ``rank_label_errors``).
CLUSTER_POOLS = frozenset({"compute"})
CLUSTER_STEPS = frozenset({"neighbour_rankings"})


def needs_cluster(step) -> bool:
    """Whether a step's work is worth a Dask worker (:data:`CLUSTER_POOLS`, :data:`CLUSTER_STEPS`)."""
    return step.pool in CLUSTER_POOLS or step.key in CLUSTER_STEPS


def _resource_requirements(tags) -> dict:
    """Dask resources a step asks for in its ``dagster-dask/resource_requirements`` tag (a JSON object)."""
    text = (tags or {}).get("dagster-dask/resource_requirements")
    return json.loads(text) if text else {}


class NoisycalDaskExecutor(dg.Executor):
    """One Dask task per step (:func:`run_steps_on_worker`), on the cluster ``cluster_type``/``config`` names
    (``"existing"``: a scheduler address; ``"local"``: a ``LocalCluster`` for this run only).

    ``local_light``: the cluster is on this host (the service's ``LocalCluster``, or the run's own), and a run
    none of whose steps :func:`needs_cluster` runs in the run's own process, as the in-process executor runs it:
    on one host its steps gain nothing from a worker, and a Dask task costs the run process the import of
    ``distributed`` (about 2.6 s of CPU) plus a round trip per step. With ``"dask_scheduler"`` (a cluster that may
    span hosts) every step goes to the cluster. ``pools``: hold the instance's pools across the cluster
    (:func:`_pool_slot`; the DuckDB warehouse)."""

    def __init__(self, in_process: dg.Executor, cluster_type: str, config: dict, *, pools: bool = False,
                 local_light: bool = False):
        self.in_process = in_process  # Dagster's in-process executor, retries disabled as on the cluster
        self.cluster_type, self.config, self.pools, self.local_light = cluster_type, dict(config), pools, local_light

    @property
    def retries(self):
        return self.in_process.retries

    def execute(self, plan_context, execution_plan):
        steps = [step for level in execution_plan.get_steps_to_execute_by_level() for step in level]
        if self.local_light and not any(needs_cluster(step) for step in steps):
            yield from self.in_process.execute(plan_context, execution_plan)
            return
        yield from self._execute_on_cluster(plan_context, execution_plan)

    def _execute_on_cluster(self, plan_context, execution_plan):
        import distributed
        from dagster_dask.executor import iterate_with_context, raise_execution_interrupts  # as for the plan API

        run = _OpaqueRun(plan_context.dagster_run)
        limit = plan_context.instance.global_op_concurrency_default_limit if self.pools else None
        with contextlib.ExitStack() as stack:
            if self.cluster_type == "existing":
                cluster = self.config["address"]
            else:  # "local": a cluster for this run only
                local = {**self.config, "threads_per_worker": 1}
                cluster = stack.enter_context(distributed.LocalCluster(**local))
            client = stack.enter_context(distributed.Client(cluster))
            futures: dict[str, object] = {}
            for level in execution_plan.get_steps_to_execute_by_level():
                for step in level:
                    keys = sorted({k for inp in step.step_inputs for k in inp.dependency_keys})
                    upstream = [(k, futures[k]) for k in keys]
                    futures[step.key] = client.submit(
                        run_steps_on_worker, upstream, plan_context.reconstructable_job, run,
                        plan_context.run_config, [step.key], plan_context.instance.get_ref(),
                        execution_plan.known_state, step.pool, limit,
                        key=f"{run.job_name}.{step.key}",  # unique per run (module docstring)
                        resources=_resource_requirements(step.tags),
                    )
            done = distributed.as_completed(list(futures.values()), with_results=True)
            for _future, events in iterate_with_context(raise_execution_interrupts, done):
                if isinstance(events, NotExecuted):
                    plan_context.log.error(events.message())
                    continue
                yield from events


def _dask_executor(settings: SettingsResource, home: str | Path | None) -> dg.ExecutorDefinition:
    import importlib.util

    if importlib.util.find_spec("dagster_dask") is None:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            'settings.json selects "executor": "dask" but dagster-dask is not installed; '
            "install the `scale` extra: pip install -c constraints.txt '.[scale]'"
        )

    @dg.executor(name="dask", requirements=dg.multiple_process_executor_requirements())
    def dask(init_context) -> dg.Executor:
        ((kind, config),) = dask_cluster_config(settings, home).items()  # at run start: is a service up?
        in_process = dg.in_process_executor.executor_creation_fn(dg.InitExecutorContext(
            job=init_context.job, executor_def=dg.in_process_executor,
            executor_config={"retries": {"disabled": {}}}, instance=init_context.instance,
        ))
        return NoisycalDaskExecutor(
            in_process, kind, config, pools=settings.warehouse == "duckdb", local_light=not settings.dask_scheduler
        )

    return dask


def executor_for(settings: SettingsResource, home: str | Path | None = None) -> dg.ExecutorDefinition:
    """The executor ``settings.executor`` names for ``home`` (see module docstring)."""
    if settings.executor == "in_process":
        return dg.in_process_executor
    if settings.executor == "multiprocess":
        return dg.multiprocess_executor
    if settings.executor == "dask":
        return _dask_executor(settings, home)
    raise ValueError(f"unknown executor {settings.executor!r}; known: {list(EXECUTORS)}")


@contextlib.contextmanager
def kernel_client(settings: SettingsResource) -> Iterator[Any]:
    """A Dask client for a step's data-parallel kernels, or ``None`` (see module docstring)."""
    if settings.executor != "dask":
        yield None
        return
    import distributed

    try:
        distributed.get_worker()
    except ValueError:  # not inside a Dask task
        if not settings.dask_scheduler:
            yield None
            return
        with distributed.Client(settings.dask_scheduler) as client:
            yield client
        return
    with distributed.worker_client() as client:
        yield client
