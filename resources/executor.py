"""Which Dagster executor runs a run's steps, chosen in ``settings.json`` (``"executor"``).

- ``in_process`` (default): every step in the run's own process, one after another (the embedded set-up);
- ``multiprocess``: one child process per step on this host (``dagster.multiprocess_executor``);
- ``dask``: one Dask task per step (``dagster_dask.dask_executor``), on the scheduler at ``dask_scheduler``
  (``"tcp://host:port"``) or, when that is empty, on a ``distributed.LocalCluster`` of ``dask_workers``
  single-threaded worker processes that the run starts and stops. Steps hand data over through the warehouse
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
from collections.abc import Iterator
from typing import Any

import dagster as dg

from resources.settings import SettingsResource

__all__ = ["EXECUTORS", "dask_cluster_config", "executor_for", "kernel_client"]

EXECUTORS = ("in_process", "multiprocess", "dask")


def dask_cluster_config(settings: SettingsResource) -> dict[str, dict]:
    """The ``cluster`` block of ``dask_executor``'s config: an existing scheduler or a local cluster."""
    if settings.dask_scheduler:
        return {"existing": {"address": settings.dask_scheduler}}
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


def _dask_executor(settings: SettingsResource) -> dg.ExecutorDefinition:
    try:
        cls = _dask_executor_class()
    except ImportError as exc:  # pragma: no cover - depends on the installed extras
        raise ImportError(
            'settings.json selects "executor": "dask" but dagster-dask is not installed; '
            "install the `scale` extra: pip install -c constraints.txt '.[scale]'"
        ) from exc
    ((kind, config),) = dask_cluster_config(settings).items()

    @dg.executor(name="dask", requirements=dg.multiple_process_executor_requirements())
    def dask(_init_context) -> dg.Executor:
        return cls(kind, config)

    return dask


def executor_for(settings: SettingsResource) -> dg.ExecutorDefinition:
    """The executor ``settings.executor`` names (see module docstring)."""
    if settings.executor == "in_process":
        return dg.in_process_executor
    if settings.executor == "multiprocess":
        return dg.multiprocess_executor
    if settings.executor == "dask":
        return _dask_executor(settings)
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
