"""``noisycal materialize`` while ``noisycal serve`` runs: the run goes through the daemon's run queue.

Starts the service (two Dagster processes that load the whole code location: 20-60 s on a 2-core machine),
so ``slow``.
"""

import os
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import pytest

from orchestration.instance import instance_for
from orchestration.run_queue import service_address
from orchestration.service import serve_in_background
from tests._server import free_port, wait_for_daemon, wait_for_server_info

REPO = Path(__file__).resolve().parents[2]


@pytest.mark.slow
def test_materialize_under_the_service_is_queued_and_launched_by_the_daemon(tmp_path):
    home = tmp_path / "home"
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO), OMP_NUM_THREADS="1")
    cli = [sys.executable, "-m", "orchestration.cli", "--home", str(home)]
    with serve_in_background(home, port, env={"OMP_NUM_THREADS": "1"}):
        wait_for_server_info(port, time.time() + 300, 1, "the webserver did not answer within 300 s")
        instance = instance_for(home)
        wait_for_daemon(instance)
        assert service_address(home) == ("127.0.0.1", port)

        tick = subprocess.run([*cli, "tick"], env=env, capture_output=True, text=True, timeout=120)
        assert tick.returncode == 0 and "nothing to do" in tick.stdout, tick.stdout + tick.stderr

        proc = subprocess.run(
            [*cli, "materialize", "--select", "raw/reference_labels"], env=env, capture_output=True, text=True,
            timeout=400,
        )
        assert proc.returncode == 0, proc.stdout + proc.stderr
        assert "through the daemon's run queue" in proc.stdout and "ok " in proc.stdout

        ours = [r.dagster_run for r in instance.get_run_records() if "noisycal/trigger" in r.dagster_run.tags]
        (run,) = [r for r in ours if r.tags["noisycal/trigger"] == "materialize_everything"]
        assert run.status == dg.DagsterRunStatus.SUCCESS
        assert run.asset_selection == {dg.AssetKey(["raw", "reference_labels"])}
        kinds = {e.dagster_event.event_type for e in instance.all_logs(run.run_id)}
        # queued by the QueuedRunCoordinator, then launched by the daemon
        assert {dg.DagsterEventType.RUN_ENQUEUED, dg.DagsterEventType.RUN_STARTING} <= kinds
        assert "noisycal/pid" not in run.tags  # its worker is the daemon's, not the CLI process
    assert service_address(home) is None  # serve removed its address on the way out
