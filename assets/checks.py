"""Asset checks: input contracts (Great Expectations, blocking), statistical guards and clinic thresholds.

Check names are module constants so tests and the UI refer to the same strings.
"""


import dagster as dg
import polars as pl

from assets.raw import ANNOTATIONS, PREDICTIONS
from noisycal_platform import contracts

ANNOTATIONS_CONTRACT = "annotations_contract"
PREDICTIONS_CONTRACT = "predictions_contract"


def _contract_result(frame: pl.DataFrame, contract: contracts.TableContract) -> dg.AssetCheckResult:
    if frame.height == 0:
        return dg.AssetCheckResult(passed=True, metadata={"rows": 0, "note": "empty table"})
    outcome = contracts.validate_frame(frame, contract)
    return dg.AssetCheckResult(
        passed=outcome["success"],
        metadata={
            "rows": frame.height,
            "expectations_evaluated": outcome["evaluated"],
            "failures": dg.MetadataValue.json(outcome["failed"]),
        },
    )


@dg.asset_check(asset=ANNOTATIONS, name=ANNOTATIONS_CONTRACT, blocking=True,
                description="Great Expectations: the annotations contract (ids, label in {0,1}, unique pairs).")
def annotations_contract(annotations: pl.DataFrame) -> dg.AssetCheckResult:
    return _contract_result(annotations, contracts.ANNOTATIONS)


@dg.asset_check(asset=PREDICTIONS, name=PREDICTIONS_CONTRACT, blocking=True,
                description="Great Expectations: the predictions contract (ids unique, score in [0, 1]).")
def predictions_contract(predictions: pl.DataFrame) -> dg.AssetCheckResult:
    return _contract_result(predictions, contracts.PREDICTIONS)


ALL_CHECKS = [annotations_contract, predictions_contract]
