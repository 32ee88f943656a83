"""A fake clock for retention tests and the retention benchmark: move a finished run back in time.

Dagster stamps a run's rows with the database's clock; retention judges a run by its ``update_timestamp`` (what
``RunsFilter(updated_before=...)`` filters on). ``backdate_run`` rewrites the run's timestamps in the instance's
run storage (its SQLAlchemy connection and ``RunsTable``), the same columns Dagster itself writes.
"""

from __future__ import annotations

from datetime import UTC, datetime

import dagster as dg


def backdate_run(instance: dg.DagsterInstance, run_id: str, when: datetime) -> None:
    from dagster._core.storage.runs.schema import RunsTable

    naive = when.astimezone(UTC).replace(tzinfo=None)  # the columns hold UTC without a zone
    with instance.run_storage.connect() as conn:
        conn.execute(
            RunsTable.update()
            .where(RunsTable.c.run_id == run_id)
            .values(create_timestamp=naive, update_timestamp=naive, start_time=when.timestamp(),
                    end_time=when.timestamp())
        )


def sensor_with_ticks(instance: dg.DagsterInstance, name: str, stamps: list[float]):
    """Store a running sensor's state (as the daemon does) and one SKIPPED tick at each of ``stamps``."""
    from dagster._core.remote_origin import (
        RegisteredCodeLocationOrigin,
        RemoteInstigatorOrigin,
        RemoteRepositoryOrigin,
    )
    from dagster._core.scheduler.instigation import (
        InstigatorState,
        InstigatorStatus,
        InstigatorType,
        SensorInstigatorData,
        TickData,
        TickStatus,
    )

    origin = RemoteInstigatorOrigin(RemoteRepositoryOrigin(RegisteredCodeLocationOrigin("noisycal"), "repo"), name)
    state = InstigatorState(origin, InstigatorType.SENSOR, InstigatorStatus.RUNNING,
                            SensorInstigatorData(min_interval=30, sensor_type=None))
    instance.add_instigator_state(state)
    for ts in stamps:
        instance.create_tick(TickData(
            instigator_origin_id=state.instigator_origin_id, instigator_name=name,
            instigator_type=InstigatorType.SENSOR, status=TickStatus.SKIPPED, timestamp=ts,
            selector_id=state.selector_id, skip_reason="nothing new",
        ))
    return state
