"""Asset checks: input contracts (blocking), statistical guards and clinic thresholds.

The contracts are those of ``noisycal_platform.contracts``; at run time their expectations are evaluated in
polars (``evaluate_contract``), which a test holds equal to Great Expectations (``contracts.validate_frame``,
also what ``noisycal validate`` runs).

Check names are module constants so tests and the UI refer to the same strings.
"""

import dataclasses
from collections.abc import Callable

import dagster as dg
import polars as pl

from assets.calibration import CHANNEL_ESTIMATES, NC_ECE_REPORT
from assets.raw import ANNOTATIONS, PREDICTIONS
from noisycal_platform import contracts
from noisycal_platform.calibration.subgroups import holm_min_p
from resources.settings import SettingsResource

ANNOTATIONS_CONTRACT = "annotations_contract"
PREDICTIONS_CONTRACT = "predictions_contract"


def _expectations(
    frame: pl.DataFrame, contract: contracts.TableContract
) -> tuple[list[tuple[str, str | list[str], pl.Expr]], list[str], list[str]]:
    """(expectation, column(s), mask of unexpected rows) per check that applies to ``frame``; the required
    columns that are missing; the unique-key columns present."""
    exprs: list[tuple[str, str | list[str], pl.Expr]] = []  # (expectation, column(s), mask of unexpected rows)
    missing: list[str] = []
    for spec in contract.columns:
        if spec.name not in frame.columns:
            if spec.required:
                missing.append(spec.name)
            continue
        col = pl.col(spec.name)
        if spec.required:
            exprs.append(("expect_column_values_to_not_be_null", spec.name, col.is_null()))
        if spec.kind == "binary":
            exprs.append(("expect_column_values_to_be_in_set", spec.name, col.is_not_null() & ~col.is_in([0, 1])))
        elif spec.kind == "unit_float":
            exprs.append(
                ("expect_column_values_to_be_between", spec.name, col.is_not_null() & ((col < 0.0) | (col > 1.0)))
            )
        elif spec.kind == "id":
            exprs.append(
                ("expect_column_value_lengths_to_be_between", spec.name, col.is_not_null() & (col.str.len_chars() < 1))
            )
    key = [c for c in contract.unique_key if c in frame.columns]
    if len(contract.unique_key) == 1 and key:
        unique = pl.col(key[0]).is_duplicated() & pl.col(key[0]).is_not_null()
        exprs.append(("expect_column_values_to_be_unique", key[0], unique))
    elif len(contract.unique_key) > 1 and len(key) == len(contract.unique_key):
        exprs.append(("expect_compound_columns_to_be_unique", key, pl.struct(key).is_duplicated()))
    return exprs, missing, key


def evaluate_contract(frame: pl.DataFrame, contract: contracts.TableContract) -> dict:
    """The expectations ``contracts.validate_frame`` builds for Great Expectations, evaluated in polars.

    Same expectations (GE type names), same result shape ``{"success", "failed", "evaluated"}`` and the same
    unexpected counts (a test holds the two engines equal on bad frames); milliseconds instead of GE's import
    and context set-up (seconds per process), so the blocking contract check never delays a run.
    """
    exprs, missing, key = _expectations(frame, contract)
    failed = [
        {"expectation": "expect_column_to_exist", "column": name, "unexpected_count": None, "examples": []}
        for name in missing
    ]
    if contract.unique_key and len(key) < len(contract.unique_key):  # a key column is missing: GE fails it too
        unique = (
            "expect_column_values_to_be_unique"
            if len(contract.unique_key) == 1
            else ("expect_compound_columns_to_be_unique")
        )
        column = contract.unique_key[0] if len(contract.unique_key) == 1 else list(contract.unique_key)
        failed.append({"expectation": unique, "column": column, "unexpected_count": None, "examples": []})
        missing.append(unique)
    if exprs:
        masks = frame.select(*(m.alias(f"m{i}") for i, (_, _, m) in enumerate(exprs)))
        counts = masks.sum().row(0)
        for i, ((expectation, column, _), n) in enumerate(zip(exprs, counts, strict=True)):
            if n:
                cols = column if isinstance(column, list) else [column]
                examples = frame.filter(masks[f"m{i}"]).select(cols).head(5)
                failed.append(
                    {
                        "expectation": expectation,
                        "column": column,
                        "unexpected_count": int(n),
                        "examples": [str(r[0] if len(r) == 1 else r) for r in examples.rows()],
                    }
                )
    return {"success": not failed, "failed": failed, "evaluated": len(exprs) + len(missing)}


def _contract_check(asset: dg.AssetKey, name: str, contract: contracts.TableContract, description: str):
    """A blocking check of ``asset`` against ``contract`` (``evaluate_contract``); an empty table passes."""

    @dg.asset_check(asset=asset, name=name, blocking=True, description=description)
    def _check(frame: pl.DataFrame) -> dg.AssetCheckResult:
        if frame.height == 0:
            return dg.AssetCheckResult(passed=True, metadata={"rows": 0, "note": "empty table"})
        outcome = evaluate_contract(frame, contract)
        return dg.AssetCheckResult(
            passed=outcome["success"],
            metadata={
                "rows": frame.height,
                "expectations_evaluated": outcome["evaluated"],
                "failures": dg.MetadataValue.json(outcome["failed"]),
            },
        )

    return _check


