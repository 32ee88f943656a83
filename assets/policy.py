"""Graph-wide policy in one place: the DuckDB pool, the automation conditions, the partition sets and the
stage-asset factory, so that each asset decorator states only what differs from its stage.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import dagster as dg
import polars as pl

from resources.warehouse import COLUMN_SCHEMA, table_schema

__all__ = [
    "BY_DATASET",
    "BY_MODEL_VERSION",
    "CALIBRATION",
    "CLEANING",
    "COMPUTE",
    "COMPUTE_POOL",
    "CORRECTNESS",
    "DATASETS",
    "DATASET_COLUMN",
    "DUCKDB_POOL",
    "EAGER",
    "EAGER_PARTITIONED",
    "MODEL_VERSIONS",
    "MODEL_VERSION_COLUMN",
    "RAW",
    "REPORTS",
    "TRANSIENT_RETRY",
    "Stage",
]

#: Every asset that opens the warehouse runs in this pool; ``$DAGSTER_HOME/dagster.yaml`` limits it to 1, so
#: DuckDB's single-writer file lock is never contended.
DUCKDB_POOL = "duckdb"
#: Long steps whose time goes to compute, not to the warehouse (encoder training, embedding the images) run in
#: their own one-slot pool, so they never hold the warehouse pool while calibration runs wait. Their inputs and
#: outputs are small reads and one short write transaction; a write that meets DuckDB's file lock (held by a
#: ``duckdb``-pool writer for its transaction) waits in the connection's backoff, as any reader does.
COMPUTE_POOL = "compute"
#: Decorator override for such a step: ``@CLEANING.asset(**COMPUTE, ...)``.
COMPUTE: Mapping[str, Any] = {"pool": COMPUTE_POOL}

_AC = dg.AutomationCondition
#: The stages whose assets are partitioned (per model version, per dataset): under the daemon their requested
#: partitions run in runs of their own, apart from the unpartitioned assets requested in the same tick.
_PARTITIONED_GROUPS = ("calibration", "cleaning")

#: Unpartitioned assets (reports, staging, correctness) rerun when anything upstream is updated: Dagster's
#: ``eager()`` with two changes (docs.dagster.io, "Customizing eager"). (1) The missing-input gate is narrowed:
#: a fan-in input partition that is missing because its run failed (one bad model version) does not hold them
#: back; they are rebuilt from the good partitions and say which are missing. (2) They wait while a partitioned
#: input is pending (requested, or about to be: it runs in another run): a report reading several stages of one
#: chain is published once, after the whole chain, never with a stale input. Unpartitioned inputs requested in
#: the same tick share the target's run, where Dagster orders the steps.
#: A partitioned input whose own eager trigger (an input updated or it went missing) has not been handled yet:
#: it is about to be requested. ``will_be_requested`` alone does not see it: it counts only inputs that can run
#: in the target's own run, and a partitioned input never does.
_INPUT_PENDING = (_AC.newly_missing() | _AC.any_deps_updated()).since_last_handled() | _AC.will_be_requested()

EAGER = (
    _AC.eager().without(~_AC.any_deps_missing())
    & ~_AC.any_deps_match(_AC.missing() & ~_AC.execution_failed())
    & ~_AC.any_deps_match(_INPUT_PENDING).allow(dg.AssetSelection.groups(*_PARTITIONED_GROUPS))
).with_label("eager (once, fan-in)")

#: Partitioned assets (per model version / dataset): ``eager()``, and an input partition whose latest run
#: failed stops the downstream partition (no cascade of misleading errors). Inputs of the same partition
#: requested in the same tick share its run.
EAGER_PARTITIONED = (_AC.eager() & ~_AC.any_deps_match(_AC.execution_failed())).with_label(
    "eager (per partition, no failed input)"
)

#: One partition per model version folder ``models/<version>/`` (added by ``model_version_sensor``).
MODEL_VERSIONS = dg.DynamicPartitionsDefinition(name="model_versions")
MODEL_VERSION_COLUMN = "model_version"

#: One partition per image dataset (added by ``dataset_sensor``).
DATASETS = dg.DynamicPartitionsDefinition(name="datasets")
DATASET_COLUMN = "dataset"

#: Decorator overrides for an asset of an unpartitioned stage that is partitioned like a later stage
#: (``raw/predictions`` by model version, ``raw/images`` by dataset): ``@RAW.asset(**BY_DATASET, ...)``.
BY_MODEL_VERSION: Mapping[str, Any] = {
    "partitions_def": MODEL_VERSIONS,
    "metadata": {"partition_expr": MODEL_VERSION_COLUMN},
}
BY_DATASET: Mapping[str, Any] = {"partitions_def": DATASETS, "metadata": {"partition_expr": DATASET_COLUMN}}

_DEFAULT_KINDS = frozenset({"polars", "duckdb"})

#: A step that fails (a DuckDB lock held past the IO manager's ~100 s connect backoff, a disk freed meanwhile)
#: is retried in the same run, twice, after 1 and 2 s (+-50 % jitter): no new run key is needed. Input
#: errors that cannot heal raise ``dg.Failure(allow_retries=False)``.
TRANSIENT_RETRY = dg.RetryPolicy(max_retries=2, delay=1, backoff=dg.Backoff.EXPONENTIAL, jitter=dg.Jitter.PLUS_MINUS)


@dataclass(frozen=True)
class Stage:
    """What every asset of one stage shares: key prefix and group (``name``), pool, kinds, automation
    condition and, for partitioned stages, the partitions definition and the column that holds its key.
    """

    name: str
    partitions_def: dg.PartitionsDefinition | None = None
    partition_column: str | None = None
    kinds: frozenset[str] = _DEFAULT_KINDS
    #: ``None``: ``EAGER_PARTITIONED`` for a partitioned stage, ``EAGER`` otherwise; ``False``: no condition
    automation_condition: dg.AutomationCondition | bool | None = None
    pool: str = DUCKDB_POOL
    extra: Mapping[str, Any] = field(default_factory=dict)

    def key(self, name: str) -> dg.AssetKey:
        """``<stage>/<name>``: the one way a key of this stage is spelled."""
        return dg.AssetKey([self.name, name])

    def options(
        self,
        *,
        kinds: set[str] | frozenset[str] | None = None,
        schema: Mapping[str, pl.DataType] | None = None,
        **overrides: Any,
    ) -> dict[str, Any]:
        """Keyword arguments for ``dg.asset``: the stage's shared ones, then ``overrides``.

        ``kinds`` are added to the stage's kinds (``{"html"}`` for a report), never replace them. ``schema``
        (polars) is declared as the asset's column schema (needs ``name``), each column described from
        :mod:`noisycal_platform.column_docs`; the warehouse loads a table that does not exist yet as an empty
        frame with these columns.
        """
        opts: dict[str, Any] = {
            "group_name": self.name,
            "pool": self.pool,
            "kinds": set(self.kinds | (kinds or set())),
            "retry_policy": TRANSIENT_RETRY,
            **self.extra,
        }
        if self.automation_condition is None:
            opts["automation_condition"] = EAGER_PARTITIONED if self.partitions_def is not None else EAGER
        elif self.automation_condition is not False:
            opts["automation_condition"] = self.automation_condition
        if self.partitions_def is not None:
            opts["partitions_def"] = self.partitions_def
            opts["metadata"] = {"partition_expr": self.partition_column}
        metadata = dict(overrides.pop("metadata", None) or {})
        if schema is not None:
            if "name" not in overrides:
                raise TypeError("a column schema needs the asset's name (Stage.asset passes the function's name)")
            metadata[COLUMN_SCHEMA] = self.column_schema(overrides["name"], schema)
        if metadata:
            opts["metadata"] = {**opts.get("metadata", {}), **metadata}
        opts.update(overrides)
        return opts

    def asset(self, **overrides: Any) -> Callable:
        """``dg.asset`` with this stage's prefix and shared options; pass only what differs. The asset's name
        is ``name`` when given, else the decorated function's (as ``dg.asset`` names it)."""
        if "name" in overrides:
            return dg.asset(key_prefix=self.name, **self.options(**overrides))

        def decorate(fn: Callable) -> dg.AssetsDefinition:
            return dg.asset(key_prefix=self.name, **self.options(name=fn.__name__, **overrides))(fn)

        return decorate

    def multi_asset(
        self,
        outs: Mapping[str, Mapping[str, pl.DataType] | None],
        *,
        descriptions: Mapping[str, str] | None = None,
        **overrides: Any,
    ) -> Callable:
        """``dg.multi_asset`` whose outputs (name -> column schema or None) each get this stage's key prefix,
        kinds, automation condition and metadata, and their own description from ``descriptions`` when given
        (the UI shows it on the asset); group, pool and partitions are set once. With ``can_subset=True`` no output
        is required: the step yields only those selected (``context.op_execution_context.selected_output_names``)."""
        required = not overrides.get("can_subset", False)
        opts = self.options(**overrides)
        shared = {k: opts.pop(k) for k in ("kinds", "automation_condition") if k in opts}
        metadata = opts.pop("metadata", {})

        def out(name: str, schema: Mapping[str, pl.DataType] | None) -> dg.AssetOut:
            md = metadata if schema is None else {**metadata, COLUMN_SCHEMA: self.column_schema(name, schema)}
            text = (descriptions or {}).get(name)
            return dg.AssetOut(key_prefix=self.name, metadata=md, description=text, is_required=required, **shared)

        return dg.multi_asset(outs={name: out(name, schema) for name, schema in outs.items()}, **opts)

    def column_schema(self, name: str, schema: Mapping[str, pl.DataType]) -> dg.TableSchema:
        """The stored columns of table ``<stage>/<name>``: the partition column first (when the frame lacks it),
        then ``schema``; each with its description (`noisycal_platform.column_docs`)."""
        if self.partition_column is not None and self.partition_column not in schema:
            schema = {self.partition_column: pl.String(), **schema}
        return table_schema(schema, self.key(name))


RAW = Stage("raw", automation_condition=False)
CLEANING = Stage("cleaning", partitions_def=DATASETS, partition_column=DATASET_COLUMN)
CALIBRATION = Stage("calibration", partitions_def=MODEL_VERSIONS, partition_column=MODEL_VERSION_COLUMN)
CORRECTNESS = Stage("correctness")
REPORTS = Stage("reports", kinds=frozenset({"polars", "duckdb", "html"}))
