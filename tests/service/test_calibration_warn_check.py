"""`calibration_test_not_rejected` on hand-made report rows: a multi-class version warns only when a kind rejects
after Holm's correction over the two kinds (min(1, 2·min p) < .05); a binary version reads its one p-value."""

import polars as pl
import pytest

from assets.checks import calibration_test_not_rejected


def _report(kinds: list[str], p_values: list[float | None]) -> pl.DataFrame:
    n = len(kinds)
    return pl.DataFrame(
        {"estimator": ["nc_ece"] * n, "kind": kinds, "value": [0.05] * n, "null_q95": [0.03] * n, "p_value": p_values},
        schema_overrides={"p_value": pl.Float64},
    )


def test_multiclass_smallest_p_is_holm_adjusted():
    # classwise p = 0.03 alone would warn at .05; over two kinds 2·0.03 = 0.06 does not, 2·0.02 = 0.04 does
    quiet = calibration_test_not_rejected(_report(["top_label", "classwise"], [0.2, 0.03]))
    assert quiet.passed and quiet.metadata["p_value"].value == pytest.approx(0.06, rel=1e-12)
    assert quiet.metadata["kind"].text == "classwise" and quiet.metadata["p_value_raw"].value == 0.03
    warned = calibration_test_not_rejected(_report(["top_label", "classwise"], [0.02, 0.5]))
    assert not warned.passed and warned.metadata["p_value"].value == pytest.approx(0.04, rel=1e-12)


def test_one_kind_that_ran_is_not_adjusted():
    binary = calibration_test_not_rejected(_report(["binary"], [0.03]))
    assert not binary.passed and binary.metadata["p_value"].value == 0.03
    one_ran = calibration_test_not_rejected(_report(["top_label", "classwise"], [0.03, None]))
    assert not one_ran.passed and one_ran.metadata["p_value"].value == 0.03
