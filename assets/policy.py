"""Graph-wide policy in one place: the DuckDB pool, the automation conditions and the partition sets."""

from __future__ import annotations

import dagster as dg

__all__ = ["DATASETS", "DATASET_COLUMN", "DUCKDB_POOL", "EAGER", "MODEL_VERSIONS", "MODEL_VERSION_COLUMN"]

#: Every asset that opens the warehouse runs in this pool; ``$DAGSTER_HOME/dagster.yaml`` limits it to 1, so
#: DuckDB's single-writer file lock is never contended (STACK.md "DuckDB under Dagster").
DUCKDB_POOL = "duckdb"

#: Downstream assets rerun when anything upstream is updated (new annotations, a new model version,
#: new confirmations). Run by the automation sensor, which starts RUNNING (definitions.py).
EAGER = dg.AutomationCondition.eager()

#: One partition per model version folder ``models/<version>/`` (added by ``model_version_sensor``).
MODEL_VERSIONS = dg.DynamicPartitionsDefinition(name="model_versions")
MODEL_VERSION_COLUMN = "model_version"

#: One partition per image dataset (added by ``dataset_sensor``).
DATASETS = dg.DynamicPartitionsDefinition(name="datasets")
DATASET_COLUMN = "dataset"
