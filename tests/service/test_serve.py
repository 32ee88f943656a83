"""``noisycal serve``: webserver and daemon for a home, both stopped by one SIGTERM.

Starts two Dagster processes that load the whole code location: 20-60 s on a 2-core machine, so ``slow``.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestration.instance import DAGSTER_YAML
from tests._server import free_port, wait_for_server_info

REPO = Path(__file__).resolve().parents[2]


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return Path(f"/proc/{pid}").exists() and "zombie" not in Path(f"/proc/{pid}/status").read_text().lower()


def _children(pid: int) -> list[int]:
    out = subprocess.run(["ps", "-o", "pid=", "--ppid", str(pid)], capture_output=True, text=True).stdout
    return [int(x) for x in out.split()]


@pytest.mark.slow
def test_serve_starts_webserver_and_daemon_and_stops_both_on_sigterm(tmp_path):
    home = tmp_path / "fresh" / "home"  # nothing exists yet: serve creates the home and DAGSTER_HOME
    port = free_port()
    env = dict(os.environ, PYTHONPATH=str(REPO))
    proc = subprocess.Popen(
        [sys.executable, "-m", "orchestration.cli", "--home", str(home), "serve", "--port", str(port)],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        wait_for_server_info(port, time.time() + 240, 1, "the webserver did not answer within 240 s")
        assert (home / "dagster" / "dagster.yaml").read_text() == DAGSTER_YAML
        children = _children(proc.pid)
        assert len(children) == 2 and all(_alive(c) for c in children)
        cmdlines = [Path(f"/proc/{c}/cmdline").read_bytes().replace(b"\0", b" ").decode() for c in children]
        assert any("dagster-webserver" in c for c in cmdlines) and any("dagster-daemon" in c for c in cmdlines)
        assert all(f"-w {REPO / 'workspace.yaml'}" in c for c in cmdlines)

        t0 = time.time()
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(timeout=60) == 0
        assert time.time() - t0 < 60
        time.sleep(0.5)
        assert not [c for c in children if _alive(c)]
        assert b"SIGTERM received, stopping" in proc.stdout.read()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)


def test_service_processes_write_bytecode_caches(tmp_path, monkeypatch):
    """Each run of the service imports the code location in a process of its own: an inherited
    PYTHONDONTWRITEBYTECODE would make every one compile the stack from source (orchestration.service)."""
    from orchestration.service import service_env

    monkeypatch.setenv("PYTHONDONTWRITEBYTECODE", "1")
    env = service_env(tmp_path / "home")
    assert "PYTHONDONTWRITEBYTECODE" not in env
    assert env["NOISYCAL_HOME"] == str(tmp_path / "home") and env["DAGSTER_HOME"] == str(tmp_path / "home" / "dagster")
    assert env["PATH"] == os.environ["PATH"]
