"""Stopping-rule sensitivity (Gröger et al. 2023 Appendix D, Figures 15-19).

Starting from p_chance = p₊ = 0.05, one parameter at a time grows to 1; each setting gives
n = stopping_count(p_chance, p₊), every recorded session is cut at its n-th consecutive "no", and the
confirmed issues (unanimous and majority, same panel rules as the protocol) are counted. Larger p means
earlier stops, so only answers that were actually given are needed.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import polars as pl

from noisycal_platform.cleaning.protocol import aggregate_answers, stopping_count, truncate_sessions

__all__ = ["DEFAULT_GRID", "SENSITIVITY_SCHEMA", "stopping_sensitivity"]

DEFAULT_GRID = tuple(float(x) for x in np.round(np.arange(0.05, 1.0001, 0.05), 2))

SENSITIVITY_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "issue_type": pl.String(),
    "parameter": pl.String(),  # "p_chance" | "p_plus"
    "value": pl.Float64(),
    "p_chance": pl.Float64(),
    "p_plus": pl.Float64(),
    "stopping_count": pl.Int64(),
    "n_unanimous": pl.Int64(),
    "n_majority": pl.Int64(),
}


def stopping_sensitivity(
    effective: pl.DataFrame,
    *,
    grid: Sequence[float] = DEFAULT_GRID,
    base: float = 0.05,
    roles: Sequence[str] | None = ("expert",),
) -> pl.DataFrame:
    """Detected issues per (dataset, issue_type) as p_chance or p₊ walks ``grid`` (the other at ``base``)."""
    g = [float(x) for x in grid]
    if not g or any(not 0 < x <= 1 for x in g):
        raise ValueError(f"grid values must be in (0, 1], got {list(grid)}")
    rows = []
    groups = sorted({(d, i) for d, i in effective.select("dataset", "issue_type").unique().iter_rows()})
    for parameter in ("p_chance", "p_plus"):
        for v in g:
            pc, pp = (v, base) if parameter == "p_chance" else (base, v)
            n = stopping_count(pc, pp)
            agg = aggregate_answers(truncate_sessions(effective, n), roles)
            for ds, it in groups:
                part = agg.filter((pl.col("dataset") == ds) & (pl.col("issue_type") == it))
                rows.append(dict(dataset=ds, issue_type=it, parameter=parameter, value=v, p_chance=pc,
                                 p_plus=pp, stopping_count=n, n_unanimous=int(part["unanimous"].sum()),
                                 n_majority=int(part["majority"].sum())))
    return pl.DataFrame(rows, schema=SENSITIVITY_SCHEMA)
