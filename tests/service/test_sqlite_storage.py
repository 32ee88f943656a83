"""The SQLite instance storage with kept engines (orchestration/sqlite_storage.py): Dagster's files and schema, so a
home written by it opens with Dagster's own classes and the reverse; engines are kept, bounded, and reused."""

import sqlite3

import dagster as dg
import pytest
from dagster._core.instance.ref import InstanceRef

from orchestration import sqlite_storage
from orchestration.instance import dagster_home, instance_for


@dg.asset
def number() -> int:
    return 1


def _dagster_default_instance(folder) -> dg.DagsterInstance:
    """The same folder opened with Dagster's own SQLite classes (no storage blocks: its defaults)."""
    return dg.DagsterInstance.from_ref(InstanceRef.from_dir(str(folder), config_dir=str(folder / "plain")))


def _stamp(db) -> str:
    with sqlite3.connect(db) as con:
        return con.execute("select version_num from alembic_version").fetchone()[0]


def test_the_home_instance_uses_the_kept_engine_classes_on_dagsters_layout(tmp_path):
    instance = instance_for(tmp_path / "home")
    assert type(instance.run_storage).__name__ == "EngineCachingSqliteRunStorage"
    assert type(instance.event_log_storage).__name__ == "EngineCachingSqliteEventLogStorage"
    assert type(instance.schedule_storage).__name__ == "EngineCachingSqliteScheduleStorage"
    run_id = dg.materialize([number], instance=instance).run_id
    folder = dagster_home(tmp_path / "home")
    assert (folder / "history" / "runs.db").is_file() and (folder / "schedules" / "schedules.db").is_file()
    assert (folder / "history" / "runs" / f"{run_id}.db").is_file()  # one database per run, as Dagster's


def test_a_home_written_by_either_class_reads_the_same_with_the_other(tmp_path):
    folder = dagster_home(tmp_path / "home")
    (folder / "plain").mkdir()
    ours = instance_for(tmp_path / "home")
    ours_run = dg.materialize([number], instance=ours).run_id
    plain = _dagster_default_instance(folder)
    assert type(plain.event_log_storage).__name__ == "SqliteEventLogStorage"
    plain_run = dg.materialize([number], instance=plain).run_id
    for instance in (ours, plain, instance_for(tmp_path / "home")):
        assert {r.run_id for r in instance.get_runs()} == {ours_run, plain_run}
        for run_id in (ours_run, plain_run):
            assert instance.get_run_by_id(run_id).status == dg.DagsterRunStatus.SUCCESS
            events = instance.all_logs(run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION)
            assert [e.dagster_event.asset_key for e in events] == [dg.AssetKey("number")]
        latest = instance.get_latest_materialization_event(dg.AssetKey("number"))
        assert latest.run_id == plain_run
    runs = folder / "history" / "runs"
    assert _stamp(runs / f"{ours_run}.db") == _stamp(runs / f"{plain_run}.db")  # the same schema version


def test_engines_are_kept_per_database_and_bounded(tmp_path, monkeypatch):
    monkeypatch.setattr(sqlite_storage, "MAX_CACHED_ENGINES", 3)
    instance = instance_for(tmp_path / "home")
    storage = instance.event_log_storage
    run_ids = [dg.materialize([number], instance=instance).run_id for _ in range(4)]
    assert len(storage._engines) == 3 and run_ids[-1] in storage._engines and run_ids[0] not in storage._engines
    first = storage._engines[run_ids[-1]]
    assert len(instance.all_logs(run_ids[-1])) == len(instance.all_logs(run_ids[-1])) > 0
    assert storage._engines[run_ids[-1]] is first  # the same engine, so its compiled statements are reused
    cache = first._compiled_cache
    size = len(cache)
    instance.all_logs(run_ids[-1])
    assert size > 0 and len(cache) == size  # a repeated query compiles nothing new
    runs_engine = instance.run_storage._kept_engine
    instance.get_run_by_id(run_ids[0])
    assert instance.run_storage._kept_engine is runs_engine
    # a run evicted from the cache still reads (a new engine, the database already initialised)
    assert len(instance.all_logs(run_ids[0])) == len(instance.all_logs(run_ids[-1]))


@pytest.mark.parametrize("threads", [4])
def test_a_new_run_database_created_by_several_threads_at_once_is_initialised_once(tmp_path, threads):
    import concurrent.futures

    folder = dagster_home(tmp_path / "home")
    base = str(folder / "history" / "runs")
    storages = [sqlite_storage.EngineCachingSqliteEventLogStorage(base) for _ in range(threads)]
    with concurrent.futures.ThreadPoolExecutor(threads) as pool:
        list(pool.map(lambda s: s.get_logs_for_run("run-made-at-once"), storages))
    with sqlite3.connect(folder / "history" / "runs" / "run-made-at-once.db") as con:
        assert con.execute("select count(*) from alembic_version").fetchone()[0] == 1
        assert con.execute("select count(*) from event_logs").fetchone()[0] == 0
