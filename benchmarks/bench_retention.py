"""A year of daily annotation batches, accelerated, with and without retention: does storage level off?

Each simulated day one run materialises a stand-in of the annotation path (``raw/annotations``, the current model
version's ``calibration/channel_estimates`` partition, ``reports/calibration``; metadata of the size the real
assets write) on a real SQLite instance in a fresh ``$NOISYCAL_HOME``, and the annotation sensor records
``--ticks-per-day`` skipped ticks (the daemon evaluates it every 30 s: 2,880 a day; fewer here to stay fast, so
tick storage is understated by that factor). The run and the ticks are then moved to that day (a fake clock:
tests/_backdate.py). Every month a new model version arrives (the warehouse keeps every version's partitions:
the audit trail, so that part grows by design) and the dataset changes (one new embedding-cache entry of
``--cache-mb``). Every ``--every`` days ``orchestration.retention.run_retention`` runs with the simulated
``now``, the default 90 days, and the current dataset's hash as the cache entries in use.

    PYTHONPATH=. .venv/bin/python benchmarks/bench_retention.py [--days 365] [--batch-every 1] [--no-retention]

Printed per simulated month: runs stored, event-log rows, ticks, the Dagster storage folder (MB), the embedding
cache (MB), the kept warehouse partitions (MB) and the run time so far.
"""

from __future__ import annotations

import argparse
import shutil
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

import dagster as dg
import numpy as np

from orchestration.instance import instance_for
from orchestration.retention import run_retention
from resources.settings import SettingsResource
from tests._backdate import backdate_run, sensor_with_ticks

VERSIONS = dg.DynamicPartitionsDefinition(name="model_versions")
START = datetime(2027, 1, 1, tzinfo=UTC)
_QUIET = {"loggers": {"console": {"config": {"log_level": "WARNING"}}}}
_MD = "\n".join(f"- file: `batch_{i:03d}.csv`, rows: {40 + i}" for i in range(40))  # ~1.5 kB, like the real md


@dg.asset(key=["raw", "annotations"])
def annotations() -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"rows": 1200, "batches": dg.MetadataValue.md(_MD)})


@dg.asset(key=["calibration", "channel_estimates"], partitions_def=VERSIONS, deps=[annotations])
def channel_estimates() -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"alpha": 0.1, "beta": 0.2, "detail": dg.MetadataValue.md(_MD)})


@dg.asset(key=["reports", "calibration"], deps=[channel_estimates])
def report() -> dg.MaterializeResult:
    return dg.MaterializeResult(metadata={"verdict": dg.MetadataValue.md(_MD)})


def _mb(path: Path) -> float:
    return sum(p.stat().st_size for p in path.rglob("*") if p.is_file()) / 1e6 if path.exists() else 0.0


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--days", type=int, default=365)
    ap.add_argument("--ticks-per-day", type=int, default=48)
    ap.add_argument("--every", type=int, default=7, help="simulated days between retention passes")
    ap.add_argument("--batch-every", type=int, default=1,
                    help="simulated days between annotation batches (1 = daily; 7 = weekly, to fit a busy machine)")
    ap.add_argument("--cache-mb", type=float, default=4.0)
    ap.add_argument("--no-retention", action="store_true")
    ap.add_argument("--tmp", default="/dev/shm" if Path("/dev/shm").is_dir() else None,
                    help="where the throw-away home goes (tmpfs by default: SQLite's fsyncs dominate on a busy disk)")
    args = ap.parse_args()

    root = Path(tempfile.mkdtemp(prefix="bench-retention-", dir=args.tmp))
    home = root / "home"
    instance = instance_for(home)
    sensor = sensor_with_ticks(instance, "annotation_sensor", [])
    settings = SettingsResource()  # retention_days 90
    cache = home / "cache" / "embeddings"
    cache.mkdir(parents=True)
    warehouse = home / "warehouse"
    job = dg.Definitions(assets=[annotations, channel_estimates, report]).resolve_implicit_global_asset_job_def()
    started = time.perf_counter()
    print(f"{'month':>5} {'runs':>5} {'events':>7} {'ticks':>6} {'dagster MB':>10} {'cache MB':>8} "
          f"{'warehouse MB':>12} {'total MB':>8} {'wall s':>7}")
    version, data_hash = "", ""
    for day in range(args.days):
        today = START + timedelta(days=day)
        month = day // 30
        if f"v{month + 1:02d}" != version:
            version = f"v{month + 1:02d}"
            instance.add_dynamic_partitions("model_versions", [version])
            part = warehouse / "calibration" / "channel_estimates" / f"model_version={version}"
            part.mkdir(parents=True)
            (part / "part-0.parquet").write_bytes(b"\0" * 200_000)  # kept for ever: the audit trail
            data_hash = f"{month:04d}" + "0" * 60
            rows = int(args.cache_mb * 1e6 / (4 * 192))
            np.save(cache / f"{data_hash}__dino-demo.npy", np.zeros((rows, 192), np.float32))
        if day % args.batch_every == 0:
            result = job.execute_in_process(instance=instance, partition_key=version, run_config=_QUIET)
            backdate_run(instance, result.run_id, today + timedelta(hours=12))
        stamps = [(today + timedelta(days=i / args.ticks_per_day)).timestamp() for i in range(args.ticks_per_day)]
        _add_ticks(instance, sensor, stamps)
        if not args.no_retention and (day + 1) % args.every == 0:
            run_retention(home, now=today + timedelta(days=1), instance=instance, settings=settings, check_keys=(),
                          dataset_hashes={data_hash})
        if (day + 1) % 30 == 0 or day + 1 == args.days:
            runs = len(instance.get_run_records())
            events = sum(len(instance.all_logs(r.dagster_run.run_id)) for r in instance.get_run_records())
            ticks = len(instance.get_ticks(sensor.instigator_origin_id, sensor.selector_id))
            dag, cch, wh = _mb(home / "dagster"), _mb(cache), _mb(warehouse)
            print(f"{(day + 1) / 30:5.1f} {runs:5d} {events:7d} {ticks:6d} {dag:10.2f} {cch:8.1f} {wh:12.1f} "
                  f"{dag + cch + wh:8.1f} {time.perf_counter() - started:7.0f}", flush=True)
    instance.dispose()
    shutil.rmtree(root, ignore_errors=True)
    return 0


def _add_ticks(instance, sensor, stamps) -> None:
    from dagster._core.scheduler.instigation import InstigatorType, TickData, TickStatus

    for ts in stamps:
        instance.create_tick(TickData(
            instigator_origin_id=sensor.instigator_origin_id, instigator_name=sensor.instigator_name,
            instigator_type=InstigatorType.SENSOR, status=TickStatus.SKIPPED, timestamp=ts,
            selector_id=sensor.selector_id, skip_reason="nothing new",
        ))


if __name__ == "__main__":
    sys.exit(main())
