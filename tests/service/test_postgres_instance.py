"""PostgreSQL instance storage (``"instance_storage": "postgres"``) against a real server on loopback.

The server is started by the test (``tests/_postgres.py``: initdb + pg_ctl on 127.0.0.1). What lands in the
database is read back with plain SQL through psycopg2, not through Dagster, so the storage really is the server.
"""

import json
import os
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest

from orchestration.instance import DAGSTER_YAML, dagster_home, dagster_yaml, instance_for
from resources.settings import SettingsResource
from tests._postgres import postgres_server

REPO = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def server():
    with postgres_server() as pg:
        yield pg


def _pg_home(tmp_path: Path, server, **extra) -> tuple[Path, str]:
    db = f"t_{uuid.uuid4().hex[:12]}"
    url = server.create_database(db)
    home = tmp_path / "home"
    home.mkdir()
    settings = {"instance_storage": "postgres", "postgres_url": url, "inbox_settle_seconds": 0, **extra}
    (home / "settings.json").write_text(json.dumps(settings))
    return home, url


def _sql(url: str, query: str) -> list[tuple]:
    import psycopg2

    con = psycopg2.connect(url)
    try:
        with con.cursor() as cur:
            cur.execute(query)
            return cur.fetchall()
    finally:
        con.close()


def test_sqlite_stays_the_default_and_postgres_fields_are_written_without_a_password():
    assert DAGSTER_YAML == dagster_yaml(SettingsResource()) and "storage:" not in DAGSTER_YAML
    text = dagster_yaml(SettingsResource(instance_storage="postgres", postgres_host="db.clinic", postgres_port=5433,
                                         postgres_user="u", postgres_db="d", postgres_password_env="PGPASS_X"))
    assert 'hostname: "db.clinic"' in text and "port: 5433" in text and 'db_name: "d"' in text
    assert 'password: {env: "PGPASS_X"}' in text  # the secret itself stays in the environment


def test_instance_lives_in_the_postgres_server(tmp_path, server):
    home, url = _pg_home(tmp_path, server)
    instance = instance_for(home)
    try:
        assert type(instance.run_storage).__name__ == "PostgresRunStorage"
        assert type(instance.event_log_storage).__name__ == "PostgresEventLogStorage"
        assert type(instance.schedule_storage).__name__ == "PostgresScheduleStorage"
        assert instance.event_log_storage.supports_global_concurrency_limits  # the pools work on it too

        @dg.asset
        def one() -> int:
            return 1

        result = dg.materialize([one], instance=instance)
        assert result.success
        rows = _sql(url, "SELECT run_id, status FROM runs")
        assert rows == [(result.run_id, "SUCCESS")]
        (n_mat,) = _sql(url, "SELECT count(*) FROM event_logs WHERE dagster_event_type = 'ASSET_MATERIALIZATION'")[0]
        assert n_mat == 1
    finally:
        instance.dispose()
    assert not (dagster_home(home) / "history").exists()  # no SQLite run storage beside it


@pytest.mark.slow  # ~25 s on the shared 2-core machine
def test_sensor_tick_runs_and_partitions_land_in_postgres(tmp_path, server):
    from noisycal_platform.calibration.demo_data import write_demo_calibration_inputs
    from orchestration.runner import tick

    home, url = _pg_home(tmp_path, server)
    write_demo_calibration_inputs(home, seed=0)
    versions = sorted(p.name for p in (home / "models").iterdir() if p.is_dir())
    report = tick(home, automation=False)
    assert report.runs and all(r["success"] for r in report.runs), report.runs
    stored = sorted(k for (k,) in _sql(url, "SELECT partition FROM dynamic_partitions"))
    assert stored == versions
    statuses = _sql(url, "SELECT status, count(*) FROM runs GROUP BY status")
    assert statuses == [("SUCCESS", report.n_runs)]
    # a second tick sees the sensors' state (cursor, run keys) and runs nothing new
    again = tick(home, automation=False)
    assert again.n_runs == 0


