"""The platform's Dagster instance: one ``dagster.yaml`` for every entry point, crash recovery, one runner per home.

- ``write_dagster_yaml``: the instance settings every command (``ui``, ``serve``, ``tick``, ``demo``,
  ``materialize``) writes, so the daemon, the UI and the in-process runner share them. Keys are those of the
  dagster.yaml reference (docs.dagster.io/guides/deploy/dagster-yaml): ``telemetry``, ``nux`` (the UI's
  first-visit community sign-up dialog), ``concurrency`` (pools and the run queue), ``run_monitoring``
  (docs.dagster.io/deployment/execution/run-monitoring), ``run_retries``
  (docs.dagster.io/deployment/execution/run-retries), ``retention`` (the daemon's purge of sensor ticks, after
  the settings' ``retention_days``) and, with ``"instance_storage": "postgres"`` in settings.json, ``storage``
  (dagster-postgres: runs, event logs and schedules in one PostgreSQL database that several hosts share).
- ``recover``: runs of the in-process runner carry their process id and host as run tags; a run still
  STARTED whose process is gone (SIGKILL, OOM) is marked failed through ``DagsterInstance.report_run_failed``,
  and the pool slots held by finished runs are released with the event-log storage's
  ``free_concurrency_slots_for_run`` (what Dagster's run-monitoring daemon and the UI's "free concurrency
  slots" action call). Each recovery is appended to ``dagster/recovered.jsonl`` for ``noisycal status``.
- ``instance_for``: the instance, its storages opened (created, on a new home) by one process at a time.
- ``home_lock``: one in-process runner per home at a time (an ``flock`` the kernel drops when the holder
  dies), waited for with a bound and a clear message, interruptible by SIGINT/SIGTERM.
"""

from __future__ import annotations

import fcntl
import json
import os
import socket
import time
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import UTC, datetime
from pathlib import Path

import dagster as dg

from assets.service_checks import root_message
from noisycal_platform.files import atomic_write_text
from noisycal_platform.paths import HomeLayout
from orchestration.errors import HomeBusy
from resources.settings import SettingsResource, load_settings

_RS = dg.DagsterRunStatus
#: Dagster's own split of run statuses (finished: nothing will change them), spelled with the public enum.
FINISHED_STATUSES = [_RS.SUCCESS, _RS.FAILURE, _RS.CANCELED]
NOT_FINISHED_STATUSES = [s for s in _RS if s not in FINISHED_STATUSES and s is not _RS.MANAGED]

__all__ = [
    "DAGSTER_YAML",
    "HOST_TAG",
    "PID_TAG",
    "HomeBusy",
    "daemon_running",
    "dagster_home",
    "dagster_yaml",
    "home_lock",
    "instance_for",
    "latest_failures",
    "process_tags",
    "recent_recoveries",
    "recover",
    "storage_block",
    "wait_for_pools",
    "write_dagster_yaml",
]

PID_TAG = "noisycal/pid"
HOST_TAG = "noisycal/host"
START_TAG = "noisycal/pid_start"

#: Seconds a finished run may keep a pool slot before the daemon frees it, and the wait for a busy home.
FREE_SLOTS_AFTER_RUN_END_SECONDS = 10
DEFAULT_LOCK_TIMEOUT_SECONDS = 600.0
#: The run queue: runs in progress at once (also the pool slots that launched runs may wait for, so a run
#: whose first steps wait for a pool still starts its process), and how often queued runs are launched.
MAX_CONCURRENT_RUNS = 4
DEQUEUE_INTERVAL_SECONDS = 1

