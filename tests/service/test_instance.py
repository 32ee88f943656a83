"""The platform's Dagster instance: the one dagster.yaml, crash recovery of in-process runs, the runner lock."""

import os
import signal
import subprocess
import sys
import textwrap
import time
import uuid
from pathlib import Path

import dagster as dg
import pytest

from orchestration.errors import HomeBusy
from orchestration.instance import (
    dagster_home,
    dagster_yaml,
    home_lock,
    instance_for,
    latest_failures,
    recent_recoveries,
    recover,
)

REPO = Path(__file__).resolve().parents[2]


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO), DAGSTER_DISABLE_TELEMETRY="1")


def test_dagster_yaml_is_the_platform_one_and_the_instance_reads_it(tmp_path):
    home = tmp_path / "home"
    stale = home / "dagster" / "dagster.yaml"
    stale.parent.mkdir(parents=True)
    stale.write_text("telemetry:\n  enabled: true\n")  # an older or hand-edited file is replaced
    path = dagster_home(home)
    assert (path / "dagster.yaml").read_text() == dagster_yaml(None, path)
    instance = instance_for(home)
    assert instance.telemetry_enabled is False
    assert instance.nux_enabled is False  # the UI's first-visit community dialog (links to external sites)
    assert instance.run_monitoring_enabled is True
    assert instance.run_monitoring_settings["free_slots_after_run_end_seconds"] > 0
    assert instance.run_retries_enabled is True
    assert instance.get_concurrency_config().pool_config.default_pool_limit == 1
    # latency: queued runs are launched every second, in threads; sensors are evaluated in threads
    assert instance.run_coordinator.dequeue_interval_seconds == 1 and instance.run_coordinator.dequeue_use_threads
    queue = instance.get_concurrency_config().run_queue_config
    assert queue.op_concurrency_slot_buffer == queue.max_concurrent_runs == 4
    assert instance.get_sensor_settings()["use_threads"] is True


def test_every_entry_point_writes_the_same_file():
    """ui, serve, tick, demo and materialize all reach DAGSTER_HOME through instance.dagster_home."""
    sources = {name: (REPO / "orchestration" / name).read_text() for name in ("cli.py", "service.py", "demo.py")}
    assert "dagster_home" in sources["cli.py"] and "dagster_home" in sources["service.py"]
    runner = (REPO / "orchestration" / "runner.py").read_text()
    assert "dagster_yaml" not in runner and "from orchestration.instance import" in runner
    assert "instance_for" in sources["demo.py"]


CRASHING_RUN = textwrap.dedent(
    """
    import os, signal, sys
    import dagster as dg
    from orchestration.instance import instance_for, process_tags

    @dg.asset(pool="duckdb")
    def crashes():
        print("IN-STEP", flush=True)
        os.kill(os.getpid(), signal.SIGKILL)  # what the OOM killer does

    dg.materialize([crashes], selection=[crashes], instance=instance_for(sys.argv[1]), tags=process_tags())
    """
)


