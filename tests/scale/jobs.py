"""Reconstructable jobs for the executor tests: a Dask worker rebuilds them by importing this module.

The home is read from ``$NOISYCAL_HOME`` (the test sets it in its own process, and in a worker before the worker's
first task of that home; :func:`execute` sets it in the run's process)."""

from __future__ import annotations

import functools
import os
from pathlib import Path

import dagster as dg

from definitions import build_definitions
from tests.asset_chains import CALIBRATION_CHAIN, CLEANING_RANKING_CHAIN

CALIBRATION_KEYS = CALIBRATION_CHAIN
SMALL_KEYS = ["raw/annotations", "raw/predictions", "staging/stg_annotations", "staging/stg_scored_items"]
CLEANING_KEYS = CLEANING_RANKING_CHAIN


def keys(names: list[str]) -> list[dg.AssetKey]:
    return [dg.AssetKey(n.split("/")) for n in names]


def _job(name: str, names: list[str]) -> dg.JobDefinition:
    return _built(name, tuple(names), os.environ["NOISYCAL_HOME"])


@functools.cache
def _built(name: str, names: tuple[str, ...], home: str) -> dg.JobDefinition:
    """Built once per process and home: a worker rebuilds the job for every step it runs."""
    defs = build_definitions(home)
    job = dg.define_asset_job(name, selection=keys(list(names)))
    return dg.Definitions(
        assets=defs.assets,
        asset_checks=defs.asset_checks,
        resources=defs.resources,
        executor=defs.executor,
        jobs=[job],
    ).resolve_job_def(name)


def calibration_job() -> dg.JobDefinition:
    return _job("scale_calibration", CALIBRATION_KEYS)


def cleaning_job() -> dg.JobDefinition:
    return _job("scale_cleaning", CLEANING_KEYS)


def small_job() -> dg.JobDefinition:
    return _job("scale_small", SMALL_KEYS)


def _use_home(home: str | None) -> None:
    """A run process kept for several tests runs each run for the home it is given."""
    if home is not None:
        os.environ["NOISYCAL_HOME"] = home


def execute(job_name: str, partition_key: str, home: str | None = None) -> tuple[bool, list[int], list[str]]:
    """Run one job for one partition on the executor of ``home`` (default ``$NOISYCAL_HOME``), in a process of its
    own; success, step pids, errors."""
    from orchestration.runner import instance_for

    _use_home(home)
    recon = dg.reconstructable(globals()[job_name])
    instance = instance_for(os.environ["NOISYCAL_HOME"])
    with dg.execute_job(recon, instance, tags={"dagster/partition": partition_key}, raise_on_error=False) as res:
        pids = [e.pid for e in res.all_events if e.is_step_success]
        return res.success, pids, [str(e.message) for e in res.all_events if e.is_step_failure]


def execute_selected(
    job_name: str, names: list[str], partition_key: str, home: str | None = None
) -> tuple[bool, list[int], list[str], str]:
    """:func:`execute` of the assets ``names`` only (an asset selection on the run, as the UI and the daemon
    launch runs of a code location's asset job); also the run id."""
    from orchestration.runner import instance_for

    _use_home(home)
    recon = dg.reconstructable(globals()[job_name])
    instance = instance_for(os.environ["NOISYCAL_HOME"])
    with dg.execute_job(
        recon, instance, tags={"dagster/partition": partition_key}, asset_selection=keys(names), raise_on_error=False
    ) as res:
        pids = [e.pid for e in res.all_events if e.is_step_success]
        return res.success, pids, [str(e.message) for e in res.all_events if e.is_step_failure], res.run_id


#: For the upstream-failure test: ``upstream`` raises while this file exists in ``$NOISYCAL_HOME``.
BREAK_UPSTREAM = "break_upstream"


@dg.asset
def upstream() -> int:
    if (Path(os.environ["NOISYCAL_HOME"]) / BREAK_UPSTREAM).exists():
        raise RuntimeError("upstream input is broken")
    return 1


@dg.asset
def downstream(upstream: int) -> int:
    with (Path(os.environ["NOISYCAL_HOME"]) / "downstream_inputs.txt").open("a") as f:
        f.write(f"{upstream}\n")
    return upstream + 1


@dg.asset
def second_downstream(downstream: int) -> int:
    return downstream + 1


def chain_job() -> dg.JobDefinition:
    """upstream → downstream → second_downstream on the dask executor of ``$NOISYCAL_DASK_SCHEDULER``, results
    kept by Dagster's filesystem IO manager in the home (the previous run's value stays readable)."""
    from resources.executor import executor_for
    from resources.settings import SettingsResource

    home = Path(os.environ["NOISYCAL_HOME"])
    (home / "io").mkdir(parents=True, exist_ok=True)
    # the run process reads the scheduler; a worker (started before the variable was set) only runs steps
    settings = SettingsResource(executor="dask", dask_scheduler=os.environ.get("NOISYCAL_DASK_SCHEDULER", ""))
    return dg.Definitions(
        assets=[upstream, downstream, second_downstream],
        resources={"io_manager": dg.FilesystemIOManager(base_dir=str(home / "io"))},
        executor=executor_for(settings),
        jobs=[dg.define_asset_job("chain", selection=[upstream, downstream, second_downstream])],
    ).resolve_job_def("chain")