annotations_contract = _contract_check(
    ANNOTATIONS,
    ANNOTATIONS_CONTRACT,
    contracts.STORED_ANNOTATIONS,
    "The annotations contract (ids, label_text present, label in {0,1} where set, unique pairs); GE expectations, "
    "run in polars.",
)
# the stored predictions hold every version: an item is unique within its model version
predictions_contract = _contract_check(
    PREDICTIONS,
    PREDICTIONS_CONTRACT,
    dataclasses.replace(
        contracts.PREDICTIONS,
        unique_key=("model_version", "item_id"),
        columns=(*contracts.PREDICTIONS.columns, contracts.ColumnSpec("model_version", "id")),
    ),
    "The predictions contract (ids unique, score in [0, 1]); GE expectations, run in polars.",
)


# ---------------------------------------------------------------------------------- calibration guards
EM_CONVERGED = "em_converged"
CHANNEL_GAP_NOT_ZERO = "channel_gap_not_zero"
ENOUGH_ITEMS_PER_BIN = "enough_items_per_bin"
NC_ECE_WITHIN_LIMIT = "nc_ece_within_limit"
CALIBRATION_TEST_NOT_REJECTED = "calibration_test_not_rejected"
ANNOTATORS_CONDITIONALLY_INDEPENDENT = "annotators_conditionally_independent"
CHANNELS_SCORE_INVARIANT = "channels_score_invariant"
CHECK_ALPHA = 0.05  # level of the WARN tests below


def _nc_rows(nc_ece_report: pl.DataFrame) -> list[dict]:
    """The version's NC-ECE rows: one for a binary version, top-label then classwise for a multi-class one."""
    return nc_ece_report.filter(pl.col("estimator") == "nc_ece").to_dicts()


def _float(v: float | None) -> float:
    return float("nan") if v is None else float(v)


def _at_least(
    value: float, limit: float, key: str, severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR
) -> dg.AssetCheckResult:
    """Passes when ``value >= limit`` (NaN fails); metadata: the value under ``key`` and the limit."""
    return dg.AssetCheckResult(passed=bool(value >= limit), severity=severity, metadata={key: value, "limit": limit})


def _p_value_check(p_value: float | None, metadata: dict) -> dg.AssetCheckResult:
    """WARN when a test rejects at CHECK_ALPHA; a test that could not run (null / NaN) passes with a note."""
    ran = p_value is not None and p_value == p_value
    return dg.AssetCheckResult(
        passed=bool(not ran or p_value >= CHECK_ALPHA),
        severity=dg.AssetCheckSeverity.WARN,
        metadata={**metadata, "p_value": float(p_value) if ran else float("nan"), "alpha": CHECK_ALPHA},
    )


@dg.asset_check(
    asset=CHANNEL_ESTIMATES,
    name=EM_CONVERGED,
    description="The channel fit converged (EM: likelihood change below tolerance; closed form: valid).",
)
def em_converged(channel_estimates: pl.DataFrame) -> dg.AssetCheckResult:
    ok = bool(channel_estimates["converged"].all()) if channel_estimates.height else False
    return dg.AssetCheckResult(
        passed=ok,
        metadata={
            "method": str(channel_estimates["method"][0]) if channel_estimates.height else "none",
            "iterations": int(channel_estimates["n_iter"].max() or 0) if channel_estimates.height else 0,
        },
    )


def _at_least_check(
    asset: dg.AssetKey,
    name: str,
    description: str,
    observed: Callable[[pl.DataFrame], float],
    setting: str,
    key: str,
    severity: dg.AssetCheckSeverity = dg.AssetCheckSeverity.ERROR,
) -> dg.AssetChecksDefinition:
    """A check that ``observed(table)`` is at least the clinic's ``settings.<setting>`` (`_at_least`: NaN fails;
    the observed value is stored under ``key``, beside the limit)."""

    @dg.asset_check(asset=asset, name=name, description=description)
    def _check(frame: pl.DataFrame, settings: SettingsResource) -> dg.AssetCheckResult:
        return _at_least(observed(frame), getattr(settings, setting), key, severity)

    return _check


def _smallest_gap(channel_estimates: pl.DataFrame) -> float:
    return float(channel_estimates["gap"].min()) if channel_estimates.height else float("nan")


def _fewest_items_per_bin(nc_ece_report: pl.DataFrame) -> int:
    return min((int(r["min_items_per_bin"]) for r in _nc_rows(nc_ece_report)), default=0)


