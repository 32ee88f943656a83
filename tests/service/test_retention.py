"""Retention (orchestration/retention.py): what is deleted after ``retention_days``, and what is pinned.

Runs are made with real materialisations on the home's instance and then moved back in time (tests/_backdate.py);
retention runs with an explicit ``now``. Expected deletions are written out by hand from the scenario below.
"""

import os
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg
import numpy as np
import pytest

from orchestration.instance import instance_for
from orchestration.retention import KEEP_TAG, run_retention
from resources.settings import SettingsResource
from tests._backdate import backdate_run, sensor_with_ticks

NOW = datetime(2027, 6, 1, tzinfo=UTC)
PARTS = dg.StaticPartitionsDefinition(["x", "y"])


@dg.asset
def a() -> int:
    return 1


@dg.asset(partitions_def=PARTS)
def p() -> int:
    return 2


@dg.asset(key=["reports", "r"])
def r() -> int:
    return 3


@dg.asset
def broken() -> int:
    raise ValueError("fails on purpose")


def _run(instance, assets, days_ago: float, partition=None, tags=None, ok=True) -> str:
    result = dg.materialize(assets, instance=instance, partition_key=partition, tags=tags, raise_on_error=False)
    assert result.success is ok
    backdate_run(instance, result.run_id, NOW - timedelta(days=days_ago))
    return result.run_id


@pytest.fixture
def scenario(tmp_path):
    home = tmp_path / "home"
    instance = instance_for(home)
    ids = {
        "A1": _run(instance, [a], 200),  # superseded by A3: deleted
        "A2": _run(instance, [a], 150, tags={KEEP_TAG: "true"}),  # tagged keep: kept
        "A3": _run(instance, [a], 120),  # the latest materialisation of a: pinned although old
        "Py1": _run(instance, [p], 130, partition="y"),  # superseded by Py2: deleted
        "Px": _run(instance, [p], 120, partition="x"),  # the latest of p[x]: pinned
        "Py2": _run(instance, [p], 10, partition="y"),  # recent
        "R1": _run(instance, [r], 100),  # the published report: pinned
        "F": _run(instance, [broken], 95, ok=False),  # an old failure: deleted
        "N1": _run(instance, [broken], 89.5, tags={KEEP_TAG: "false"}, ok=False),  # younger than 90 days: kept
    }
    started = dg.DagsterRun(job_name="elsewhere", run_id="f" * 32, status=dg.DagsterRunStatus.STARTED)
    instance.add_run(started)
    backdate_run(instance, started.run_id, NOW - timedelta(days=400))  # unfinished: never deleted
    sensor = sensor_with_ticks(instance, "annotation_sensor",
                               [(NOW - timedelta(days=d)).timestamp() for d in (200, 91, 89, 1)])
    cache = home / "cache" / "embeddings"
    cache.mkdir(parents=True)
    for name in ("oldhash__dino-abc.npy", "oldhash__baseline-v1.npy", "curhash__dino-abc.npy"):
        np.save(cache / name, np.zeros((2, 2), np.float32))
    stale = home / "reports" / ".calibration.html.k3j.tmp"
    fresh = home / "reports" / ".cleaning.html.z9.tmp"
    inbox = home / "inbox" / "annotations" / ".batch.csv.q1.tmp"
    parquet = home / "warehouse" / "raw" / "images" / f"part.parquet.tmp-{'a' * 32}"
    for f in (stale, fresh, inbox, parquet):
        f.parent.mkdir(parents=True, exist_ok=True)
        f.write_text("partial")
    old = time.time() - 3 * 86400.0
    for f in (stale, inbox, parquet):
        os.utime(f, (old, old))
    yield home, instance, ids, sensor, {"stale": stale, "fresh": fresh, "inbox": inbox, "parquet": parquet}
    instance.dispose()


def _kw():
    return {"now": NOW, "settings": SettingsResource(retention_days=90), "check_keys": (),
            "dataset_hashes": {"curhash"}}


def test_retention_deletes_old_history_and_keeps_pinned_runs(scenario):
    """One scenario (its ten runs take ~20 s to make on a loaded machine): a dry run first, then the real one."""
    home, instance, ids, sensor, files = scenario
    n_runs = len(instance.get_run_records())
    dry = run_retention(home, dry_run=True, instance=instance, **_kw())
    assert sorted(dry.runs_deleted) == sorted([ids["A1"], ids["Py1"], ids["F"]])
    assert dry.ticks_purged == 2 and sorted(dry.cache_removed) == ["oldhash__baseline-v1.npy", "oldhash__dino-abc.npy"]
    assert len(instance.get_run_records()) == n_runs  # the dry run deleted nothing
    assert all(f.exists() for f in files.values())
    assert (home / "cache" / "embeddings" / "oldhash__dino-abc.npy").exists()

    report = run_retention(home, instance=instance, **_kw())
    deleted = {ids["A1"], ids["Py1"], ids["F"]}
    assert set(report.runs_deleted) == deleted
    remaining = {rec.dagster_run.run_id for rec in instance.get_run_records()}
    assert remaining == (set(ids.values()) - deleted) | {"f" * 32}
    for run_id in deleted:
        assert not Path(instance.event_log_storage.path_for_shard(run_id)).exists()  # its SQLite event-log file
    assert Path(instance.event_log_storage.path_for_shard(ids["A3"])).exists()
    fresh = instance_for(home)  # another process's view (this one caches the shards it initialised)
    try:
        for run_id in deleted:
            assert fresh.all_logs(run_id) == []  # the event log went with the run
        assert len(fresh.all_logs(ids["A3"])) > 0
    finally:
        fresh.dispose()
    assert report.runs_pinned[ids["A2"]] == "tagged-keep"
    assert report.runs_pinned[ids["Px"]].startswith("latest-materialisation of p[x]")
    assert report.runs_pinned[ids["R1"]].startswith("published-report of reports/r")
    assert report.runs_pinned[ids["A3"]].startswith("latest-materialisation of a")
    # Dagster's view of what exists is unchanged: automation has nothing to rerun
    assert instance.get_latest_materialization_event(dg.AssetKey("a")).run_id == ids["A3"]
    assert set(instance.get_materialized_partitions(dg.AssetKey("p"))) == {"x", "y"}
    ticks = instance.get_ticks(sensor.instigator_origin_id, sensor.selector_id)
    assert sorted(round((NOW.timestamp() - t.timestamp) / 86400) for t in ticks) == [1, 89]
    assert sorted(p.name for p in (home / "cache" / "embeddings").iterdir()) == ["curhash__dino-abc.npy"]
    assert not files["stale"].exists() and not files["parquet"].exists()
    assert files["fresh"].exists() and files["inbox"].exists()  # too new / a drop folder
    again = run_retention(home, instance=instance, **_kw())
    assert again.runs_deleted == [] and again.ticks_purged == 0 and again.cache_removed == []
