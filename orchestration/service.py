"""``noisycal serve``: the Dagster webserver and daemon for one home, as one supervised service.

Both children get ``NOISYCAL_HOME`` and ``DAGSTER_HOME`` (created, with the platform's ``dagster.yaml``) and
load ``workspace.yaml``. Each runs in its own process group with SIGINT/SIGTERM at their defaults (a shell
that backgrounds a command makes it ignore SIGINT, and Dagster then ignores SIGTERM too). On SIGTERM or
SIGINT the supervisor sends SIGTERM to every group, waits ``stop_timeout`` seconds, then SIGKILLs what is
left; if one child dies, the other is stopped and the service exits non-zero (systemd restarts it).

Both load the code location from one persistent gRPC code server, a third child started first
(``dagster code-server start``, ``$DAGSTER_HOME/workspace.yaml`` names it). Given ``workspace.yaml``'s
``python_file`` entry instead, the daemon starts a code server of its own and replaces it at every periodic
workspace reload: measured on the 2-core box, a new process importing the whole code location every 60–75 s
(2.5–3.5 CPU s each, a few percent of the machine for as long as the service runs).

With ``"executor": "dask"`` and no ``"dask_scheduler"``, one more child runs the home's Dask cluster
(``orchestration.dask_cluster``): one per service, shared by every run, supervised like the others.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

from noisycal_platform.files import atomic_write_text
from noisycal_platform.paths import HOME_ENV, HomeLayout
from orchestration.instance import dagster_home, instance_for
from orchestration.run_queue import remove_service_file, write_service_file

__all__ = [
    "CODE_LOCATION",
    "DROPPED_ENV",
    "REPO_ROOT",
    "WORKSPACE",
    "code_server_command",
    "serve",
    "serve_in_background",
    "service_commands",
    "service_env",
    "service_workspace",
    "webserver_answers",
]

REPO_ROOT = Path(__file__).resolve().parent.parent
WORKSPACE = REPO_ROOT / "workspace.yaml"


def _bin(name: str) -> str:
    return str(Path(sys.executable).parent / name)


#: the code location's name (``location_name`` in workspace.yaml and in the service's workspace)
CODE_LOCATION = "noisycal_platform"

#: how long the service waits for its code server to load the code location before it gives up
CODE_SERVER_START_TIMEOUT_SECONDS = 600.0


def code_server_command(port: int, host: str = "127.0.0.1") -> list[str]:
    """The service's code server: ``definitions.py`` served over gRPC on ``host:port`` (loopback only)."""
    return [
        _bin("dagster"), "code-server", "start", "-h", host, "-p", str(port), "-f", str(REPO_ROOT / "definitions.py"),
        "-d", str(REPO_ROOT), "--location-name", CODE_LOCATION,
    ]


def service_workspace(home: str | Path, code_server_port: int, host: str = "127.0.0.1") -> Path:
    """``$DAGSTER_HOME/workspace.yaml`` naming the service's code server (written atomically); its path."""
    text = (
        "# written by `noisycal serve` at each start: the code location served by the service's code server\n"
        "load_from:\n"
        "  - grpc_server:\n"
        f"      host: {host}\n"
        f"      port: {int(code_server_port)}\n"
        f"      location_name: {CODE_LOCATION}\n"
    )
    path = dagster_home(home) / "workspace.yaml"
    atomic_write_text(path, text)
    return path


def service_commands(host: str, port: int, workspace: str | Path = WORKSPACE) -> dict[str, list[str]]:
    """The webserver and the daemon for ``workspace`` (``noisycal serve`` passes its `service_workspace`; also
    what the README's systemd units run through ``noisycal serve``)."""
    return {
        "webserver": [_bin("dagster-webserver"), "-h", host, "-p", str(port), "-w", str(workspace)],
        "daemon": [_bin("dagster-daemon"), "run", "-w", str(workspace)],
    }


#: Environment variables the service's processes do not inherit: with ``PYTHONDONTWRITEBYTECODE`` (set in many
#: shells and container images) no process of the service writes bytecode caches, so on an environment installed
#: without them (uv's default) every run's process compiled Dagster, SciPy, polars and the code location from
#: source again: about 4 s of CPU per run on the 2-core box (7.1 s against 3.1 s to import ``definitions.py``, on a
#: loaded box). Caches that cannot be written (a read-only environment) are skipped by Python without an error.
DROPPED_ENV = ("PYTHONDONTWRITEBYTECODE",)