_CONCURRENT = textwrap.dedent(
    """
    import sys, time
    import dagster as dg
    from orchestration.instance import instance_for

    home, name, start_at = sys.argv[1], sys.argv[2], float(sys.argv[3])

    @dg.asset(name=name)
    def slow(context) -> dg.MaterializeResult:
        began = time.time()
        time.sleep(3.0)
        return dg.MaterializeResult(metadata={"began": began, "ended": time.time()})

    instance = instance_for(home)
    time.sleep(max(0.0, start_at - time.time()))
    result = dg.materialize([slow], instance=instance, tags={"noisycal/test": name})
    print(result.run_id)
    sys.exit(0 if result.success else 1)
    """
)


@pytest.mark.slow  # two processes import Dagster: ~23 s
def test_two_concurrent_runs_from_two_processes(tmp_path, server):
    home, url = _pg_home(tmp_path, server)
    instance_for(home).dispose()  # create the schema once (as `noisycal serve` does) before two writers
    env = dict(os.environ, PYTHONPATH=str(REPO), DAGSTER_DISABLE_TELEMETRY="1")
    start_at = time.time() + 8.0  # both processes have imported Dagster by then
    procs = [
        subprocess.Popen([sys.executable, "-c", _CONCURRENT, str(home), name, str(start_at)], env=env,
                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
        for name in ("alpha", "beta")
    ]
    outs = [p.communicate(timeout=180) for p in procs]
    for p, (out, err) in zip(procs, outs, strict=True):
        assert p.returncode == 0, out + err
    run_ids = sorted(out.strip().splitlines()[-1] for out, _ in outs)
    assert sorted(r for (r,) in _sql(url, "SELECT run_id FROM runs WHERE status = 'SUCCESS'")) == run_ids
    instance = instance_for(home)
    try:
        spans = []
        for name in ("alpha", "beta"):
            event = instance.get_latest_materialization_event(dg.AssetKey(name))
            meta = event.asset_materialization.metadata
            spans.append((meta["began"].value, meta["ended"].value))
            # each run's events are its own: one materialisation per run, in its own run's log
            assert event.run_id in run_ids
        (a0, a1), (b0, b1) = spans
        assert a0 < b1 and b0 < a1, f"the two runs did not overlap: {spans}"
        per_run = dict(_sql(url, "SELECT run_id, count(*) FROM event_logs WHERE dagster_event_type = "
                                 "'ASSET_MATERIALIZATION' GROUP BY run_id"))
        assert per_run == dict.fromkeys(run_ids, 1)
    finally:
        instance.dispose()


@pytest.mark.slow
def test_service_daemon_sensors_and_run_queue_on_postgres(tmp_path, server):
    """``noisycal serve`` on a PostgreSQL home: the daemon's heartbeat and sensor ticks are stored there, and
    ``noisycal materialize`` goes through the QueuedRunCoordinator and is launched by the daemon."""
    from orchestration.service import serve_in_background
    from tests._server import free_port, wait_for_daemon, wait_for_server_info

    home, url = _pg_home(tmp_path, server)
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cli = [sys.executable, "-m", "orchestration.cli", "--home", str(home)]
    with serve_in_background(home, port, env={"OMP_NUM_THREADS": "1"}):
        wait_for_server_info(port, time.time() + 300, 1, "the webserver did not answer within 300 s")
        instance = instance_for(home)
        wait_for_daemon(instance)
        proc = subprocess.run([*cli, "materialize", "--select", "raw/reference_labels"], env=env,
                              capture_output=True, text=True, timeout=400)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "through the daemon's run queue" in proc.stdout
        deadline = time.time() + 120
        while time.time() < deadline and not _sql(url, "SELECT count(*) FROM job_ticks")[0][0]:
            time.sleep(2)
        assert _sql(url, "SELECT count(*) FROM job_ticks")[0][0] > 0  # the daemon's sensor ticks
        kinds = {k for (k,) in _sql(url, "SELECT DISTINCT dagster_event_type FROM event_logs")}
        assert {"PIPELINE_ENQUEUED", "PIPELINE_STARTING", "PIPELINE_SUCCESS"} <= kinds
        instance.dispose()
