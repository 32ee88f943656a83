"""The dask executor (settings ``"executor": "dask"``) on a ``distributed.LocalCluster`` of two worker processes
started here: calibration for two model versions and cleaning for one dataset run as Dask tasks, and every
warehouse table equals the one an in-process run of the same inputs writes (exactly for integer and text
columns, 1e-12 for floats: the steps run the same code on the same inputs, only in other processes).

What the tests share, none of it part of what a test proves: the processes that runs are launched from
(``run_processes``: two, kept for the module, where each run had a process started and the code location
imported for it), the one-worker cluster of the two tests that need one (``one_worker``: its worker is pointed
at each test's home before the test's first task; its statistics are read as differences), and Dask's
background rates for the module (``QUIET_DASK``)."""

from __future__ import annotations

import concurrent.futures
import json
import multiprocessing
import os
import subprocess
import sys

import dagster as dg
import duckdb
import numpy as np
import polars as pl
import pytest

from noisycal_platform.calibration.demo_data import write_demo_calibration_inputs, write_demo_model_version
from noisycal_platform.cleaning.demo_data import write_demo_cleaning_dataset
from noisycal_platform.demo import write_demo_cleaning_scores
from orchestration.runner import instance_for
from resources.executor import (
    dask_cluster_config,
    executor_for,
    forget_service_cluster,
    record_service_cluster,
    service_scheduler,
    worker_stats,
)
from resources.settings import SettingsResource
from tests.scale import jobs

dask = pytest.importorskip("dask")
distributed = pytest.importorskip("distributed")

#: Dask's background work while the clusters wait (2-core box, one idle worker: 1.4 CPU s per 30 s in the worker
#: and 1.6 in the test process (scheduler, nanny, client) with the defaults, 0.15 and 0.3 with these): the worker's
#: statistical profiler off, event-loop ticks, system and memory monitors once a second or less. Monitoring only:
#: no task, key or result depends on it. Worker processes get the test process's config from their nanny, the run
#: processes through ``run_processes``' initializer.
QUIET_DASK = {
    "distributed.worker.profile.enabled": False,
    "distributed.admin.tick.interval": "1s",
    "distributed.admin.system-monitor.interval": "5s",
    "distributed.worker.memory.monitor-interval": "1s",
}


@pytest.fixture(scope="module", autouse=True)
def _quiet_dask():
    with dask.config.set(QUIET_DASK):
        yield


RUN_PROCESSES = 2


@pytest.fixture(scope="module")
def run_processes():
    """Two spawned processes, each running one run at a time (like runs the daemon launches, in processes of
    their own): two runs at once use both. Kept for the module (each import of the code location and of Dask in
    a fresh process cost about 5 CPU s); a run gets its home as an argument (``jobs.execute``)."""
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(
        RUN_PROCESSES, mp_context=spawn, initializer=dask.config.set, initargs=(QUIET_DASK,)
    ) as pool:
        yield pool