def test_recover_fails_runs_of_dead_processes_and_frees_their_pool_slot(tmp_path):
    home = tmp_path / "home"
    proc = subprocess.run(
        [sys.executable, "-c", CRASHING_RUN, str(home)], env=_env(), capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == -signal.SIGKILL and "IN-STEP" in proc.stdout, proc.stderr[-2000:]
    instance = instance_for(home)
    (run,) = [r.dagster_run for r in instance.get_run_records()]
    assert run.status == dg.DagsterRunStatus.STARTED  # what a dead run looks like to Dagster
    assert instance.event_log_storage.get_concurrency_info("duckdb").claimed_slots  # its slot is still held

    recovered = recover(home)
    assert {e["action"] for e in recovered} == {"marked failed", "freed 1 pool slot(s)"}
    instance = instance_for(home)
    assert instance.get_run_by_id(run.run_id).status == dg.DagsterRunStatus.FAILURE
    assert not instance.event_log_storage.get_concurrency_info("duckdb").claimed_slots
    assert [e["run_id"] for e in recent_recoveries(home)] == [run.run_id, run.run_id]
    (failure,) = latest_failures(instance)
    assert failure["asset"] == "crashes" and "is gone" in failure["reason"]
    assert recover(home) == []  # nothing left to recover


def test_runs_of_live_processes_are_left_alone(tmp_path):
    home = tmp_path / "home"
    instance = instance_for(home)

    @dg.asset
    def fine():
        return 1

    from orchestration.instance import process_tags

    result = dg.materialize([fine], instance=instance, tags=process_tags())
    assert result.success
    assert recover(home) == []
    assert latest_failures(instance) == []


def test_home_lock_wait_is_bounded_with_a_clear_message(tmp_path):
    home = tmp_path / "home"
    with home_lock(home, "first"):
        t0 = time.monotonic()
        with pytest.raises(HomeBusy, match=r"busy: another noisycal run \(first, pid \d+\)"):
            with home_lock(home, "second", timeout=1.0):
                pass
        assert 1.0 <= time.monotonic() - t0 < 10
    with home_lock(home, "third", timeout=1.0):  # released on exit
        pass


HOLDER = "import sys, time\nfrom orchestration.instance import home_lock\nwith home_lock(sys.argv[1], 'holder'):\n" \
    "    print('HELD', flush=True)\n    time.sleep(600)\n"
WAITER = "import sys\nfrom orchestration.instance import home_lock\nwith home_lock(sys.argv[1], 'waiter', 600):\n" \
    "    print('GOT', flush=True)\n"


def test_a_killed_holder_never_blocks_and_a_waiter_honours_sigterm(tmp_path):
    home = str(tmp_path / "home")
    dagster_home(home)
    holder = subprocess.Popen([sys.executable, "-c", HOLDER, home], env=_env(), stdout=subprocess.PIPE, text=True)
    try:
        assert holder.stdout.readline().strip() == "HELD"
        waiter = subprocess.Popen([sys.executable, "-c", WAITER, home], env=_env(), stdout=subprocess.PIPE, text=True)
        assert waiter.stdout.readline().startswith("waiting for another noisycal run")
        t0 = time.monotonic()
        waiter.send_signal(signal.SIGTERM)
        assert waiter.wait(timeout=10) == -signal.SIGTERM and time.monotonic() - t0 < 10
        holder.send_signal(signal.SIGKILL)
        holder.wait(timeout=10)
        with home_lock(home, "after", timeout=5.0):  # the kernel dropped the dead holder's lock
            pass
    finally:
        for p in (holder,):
            if p.poll() is None:
                p.kill()


def test_beside_a_live_daemon_tick_leaves_it_to_the_daemon_and_materialize_needs_its_queue(tmp_path):
    from dagster._daemon.types import DaemonHeartbeat

    from orchestration.run_queue import QueueUnavailable
    from orchestration.runner import materialize_everything, tick

    @dg.asset
    def one() -> None:
        return None

    home = tmp_path / "home"
    instance = instance_for(home)
    instance.add_daemon_heartbeat(DaemonHeartbeat(time.time() - 300, "SENSOR", "old", None))
    report = tick(home, defs=dg.Definitions())  # a daemon that stopped long ago does not count
    assert report.n_runs == 0 and not report.note
    instance.add_daemon_heartbeat(DaemonHeartbeat(time.time(), "SENSOR", "live", None))
    report = tick(home, defs=dg.Definitions(assets=[one]))
    assert report.n_runs == 0 and "evaluates the sensors and the automation" in report.note
    # no `noisycal serve` / `ui` webserver recorded for the home: nothing to submit the run to, nothing runs
    with pytest.raises(QueueUnavailable, match="a dagster-daemon is running for this home"):
        materialize_everything(home, defs=dg.Definitions(assets=[one]))
    assert instance.get_run_records() == []



def _open_and_write_at_barrier(home: str, barrier, report: str) -> None:
    """A forked child: wait for the others, open the home's instance (creating its storages), write a run; any
    error goes to ``report`` and exit status 1."""
    status = 1
    try:
        barrier.wait(timeout=60)
        instance = instance_for(home)
        instance.add_run(dg.DagsterRun(job_name="probe", run_id=str(uuid.uuid4())))
        instance.dispose()
        status = 0
    except Exception as exc:
        Path(report).write_text(f"{type(exc).__name__}: {str(exc)[:300]}")
    finally:
        os._exit(status)


def test_processes_opening_a_new_home_at_once_all_succeed(tmp_path):
    """Dagster's SQLite storages create their tables on first open, unguarded: without `instance_for`'s lock,
    processes released together on a new home failed (table ... already exists) in most of these homes."""
    import multiprocessing

    ctx = multiprocessing.get_context("fork")  # dagster already imported: the children start at once
    n_homes, n_procs = 6, 4
    for h in range(n_homes):
        home = tmp_path / f"home{h}"
        dagster_home(home)  # the dagster.yaml (atomic) first; the storages are created by the racing children
        barrier = ctx.Barrier(n_procs)
        reports = [tmp_path / f"home{h}-{i}.err" for i in range(n_procs)]
        procs = [ctx.Process(target=_open_and_write_at_barrier, args=(str(home), barrier, str(r))) for r in reports]
        for p in procs:
            p.start()
        for p in procs:
            p.join(timeout=120)
        errors = [r.read_text() for r in reports if r.exists()]
        assert errors == [] and [p.exitcode for p in procs] == [0] * n_procs, f"home {h}: {errors}"
        instance = instance_for(home)
        assert len(instance.get_run_records()) == n_procs  # every process's run is there
        instance.dispose()
