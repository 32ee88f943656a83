"""Input table contracts: the columns, types and ranges every reader and every asset check enforces.

One contract per user-supplied table. ``io.py`` applies them to files (errors name file, 1-based data row and
column); ``assets/checks.py`` turns the same contracts into Great Expectations suites run as blocking checks.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

__all__ = [
    "ANNOTATIONS",
    "CONTRACTS",
    "PREDICTIONS",
    "REFERENCE_LABELS",
    "ColumnSpec",
    "TableContract",
    "validate_frame",
]

Kind = Literal["id", "binary", "unit_float", "timestamp"]


@dataclass(frozen=True)
class ColumnSpec:
    """One column: ``id`` = non-empty string; ``binary`` = integer 0 or 1; ``unit_float`` = finite float in
    [0, 1]; ``timestamp`` = ISO-8601 date-time (stored as UTC)."""

    name: str
    kind: Kind
    required: bool = True
    description: str = ""


@dataclass(frozen=True)
class TableContract:
    name: str
    columns: tuple[ColumnSpec, ...]
    unique_key: tuple[str, ...] = field(default=())

    @property
    def required(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if c.required)

    @property
    def optional(self) -> tuple[str, ...]:
        return tuple(c.name for c in self.columns if not c.required)

    def column(self, name: str) -> ColumnSpec:
        for c in self.columns:
            if c.name == name:
                return c
        raise KeyError(name)


ANNOTATIONS = TableContract(
    name="annotations",
    columns=(
        ColumnSpec("item_id", "id", description="the item the annotator labelled"),
        ColumnSpec("annotator_id", "id", description="who labelled it"),
        ColumnSpec("label", "binary", description="the annotator's label, 0 or 1"),
        ColumnSpec("timestamp", "timestamp", required=False, description="when it was labelled"),
    ),
    unique_key=("item_id", "annotator_id"),
)

PREDICTIONS = TableContract(
    name="predictions",
    columns=(
        ColumnSpec("item_id", "id", description="the scored item"),
        ColumnSpec("score", "unit_float", description="the model's probability of class 1"),
    ),
    unique_key=("item_id",),
)

REFERENCE_LABELS = TableContract(
    name="reference_labels",
    columns=(
        ColumnSpec("item_id", "id", description="the item"),
        ColumnSpec("label", "binary", description="clean reference label, 0 or 1"),
    ),
    unique_key=("item_id",),
)

CONTRACTS = {c.name: c for c in (ANNOTATIONS, PREDICTIONS, REFERENCE_LABELS)}


def validate_frame(frame, contract: TableContract) -> dict:
    """Run ``contract`` as a Great Expectations suite over a polars frame (GE has no polars source: pandas).

    Returns ``{"success": bool, "failed": [{"expectation", "column", "unexpected_count", "examples"}],
    "evaluated": int}``. GE is imported here, not at module import (it costs ~3 s per process, STACK.md).
    """
    import great_expectations as gx
    import great_expectations.expectations as gxe
    from great_expectations.data_context.types.base import ProgressBarsConfig

    expectations = []
    for spec in contract.columns:
        if spec.name not in frame.columns:
            if spec.required:
                expectations.append(gxe.ExpectColumnToExist(column=spec.name))
            continue
        if spec.required:
            expectations.append(gxe.ExpectColumnValuesToNotBeNull(column=spec.name))
        if spec.kind == "binary":
            expectations.append(gxe.ExpectColumnValuesToBeInSet(column=spec.name, value_set=[0, 1]))
        elif spec.kind == "unit_float":
            expectations.append(gxe.ExpectColumnValuesToBeBetween(column=spec.name, min_value=0.0, max_value=1.0))
        elif spec.kind == "id":
            expectations.append(gxe.ExpectColumnValueLengthsToBeBetween(column=spec.name, min_value=1))
    if len(contract.unique_key) == 1:
        expectations.append(gxe.ExpectColumnValuesToBeUnique(column=contract.unique_key[0]))
    elif contract.unique_key:
        expectations.append(gxe.ExpectCompoundColumnsToBeUnique(column_list=list(contract.unique_key)))

    context = gx.get_context(mode="ephemeral")
    context.variables.progress_bars = ProgressBarsConfig(globally=False)  # no tqdm bars on stderr per validation
    batch_def = (
        context.data_sources.add_pandas(name=f"{contract.name}_source")
        .add_dataframe_asset(name=contract.name)
        .add_batch_definition_whole_dataframe("whole")
    )
    suite = context.suites.add(gx.ExpectationSuite(name=f"{contract.name}_contract", expectations=expectations))
    result = batch_def.get_batch(batch_parameters={"dataframe": frame.to_pandas()}).validate(suite)
    failed = []
    for r in result.results:
        if not r.success:
            cfg = r.expectation_config
            failed.append(
                {
                    "expectation": cfg.type,
                    "column": cfg.kwargs.get("column") or cfg.kwargs.get("column_list"),
                    "unexpected_count": (r.result or {}).get("unexpected_count"),
                    "examples": [str(v) for v in ((r.result or {}).get("partial_unexpected_list") or [])[:5]],
                }
            )
    return {"success": bool(result.success), "failed": failed, "evaluated": len(result.results)}


# ------------------------------------------------------------------------------------------ cleaning scores
#: A model's scores on an image dataset, for the cleaning-impact analysis (seed 001 §4.3):
#: ``models/<version>/cleaning/<dataset>.csv``, one row per image (``file_name`` as in the dataset).
CLEANING_SCORES = TableContract(
    name="cleaning_scores",
    columns=(
        ColumnSpec("file_name", "id", description="the image, as named in the dataset"),
        ColumnSpec("score", "unit_float", description="the model's probability of the positive class"),
        ColumnSpec("target", "binary", description="the image's class for this model, 0 or 1"),
    ),
    unique_key=("file_name",),
)
