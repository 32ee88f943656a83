"""Screenshots of the running service: the Dagster UI's run log of the encoder training (its per-epoch progress
events) and the HTML reports (index, calibration, cleaning), taken with Playwright driving the system Chromium.

    python benchmarks/screenshots.py --out DIR [--home HOME] [--port 3000]

A home without a warehouse gets the demo first (``noisycal demo --fresh``, a few minutes). The service
(``noisycal serve``) is started for the home and stopped at the end. Nothing is fetched from the network: the
UI is served from 127.0.0.1 and the reports are local files.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import dagster as dg  # noqa: E402

from orchestration.instance import instance_for  # noqa: E402
from orchestration.service import serve_in_background, webserver_answers  # noqa: E402

SSL_ENCODER = dg.AssetKey(["cleaning", "ssl_encoder"])
REPORTS = {
    "report_index": "index.html",
    "report_calibration": "calibration.html",
    "report_calibration_v1": "calibration/v1.html",
    "report_cleaning": "cleaning.html",
}
CHROMIUM = "/usr/bin/chromium"


def _encoder_run(home: Path) -> str:
    records = instance_for(home).fetch_materializations(SSL_ENCODER, limit=1).records
    if not records:
        raise RuntimeError(f"{home} has no materialisation of cleaning/ssl_encoder: run the demo first")
    return records[0].run_id


def _shoot(out: Path, port: int, run_id: str, reports: Path, prefix: str) -> list[Path]:
    from playwright.sync_api import sync_playwright

    shots = []
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(f"http://127.0.0.1:{port}/runs/{run_id}", wait_until="domcontentloaded")
        page.wait_for_timeout(8000)
        skip = page.get_by_role("button", name="Skip")
        if skip.count():
            skip.first.click()
        shots.append(out / f"{prefix}ui_run_log.png")
        page.screenshot(path=str(shots[-1]))
        search = page.get_by_placeholder("Filter", exact=False)
        if search.count():  # only the progress events of the run log
            search.first.fill("progress")
            page.wait_for_timeout(3000)
            shots.append(out / f"{prefix}ui_run_log_progress.png")
            page.screenshot(path=str(shots[-1]))
        for name, file in REPORTS.items():
            if not (reports / file).is_file():
                continue
            page.goto((reports / file).as_uri())
            page.wait_for_timeout(1500)
            shots.append(out / f"{prefix}{name}.png")
            page.screenshot(path=str(shots[-1]), full_page=True)
        browser.close()
    return shots


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", type=Path, required=True, help="folder for the PNG files")
    ap.add_argument("--home", type=Path, default=Path("/tmp/noisycal-screens/home"))
    ap.add_argument("--port", type=int, default=3000)
    ap.add_argument("--prefix", default="", help="file name prefix")
    args = ap.parse_args()
    home = args.home.resolve()
    env = {"OMP_NUM_THREADS": "1"}
    if not (home / "warehouse.duckdb").is_file():
        cmd = [sys.executable, "-m", "orchestration.cli", "--home", str(home), "demo", "--fresh"]
        subprocess.run(cmd, env={**os.environ, "PYTHONPATH": str(REPO), **env}, check=True)
    run_id = _encoder_run(home)
    args.out.mkdir(parents=True, exist_ok=True)
    with serve_in_background(home, args.port, env=env):
        if not webserver_answers(args.port, time.time() + 300, 2.0):
            raise TimeoutError(f"the Dagster UI did not answer on port {args.port} within 300 s")
        shots = _shoot(args.out, args.port, run_id, home / "reports", args.prefix)
    for shot in shots:
        print(shot)
    return 0


if __name__ == "__main__":
    sys.exit(main())