_DAGSTER_YAML_TEMPLATE = f"""\
# Written by noisycal (orchestration/instance.py) for every entry point; edits here are overwritten.
# Offline clinic: no telemetry, no first-visit community dialog (it links to external sites).
telemetry:
  enabled: false
nux:
  enabled: false
concurrency:
  pools:
    # one slot per pool: "duckdb" (every warehouse step: one DuckDB writer at a time) and "compute" (encoder
    # training and embedding, whose short warehouse reads and writes retry on DuckDB's lock)
    default_limit: 1
    # a run whose first steps wait for a slot is launched anyway (counted in slots: up to the run-queue
    # limit), so its process starts while the slot's holder finishes instead of after it
    op_granularity_run_buffer: {MAX_CONCURRENT_RUNS}
  runs:
    # the run queue (QueuedRunCoordinator, run by the daemon)
    max_concurrent_runs: {MAX_CONCURRENT_RUNS}
run_queue:
  # how often the daemon launches queued runs (Dagster's default: 5 s), each in a thread of its own: two runs
  # requested together start their processes side by side, not one after the other
  dequeue_interval_seconds: {DEQUEUE_INTERVAL_SECONDS}
  dequeue_use_threads: true
  dequeue_num_workers: 4
sensors:
  # sensors are evaluated in parallel threads: a slow one (the snapshot copy) never delays another
  use_threads: true
  num_workers: 4
# the daemon marks crashed run workers failed and frees the pool slots of finished runs
run_monitoring:
  enabled: true
  start_timeout_seconds: 180
  cancel_timeout_seconds: 180
  max_resume_run_attempts: 0
  poll_interval_seconds: 30
  free_slots_after_run_end_seconds: {FREE_SLOTS_AFTER_RUN_END_SECONDS}
# a run whose worker crashed is retried as a new run; step failures retry through the assets' retry policy
run_retries:
  enabled: true
  max_retries: 2
  retry_on_asset_or_op_failure: false
retention:
  schedule:
    purge_after_days: {{tick_days}}
  sensor:
    purge_after_days:
      skipped: 7
      failure: {{tick_days}}
      success: {{tick_days}}
  auto_materialize:
    purge_after_days:
      skipped: 7
      failure: {{tick_days}}
      success: {{tick_days}}
"""


def _yaml_string(value: str) -> str:
    return json.dumps(value)  # a JSON string is a YAML double-quoted scalar


#: SQLAlchemy 2.1 reads a bare ``postgresql://`` as the psycopg 3 driver; dagster-postgres is built on psycopg2
PG_SCHEME = "postgresql+psycopg2"


def _psycopg2_url(url: str) -> str:
    for bare in ("postgresql://", "postgres://"):
        if url.startswith(bare):
            return PG_SCHEME + "://" + url.removeprefix(bare)
    return url


#: dagster.yaml key -> (folder under ``DAGSTER_HOME``, class in ``orchestration.sqlite_storage``). The folders are
#: Dagster's SQLite layout (``dagster._core.instance.ref``), so a home written by Dagster's own classes (or by an
#: older noisycal) keeps its history.
SQLITE_STORAGES = {
    "run_storage": ("history/", "EngineCachingSqliteRunStorage"),
    "event_log_storage": ("history/runs/", "EngineCachingSqliteEventLogStorage"),
    "schedule_storage": ("schedules", "EngineCachingSqliteScheduleStorage"),
}


