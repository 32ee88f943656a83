"""Runs that ``noisycal materialize`` asks for while a daemon serves the home go through the daemon's run queue.

``noisycal serve`` (and ``noisycal ui``) record where their webserver listens in ``$DAGSTER_HOME/service.json``.
``submit`` sends a run there through Dagster's public GraphQL client
(``dagster_graphql.DagsterGraphQLClient.submit_job_execution``, the call the UI's "Materialize" button makes), so
the instance's run coordinator (the ``QueuedRunCoordinator`` of ``dagster.yaml``) queues it and the daemon launches
it when the run queue and the pools allow, like any sensor's run. ``wait`` follows it to its end.
"""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

import dagster as dg

from noisycal_platform.files import atomic_write_text
from orchestration.errors import HomeBusy
from orchestration.instance import FINISHED_STATUSES, dagster_home

__all__ = ["ASSET_JOB", "QueueUnavailable", "service_address", "submit", "wait", "write_service_file"]

#: Dagster's implicit job over every asset of a code location: what the UI launches for an asset selection.
ASSET_JOB = "__ASSET_JOB"
SERVICE_FILE = "service.json"
POLL_SECONDS = 1.0


class QueueUnavailable(HomeBusy):
    """A daemon runs for the home, but no webserver of ``noisycal serve`` / ``noisycal ui`` to submit runs to."""


def _service_file(home: str | Path) -> Path:
    return dagster_home(home) / SERVICE_FILE


def write_service_file(home: str | Path, host: str, port: int, pid: int | None = None) -> Path:
    """Record the webserver's address for this home (the process ``pid`` serves it; default: this process)."""
    path = _service_file(home)
    atomic_write_text(path, json.dumps({"host": host, "port": port, "pid": pid or os.getpid()}) + "\n")
    return path


def remove_service_file(home: str | Path) -> None:
    _service_file(home).unlink(missing_ok=True)


def service_address(home: str | Path) -> tuple[str, int] | None:
    """(host, port) of the home's webserver, or ``None`` when no live ``serve``/``ui`` process recorded one."""
    path = _service_file(home)
    if not path.is_file():
        return None
    entry = json.loads(path.read_text(encoding="utf-8"))
    try:
        os.kill(int(entry["pid"]), 0)
    except ProcessLookupError:
        return None  # a service that died without removing the file
    except PermissionError:
        pass
    return str(entry["host"]), int(entry["port"])


def submit(home: str | Path, asset_keys: list[dg.AssetKey], partition: str | None, tags: dict[str, str]) -> str:
    """Queue one run of ``asset_keys`` (one partition, or none) through the home's webserver; its run id."""
    from dagster_graphql import DagsterGraphQLClient, DagsterGraphQLClientError

    address = service_address(home)
    if address is None:
        raise QueueUnavailable(
            "a dagster-daemon is running for this home but no webserver of `noisycal serve` / `noisycal ui` is "
            "recorded to submit runs to (a `dagster dev` started by hand?): launch runs from its UI "
            "(Assets -> Materialize) or `dagster job launch -w workspace.yaml`, or stop it first"
        )
    host, port = address
    run_tags = {**tags, **({"dagster/partition": partition} if partition else {})}
    try:
        return DagsterGraphQLClient(host, port_number=port).submit_job_execution(
            ASSET_JOB, asset_selection=asset_keys, tags=run_tags
        )
    except (DagsterGraphQLClientError, ConnectionError) as exc:
        raise QueueUnavailable(f"the webserver on {host}:{port} refused the run: {exc}") from exc


def wait(instance: dg.DagsterInstance, run_id: str, poll: float = POLL_SECONDS) -> dg.DagsterRunStatus:
    """Sleep until the run is finished (success, failure or cancelled); its final status."""
    while True:
        run = instance.get_run_by_id(run_id)
        if run is not None and run.status in FINISHED_STATUSES:
            return run.status
        time.sleep(poll)
