"""Latency of the service (``noisycal serve``: webserver + daemon) from a dropped annotation batch to the final
calibration report, over three drops: time to ingestion (raw/annotations), to calibration/nc_ece_report[v1],
to the last reports/calibration publication, and how many times reports/calibration was published per drop.

    python benchmarks/bench_service_latency.py [--drops 3] [--timeout 600] [--settle 0]

Each drop is one third of the demo's held-back annotation pairs, moved into the inbox by atomic rename, so the
home's ``inbox_settle_seconds`` is 0, the setting for writers that rename complete files in (``--settle``
sets another; a batch waits that long before the sensor takes it).

Where the time of a drop went, from the run records and run event logs of the runs created between the drop
and the final publication (each second counted once, in the first class that covers it):
- steps: some step of those runs was executing (STEP_START to STEP_SUCCESS/FAILURE);
- in a run: a run existed but no step ran (queued, launching its process and loading the code, waiting for a
  pool slot, writing events);
- between runs: no run existed yet (settle time, sensor and automation intervals, evaluation).
After each drop it prints each run's timeline (:func:`timeline`: seconds after the drop at which the run was
created, was launched from the queue, had its process up, started its first step and ended its last).

``--rows-json F`` also writes the row of ``make bench`` (results_table): the median over the drops of the time to
the final reports/calibration publication (goal < 30 s); ``--quick`` is one drop.
"""

from __future__ import annotations

import argparse
import json
import os
import socket
import statistics
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402

from noisycal_platform.calibration.demo_data import _annotations, write_demo_calibration_inputs  # noqa: E402
from orchestration.instance import instance_for  # noqa: E402
from orchestration.service import serve_in_background  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from results_table import add_rows_arg, row, write_rows  # noqa: E402

_T = dg.DagsterEventType
_STEP_END = {_T.STEP_SUCCESS, _T.STEP_FAILURE}

KEYS = {
    "ingested": dg.AssetKey(["raw", "annotations"]),
    "nc_ece_report": dg.AssetKey(["calibration", "nc_ece_report"]),
    "report": dg.AssetKey(["reports", "calibration"]),
}


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _materialisations_after(instance, key, t0: float) -> list[float]:
    records = instance.fetch_materializations(dg.AssetRecordsFilter(asset_key=key, after_timestamp=t0), limit=50)
    return sorted(r.timestamp for r in records.records)


def _busy(instance) -> bool:
    active = [dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.STARTING, dg.DagsterRunStatus.STARTED]
    return bool(instance.get_run_records(filters=dg.RunsFilter(statuses=active), limit=1))


def _wait_quiet(instance, key, t0: float, timeout: float, serve, quiet: float = 45.0) -> list[float]:
    """Wait until ``key`` was materialised after ``t0`` and nothing ran for ``quiet`` seconds."""
    deadline = time.time() + timeout
    last_busy = time.time()
    while time.time() < deadline:
        if serve.poll() is not None:
            raise RuntimeError(f"noisycal serve exited with {serve.returncode}")
        if _busy(instance):
            last_busy = time.time()
        elif _materialisations_after(instance, key, t0) and time.time() - last_busy > quiet:
            return _materialisations_after(instance, key, t0)
        time.sleep(1.0)
    raise TimeoutError(f"{key.to_user_string()} not final within {timeout:.0f} s")


def breakdown(instance, t0: float, t1: float) -> dict[str, float]:
    """Seconds of [t0, t1] in steps, in a run but not in a step, and between runs (module docstring)."""
    grid = np.arange(t0, t1, 0.1)
    in_run = np.zeros(grid.size, dtype=bool)
    in_step = np.zeros(grid.size, dtype=bool)
    n_runs = 0
    for record in instance.get_run_records(filters=dg.RunsFilter(created_after=datetime.fromtimestamp(t0, UTC))):
        created = record.create_timestamp.timestamp()
        if created > t1:
            continue
        n_runs += 1
        in_run |= (grid >= created) & (grid < (record.end_time or t1))
        started: dict[str, float] = {}
        for event in instance.all_logs(record.dagster_run.run_id, of_type={_T.STEP_START, *_STEP_END}):
            if event.dagster_event.event_type == _T.STEP_START:
                started[event.step_key] = event.timestamp
            elif event.step_key in started:
                in_step |= (grid >= started.pop(event.step_key)) & (grid < event.timestamp)
    return {
        "runs": n_runs,
        "steps_s": 0.1 * in_step.sum(),
        "in_run_s": 0.1 * (in_run & ~in_step).sum(),
        "between_runs_s": 0.1 * (~in_run & ~in_step).sum(),
    }


