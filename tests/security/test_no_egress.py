"""No egress at run time: every asset of a small demo home materialises in a child process whose audit hook
(PEP 578) refuses and records any connection or name lookup that is not loopback or a unix socket."""

import json
import os
import subprocess
import sys
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]


def _child(*args: str, timeout: int) -> dict:
    env = {**os.environ, "PYTHONPATH": f"{REPO}{os.pathsep}{os.environ.get('PYTHONPATH', '')}", "OMP_NUM_THREADS": "1"}
    res = subprocess.run(
        [sys.executable, "-m", "tests.security._offline_run", *args],
        cwd=REPO, env=env, capture_output=True, text=True, timeout=timeout,
    )
    assert res.returncode == 0, res.stderr[-3000:]
    return json.loads(res.stdout.strip().splitlines()[-1])


def test_the_hook_refuses_outbound_and_allows_loopback():
    out = _child("--probe", timeout=60)
    assert out["outcome"] == {"connect": "refused", "lookup": "refused", "loopback": "allowed"}
    assert [a["event"] for a in out["attempts"]] == ["socket.connect", "socket.getaddrinfo"]


def test_materialising_the_demo_assets_attempts_no_outbound_connection(tmp_path):
    out = _child(str(tmp_path / "home"), timeout=600)
    assert out["attempts"] == []
    assert out["failed"] == [] and out["runs"] > 0