def service_env(home: str | Path) -> dict[str, str]:
    """The environment of the service's children: this one, less :data:`DROPPED_ENV`, with ``NOISYCAL_HOME``
    and ``DAGSTER_HOME`` (created, with the platform's ``dagster.yaml``)."""
    home = HomeLayout.at(home).ensure().home
    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    return env | {HOME_ENV: str(home), "DAGSTER_HOME": str(dagster_home(home))}


def _default_signals() -> None:  # runs in the child between fork and exec
    signal.signal(signal.SIGINT, signal.SIG_DFL)
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _stop(children: dict[str, subprocess.Popen], timeout: float) -> None:
    for proc in children.values():
        if proc.poll() is None:
            try:
                os.killpg(proc.pid, signal.SIGTERM)
            except ProcessLookupError:
                pass
    deadline = time.monotonic() + timeout
    for proc in children.values():
        try:
            proc.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            pass
    for proc in children.values():  # the group: also the code servers the daemon and webserver started
        try:
            os.killpg(proc.pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
        proc.wait()


#: the service's first retention pass waits this long (the webserver and daemon load the code first)
RETENTION_FIRST_DELAY_SECONDS = 600.0


class _RetentionSchedule:
    """``noisycal retention`` as a child process every ``retention_every_hours`` (settings.json; 0 = never), the
    first one ``RETENTION_FIRST_DELAY_SECONDS`` after start. Its failure is reported, never stops the service."""

    def __init__(self, home: str | Path) -> None:
        from resources.settings import load_settings

        self.home = HomeLayout.at(home).home
        self.every = load_settings(self.home).retention_every_hours * 3600.0
        self.next_at = time.monotonic() + min(RETENTION_FIRST_DELAY_SECONDS, self.every)
        self.proc: subprocess.Popen | None = None

    def poll(self, env: dict[str, str]) -> None:
        if self.proc is not None and self.proc.poll() is not None:
            if self.proc.returncode != 0:
                print(f"noisycal serve: retention exited {self.proc.returncode}", file=sys.stderr, flush=True)
            self.proc = None
        if self.every <= 0 or self.proc is not None or time.monotonic() < self.next_at:
            return
        self.next_at = time.monotonic() + self.every
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "orchestration.cli", "--home", str(self.home), "retention"],
            env={**env, "PYTHONPATH": str(REPO_ROOT)}, cwd=REPO_ROOT, start_new_session=True,
            preexec_fn=_default_signals,
        )

    def stop(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=30)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


def _free_port(host: str) -> int:
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]


def _start_cluster(home: str | Path, env: dict[str, str]) -> subprocess.Popen | None:
    """The service's Dask cluster (``orchestration.dask_cluster``) when settings.json names the dask executor
    without a ``dask_scheduler``; recorded for the runs' executor before the daemon starts. Else ``None``."""
    from resources.executor import record_service_cluster
    from resources.settings import load_settings

    settings = load_settings(home)
    if settings.executor != "dask" or settings.dask_scheduler:
        return None
    from orchestration.dask_cluster import cluster_command

    port = _free_port("127.0.0.1")
    proc = subprocess.Popen(
        cluster_command(port, settings.dask_workers), env={**env, "PYTHONPATH": _pythonpath(env)}, cwd=REPO_ROOT,
        start_new_session=True, preexec_fn=_default_signals,
    )
    record_service_cluster(home, f"tcp://127.0.0.1:{port}", proc.pid)
    return proc


