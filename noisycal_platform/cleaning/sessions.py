"""How each confirmation session ended (Gröger et al. 2023 §3.3 and Appendix C, Figure 9).

A session is one annotator on one (dataset, issue type). It walks the queue in ranking order: the answered
prefix is the candidates from the first one on that the annotator has answered (after undos), up to the
first unanswered one. Along it, a run of ``n_stop`` consecutive "no" answers ends the session by the
stopping rule (the answer that completes the run is kept); a prefix that reaches the last candidate
without such a run ends it at the end of the candidates; otherwise the session is still open. This is the
walk the confirmation web tool makes for each annotator; answers are matched to the queue by item, so a
re-exported queue keeps them.
"""

from __future__ import annotations

import polars as pl

from noisycal_platform.cleaning.protocol import SESSION, effective_answers

__all__ = ["ENDED_BY", "SESSION_ENDINGS_SCHEMA", "session_endings"]

#: ``ended_by`` values; null = the session is still open.
ENDED_BY = ("stopping_rule", "end_of_candidates")
SESSION_ENDINGS_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "issue_type": pl.String(),
    "annotator_id": pl.String(),
    "role": pl.String(),
    "candidates": pl.Int64(),  # candidates of this issue type in the queue
    "answered": pl.Int64(),  # the walked prefix, up to and including the stopping answer
    "yes": pl.Int64(),
    "percent_yes": pl.Float64(),  # 100 · yes / answered (seed Figure 9)
    "consecutive_no": pl.Int64(),  # trailing run of "no" at the end of the prefix
    "stopping_count": pl.Int64(),
    "ended_by": pl.String(),
}


def session_endings(answers: pl.DataFrame, queue: pl.DataFrame, n_stop: int) -> pl.DataFrame:
    """``SESSION_ENDINGS_SCHEMA``, one row per session in ``answers`` (records of
    :func:`~noisycal_platform.cleaning.protocol.answers_from_records`) against ``queue`` (``QUEUE_SCHEMA``)."""
    if isinstance(n_stop, bool) or not isinstance(n_stop, int) or n_stop < 0:
        raise ValueError(f"n_stop must be an int >= 0, got {n_stop!r}")
    n = max(n_stop, 1)
    eff = effective_answers(answers)
    sizes = queue.group_by("dataset", "issue_type").agg(pl.len().cast(pl.Int64).alias("candidates"))
    q = queue.select("dataset", "issue_type", "item_id", "item_id_2", pl.col("position").alias("_q"))
    a = eff.select(*SESSION, "role", "item_id", "item_id_2", "yes").join(
        q, on=["dataset", "issue_type", "item_id", "item_id_2"], how="inner", nulls_equal=True
    )
    a = a.sort(*SESSION, "_q").with_columns(pl.int_range(pl.len()).over(SESSION).alias("_i"))
    # the answered prefix: queue positions 0, 1, 2, ... without a gap
    gap = pl.when(pl.col("_q") != pl.col("_i")).then(pl.col("_i")).otherwise(None).min().over(SESSION)
    a = a.with_columns(gap.fill_null(pl.len().over(SESSION)).alias("_m")).filter(pl.col("_i") < pl.col("_m"))
    last_yes = pl.when(pl.col("yes")).then(pl.col("_i")).otherwise(-1).cum_max().over(SESSION)
    a = a.with_columns((pl.col("_i") - last_yes).alias("_run"))
    stop = pl.when(pl.col("_run") >= n).then(pl.col("_i")).otherwise(None).min().over(SESSION)
    a = a.with_columns(stop.alias("_stop")).filter(pl.col("_stop").is_null() | (pl.col("_i") <= pl.col("_stop")))
    walked = a.group_by(SESSION).agg(
        pl.len().cast(pl.Int64).alias("answered"),
        pl.col("yes").sum().cast(pl.Int64).alias("yes"),
        pl.col("_run").last().cast(pl.Int64).alias("consecutive_no"),
        pl.col("_stop").first().is_not_null().alias("_by_rule"),
    )
    sessions = eff.group_by(SESSION).agg(pl.col("role").last())
    out = (
        sessions.join(sizes, on=["dataset", "issue_type"], how="left")
        .join(walked, on=list(SESSION), how="left")
        .with_columns(
            pl.col("candidates").fill_null(0),
            pl.col("answered").fill_null(0),
            pl.col("yes").fill_null(0),
            pl.col("consecutive_no").fill_null(0),
            pl.lit(n, pl.Int64).alias("stopping_count"),
        )
    )
    ended = (
        pl.when(pl.col("_by_rule").fill_null(False)).then(pl.lit(ENDED_BY[0]))
        .when(pl.col("answered") >= pl.col("candidates")).then(pl.lit(ENDED_BY[1]))
        .otherwise(None)
    )
    pct = pl.when(pl.col("answered") > 0).then(100.0 * pl.col("yes") / pl.col("answered")).otherwise(None)
    out = out.with_columns(ended.alias("ended_by"), pct.alias("percent_yes"))
    return out.select(list(SESSION_ENDINGS_SCHEMA)).cast(SESSION_ENDINGS_SCHEMA).sort(list(SESSION))