@pytest.fixture(scope="module")
def one_worker():
    """A client of a ``LocalCluster`` of one single-threaded worker process, for the tests that need one worker
    (started once: a worker process and its imports cost about 5 CPU s). Tests point it at their home
    (:func:`_point_at`) and read its :func:`worker_stats` as differences."""
    with distributed.LocalCluster(
        n_workers=1, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        yield client


def _point_at(client, home) -> None:
    """Set ``$NOISYCAL_HOME`` in the cluster's workers, as a worker started in the test would have inherited it.
    A lambda, pickled by value: the worker imports no test module (nor the code location) for it."""
    path = str(home)
    client.run(lambda: os.environ.__setitem__("NOISYCAL_HOME", path))

DATASET = "digits_tiny"
VERSIONS = ["v1", "v2"]
TINY = {
    "encoder_overrides": {"epochs": 1, "depth": 1, "batch_size": 64},
    "near_duplicate_top_k": 100,
    "queue_max_per_type": 40,
    "n_bootstrap": 50,
    "n_bootstrap_cleaning": 50,
}


def _inputs(home, settings: dict) -> None:
    home.mkdir(parents=True, exist_ok=True)
    (home / "settings.json").write_text(json.dumps(settings))
    write_demo_calibration_inputs(home, seed=0)
    write_demo_model_version(home, "v2", seed=0)
    write_demo_cleaning_dataset(
        home, name=DATASET, seed=0, n_digits=120, n_irrelevant=4, n_duplicate_pairs=4, n_duplicate_triples=1,
        n_flipped=4,
    )
    write_demo_cleaning_scores(home, DATASET, "v1", seed=0)
    instance = instance_for(home)
    instance.add_dynamic_partitions("model_versions", VERSIONS)
    instance.add_dynamic_partitions("datasets", [DATASET])


def _tables(home) -> dict[str, pl.DataFrame]:
    """Every table and view of the home's warehouse; paths inside the home are written relative to it."""
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        names = con.execute(
            "select table_schema, table_name from information_schema.tables order by 1, 2"
        ).fetchall()
        frames = {f"{s}.{t}": con.execute(f'select * from "{s}"."{t}"').pl() for s, t in names}
    text = pl.col(pl.String).str.replace_all(str(home), "<home>", literal=True)
    return {name: frame.with_columns(text) for name, frame in frames.items()}


#: Wall-clock stamps and durations (when a run ingested or registered an input, ``ingest.py``, ``assets/raw.py``;
#: how long the encoder trained, ``cleaning/pipeline/embeddings.py``): they differ between any two runs, so they are
#: compared by type only.
WALL_CLOCK = {"ingested_at", "registered_at", "train_seconds", "images_per_second"}


def _canonical(frame: pl.DataFrame) -> pl.DataFrame:
    """Rows in one order: by every non-float column, then by the floats (tables have no row order)."""
    frame = frame.drop([c for c in WALL_CLOCK if c in frame.columns])
    floats = [c for c, t in frame.schema.items() if t.is_float()]
    others = [c for c in frame.columns if c not in floats and not isinstance(frame.schema[c], pl.List)]
    return frame.sort([*others, *floats], nulls_last=True) if frame.height else frame


def assert_same_tables(got: dict[str, pl.DataFrame], want: dict[str, pl.DataFrame]) -> None:
    assert sorted(got) == sorted(want)
    for name, frame in want.items():
        assert got[name].schema == frame.schema, name
        a, b = _canonical(got[name]), _canonical(frame)
        assert a.height == b.height, name
        for col in b.columns:
            x, y = a[col], b[col]
            if isinstance(y.dtype, pl.List):
                x, y = x.explode(), y.explode()
            if y.dtype.is_float():
                np.testing.assert_allclose(
                    x.to_numpy(), y.to_numpy(), rtol=1e-12, atol=1e-12, equal_nan=True, err_msg=f"{name}.{col}"
                )
            else:
                assert x.to_list() == y.to_list(), f"{name}.{col}"


def _single_threaded(torch_too: bool = True):
    """The in-process reference with one BLAS / torch thread, like the single-threaded Dask workers."""
    from threadpoolctl import threadpool_limits

    if not torch_too:
        limits = threadpool_limits(1)
        return limits.unregister
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    limits = threadpool_limits(1)
    return lambda: (limits.unregister(), torch.set_num_threads(before))


def _in_process(home, plan: list[tuple[list[str], list[str]]]) -> None:
    from definitions import build_definitions

    defs = build_definitions(home)
    # torch (about 3 CPU s to import) is limited when loaded or when the plan has cleaning steps (the encoder, the
    # embeddings); a plan without them must not load it, which is checked after the runs
    torch_too = "torch" in sys.modules or any(n.startswith("cleaning/") for names, _ in plan for n in names)
    restore = _single_threaded(torch_too)
    try:
        for names, partitions in plan:
            for pk in partitions:
                result = dg.materialize(
                    [*defs.assets, *defs.asset_checks],
                    selection=jobs.keys(names),
                    partition_key=pk,
                    instance=instance_for(home),
                    resources=defs.resources,
                    raise_on_error=False,
                )
                assert result.success, [e.message for e in result.all_events if e.is_step_failure]
    finally:
        restore()
    assert torch_too or "torch" not in sys.modules, "a step of the plan loaded torch: limit its threads too"


def test_settings_choose_the_executor():
    assert executor_for(SettingsResource()) is dg.in_process_executor
    assert executor_for(SettingsResource(executor="multiprocess")) is dg.multiprocess_executor
    assert executor_for(SettingsResource(executor="dask")).name == "dask"
    with pytest.raises(ValueError):
        SettingsResource(executor="threads")
    local = dask_cluster_config(SettingsResource(executor="dask", dask_workers=3))
    assert local["local"]["n_workers"] == 3 and local["local"]["threads_per_worker"] == 1
    existing = dask_cluster_config(SettingsResource(executor="dask", dask_scheduler="tcp://10.0.0.5:8786"))
    assert existing == {"existing": {"address": "tcp://10.0.0.5:8786"}}


@pytest.mark.slow
def test_dask_cluster_runs_partitions_on_workers_and_matches_in_process(tmp_path, monkeypatch, run_processes):
    """Two model versions at once (two runs sharing the cluster), then the cleaning chain of one dataset."""
    ref, home = tmp_path / "ref", tmp_path / "dask"
    _inputs(ref, TINY)
    _in_process(ref, [(jobs.CALIBRATION_KEYS, VERSIONS), (jobs.CLEANING_KEYS, [DATASET])])

    monkeypatch.setenv("NOISYCAL_HOME", str(home))  # the workers rebuild the jobs from this home
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        _inputs(home, {**TINY, "executor": "dask", "dask_scheduler": cluster.scheduler_address})
        results = _concurrent_runs(run_processes, home, "calibration_job", VERSIONS)  # two versions at once
        results[DATASET] = jobs.execute("cleaning_job", DATASET)
    for pk, (ok, _, failures) in results.items():
        assert ok, (pk, failures)
    pids = {p for _, step_pids, _ in results.values() for p in step_pids}
    assert os.getpid() not in pids and len(pids) == 2  # every step ran on one of the two worker processes
    assert_same_tables(_tables(home), _tables(ref))


def _concurrent_runs(pool, home, job: str, versions: list[str]) -> dict[str, tuple[bool, list[int], list[str]]]:
    """One run per version, all at once (at most two), each from a process of its own (``run_processes``)."""
    assert len(versions) <= RUN_PROCESSES
    runs = {v: pool.submit(jobs.execute, job, v, str(home)) for v in versions}
    return {v: f.result(timeout=600) for v, f in runs.items()}


# It passes in 17–27 s. It once took minutes in backgrounded suites: workers that inherited an ignored SIGTERM
# waited 2 × 30 s per step for Dagster's log followers (fixed by orchestration.signals.heed_interrupts in
# tests/conftest.py). The timeout stays as a guard: fail with a stack dump instead of holding the suite.
@pytest.mark.timeout(300)
def test_dask_cluster_two_partitions_at_once_match_in_process(tmp_path, monkeypatch, run_processes):
    """Default-suite version: the raw and staging steps of two model versions, two runs at once on one
    two-worker LocalCluster (runs of one job must not share Dask task keys), equal to in-process runs."""
    ref, home = tmp_path / "ref", tmp_path / "dask"
    _inputs(ref, TINY)
    _in_process(ref, [(jobs.SMALL_KEYS, VERSIONS)])
    monkeypatch.setenv("NOISYCAL_HOME", str(home))
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster:
        _inputs(home, {**TINY, "executor": "dask", "dask_scheduler": cluster.scheduler_address})
        results = _concurrent_runs(run_processes, home, "small_job", VERSIONS)
    for pk, (ok, pids, failures) in results.items():
        assert ok and pids and os.getpid() not in pids, (pk, failures)
    assert_same_tables(_tables(home), _tables(ref))


def test_service_cluster_is_found_only_while_its_process_lives(tmp_path):
    home = tmp_path / "home"
    settings = SettingsResource(executor="dask")
    assert service_scheduler(home) == "" and "local" in dask_cluster_config(settings, home)
    record_service_cluster(home, "tcp://127.0.0.1:1234", os.getpid())
    assert dask_cluster_config(settings, home) == {"existing": {"address": "tcp://127.0.0.1:1234"}}
    pinned = SettingsResource(executor="dask", dask_scheduler="tcp://10.0.0.5:8786")  # the settings' own wins
    assert dask_cluster_config(pinned, home) == {"existing": {"address": "tcp://10.0.0.5:8786"}}
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    record_service_cluster(home, "tcp://127.0.0.1:1234", dead.pid)  # a service killed without cleaning up
    assert service_scheduler(home) == "" and "local" in dask_cluster_config(settings, home)
    forget_service_cluster(home)
    assert not (home / "dagster" / "dask_cluster.json").exists()


@pytest.mark.slow  # 30-90 s: a two-worker cluster, two runs from processes of their own, a tiny encoder
@pytest.mark.timeout(400)
def test_runs_reuse_the_service_cluster_instead_of_starting_their_own(tmp_path, monkeypatch, run_processes):
    """Settings name the dask executor without a scheduler; a live service cluster is recorded for the home
    (what `noisycal serve` does). A run with a step that needs the cluster (encoder training, ``compute`` pool)
    runs every step on that cluster's two worker processes, which were started before the run (a run's own
    LocalCluster would bring new processes); a run of light steps only (raw and staging tables) runs them in
    its own process, as the in-process executor would, and starts no worker either."""
    home = tmp_path / "dask"
    monkeypatch.setenv("NOISYCAL_HOME", str(home))
    with distributed.LocalCluster(
        n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None
    ) as cluster, distributed.Client(cluster) as client:
        _inputs(home, {**TINY, "executor": "dask"})
        record_service_cluster(home, cluster.scheduler_address, os.getpid())
        workers = set(client.run(os.getpid).values())
        assert len(workers) == 2
        ok, cluster_pids, failures, _ = _selected_run(
            run_processes, home, "cleaning_job", ["raw/images", "cleaning/ssl_encoder"], DATASET
        )
        assert ok and cluster_pids, failures
        assert set(cluster_pids) <= workers, (cluster_pids, workers)
        ok, pids, failures = _concurrent_runs(run_processes, home, "small_job", ["v1"])["v1"]
        assert ok and pids, failures
        assert len(set(pids)) == 1 and not set(pids) & workers  # the run's own process
        assert set(client.run(os.getpid).values()) == workers  # the same two processes: none restarted
        tasks = sum(stats.get("tasks", 0) for stats in client.run(worker_stats).values())
        assert tasks == len(cluster_pids)  # one task per step of the first run; none of the second


def _selected_run(pool, home, job: str, names: list[str], version: str) -> tuple[bool, list[int], list[str], str]:
    return pool.submit(jobs.execute_selected, job, names, version, str(home)).result(timeout=600)


@pytest.mark.timeout(300)
def test_a_worker_opens_the_code_location_and_the_instance_once_not_per_task(
    tmp_path, monkeypatch, run_processes, one_worker
):
    """Two runs of an asset subset on a one-worker cluster: every step is a task on that worker, which imports
    the code location's module once (its first task) and opens the instance once, however many tasks it runs;
    and each task executes the run's own asset subset: the checks evaluated are those of the selected assets
    (dagster-dask re-subset the job by op selection, dropping the assets, and a multi-check step then evaluated
    the checks of every asset in the job). The worker is the module's (``one_worker``): its counts are taken
    before and after the runs, and the code location's loads over its whole life (the chain test's job is in
    the same module)."""
    home = tmp_path / "dask"
    monkeypatch.setenv("NOISYCAL_HOME", str(home))
    selected = ["raw/predictions", "staging/stg_scored_items"]  # of the calibration job's many assets
    client = one_worker
    _point_at(client, home)
    (before,) = client.run(worker_stats).values()
    _inputs(home, {**TINY, "executor": "dask", "dask_scheduler": client.scheduler.address})
    runs = [_selected_run(run_processes, home, "calibration_job", selected, v) for v in VERSIONS]
    (after,) = client.run(worker_stats).values()
    stats = {k: after.get(k, 0) - before.get(k, 0) for k in after}
    for ok, pids, failures, _ in runs:
        assert ok and pids, failures
    instance = instance_for(home)
    steps = {run_id: instance.all_logs(run_id, of_type=dg.DagsterEventType.STEP_SUCCESS) for *_, run_id in runs}
    n_tasks = sum(len(s) for s in steps.values())
    assert n_tasks >= 2 * len(selected)
    assert stats["tasks"] == n_tasks
    assert after["code_location_loads"] == 1  # tests.scale.jobs, imported by the worker's first task only
    assert stats["instances_opened"] == 1
    checked = {
        e.dagster_event.event_specific_data.asset_key
        for run_id in steps
        for e in instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_CHECK_EVALUATION)
    }
    assert checked and checked <= set(jobs.keys(selected))
    assert stats["jobs_built"] == len(runs)  # the run's job subset: once per run on this worker