def _wait_for_code_server(proc: subprocess.Popen, port: int, stop: dict, timeout: float) -> bool:
    """True once the code server accepts connections on 127.0.0.1:``port`` (it listens only after it has
    loaded the code location); False when it exits, a stop signal arrives or ``timeout`` seconds pass."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline and stop["signal"] is None and proc.poll() is None:
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=1.0):
                return True
        except OSError:
            time.sleep(0.25)
    return False


def _pythonpath(env: dict[str, str]) -> str:
    """The repository root first on the path of a child that imports the code location by module name."""
    return os.pathsep.join([str(REPO_ROOT), *filter(None, [env.get("PYTHONPATH")])])


def serve(home: str | Path, host: str = "127.0.0.1", port: int = 3000, stop_timeout: float = 30.0) -> int:
    """Run webserver + daemon (and the Dask cluster the settings ask for) until SIGTERM/SIGINT (returns 0) or
    until a child dies (returns 1)."""
    from resources.executor import forget_service_cluster

    env = service_env(home)
    # create the instance's SQLite storage here, once: the two children creating it at the same moment on a
    # fresh home can leave its schema with two heads, and then neither starts
    instance_for(home).dispose()
    stop = {"signal": None}

    def _on_signal(signum, _frame):
        stop["signal"] = signum

    previous = {s: signal.signal(s, _on_signal) for s in (signal.SIGTERM, signal.SIGINT)}
    children: dict[str, subprocess.Popen] = {}
    retention = _RetentionSchedule(home)
    try:
        cluster = _start_cluster(home, env)  # first: the daemon's first run finds it
        if cluster is not None:
            children["dask-cluster"] = cluster
        code_port = _free_port("127.0.0.1")
        children["code-server"] = subprocess.Popen(
            code_server_command(code_port), env=env, cwd=REPO_ROOT, start_new_session=True,
            preexec_fn=_default_signals,
        )
        if not _wait_for_code_server(children["code-server"], code_port, stop, CODE_SERVER_START_TIMEOUT_SECONDS):
            if stop["signal"] is not None:
                print(f"noisycal serve: {signal.Signals(stop['signal']).name} received, stopping", flush=True)
                return 0
            print(
                "noisycal serve: the code server did not load the code location "
                f"(exit status {children['code-server'].poll()}); see its output above",
                file=sys.stderr, flush=True,
            )
            return 1
        workspace = service_workspace(home, code_port)
        for name, cmd in service_commands(host, port, workspace).items():
            children[name] = subprocess.Popen(
                cmd, env=env, cwd=REPO_ROOT, start_new_session=True, preexec_fn=_default_signals
            )
        write_service_file(home, host, port)  # where `noisycal materialize` submits runs (orchestration.run_queue)
        print(
            f"noisycal serve: Dagster UI on http://{host}:{port}, daemon running "
            f"(DAGSTER_HOME={env['DAGSTER_HOME']}); pids "
            + ", ".join(f"{n} {p.pid}" for n, p in children.items()),
            flush=True,
        )
        while stop["signal"] is None:
            dead = [n for n, p in children.items() if p.poll() is not None]
            if dead:
                print(f"noisycal serve: {', '.join(dead)} exited; stopping the service", file=sys.stderr, flush=True)
                return 1
            retention.poll(env)
            time.sleep(0.5)
        print(f"noisycal serve: {signal.Signals(stop['signal']).name} received, stopping", flush=True)
        return 0
    finally:
        remove_service_file(home)
        forget_service_cluster(home)
        retention.stop()
        _stop(children, stop_timeout)
        for s, handler in previous.items():
            signal.signal(s, handler)


@contextmanager
def serve_in_background(home: str | Path, port: int, env: dict[str, str] | None = None) -> Iterator[subprocess.Popen]:
    """``noisycal serve`` for ``home`` as a child process (its own session) while the block runs; then SIGTERM,
    and SIGKILL to its process group after 60 s (for benchmarks, tests and scripts)."""
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestration.cli", "--home", str(home), "serve", "--port", str(port)],
        env={**os.environ, "PYTHONPATH": str(REPO_ROOT), **(env or {})},
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()


def webserver_answers(port: int, deadline: float, poll_s: float = 1.0) -> bool:
    """Poll the Dagster webserver's ``/server_info`` on 127.0.0.1:``port`` until it answers 200 (True) or
    ``deadline`` (a ``time.time()``) passes (False)."""
    import urllib.request

    while time.time() < deadline:
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{port}/server_info", timeout=5) as r:
                if r.status == 200:
                    return True
        except OSError:
            time.sleep(poll_s)
    return False
