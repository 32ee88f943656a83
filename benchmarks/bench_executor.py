"""The Dask executor's cost on one host (issue 25 item 3): the demo home materialised through ``noisycal serve``
with ``"executor": "in_process"`` and with ``"executor": "dask"``, the same runs in both.

    python benchmarks/bench_executor.py [--seed 0] [--workers 2] [--quick] [--keep DIR] [--rows-json F]

1. One source home: the ``noisycal demo`` first-arrival inputs (``noisycal_platform.demo.write_demo_inputs``;
   ``--quick``: the calibration inputs only), registered and loaded by one in-process sensor pass
   (``orchestration.runner.tick(home, automation=False)``, as ``noisycal demo`` starts).
2. Every sensor and schedule of the code location is then stopped in that home's instance (Dagster's instigator
   state, read by the daemon), so the daemon launches no run of its own: no automation rerun, no queue refill,
   no snapshot run beside the measured ones. Both copies inherit the stopped state (it lives in the home's
   ``dagster/`` storage), so both do exactly the runs that ``noisycal materialize`` submits, and the benchmark
   checks that no other run was created.
3. The home is copied twice; each copy names its executor in settings.json and runs ``noisycal serve`` (with
   ``dask``: the service's ``LocalCluster`` of ``--workers`` single-threaded workers, waited for before the
   clock starts, as a service would be running already). ``noisycal materialize`` (``materialize_everything``:
   every asset for every partition, one run per topological level and partition, through the daemon's run
   queue) is timed from its start to the end of its last run (the run records).

Where the time went, per executor, from the run records and the event logs (each second counted once):
- ``steps``: some step was executing (STEP_START to STEP_SUCCESS / STEP_FAILURE: compute, warehouse reads and
  writes, DuckDB lock waits inside the IO manager);
- ``launch``: a run was created but not started (queue, run process start and its code-location load);
- ``in run, no step``: a run had started, but no step was executing (executor set-up, per-task set-up on a Dask
  worker before STEP_START, events, run end);
- ``between runs``: ``materialize`` waiting for a finished run and submitting the next.
Then the steps whose duration grew most from in-process to Dask. CPU seconds: the service's whole process tree
(webserver, daemon, code servers, run processes, Dask workers: user + system, /proc), over the timed window.

``--rows-json F`` writes the row of ``make bench``: Dask time / in-process time (goal ≤ 1.5).
Quiet-box command: ``nice -n 10 .venv/bin/python benchmarks/bench_executor.py`` (about 20 min on the loaded 2-core
box; ``--quick``, the calibration inputs only, about 10).
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import socket
import sys
import tempfile
import time
from datetime import UTC, datetime
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402

from noisycal_platform.home_version import record_home  # noqa: E402
from noisycal_platform.paths import HOME_ENV, HomeLayout  # noqa: E402
from orchestration.instance import daemon_running, dagster_home, instance_for  # noqa: E402
from orchestration.runner import materialize_everything, tick  # noqa: E402
from orchestration.service import WORKSPACE, serve_in_background, webserver_answers  # noqa: E402

sys.path.insert(0, str(REPO / "benchmarks"))
from results_table import add_rows_arg, row, write_rows  # noqa: E402

_T = dg.DagsterEventType
_STEP_END = {_T.STEP_SUCCESS, _T.STEP_FAILURE}
EXECUTORS = ("in_process", "dask")


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


# --------------------------------------------------------------------------- the source home
def build_source(home: Path, seed: int, quick: bool) -> None:
    """The demo's first-arrival inputs, registered and loaded in process (module docstring, 1)."""
    from noisycal_platform import demo as demo_inputs
    from noisycal_platform.calibration.demo_data import write_demo_calibration_inputs

    layout = HomeLayout.at(home).ensure()
    record_home(layout.home)
    (layout.home / "settings.json").write_text(json.dumps({"inbox_settle_seconds": 0}) + "\n")
    if quick:
        write_demo_calibration_inputs(layout.home, seed=seed)
    else:
        demo_inputs.write_demo_inputs(layout.home, seed=seed)
    report = tick(layout.home, automation=False)
    failed = [r for r in report.runs if not r["success"]]
    if failed:
        raise RuntimeError(f"the source home's sensor pass failed: {failed}")


def stop_instigators(home: Path) -> list[str]:
    """Stop every sensor and schedule of the code location in ``home``'s instance (module docstring, 2)."""
    from dagster._core.workspace.context import WorkspaceProcessContext
    from dagster._core.workspace.load_target import WorkspaceFileTarget

    previous = {k: os.environ.get(k) for k in (HOME_ENV, "DAGSTER_HOME")}
    os.environ[HOME_ENV] = str(home)
    os.environ["DAGSTER_HOME"] = str(dagster_home(home))
    stopped = []
    try:
        instance = instance_for(home)
        with WorkspaceProcessContext(instance, WorkspaceFileTarget([str(WORKSPACE)])) as process_context:
            for location in process_context.create_request_context().code_locations:
                for repo in location.get_repositories().values():
                    for sensor in repo.get_sensors():
                        instance.stop_sensor(sensor.get_remote_origin_id(), sensor.selector_id, sensor)
                        stopped.append(sensor.name)
                    for schedule in repo.get_schedules():
                        instance.stop_schedule(schedule.get_remote_origin_id(), schedule.selector_id, schedule)
                        stopped.append(schedule.name)
    finally:
        for k, v in previous.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v
    return stopped


