"""The run-time contract checks evaluate the Great Expectations contract in polars: same verdicts and counts
as GE itself (the peer engine), in milliseconds."""

import dataclasses
import time

import polars as pl
import pytest

from assets.checks import evaluate_contract
from noisycal_platform import contracts

STORED_PREDICTIONS = dataclasses.replace(
    contracts.PREDICTIONS,
    unique_key=("model_version", "item_id"),
    columns=(*contracts.PREDICTIONS.columns, contracts.ColumnSpec("model_version", "id")),
)

GOOD_ANN = {"item_id": ["a", "a", "b"], "annotator_id": ["r1", "r2", "r1"], "label": [0, 1, 1]}
FRAMES = {
    "good_annotations": (contracts.ANNOTATIONS, GOOD_ANN),
    "label_2_and_null": (contracts.ANNOTATIONS, {**GOOD_ANN, "label": [2, None, 1]}),
    "duplicate_pair": (contracts.ANNOTATIONS, {**GOOD_ANN, "annotator_id": ["r1", "r1", "r1"]}),
    "empty_id": (contracts.ANNOTATIONS, {**GOOD_ANN, "item_id": ["", "a", "b"]}),
    "missing_column": (contracts.ANNOTATIONS, {"item_id": ["a"], "label": [1]}),
    "good_predictions": (STORED_PREDICTIONS, {"item_id": ["a", "b"], "score": [0.0, 1.0], "model_version": ["v", "v"]}),
    "score_out_of_range": (
        STORED_PREDICTIONS,
        {"item_id": ["a", "b"], "score": [-0.1, 1.5], "model_version": ["v", "v"]},
    ),
    "duplicate_item_in_version": (
        STORED_PREDICTIONS,
        {"item_id": ["a", "a", "a"], "score": [0.1, 0.2, 0.3], "model_version": ["v1", "v1", "v2"]},
    ),
    "unique_single_key": (contracts.PREDICTIONS, {"item_id": ["a", "a", "b"], "score": [0.1, 0.2, 0.3]}),
}


def _summary(outcome: dict) -> tuple:
    failed = sorted((f["expectation"], str(f["column"]), f["unexpected_count"] or 0) for f in outcome["failed"])
    return outcome["success"], failed


@pytest.mark.parametrize("case", sorted(FRAMES))
def test_polars_evaluation_equals_great_expectations(case):
    contract, data = FRAMES[case]
    frame = pl.DataFrame(data)
    assert _summary(evaluate_contract(frame, contract)) == _summary(contracts.validate_frame(frame, contract))


def test_polars_contract_is_fast_at_100k_rows():
    n = 100_000
    frame = pl.DataFrame(
        {"item_id": [f"i{i}" for i in range(n)], "annotator_id": ["r"] * n, "label": [i % 2 for i in range(n)]}
    )
    t0 = time.perf_counter()
    outcome = evaluate_contract(frame, contracts.ANNOTATIONS)
    assert outcome["success"] and time.perf_counter() - t0 < 2.0
