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

Two fixes over dagster-dask 0.29.27, both in :class:`_OpaqueRun`, which the executor hands out in place of the
run record: (1) the record goes to ``Client.submit`` as a plain argument, and dask's task spec (2024.12 and later)
walks every tuple argument, while the run (a named tuple) holds a Dagster record that forbids iteration, so
every run failed before its first step; the wrapper is not a tuple and unpickles as the run itself on the
worker. (2) Dask task keys are ``<job name>.<step key>``, so two runs of one job at once on a shared scheduler
(two partitions) got the same keys, and Dask gave the second run the first run's results without running its
steps; the wrapper's job name, used only for those keys, carries the run id.
"""

from __future__ import annotations

import contextlib
import copy
import functools
import json
import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import dagster as dg

from noisycal_platform.files import atomic_write_text
from resources.settings import SettingsResource

__all__ = [
    "EXECUTORS",
    "SERVICE_CLUSTER_FILE",
    "dask_cluster_config",
    "executor_for",
    "forget_service_cluster",
    "kernel_client",
    "record_service_cluster",
    "service_scheduler",
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


@functools.cache
def _dask_executor_class() -> type:
    from dagster_dask.executor import DaskExecutor

    class OpaqueRunDaskExecutor(DaskExecutor):
        """``DaskExecutor`` whose tasks receive the run as :class:`_OpaqueRun` (see module docstring)."""

        def execute(self, plan_context, execution_plan):
            ctx = copy.copy(plan_context)
            ctx._plan_data = plan_context.plan_data._replace(dagster_run=_OpaqueRun(plan_context.dagster_run))
            return super().execute(ctx, execution_plan)

    return OpaqueRunDaskExecutor


def _dask_executor(settings: SettingsResource, home: str | Path | None) -> dg.ExecutorDefinition:
    try:
        cls = _dask_executor_class()
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            'settings.json selects "executor": "dask" but dagster-dask is not installed; '
            "install the `scale` extra: pip install -c constraints.txt '.[scale]'"
        ) from exc

    @dg.executor(name="dask", requirements=dg.multiple_process_executor_requirements())
    def dask(_init_context) -> dg.Executor:
        ((kind, config),) = dask_cluster_config(settings, home).items()  # at run start: is a service up?
        return cls(kind, config)

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