# --------------------------------------------------------------------------- CPU of the service's process tree
def _proc_table() -> dict[int, tuple[int, float]]:
    """{pid: (ppid, CPU seconds of the process and of its reaped children)} from /proc (Linux)."""
    tick_s = os.sysconf("SC_CLK_TCK")
    table = {}
    for entry in os.scandir("/proc"):
        if not entry.name.isdigit():
            continue
        try:
            with open(f"/proc/{entry.name}/stat", "rb") as f:
                fields = f.read().rsplit(b")", 1)[1].split()
        except OSError:
            continue
        # fields[0] is the state (field 3); ppid is field 4; utime, stime, cutime, cstime are fields 14-17
        table[int(entry.name)] = (int(fields[1]), sum(int(x) for x in fields[11:15]) / tick_s)
    return table


def tree_cpu_seconds(root: int) -> float:
    """CPU seconds of ``root`` and its live descendants, each with its reaped children (user + system)."""
    table = _proc_table()
    children: dict[int, list[int]] = {}
    for pid, (ppid, _) in table.items():
        children.setdefault(ppid, []).append(pid)
    total, todo = 0.0, [root]
    while todo:
        pid = todo.pop()
        if pid in table:
            total += table[pid][1]
            todo.extend(children.get(pid, []))
    return total


# --------------------------------------------------------------------------- attribution
def attribute(instance: dg.DagsterInstance, t0: float, t1: float) -> dict:
    """Seconds of [t0, t1] per class (module docstring) and every step's duration."""
    grid = np.arange(t0, t1, 0.05)
    created_mask = np.zeros(grid.size, dtype=bool)
    started_mask = np.zeros(grid.size, dtype=bool)
    step_mask = np.zeros(grid.size, dtype=bool)
    steps: dict[str, float] = {}
    runs, statuses = 0, {}
    for record in instance.get_run_records(filters=dg.RunsFilter(created_after=datetime.fromtimestamp(t0, UTC))):
        run = record.dagster_run
        runs += 1
        statuses[run.status.value] = statuses.get(run.status.value, 0) + 1
        created = record.create_timestamp.timestamp()
        end = record.end_time or t1
        start = record.start_time or end
        created_mask |= (grid >= created) & (grid < end)
        started_mask |= (grid >= start) & (grid < end)
        partition = run.tags.get("dagster/partition", "")
        begun: dict[str, float] = {}
        for event in instance.all_logs(run.run_id, of_type={_T.STEP_START, *_STEP_END}):
            if event.dagster_event.event_type == _T.STEP_START:
                begun[event.step_key] = event.timestamp
            elif event.step_key in begun:
                s = begun.pop(event.step_key)
                step_mask |= (grid >= s) & (grid < event.timestamp)
                key = f"{event.step_key}[{partition}]" if partition else event.step_key
                while key in steps:  # the same step in another run (an unpartitioned check step, say)
                    key += "+"
                steps[key] = event.timestamp - s
    dt = 0.05
    return {
        "runs": runs,
        "statuses": statuses,
        "steps_s": dt * step_mask.sum(),
        "launch_s": dt * (created_mask & ~started_mask).sum(),
        "in_run_no_step_s": dt * (started_mask & ~step_mask).sum(),
        "between_runs_s": dt * (~created_mask).sum(),
        "step_sum_s": float(sum(steps.values())),
        "step_times": steps,
    }


# --------------------------------------------------------------------------- one executor
def _wait_ready(home: Path, instance, port: int, executor: str, workers: int, serve, timeout: float) -> None:
    """The webserver answers, the daemon heartbeats and (dask) the service's workers are connected."""
    from resources.executor import service_scheduler

    deadline = time.time() + timeout
    if not webserver_answers(port, deadline):
        raise TimeoutError("the webserver did not answer")
    while not daemon_running(instance):
        if serve.poll() is not None or time.time() > deadline:
            raise TimeoutError(f"the daemon did not start (serve exit status {serve.poll()})")
        time.sleep(1.0)
    if executor == "dask":
        import distributed

        address = service_scheduler(home)
        if not address:
            raise RuntimeError("noisycal serve recorded no Dask cluster")
        with distributed.Client(address, timeout=max(5.0, deadline - time.time())) as client:
            client.wait_for_workers(workers, timeout=max(5.0, deadline - time.time()))