@pytest.mark.timeout(300)
def test_a_step_whose_upstream_failed_is_not_executed(tmp_path, monkeypatch, one_worker):
    """A chain of three assets on a one-worker cluster, run twice: the first run succeeds; in the second the first
    asset fails. Its two downstream steps must not run: the second would otherwise read the first run's value of
    the failed asset (still in the IO manager's storage) and materialise a new version from stale data, as
    dagster-dask's executor did."""
    home = tmp_path / "home"
    home.mkdir()
    monkeypatch.setenv("NOISYCAL_HOME", str(home))
    _point_at(one_worker, home)
    monkeypatch.setenv("NOISYCAL_DASK_SCHEDULER", one_worker.scheduler.address)
    (home / "dagster").mkdir()
    instance = dg.DagsterInstance.local_temp(str(home / "dagster"))
    recon = dg.reconstructable(jobs.chain_job)
    with dg.execute_job(recon, instance, raise_on_error=False) as first:
        assert first.success
    (home / jobs.BREAK_UPSTREAM).touch()
    with dg.execute_job(recon, instance, raise_on_error=False) as second:
        assert not second.success
        started = {e.step_key for e in second.all_events if e.event_type == dg.DagsterEventType.STEP_START}
        failed = {e.step_key for e in second.all_events if e.is_step_failure}
        logs = [e.user_message for e in instance.all_logs(second.run_id)]
    assert started == failed == {"upstream"}
    assert (home / "downstream_inputs.txt").read_text() == "1\n"  # downstream ran in the first run only
    assert any("Not executing" in m and "'upstream'" in m for m in logs)
    assert any("Not executing" in m and "'downstream'" in m for m in logs)
    materialized = instance.get_latest_materialization_event(dg.AssetKey("downstream"))
    assert materialized.run_id == first.run_id
