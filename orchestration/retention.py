"""Bounded storage for a long-running service: ``noisycal retention [--dry-run]`` (and ``noisycal serve`` every
``retention_every_hours``).

What goes, through Dagster's public instance API:

- finished runs last updated more than ``retention_days`` (settings.json, default 90) ago, with their event logs
  (``DagsterInstance.get_run_records`` with ``RunsFilter(updated_before=..., statuses=...)``, then
  ``DagsterInstance.delete_run``, which deletes the run and every event it wrote), their compute-log folder and,
  on SQLite, the run's emptied event-log file (``<run id>.db``, which ``delete_run`` leaves behind);
- sensor and schedule ticks older than that (``DagsterInstance.purge_ticks`` per instigator state; the daemon also
  purges them by the ``retention`` block of ``dagster.yaml``, written with the same number of days);
- embedding-cache entries (``cache/embeddings/<dataset hash>__<config>.npy``) whose dataset hash no current
  ``raw/images`` partition has (read from the warehouse snapshot; without one nothing is collected);
- leftover temporary files of interrupted atomic writes (``.<name>.*.tmp``, ``*.tmp-<hex>``) older than
  ``temp_file_hours``, anywhere in the home except the drop folders.

What stays, whatever its age (pinned):

- unfinished runs;
- the run of the latest materialisation of every asset partition (and of every unpartitioned asset), so Dagster's
  view of what exists, what is stale and what automation must rerun is unchanged; the current published reports
  (``reports/*``) are among these;
- the run of the latest evaluation of every asset check;
- runs tagged ``noisycal/keep`` (any value but "false"), e.g. the run behind a report sent to a regulator.

Never touched: the warehouse (every model version's partitions stay: they are the audit trail), the archive of
accepted annotation batches, the ledger, registered datasets and models.
"""

from __future__ import annotations

import os
import re
import shutil
import time
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from pathlib import Path

import dagster as dg

from noisycal_platform.paths import HomeLayout
from orchestration.instance import FINISHED_STATUSES, dagster_home, instance_for
from resources.settings import SettingsResource, load_settings

__all__ = ["KEEP_TAG", "RetentionReport", "pinned_runs", "referenced_dataset_hashes", "run_retention"]

KEEP_TAG = "noisycal/keep"
_TEMP_NAMES = (re.compile(r"^\..+\.tmp$"), re.compile(r".+\.tmp-[0-9a-f]{32}$"))
_PAGE = 1000


@dataclass
class RetentionReport:
    cutoff: datetime
    dry_run: bool
    runs_deleted: list[str] = field(default_factory=list)
    #: old runs kept, run id -> why
    runs_pinned: dict[str, str] = field(default_factory=dict)
    ticks_purged: int = 0
    cache_removed: list[str] = field(default_factory=list)
    temp_removed: list[str] = field(default_factory=list)
    bytes_freed: int = 0
    notes: list[str] = field(default_factory=list)

    def lines(self) -> list[str]:
        verb = "would delete" if self.dry_run else "deleted"
        out = [
            f"retention (older than {self.cutoff.isoformat(timespec='seconds')}): {verb} "
            f"{len(self.runs_deleted)} run(s) with their event logs, {self.ticks_purged} tick(s), "
            f"{len(self.cache_removed)} embedding-cache entr(y/ies), {len(self.temp_removed)} temporary file(s) "
            f"({self.bytes_freed / 1e6:.1f} MB of files)",
            f"  kept {len(self.runs_pinned)} old pinned run(s): "
            + (", ".join(sorted({why.split(' ')[0] for why in self.runs_pinned.values()})) or "none"),
        ]
        return out + [f"  note: {n}" for n in self.notes]


def _keep_tagged(run: dg.DagsterRun) -> bool:
    value = run.tags.get(KEEP_TAG)
    return value is not None and value.strip().lower() != "false"


def pinned_runs(instance: dg.DagsterInstance, check_keys: Iterable[dg.AssetCheckKey] = ()) -> dict[str, str]:
    """Run id -> why it is pinned: the latest materialisation of every asset partition and the latest evaluation
    of every asset check (``check_keys``). Tagged runs are judged run by run (:func:`run_retention`)."""
    pinned: dict[str, str] = {}
    for key in instance.get_asset_keys():
        seen: set[str | None] = set()
        cursor = None
        while True:
            page = instance.fetch_materializations(key, limit=_PAGE, cursor=cursor)  # newest first
            for record in page.records:
                partition = record.partition_key
                if partition not in seen:
                    seen.add(partition)
                    where = f"{key.to_user_string()}[{partition}]" if partition else key.to_user_string()
                    reason = "published-report" if key.path[0] == "reports" else "latest-materialisation"
                    pinned.setdefault(record.run_id, f"{reason} of {where}")
            if not page.has_more:
                break
            cursor = page.cursor
    check_keys = list(check_keys)
    if check_keys:
        latest = instance.event_log_storage.get_latest_asset_check_execution_by_key(check_keys)
        for check_key, execution in latest.items():
            if execution is not None:
                pinned.setdefault(execution.run_id, f"latest-check of {check_key.asset_key.to_user_string()}")
    return pinned