def timeline(instance, t0: float, t1: float) -> list[str]:
    """One line per run created in [t0, t1]: its assets and partition, then seconds after ``t0`` when it was
    created, dequeued by the run queue, its process started (Dagster's engine event), its first step started,
    its last step ended and the run ended."""
    lines = []
    records = instance.get_run_records(filters=dg.RunsFilter(created_after=datetime.fromtimestamp(t0, UTC)))
    for record in sorted(records, key=lambda r: r.create_timestamp):
        created = record.create_timestamp.timestamp()
        if created > t1:
            continue
        run = record.dagster_run
        marks: dict[str, float] = {}
        for event in instance.all_logs(run.run_id):
            de = event.dagster_event
            if de is None:
                continue
            name = {_T.RUN_STARTING: "launched", _T.RUN_START: "run_start"}.get(de.event_type)
            if de.event_type == _T.ENGINE_EVENT and "Started process" in (de.message or ""):
                name = "process"
            if de.event_type == _T.STEP_START:
                marks.setdefault("first_step", event.timestamp)
            if de.event_type in _STEP_END:
                marks["last_step_end"] = event.timestamp
            if name:
                marks.setdefault(name, event.timestamp)
        assets = ",".join(sorted(k.to_user_string() for k in run.asset_selection or ()))
        part = run.tags.get("dagster/partition", "")
        stamps = " ".join(f"{k} {v - t0:.1f}" for k, v in sorted(marks.items(), key=lambda kv: kv[1]))
        lines.append(
            f"  run {run.run_id[:8]} [{assets}]{'[' + part + ']' if part else ''}: created "
            f"{created - t0:.1f} {stamps} end {(record.end_time or t1) - t0:.1f}"
        )
    return lines


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--drops", type=int, default=None, help="drops (default 3; --quick 1)")
    ap.add_argument("--timeout", type=float, default=600)
    ap.add_argument("--settle", type=float, default=0.0, help="inbox_settle_seconds of the home")
    ap.add_argument("--quick", action="store_true", help="one drop (a smoke run; rows labelled quick)")
    add_rows_arg(ap)
    args = ap.parse_args()
    if args.drops is None:
        args.drops = 1 if args.quick else 3
    home = Path(tempfile.mkdtemp(prefix="noisycal-latency-")) / "home"
    write_demo_calibration_inputs(home, seed=0)
    (home / "settings.json").write_text(json.dumps({"inbox_settle_seconds": args.settle}) + "\n")
    ann, held = _annotations(0)
    later = ann.filter(held)
    chunks = [later[i :: args.drops] for i in range(args.drops)]
    port = _free_port()
    rows = []
    instance = instance_for(home)  # creates the instance's storage before the service opens it
    with serve_in_background(home, port, env={"OMP_NUM_THREADS": "1"}) as serve:
        t_start = time.time()
        _wait_quiet(instance, KEYS["report"], 0.0, args.timeout * 2, serve)
        print(f"initial build done after {time.time() - t_start:.0f} s", flush=True)
        for i, chunk in enumerate(chunks, 1):
            tmp = home / "inbox" / "annotations" / f".drop_{i}.csv.tmp"
            chunk.write_csv(tmp)
            t0 = time.time()
            os.replace(tmp, tmp.with_name(f"drop_{i}.csv"))
            published = _wait_quiet(instance, KEYS["report"], t0, args.timeout, serve)
            ingested = _materialisations_after(instance, KEYS["ingested"], t0)
            ece = _materialisations_after(instance, KEYS["nc_ece_report"], t0)
            rows.append(
                {
                    "drop": i,
                    "rows": chunk.height,
                    "ingested_s": ingested[0] - t0 if ingested else float("nan"),
                    "nc_ece_report_s": ece[-1] - t0 if ece else float("nan"),
                    "report_final_s": published[-1] - t0,
                    "report_publications": len(published),
                    **breakdown(instance, t0, published[-1]),
                    "load_1min": os.getloadavg()[0],
                }
            )
            print(rows[-1], flush=True)
            print("\n".join(timeline(instance, t0, published[-1])), flush=True)
    print(f"inbox_settle_seconds {args.settle:g}; {os.cpu_count()} CPUs")
    print("| drop | rows | ingested (s) | nc_ece_report[v1] (s) | reports/calibration final (s) | publications "
          "| runs | steps (s) | in a run, no step (s) | between runs (s) | load (1 min) |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        print(f"| {r['drop']} | {r['rows']} | {r['ingested_s']:.1f} | {r['nc_ece_report_s']:.1f} | "
              f"{r['report_final_s']:.1f} | {r['report_publications']} | {r['runs']} | {r['steps_s']:.1f} | "
              f"{r['in_run_s']:.1f} | {r['between_runs_s']:.1f} | {r['load_1min']:.1f} |")
    for k in ("ingested_s", "nc_ece_report_s", "report_final_s"):
        print(f"median {k}: {statistics.median(r[k] for r in rows):.1f}")
    print(f"load average at the end: {os.getloadavg()}")
    write_rows(args.rows_json, table_rows(median_of_drops(rows), args.quick))
    return 0


def median_of_drops(drops: list[dict]) -> dict:
    keys = ("ingested_s", "nc_ece_report_s", "report_final_s")
    return {k: statistics.median(r[k] for r in drops) for k in keys} | {"drops": len(drops)}


def table_rows(m: dict, quick: bool = False) -> list[dict]:
    return [row("service_latency", f"service: dropped annotation batch → final calibration report (median of "
                f"{m['drops']} drops)", m["report_final_s"], "s", goal=("ours", "<", 30.0), quick=quick,
                note=f"median to ingestion {m['ingested_s']:.1f} s, to nc_ece_report {m['nc_ece_report_s']:.1f} s")]


if __name__ == "__main__":
    sys.exit(main())
