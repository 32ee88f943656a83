"""Stopping-rule sensitivity (Gröger et al. 2023 Appendix D)."""

import math

import polars as pl
import pytest

from noisycal_platform.cleaning.protocol import answers_from_records, effective_answers
from noisycal_platform.cleaning.sensitivity import DEFAULT_GRID, stopping_sensitivity
from tests.unit.cleaning._answers import answer_record, stamp

# Two experts answer the same ranking; issues sit after runs of "no" of lengths 3, 12 and 40.
PATTERN = ["yes"] + ["no"] * 3 + ["yes"] + ["no"] * 12 + ["yes"] + ["no"] * 40 + ["yes"] + ["no"] * 70


def _answers():
    recs, k = [], 0
    for ann in ("e1", "e2"):
        for p, a in enumerate(PATTERN):
            recs.append(answer_record(f"{ann}-{p}", ann, f"i{p:03d}", a, p, stamp(k)))
            k += 1
    return answers_from_records(recs)


def _expected_found(n: int) -> int:
    """Plain loop over the pattern: yes answers before the n-th consecutive no (n = 0 treated as 1)."""
    n = max(n, 1)
    run = found = 0
    for a in PATTERN:
        if a == "yes":
            found += 1
            run = 0
        else:
            run += 1
            if run >= n:
                break
    return found


def test_detected_issues_follow_the_stopping_count():
    out = stopping_sensitivity(effective_answers(_answers()))
    assert out.height == 2 * len(DEFAULT_GRID)
    for r in out.iter_rows(named=True):
        n = (
            0
            if 1.0 in (r["p_chance"], r["p_plus"])
            else math.floor(math.log(r["p_chance"]) / math.log(1 - r["p_plus"]) + 1e-9)
        )
        assert r["stopping_count"] == n
        assert r["n_unanimous"] == _expected_found(n) == r["n_majority"]
    first = out.filter((pl.col("parameter") == "p_plus") & (pl.col("value") == 0.05)).row(0, named=True)
    assert first["stopping_count"] == 58 and first["n_unanimous"] == 4
    seq = out.filter(pl.col("parameter") == "p_plus").sort("value")["n_unanimous"].to_list()
    assert seq == sorted(seq, reverse=True)  # earlier stops can only lose issues


def test_grid_validation():
    with pytest.raises(ValueError, match="grid"):
        stopping_sensitivity(effective_answers(_answers()), grid=[0.0, 0.5])