channel_gap_not_zero = _at_least_check(
    CHANNEL_ESTIMATES,
    CHANNEL_GAP_NOT_ZERO,
    "Every channel gap is at least min_channel_gap: δ_j = 1 − a_j − b_j for two classes, the smallest "
    "singular value of the confusion matrix T_j for more; a gap near 0 makes the corrected labels (A − a)/δ, "
    "T_j^{-T} e_A, explode (Hanada and Futami 2026 §4.3).",
    _smallest_gap,
    "min_channel_gap",
    "min_gap",
)
enough_items_per_bin = _at_least_check(
    NC_ECE_REPORT,
    ENOUGH_ITEMS_PER_BIN,
    "Every non-empty score bin holds at least min_items_per_bin items.",
    _fewest_items_per_bin,
    "min_items_per_bin",
    "min_items_per_bin",
    dg.AssetCheckSeverity.WARN,
)


@dg.asset_check(
    asset=NC_ECE_REPORT,
    name=NC_ECE_WITHIN_LIMIT,
    description="The clinic's threshold: fails only when the evidence says NC-ECE exceeds nc_ece_limit, i.e. the "
    "lower end of its 95% interval (channel refits included) is above the limit (settings.json); for a "
    "multi-class version, top-label or classwise.",
)
def nc_ece_within_limit(nc_ece_report: pl.DataFrame, settings: SettingsResource) -> dg.AssetCheckResult:
    metadata: dict = {"limit": settings.nc_ece_limit}
    passed = True
    for row in _nc_rows(nc_ece_report):
        low = row["ci_low"] if row["ci_low"] is not None else row["value"]  # no interval stored: the plug-in value
        passed = passed and bool(low <= settings.nc_ece_limit)
        prefix = "" if row["kind"] in (None, "binary") else f"{row['kind']}_"
        metadata |= {
            f"{prefix}nc_ece": float(row["value"]),
            f"{prefix}nc_ece_debiased": _float(row["value_debiased"]),
            f"{prefix}ci_low": float(low),
            f"{prefix}ci_high": _float(row["ci_high"]),
        }
    return dg.AssetCheckResult(passed=passed, metadata=metadata)


@dg.asset_check(
    asset=NC_ECE_REPORT,
    name=CALIBRATION_TEST_NOT_REJECTED,
    description="WARN when the calibration test rejects H0 P(Y=1 | s) = s at the 5% level (null simulated with the "
    "estimated channels and the observed missingness, channels refitted in every replicate; Hanada and Futami 2026 "
    "§3); for a multi-class version, when the top-label or the classwise test rejects after Holm's correction "
    "over the two (the p-value is the smaller Holm-adjusted one, min(1, 2·min p)).",
)
def calibration_test_not_rejected(nc_ece_report: pl.DataFrame) -> dg.AssetCheckResult:
    rows = _nc_rows(nc_ece_report)  # multi-class: the kind with the smallest p-value speaks, Holm-adjusted
    ran = [r for r in rows if r["p_value"] is not None and r["p_value"] == r["p_value"]]
    row = min(ran, key=lambda r: r["p_value"]) if ran else rows[0]
    p_value = holm_min_p([r["p_value"] for r in ran]) if ran else row["p_value"]
    metadata = {"nc_ece": float(row["value"]), "null_q95": _float(row["null_q95"]), "kind": str(row["kind"])}
    if len(ran) > 1:
        metadata |= {"p_value_raw": float(row["p_value"]), "n_tests": len(ran), "correction": "holm"}
    return _p_value_check(p_value, metadata)


def _assumption_check(name: str, prefix: str, description: str) -> dg.AssetChecksDefinition:
    """A WARN check on the channel table's ``<prefix>_statistic`` / ``<prefix>_p_value`` (Hanada and Futami 2026
    §D.7)."""

    @dg.asset_check(asset=CHANNEL_ESTIMATES, name=name, description=description)
    def _check(channel_estimates: pl.DataFrame) -> dg.AssetCheckResult:
        row = channel_estimates.row(0, named=True)
        statistic = row.get(f"{prefix}_statistic")
        return _p_value_check(
            row.get(f"{prefix}_p_value"),
            {
                "statistic": float("nan") if statistic is None else float(statistic),
                "note": row.get("assumption_note") or "",
            },
        )

    return _check


annotators_conditionally_independent = _assumption_check(
    ANNOTATORS_CONDITIONALLY_INDEPENDENT,
    "independence",
    "WARN when observed pairwise agreement exceeds what channels fitted without that pair imply, within score "
    "groups (bootstrap p-value; Hanada and Futami 2026 §4.1, §D.7: annotators independent given the class).",
)
channels_score_invariant = _assumption_check(
    CHANNELS_SCORE_INVARIANT,
    "invariance",
    "WARN when an annotator's error rates trend across score groups (bootstrap p-value of the largest standardised "
    "trend; Hanada and Futami 2026 §4.1, §D.7: channels shared across scores).",
)


ALL_CHECKS = [
    annotations_contract,
    predictions_contract,
    em_converged,
    channel_gap_not_zero,
    enough_items_per_bin,
    nc_ece_within_limit,
    calibration_test_not_rejected,
    annotators_conditionally_independent,
    channels_score_invariant,
]
