"""Run-level faults: ``noisycal materialize`` SIGKILLed in the middle of a materialisation, then restarted, and
two ``noisycal tick`` processes started at once. The process is killed for real (SIGKILL, no exception).

Both tests run the calibration graph several times in subprocesses: about a minute each on a quiet 2-core
machine (much longer under load), so they are ``slow``; the fast version of the recovery is
tests/service/test_instance.py::test_recover_fails_runs_of_dead_processes_and_frees_their_pool_slot.
"""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import dagster as dg
import duckdb
import polars as pl
import pytest
from polars.testing import assert_frame_equal

from noisycal_platform.calibration.demo_data import write_demo_calibration_inputs
from noisycal_platform.paths import HomeLayout
from orchestration.instance import instance_for

REPO = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow


def _env() -> dict:
    return dict(os.environ, PYTHONPATH=str(REPO), DAGSTER_DISABLE_TELEMETRY="1", OMP_NUM_THREADS="1")


def _cli(home: Path, *args: str) -> list[str]:
    return [sys.executable, "-m", "orchestration.cli", "--home", str(home), *args]


def _home(tmp_path) -> Path:
    home = tmp_path / "home"
    write_demo_calibration_inputs(home, seed=0)
    (home / "settings.json").write_text(json.dumps({"n_bootstrap": 50}))
    return home


def _tables(home: Path) -> dict[str, pl.DataFrame]:
    with duckdb.connect(str(HomeLayout.at(home).warehouse), read_only=True) as con:
        names = con.execute("select table_schema, table_name from information_schema.tables order by 1, 2").fetchall()
        return {f"{s}.{t}": con.execute(f'select * from "{s}"."{t}" order by all').pl() for s, t in names}


#: columns that record when a row was written, not what was computed: a report's creation time, and the hash
#: of a report file that prints its creation time
WALL_CLOCK_COLUMNS = {"created"}
REPORT_FILE_COLUMNS = {"created", "sha256"}


def _assert_same_tables(got: dict, want: dict) -> None:
    assert sorted(got) == sorted(want)
    for name in want:
        drop = REPORT_FILE_COLUMNS if name.startswith("reports.") else WALL_CLOCK_COLUMNS
        got[name], want[name] = (t.drop(drop & set(t.columns)) for t in (got[name], want[name]))
        # recomputed from the same inputs with the same seeds; floats through BLAS: rel 1e-9
        try:
            assert_frame_equal(got[name], want[name], check_exact=False, rel_tol=1e-9, abs_tol=1e-12)
        except AssertionError as exc:
            raise AssertionError(f"table {name} differs from the clean run: {exc}") from None


def _claimed(instance) -> list:
    return instance.event_log_storage.get_concurrency_info("duckdb").claimed_slots


def _failures(stdout: str) -> list[str]:
    """The FAIL lines and their error lines of a ``noisycal materialize`` report."""
    lines, keep = [], False
    for line in stdout.splitlines():
        if line.startswith(("  FAIL", "  ok ", "  skip", "  recovered")):
            keep = line.startswith("  FAIL")
        if keep:
            lines.append(line)
    return lines


#: the warehouse write at which the second materialize kills itself: within a later run than its first
KILL_AT = 6


def test_sigkill_in_the_middle_of_materialize_then_restart(tmp_path):
    home = _home(tmp_path)
    instance_for(home).add_dynamic_partitions("model_versions", ["v1"])
    # the clean run: what every table must equal after a crash and a rerun (this home has calibration inputs
    # only, so raw/generations fails on its missing folder in both, and what reads it is not run)
    clean_run = subprocess.run(_cli(home, "materialize"), env=_env(), capture_output=True, text=True, timeout=1500)
    assert "materialize:" in clean_run.stdout, clean_run.stderr[-3000:]
    clean = _tables(home)
    assert "calibration.nc_ece_report" in clean and "reports.calibration" in clean

    # killed for real inside a step that holds the warehouse slot, its slice replaced but not committed: the
    # materialize process SIGKILLs itself at its KILL_AT-th warehouse write (a later run than the first); polling
    # the slot from here and killing on sight raced with short steps, which could let go of it in between
    instance = instance_for(home)
    before = {r.dagster_run.run_id for r in instance.get_run_records()}
    killed = subprocess.run(_cli(home, "materialize"), env=dict(_env(), NOISYCAL_FAULT=f"warehouse_replace:{KILL_AT}"),
                            capture_output=True, text=True, timeout=1500)
    assert killed.returncode == -signal.SIGKILL, killed.stdout[-3000:] + killed.stderr[-3000:]
    instance = instance_for(home)
    new = [r.dagster_run for r in instance.get_run_records() if r.dagster_run.run_id not in before]
    started = [r for r in new if r.status == dg.DagsterRunStatus.STARTED]
    assert len(new) >= 2 and len(started) == 1, [(r.run_id[:8], r.status) for r in new]  # in the middle
    victim = started[0]
    assert [s.run_id for s in _claimed(instance)] == [victim.run_id]  # the dead run still holds the only slot

    t0 = time.time()
    rerun = subprocess.run(_cli(home, "materialize"), env=_env(), capture_output=True, text=True, timeout=900)
    assert rerun.returncode == clean_run.returncode, rerun.stdout[-3000:] + rerun.stderr[-3000:]
    assert f"recovered: run {victim.run_id} marked failed" in rerun.stdout
    assert _failures(rerun.stdout) == _failures(clean_run.stdout) and time.time() - t0 < 900
    instance = instance_for(home)
    assert instance.get_run_by_id(victim.run_id).status == dg.DagsterRunStatus.FAILURE
    assert not _claimed(instance)
    _assert_same_tables(_tables(home), clean)
    status = subprocess.run(_cli(home, "status"), env=_env(), capture_output=True, text=True, timeout=300)
    assert "recovered after a crash" in status.stdout and victim.run_id[:8] in status.stdout


def test_two_ticks_started_at_once_ingest_exactly_once(tmp_path):
    home = _home(tmp_path)
    layout = HomeLayout.at(home)
    batches = sorted(layout.annotation_inbox.glob("*.csv"))
    expected = pl.concat([pl.read_csv(p, infer_schema=False) for p in batches])
    n_predictions = pl.read_csv(layout.predictions_file("v1")).height

    procs = [
        subprocess.Popen(_cli(home, "tick"), env=_env(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        for _ in range(2)
    ]
    outs = [p.communicate(timeout=1500)[0] for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    assert sum("waiting for another noisycal run" in o for o in outs) == 1  # the second waited for the first

    ledger = [json.loads(ln) for ln in layout.ledger.read_text().splitlines() if ln.strip()]
    assert len(ledger) == len(batches)
    with duckdb.connect(str(layout.warehouse), read_only=True) as con:
        n, n_pairs = con.execute(
            "select count(*), count(distinct (item_id, annotator_id)) from raw.annotations"
        ).fetchone()
        preds = con.execute("select count(*) from raw.predictions where model_version = 'v1'").fetchone()[0]
    assert n == n_pairs == expected.height
    assert preds == n_predictions
    runs = [r.dagster_run for r in instance_for(home).get_run_records()]
    ingest = [r for r in runs if r.tags.get("noisycal/batch") and r.status == dg.DagsterRunStatus.SUCCESS]
    assert len(ingest) == len(batches)
