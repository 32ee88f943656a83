"""The service's Dask cluster: one ``distributed.LocalCluster`` per ``noisycal serve``, shared by every run.

With ``"executor": "dask"`` and no ``"dask_scheduler"`` in settings.json, ``noisycal serve`` starts
``python -m orchestration.dask_cluster --port PORT --workers N`` beside the webserver and the daemon
(supervised like them): a scheduler on 127.0.0.1:PORT and N single-threaded worker processes. ``serve`` records
the address and this process's id in ``$DAGSTER_HOME/dask_cluster.json`` (``resources.executor.record_service_cluster``)
before the daemon starts, and every run's dask executor connects to it while that process lives
(``resources.executor.service_scheduler``). Without it each run started a cluster of
its own, and each new worker process imported the code location again before its first step (about 10 s of CPU
per worker per run on a 2-core box, most of the 5× the executor cost there).

Each worker imports the code location once, when it starts (:func:`dask_setup`, a Dask worker preload): the steps
it runs later find it loaded (``resources.executor.run_steps_on_worker`` also keeps the instance and each run's job
per worker process, and counts what it had to build: ``resources.executor.worker_stats``).
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

__all__ = ["cluster_command", "dask_setup", "main"]

REPO_ROOT = Path(__file__).resolve().parent.parent


#: Dask's background work per worker process, made lighter for a cluster that mostly waits between steps: no
#: statistical profiler (a thread sampling every step's stack every 10 ms, for the dashboard this cluster does
#: not serve), the memory monitor and the event-loop health tick once a second instead of every 100 and 20 ms.
QUIET_WORKERS = {
    "distributed.worker.profile.enabled": False,
    "distributed.worker.memory.monitor-interval": "1s",
    "distributed.admin.tick.interval": "1s",
}


def cluster_command(port: int, workers: int) -> list[str]:
    """The command ``noisycal serve`` runs for the home's cluster (its environment names the home)."""
    return [sys.executable, "-m", "orchestration.dask_cluster", "--port", str(port), "--workers", str(workers)]


def dask_setup(worker) -> None:  # the signature Dask's preload calls
    """Worker preload: import the code location the way Dagster loads it (``definitions.py`` as module
    ``definitions``), so the first step on this worker does not pay for it."""
    import importlib.util

    try:
        if str(REPO_ROOT) not in sys.path:
            sys.path.insert(0, str(REPO_ROOT))
        spec = importlib.util.spec_from_file_location("definitions", REPO_ROOT / "definitions.py")
        module = importlib.util.module_from_spec(spec)
        sys.modules["definitions"] = module
        spec.loader.exec_module(module)
    except Exception as exc:  # a broken code location fails its steps with the real error, not the worker
        print(f"noisycal dask worker: the code location did not load at start: {exc!r}", file=sys.stderr)


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m orchestration.dask_cluster")
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2)
    args = ap.parse_args(argv)

    import dask
    import distributed

    dask.config.set(QUIET_WORKERS)  # the nannies hand this configuration to their worker processes
    stop = threading.Event()
    for s in (signal.SIGTERM, signal.SIGINT):
        signal.signal(s, lambda *_: stop.set())
    with distributed.LocalCluster(
        host="127.0.0.1",
        scheduler_port=args.port,
        n_workers=args.workers,
        threads_per_worker=1,
        processes=True,
        dashboard_address=None,
        preload=["orchestration.dask_cluster"],
    ) as cluster:
        print(f"noisycal dask cluster: {cluster.scheduler_address}, {args.workers} worker(s)", flush=True)
        while not stop.wait(1.0):
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