def storage_block(settings: SettingsResource, dagster_dir: str | Path | None = None) -> str:
    """The storage blocks of ``dagster.yaml`` for the settings' ``instance_storage``.

    SQLite (the default): Dagster's SQLite storages on its own layout under ``dagster_dir``, with kept SQLAlchemy
    engines (``orchestration.sqlite_storage``); '' without ``dagster_dir`` (Dagster's defaults). PostgreSQL:
    ``storage`` (dagster-postgres); the password, if any, stays in the environment variable the settings name."""
    if settings.instance_storage == "sqlite":
        if dagster_dir is None:
            return ""
        root = Path(dagster_dir).resolve()
        lines = ["# instance storage: Dagster's SQLite files under this folder, one kept engine per file "
                 "(orchestration/sqlite_storage.py)"]
        for key, (sub, cls) in SQLITE_STORAGES.items():
            base = str(root / sub) + ("/" if sub.endswith("/") else "")
            lines += [f"{key}:", "  module: orchestration.sqlite_storage", f"  class: {cls}",
                      "  config:", f"    base_dir: {_yaml_string(base)}"]
        return "\n".join(lines) + "\n"
    lines = ["# instance storage: PostgreSQL (settings.json instance_storage), shared by every host", "storage:",
             "  postgres:"]
    if settings.postgres_url:
        lines.append(f"    postgres_url: {_yaml_string(_psycopg2_url(settings.postgres_url))}")
    else:
        lines += ["    postgres_db:", f"      username: {_yaml_string(settings.postgres_user)}",
                  f"      hostname: {_yaml_string(settings.postgres_host)}",
                  f"      db_name: {_yaml_string(settings.postgres_db)}", f"      port: {settings.postgres_port}",
                  f"      scheme: {_yaml_string(PG_SCHEME)}"]
        if settings.postgres_password_env:
            lines.append(f"      password: {{env: {_yaml_string(settings.postgres_password_env)}}}")
    return "\n".join(lines) + "\n"


def dagster_yaml(settings: SettingsResource | None = None, dagster_dir: str | Path | None = None) -> str:
    """The platform's ``dagster.yaml`` text for ``settings`` and the ``DAGSTER_HOME`` folder ``dagster_dir`` (without
    it: no storage blocks for SQLite, :data:`DAGSTER_YAML`)."""
    settings = settings or SettingsResource()
    tick_days = f"{settings.retention_days:g}"
    return _DAGSTER_YAML_TEMPLATE.replace("{tick_days}", tick_days) + storage_block(settings, dagster_dir)


#: ``dagster.yaml`` of a home with default settings (SQLite storage, 90 days of ticks), less the storage blocks
#: that name the home's folder
DAGSTER_YAML = dagster_yaml()


def write_dagster_yaml(path: str | Path, settings: SettingsResource | None = None) -> Path:
    """Create ``path`` (a ``DAGSTER_HOME``) and write the platform's ``dagster.yaml`` for ``settings`` into it if
    it differs (a home moved to another folder gets its storage paths rewritten here)."""
    path = Path(path)
    path.mkdir(parents=True, exist_ok=True)
    cfg = path / "dagster.yaml"
    text = dagster_yaml(settings, path)
    if not cfg.is_file() or cfg.read_text(encoding="utf-8") != text:
        atomic_write_text(cfg, text)
    return path


def dagster_home(home: str | Path) -> Path:
    """``$NOISYCAL_HOME/dagster``, created, with the platform's ``dagster.yaml`` for the home's settings.json."""
    layout = HomeLayout.at(home)
    return write_dagster_yaml(layout.home / "dagster", load_settings(layout.home))


#: the ``flock`` that ``instance_for`` holds while Dagster opens (on a new home: creates) the instance storages
INSTANCE_LOCK_NAME = "instance.lock"


def instance_for(home: str | Path) -> dg.DagsterInstance:
    """A persistent instance under ``$NOISYCAL_HOME/dagster`` (runs, partitions and cursors survive).

    Opened under an ``flock`` on ``dagster/instance.lock``: Dagster's SQLite storages create their tables on first
    open with no guard against another process doing the same, so two commands started at once on a new home
    failed with "table secondary_indexes already exists" (or "runs") in one of them. Held only while the storages
    are opened (the kernel drops it if the holder dies)."""
    dh = dagster_home(home)
    fd = os.open(dh / INSTANCE_LOCK_NAME, os.O_RDWR | os.O_CREAT, 0o640)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)
        return dg.DagsterInstance.from_config(str(dh))
    finally:
        os.close(fd)  # closing the descriptor drops the flock


