"""Hand-made tables for the correctness tests."""

from __future__ import annotations

import polars as pl


def auroc_grid(auroc: list[float], **columns: list) -> pl.DataFrame:
    """One dataset "d", UE methods a, b × criteria f, g (rows a-f, a-g, b-f, b-g) with the given AUROCs, plus any
    further columns given."""
    return pl.DataFrame(
        {"dataset": ["d"] * 4, "ue_method": ["a", "a", "b", "b"], "criterion": ["f", "g", "f", "g"], "auroc": auroc,
         **columns}
    )
