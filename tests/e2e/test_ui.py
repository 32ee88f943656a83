"""``noisycal ui`` (what ``make ui`` runs): ``dagster dev`` on 127.0.0.1 serves the whole asset graph with lineage."""

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from tests._server import free_port, wait_for_server_info
from tests.test_definitions import ASSET_KEYS


def _graphql(port: int, query: str) -> dict:
    req = urllib.request.Request(
        f"http://127.0.0.1:{port}/graphql",
        data=json.dumps({"query": query}).encode(),
        headers={"Content-Type": "application/json"},
    )
    with urllib.request.urlopen(req, timeout=30) as resp:
        return json.loads(resp.read())


@pytest.mark.slow
def test_ui_serves_the_asset_graph_with_lineage(tmp_path):
    port = free_port()
    cli = Path(sys.executable).parent / "noisycal"
    proc = subprocess.Popen(
        [str(cli), "--home", str(tmp_path / "home"), "ui", "--port", str(port)],
        stdout=subprocess.PIPE,
        stderr=subprocess.STDOUT,
        start_new_session=True,
    )
    try:
        deadline = time.time() + 180
        wait_for_server_info(port, deadline, 2, "dagster dev did not answer /server_info within 180 s")
        data = None
        while time.time() < deadline:  # the code location loads after the web server answers
            data = _graphql(port, "{ assetNodes { assetKey { path } dependencyKeys { path } } }")
            if data.get("data") and data["data"]["assetNodes"]:
                break
            time.sleep(2)
        nodes = {
            "/".join(n["assetKey"]["path"]): {"/".join(d["path"]) for d in n["dependencyKeys"]}
            for n in data["data"]["assetNodes"]
        }
        assert sorted(nodes) == ASSET_KEYS
        assert nodes["calibration/nc_ece_report"] >= {
            "raw/annotations",
            "raw/predictions",
            "calibration/channel_estimates",
        }
        assert "cleaning/confirmed_issues" in nodes["cleaning/cleaned_file_list"]
        # the DAGSTER_HOME the UI uses lives in the platform home, with the duckdb pool limited to one slot
        written = (tmp_path / "home" / "dagster" / "dagster.yaml").read_text()
        assert "default_limit: 1" in written
        assert "nux:\n  enabled: false" in written and "telemetry:\n  enabled: false" in written
        # what the UI asks before its first-visit community sign-up dialog (links to external sites)
        assert _graphql(port, "{ shouldShowNux }")["data"]["shouldShowNux"] is False
    finally:
        os.killpg(proc.pid, signal.SIGINT)
        try:
            proc.wait(timeout=60)
        except subprocess.TimeoutExpired:
            os.killpg(proc.pid, signal.SIGKILL)
