"""The one Definitions object: assets, checks, sensors, schedules, jobs and resources.

``build_definitions(home)`` serves the Dagster code location (``$NOISYCAL_HOME``, default ``./.noisycal``)
and the tests (``tmp_path``) alike; nothing branches on the environment.
"""

from __future__ import annotations

from pathlib import Path

import dagster as dg

from assets import automation, calibration, checks, cleaning, correctness, raw, reports
from assets.service_checks import build_latest_run_checks, failed_run_sensor
from assets.sql_models import build_sql_assets
from noisycal_platform.paths import default_home
from resources import build_resources
from resources.executor import executor_for
from resources.settings import load_settings

STAGE_MODULES = [raw, calibration, cleaning, correctness, reports]


def build_definitions(home: str | Path | None = None) -> dg.Definitions:
    home = Path(home) if home is not None else default_home()
    assets = [*dg.load_assets_from_modules(STAGE_MODULES), *build_sql_assets()]
    keys = sorted({key for a in assets for key in a.keys}, key=lambda k: k.to_user_string())
    return dg.Definitions(
        assets=assets,
        asset_checks=[*checks.ALL_CHECKS, build_latest_run_checks(keys)],
        sensors=[*automation.SENSORS, failed_run_sensor],
        schedules=automation.SCHEDULES,
        jobs=automation.JOBS,
        resources=build_resources(home),
        executor=executor_for(load_settings(home), home),
    )


defs = build_definitions()