def measure(source: Path, home: Path, executor: str, workers: int, timeout: float) -> dict:
    shutil.copytree(source, home, symlinks=True)
    settings_path = home / "settings.json"
    settings = json.loads(settings_path.read_text())
    settings.update(executor=executor, dask_workers=workers)
    settings_path.write_text(json.dumps(settings) + "\n")
    instance = instance_for(home)
    before = {r.dagster_run.run_id for r in instance.get_run_records()}
    port = _free_port()
    load0 = os.getloadavg()[0]
    with serve_in_background(home, port, env={"OMP_NUM_THREADS": "1"}) as serve:
        _wait_ready(home, instance, port, executor, workers, serve, timeout)
        cpu0 = tree_cpu_seconds(serve.pid)
        own0 = time.process_time()
        t0 = time.time()
        report = materialize_everything(home)
        t_submitted = time.time()
        cpu1 = tree_cpu_seconds(serve.pid)
        own1 = time.process_time()
    instance = instance_for(home)
    new = [r for r in instance.get_run_records() if r.dagster_run.run_id not in before]
    ours = {r["run_id"] for r in report.runs if r.get("run_id")}
    others = sorted(r.dagster_run.run_id for r in new if r.dagster_run.run_id not in ours)
    t1 = max((r.end_time or t_submitted) for r in new) if new else t_submitted
    failed = [r for r in report.runs if not r["success"]]
    out = {
        "executor": executor,
        "wall_s": t1 - t0,
        "service_cpu_s": cpu1 - cpu0,
        "bench_cpu_s": own1 - own0,
        "load_1min_before": load0,
        "load_1min_after": os.getloadavg()[0],
        "n_runs": len(ours),
        "failed_runs": [f"{', '.join(r['assets'])} [{r['partition']}]: {r.get('errors')}" for r in failed],
        "other_runs": others,
        **attribute(instance, t0, t1),
    }
    return out


def _print(result: dict) -> None:
    print(
        f"  {result['executor']:<10} {result['wall_s']:7.1f} s wall, {result['service_cpu_s']:7.1f} CPU s (service "
        f"tree; + {result['bench_cpu_s']:.1f} s materialize), {result['n_runs']} runs, load "
        f"{result['load_1min_before']:.2f} -> {result['load_1min_after']:.2f}",
        flush=True,
    )
    print(
        f"             steps {result['steps_s']:.1f} s (sum over steps {result['step_sum_s']:.1f} s), launch "
        f"{result['launch_s']:.1f} s, in run without a step {result['in_run_no_step_s']:.1f} s, between runs "
        f"{result['between_runs_s']:.1f} s",
        flush=True,
    )
    if result["failed_runs"]:
        print(f"             FAILED: {result['failed_runs']}")
    if result["other_runs"]:
        print(f"             runs not submitted by materialize (should be none): {result['other_runs']}")


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--seed", type=int, default=0, help="demo seed")
    ap.add_argument("--workers", type=int, default=2, help="Dask workers of the service's LocalCluster")
    ap.add_argument("--quick", action="store_true", help="calibration inputs only (a smoke run; rows labelled quick)")
    ap.add_argument("--timeout", type=float, default=300.0, help="seconds for a service to be ready")
    ap.add_argument("--keep", type=Path, default=None, help="build the homes here and keep them")
    ap.add_argument("--json", type=Path, default=None, help="also write every figure to this JSON file")
    add_rows_arg(ap)
    args = ap.parse_args()
    root = args.keep or Path(tempfile.mkdtemp(prefix="noisycal-bench-executor-"))
    root.mkdir(parents=True, exist_ok=True)
    source = root / "source"
    t = time.time()
    build_source(source, args.seed, args.quick)
    stopped = stop_instigators(source)
    print(f"source home {source}: built in {time.time() - t:.0f} s; stopped {len(stopped)} sensors/schedules",
          flush=True)
    results = {}
    for executor in EXECUTORS:
        results[executor] = measure(source, root / executor, executor, args.workers, args.timeout)
        _print(results[executor])
    base, dask = results["in_process"], results["dask"]
    ratio = dask["wall_s"] / base["wall_s"]
    print(f"\ndask / in_process: {ratio:.2f}x wall, {dask['service_cpu_s'] / base['service_cpu_s']:.2f}x CPU "
          f"(goal: wall <= 1.5x)")
    print("steps that took longest on dask relative to in process (s):")
    grown = sorted(
        ((dask["step_times"][k] - v, k, v, dask["step_times"][k]) for k, v in base["step_times"].items()
         if k in dask["step_times"]),
        reverse=True,
    )
    for diff, key, b, d in grown[:10]:
        print(f"  {key:<70} in process {b:6.1f}  dask {d:6.1f}  (+{diff:.1f})")
    if args.json:
        args.json.write_text(json.dumps(results, indent=1, default=str))
    ok = not (base["failed_runs"] or dask["failed_runs"] or base["other_runs"] or dask["other_runs"])
    note = (
        f"{dask['n_runs']} runs; Dask {args.workers} workers; CPU s service tree: in process "
        f"{base['service_cpu_s']:.0f}, dask {dask['service_cpu_s']:.0f}; load {base['load_1min_before']:.1f}"
        + ("" if ok else "; FAILED or extra runs")
    )
    write_rows(args.rows_json, [
        row("executor", "demo home through `noisycal serve`: dask executor / in process", dask["wall_s"], "s",
            peer="in_process executor", peer_value=base["wall_s"], ratio_of="ours/peer", goal=("ratio", "<=", 1.5),
            note=note, quick=args.quick),
    ])
    if args.keep is None:
        shutil.rmtree(root, ignore_errors=True)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
