"""``noisycal serve``: code server, webserver and daemon for a home, all stopped by one SIGTERM.

Starts two Dagster processes that load the whole code location: 20-60 s on a 2-core machine, so ``slow``.
"""

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from orchestration.instance import dagster_yaml
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
        assert (home / "dagster" / "dagster.yaml").read_text() == dagster_yaml(None, home / "dagster")
        children = _children(proc.pid)
        assert len(children) == 3 and all(_alive(c) for c in children)
        cmdlines = {c: Path(f"/proc/{c}/cmdline").read_bytes().replace(b"\0", b" ").decode() for c in children}
        by_role = {role: [c for c, line in cmdlines.items() if role in line] for role in
                   ("dagster-webserver", "dagster-daemon", "code-server start")}
        assert all(len(pids) == 1 for pids in by_role.values()), cmdlines
        workspace = home / "dagster" / "workspace.yaml"
        assert "grpc_server:" in workspace.read_text()
        for role in ("dagster-webserver", "dagster-daemon"):
            assert f"-w {workspace}" in cmdlines[by_role[role][0]]
        # both ask the service's code server: the daemon starts no code server of its own (it would replace it
        # at every workspace reload, about once a minute)
        (daemon,) = by_role["dagster-daemon"]
        assert not [c for c in _children(daemon)
                    if "api grpc" in Path(f"/proc/{c}/cmdline").read_bytes().replace(b"\0", b" ").decode()]

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


def test_service_workspace_names_the_services_code_server_on_loopback(tmp_path):
    """The webserver and the daemon load the code location from the service's code server (one process for the
    service's lifetime), not from ``workspace.yaml``'s ``python_file`` entry, whose code servers the daemon
    replaces at every periodic workspace reload."""
    import yaml

    from orchestration.service import (
        CODE_LOCATION,
        code_server_command,
        service_commands,
        service_workspace,
    )

    home = tmp_path / "home"
    workspace = service_workspace(home, 50123)
    assert workspace == home / "dagster" / "workspace.yaml"
    (entry,) = yaml.safe_load(workspace.read_text())["load_from"]
    assert entry == {"grpc_server": {"host": "127.0.0.1", "port": 50123, "location_name": CODE_LOCATION}}
    assert yaml.safe_load((REPO / "workspace.yaml").read_text())["load_from"][0]["python_file"]["location_name"] == (
        CODE_LOCATION
    )
    cmd = code_server_command(50123)
    assert cmd[1:3] == ["code-server", "start"]
    assert cmd[cmd.index("-h") + 1] == "127.0.0.1" and cmd[cmd.index("-p") + 1] == "50123"
    assert cmd[cmd.index("-f") + 1] == str(REPO / "definitions.py")
    commands = service_commands("127.0.0.1", 3000, workspace)
    assert all(c[c.index("-w") + 1] == str(workspace) for c in commands.values())