def referenced_dataset_hashes(home: str | Path) -> set[str] | None:
    """Dataset content hashes of the current ``raw/images`` partitions (from the warehouse snapshot), or ``None``
    when they cannot be read (no snapshot yet, no images table): then no cache entry is collected."""
    from orchestration.snapshot import query

    try:
        frame = query(home, "SELECT DISTINCT dataset_hash FROM raw.images")
    except Exception:
        return None
    return {str(h) for h in frame["dataset_hash"].to_list() if h is not None}


def _size(path: Path) -> int:
    if path.is_dir():
        return sum(p.stat().st_size for p in path.rglob("*") if p.is_file())
    return path.stat().st_size if path.exists() else 0


def _remove(path: Path, dry_run: bool) -> int:
    size = _size(path)
    if not dry_run:
        if path.is_dir():
            shutil.rmtree(path, ignore_errors=True)
        else:
            path.unlink(missing_ok=True)
    return size


def _sensor_and_schedule_ticks(instance: dg.DagsterInstance, before: float, dry_run: bool) -> int:
    purged = 0
    for state in instance.all_instigator_state():
        origin_id, selector_id = state.instigator_origin_id, state.selector_id
        old = instance.get_ticks(origin_id, selector_id, before=before)
        purged += len(old)
        if old and not dry_run:
            instance.purge_ticks(origin_id, selector_id, before=before)
    return purged


def run_retention(
    home: str | Path,
    *,
    now: datetime | None = None,
    dry_run: bool = False,
    instance: dg.DagsterInstance | None = None,
    settings: SettingsResource | None = None,
    check_keys: Iterable[dg.AssetCheckKey] | None = None,
    dataset_hashes: set[str] | None = None,
) -> RetentionReport:
    """Apply the retention rules of the module docstring to ``home`` as of ``now`` (default: the clock).

    ``check_keys`` default to the home's definitions' asset checks; ``dataset_hashes`` (the embedding-cache
    entries still in use) default to :func:`referenced_dataset_hashes`."""
    layout = HomeLayout.at(home)
    settings = settings or load_settings(layout.home)
    own_instance = instance is None
    instance = instance or instance_for(layout.home)
    now = now or datetime.now(UTC)
    cutoff = now - timedelta(days=settings.retention_days)
    report = RetentionReport(cutoff=cutoff, dry_run=dry_run)
    if check_keys is None:
        from definitions import build_definitions

        check_keys = build_definitions(layout.home).resolve_asset_graph().asset_check_keys
    try:
        pinned = pinned_runs(instance, check_keys)
        old = instance.get_run_records(
            filters=dg.RunsFilter(updated_before=cutoff, statuses=FINISHED_STATUSES), ascending=True
        )
        storage_dir = dagster_home(layout.home) / "storage"
        for record in old:
            run = record.dagster_run
            why = pinned.get(run.run_id) or ("tagged-keep" if _keep_tagged(run) else None)
            if why:
                report.runs_pinned[run.run_id] = why
                continue
            report.runs_deleted.append(run.run_id)
            if not dry_run:
                instance.delete_run(run.run_id)  # the run and every event of its log
            report.bytes_freed += _remove(storage_dir / run.run_id, dry_run)  # its compute logs, if any
            shard = getattr(instance.event_log_storage, "path_for_shard", None)
            if shard is not None:  # SQLite: delete_run empties the run's own event-log file but leaves it behind
                for suffix in ("", "-wal", "-shm", "-journal"):
                    report.bytes_freed += _remove(Path(shard(run.run_id) + suffix), dry_run)
        report.ticks_purged = _sensor_and_schedule_ticks(instance, cutoff.timestamp(), dry_run)
    finally:
        if own_instance:
            instance.dispose()

    cache = layout.cache / "embeddings"
    hashes = dataset_hashes if dataset_hashes is not None else referenced_dataset_hashes(layout.home)
    if hashes is None:
        report.notes.append("embedding cache not collected: no warehouse snapshot with raw.images to tell which "
                            "entries are in use")
    elif cache.is_dir():
        for entry in sorted(cache.glob("*__*.npy")):
            if entry.name.split("__", 1)[0] not in hashes:
                report.bytes_freed += _remove(entry, dry_run)
                report.cache_removed.append(entry.name)

    temp_cutoff = time.time() - settings.temp_file_hours * 3600
    drop_folders = (layout.annotation_inbox, layout.confirmation_inbox)
    for dirpath, _dirs, files in os.walk(layout.home):
        folder = Path(dirpath)
        if any(folder == d or folder.is_relative_to(d) for d in drop_folders):
            continue  # a writer may be filling a file there right now
        for name in files:
            path = folder / name
            if any(p.match(name) for p in _TEMP_NAMES) and path.lstat().st_mtime < temp_cutoff:
                report.bytes_freed += _remove(path, dry_run)
                report.temp_removed.append(str(path.relative_to(layout.home)))
    return report