# ------------------------------------------------------------------------------------------ process identity
def _process_start(pid: int) -> str:
    """Start time of ``pid`` in clock ticks since boot (field 22 of /proc/<pid>/stat, proc(5)); '' if unknown.

    Together with the pid it identifies a process even after the pid is reused."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return ""
    return stat.rsplit(")", 1)[1].split()[19]


def process_tags() -> dict[str, str]:
    """Run tags naming the process that executes the run (read by ``recover``)."""
    pid = os.getpid()
    return {PID_TAG: str(pid), HOST_TAG: socket.gethostname(), START_TAG: _process_start(pid)}


def _alive(pid: int, start: str) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not start or _process_start(pid) in ("", start)


def _dead_runner(run: dg.DagsterRun) -> bool:
    tags = run.tags
    if tags.get(HOST_TAG) != socket.gethostname() or not tags.get(PID_TAG, "").isdigit():
        return False  # not ours (the daemon's run monitoring watches those) or another machine's
    return not _alive(int(tags[PID_TAG]), tags.get(START_TAG, ""))


# ------------------------------------------------------------------------------------------------- recovery
def _recovery_log(home: str | Path) -> Path:
    return dagster_home(home) / "recovered.jsonl"


def recover(home: str | Path, instance: dg.DagsterInstance | None = None) -> list[dict]:
    """Mark runs of dead runner processes failed and free pool slots held by finished runs; returns the log."""
    instance = instance or instance_for(home)
    now = datetime.now(UTC).isoformat(timespec="seconds")
    recovered: list[dict] = []
    for record in instance.get_run_records(filters=dg.RunsFilter(statuses=NOT_FINISHED_STATUSES)):
        run = record.dagster_run
        if _dead_runner(run):
            instance.report_run_failed(
                run, message=f"noisycal: the process running this run (pid {run.tags[PID_TAG]}) is gone"
            )
            recovered.append({"at": now, "run_id": run.run_id, "action": "marked failed", "pid": run.tags[PID_TAG]})
    storage = instance.event_log_storage
    if storage.supports_global_concurrency_limits:
        held: dict[str, int] = {}
        for pool in storage.get_concurrency_keys():
            for slot in storage.get_concurrency_info(pool).claimed_slots:
                held[slot.run_id] = held.get(slot.run_id, 0) + 1
        run_ids = sorted(set(held) | set(storage.get_concurrency_run_ids()))
        if run_ids:
            finished = instance.get_run_records(filters=dg.RunsFilter(run_ids=run_ids, statuses=FINISHED_STATUSES))
            for record in finished:
                run_id = record.dagster_run.run_id
                storage.free_concurrency_slots_for_run(run_id)  # frees its claimed slots and pending claims
                action = f"freed {held[run_id]} pool slot(s)" if held.get(run_id) else "dropped pending pool claims"
                recovered.append({"at": now, "run_id": run_id, "action": action})
    if recovered:
        with _recovery_log(home).open("a", encoding="utf-8") as fh:
            for entry in recovered:
                fh.write(json.dumps(entry) + "\n")
            fh.flush()
            os.fsync(fh.fileno())
    return recovered


def recent_recoveries(home: str | Path, n: int = 5) -> list[dict]:
    path = HomeLayout.at(home).home / "dagster" / "recovered.jsonl"
    if not path.is_file():
        return []
    lines = [ln for ln in path.read_text(encoding="utf-8").splitlines() if ln.strip()]
    return [json.loads(ln) for ln in lines[-n:]]


def wait_for_pools(
    home: str | Path, instance: dg.DagsterInstance, timeout: float = DEFAULT_LOCK_TIMEOUT_SECONDS
) -> None:
    """Wait (sleeping, at most ``timeout`` s) until no other run holds a pool slot, recovering dead holders.

    Dagster's in-process executor polls a blocked pool without sleeping and without checking for signals,
    so the runner waits here, before it starts a run, instead."""
    storage = instance.event_log_storage
    if not storage.supports_global_concurrency_limits:
        return
    deadline = time.monotonic() + timeout
    told = False
    while True:
        holders = set(storage.get_concurrency_run_ids())
        if not holders:
            return
        recover(home, instance)
        holders = set(storage.get_concurrency_run_ids())
        if not holders:
            return
        if time.monotonic() >= deadline:
            raise HomeBusy(
                f"the warehouse pool is still held by run(s) {', '.join(sorted(holders))} after {timeout:.0f} s "
                "(see them in the Dagster UI, or `noisycal status`); nothing was started"
            )
        if not told:
            print(f"waiting for run(s) {', '.join(sorted(holders))} to release the warehouse pool", flush=True)
            told = True
        time.sleep(1.0)


# ---------------------------------------------------------------------------------------------- home lock
@contextmanager
def home_lock(home: str | Path, what: str, timeout: float = DEFAULT_LOCK_TIMEOUT_SECONDS) -> Iterator[None]:
    """Hold the home's runner lock for ``what``; wait at most ``timeout`` s (sleeping, so signals are honoured).

    The lock is an ``flock`` on ``dagster/runner.lock``: the kernel releases it when the holder exits or is
    killed, so a crashed runner never blocks the next one."""
    dh = dagster_home(home)
    lock_path = dh / "runner.lock"
    fd = os.open(lock_path, os.O_RDWR | os.O_CREAT, 0o640)
    try:
        deadline = time.monotonic() + timeout
        told = False
        while True:
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                holder_file = dh / "runner.holder"
                holder = holder_file.read_text(encoding="utf-8").strip() if holder_file.is_file() else "?"
                if time.monotonic() >= deadline:
                    raise HomeBusy(
                        f"{HomeLayout.at(home).home} is busy: another noisycal run ({holder}) still holds it after "
                        f"{timeout:.0f} s; try again when it has finished"
                    ) from None
                if not told:
                    print(f"waiting for another noisycal run on this home ({holder}) to finish", flush=True)
                    told = True
                time.sleep(0.5)
        atomic_write_text(dh / "runner.holder", f"{what}, pid {os.getpid()}")
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the flock


# ------------------------------------------------------------------------------------------------- daemon
DAEMON_FRESH_SECONDS = 90.0


def daemon_running(instance: dg.DagsterInstance, within: float = DAEMON_FRESH_SECONDS) -> bool:
    """A ``dagster-daemon`` (``noisycal serve``, ``noisycal ui``) sent a heartbeat for this instance recently."""
    now = time.time()
    return any(now - hb.timestamp < within for hb in instance.get_daemon_heartbeats().values())


# ------------------------------------------------------------------------------------------- failed partitions
def latest_failures(instance: dg.DagsterInstance, limit: int = 200) -> list[dict]:
    """(asset, partition) whose latest run failed, with the reason; a later successful run clears it."""

    settled: set[tuple[str, str | None]] = set()
    failures: list[dict] = []
    for record in instance.get_run_records(limit=limit):  # newest first
        run = record.dagster_run
        if run.status not in FINISHED_STATUSES:
            continue
        partition = run.tags.get("dagster/partition")
        selected = sorted(k.to_user_string() for k in run.asset_selection or ()) or sorted(
            {
                e.dagster_event.asset_key.to_user_string()
                for e in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.ASSET_MATERIALIZATION_PLANNED)
                if e.dagster_event.asset_key is not None
            }
        )
        reasons: dict[str, str] = {}
        if run.status == dg.DagsterRunStatus.FAILURE:
            for event in instance.all_logs(run.run_id, of_type=dg.DagsterEventType.STEP_FAILURE):
                step = event.dagster_event.step_key or ""
                reasons[step.replace("__", "/")] = root_message(event.dagster_event.event_specific_data.error)
            if not reasons:
                run_failures = instance.all_logs(run.run_id, of_type=dg.DagsterEventType.RUN_FAILURE)
                message = run_failures[-1].dagster_event.message if run_failures else "run failed"
                reasons = {k: message or "run failed" for k in selected or [run.job_name]}
        for key in selected or sorted(reasons):
            if (key, partition) in settled:
                continue
            settled.add((key, partition))
            if key in reasons:
                failures.append(
                    {"asset": key, "partition": partition, "run_id": run.run_id, "reason": reasons[key]}
                )
    return failures
