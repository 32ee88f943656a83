"""The SelfClean protocol's tables (Gröger et al. 2023 §3): the queue of candidates, the panel's verdicts on them, the
files
the cleaning removes and keeps, the label-error prevalence and Table 1. Pure: rankings and answers in, frames out.
The protocol's rules themselves (effective answer, panel, unanimous, majority, stopping rule) are in
:mod:`noisycal_platform.cleaning.protocol`.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np
import polars as pl

from noisycal_platform.cleaning.pipeline.schemas import (
    CONFIRMED_SCHEMA,
    ISSUE_TABLE_SCHEMA,
    PREVALENCE_SCHEMA,
    QUEUE_SCHEMA,
)
from noisycal_platform.cleaning.protocol import (
    ISSUE_TYPES,
    RULES,
    aggregate_answers,
    effective_answers,
    label_error_prevalence_ci,
    select_removals,
    truncate_sessions,
)
from noisycal_platform.cleaning.rankings.types import PairRanking, Ranking

__all__ = [
    "PANEL_ROLES",
    "check_files",
    "check_rule",
    "cleaned_file_list",
    "confirmation_queue",
    "confirmed_issues",
    "image_files",
    "issue_table",
    "label_error_prevalence",
    "panel_answers",
    "removed_files",
]


#: The confirming panel; lay raters enter agreement and expert-vs-lay only (Gröger et al. 2023 §4.5).
PANEL_ROLES = ("expert",)


def image_files(images: pl.DataFrame) -> pl.DataFrame:
    """``file_name``, ``label`` of the ``raw/images`` table in embedding-row order (``idx``)."""
    return images.sort("idx").select("file_name", pl.col("label").cast(pl.String))


def check_files(files: pl.DataFrame, need: Sequence[str] = ("file_name", "label")) -> None:
    missing = [c for c in need if c not in files.columns]
    if missing:
        raise ValueError(f"files: missing columns {missing}")
    if files["file_name"].null_count() or files["file_name"].n_unique() != files.height:
        raise ValueError("files: file_name must be non-null and unique")


def confirmation_queue(
    dataset: str,
    irrelevant: Ranking | None,
    near_dups: PairRanking | None,
    label_errors: Ranking | None,
    files: pl.DataFrame,
    max_per_type: int | None = None,
) -> pl.DataFrame:
    """Queue snapshot rows (``QUEUE_SCHEMA``) from the three rankings, most suspicious first.

    ``irrelevant``/``label_errors``: ``Ranking`` (``.order`` = row indices into ``files``);
    ``near_dups``: ``PairRanking`` (``.pairs`` k×2). ``files`` rows are in the index order the rankings
    use. Pairs are stored with ``item_id < item_id_2``; ``label`` is set for label_error rows only.
    ``max_per_type`` keeps the first candidates of each ranking (None = all).
    """
    if not isinstance(dataset, str) or not dataset:
        raise ValueError(f"dataset must be a non-empty str, got {dataset!r}")
    if max_per_type is not None and max_per_type < 0:
        raise ValueError(f"max_per_type must be >= 0 or None, got {max_per_type}")
    check_files(files)
    names = np.asarray(files["file_name"].to_list(), dtype=object)
    labels = np.asarray(files["label"].cast(pl.String).to_list(), dtype=object)
    n = len(names)
    lim = slice(None) if max_per_type is None else slice(0, max_per_type)
    parts = []
    for it, r in (("irrelevant", irrelevant), ("label_error", label_errors)):
        if r is None:
            continue
        order = np.asarray(r.order, dtype=np.int64)[lim]
        if order.size and (order.min() < 0 or order.max() >= n):
            raise ValueError(
                f"{it} ranking: order index out of range [0, {n}), got {order.min()}..{order.max()}"
            )
        parts.append(
            pl.DataFrame(
                {
                    "dataset": [dataset] * order.size,
                    "issue_type": [it] * order.size,
                    "position": np.arange(order.size, dtype=np.int64),
                    "item_id": names[order].tolist(),
                    "item_id_2": [None] * order.size,
                    "label": labels[order].tolist() if it == "label_error" else [None] * order.size,
                },
                schema=QUEUE_SCHEMA,
            )
        )
    if near_dups is not None:
        pairs = np.asarray(near_dups.pairs, dtype=np.int64).reshape(-1, 2)[lim]
        if pairs.size and (pairs.min() < 0 or pairs.max() >= n or (pairs[:, 0] == pairs[:, 1]).any()):
            raise ValueError(
                f"near_dups: pairs must be distinct indices in [0, {n}), got {pairs[:3].tolist()}"
            )
        a, b = names[pairs[:, 0]], names[pairs[:, 1]]
        swap = a > b
        lo, hi = np.where(swap, b, a), np.where(swap, a, b)
        k = pairs.shape[0]
        parts.append(
            pl.DataFrame(
                {
                    "dataset": [dataset] * k,
                    "issue_type": ["near_duplicate"] * k,
                    "position": np.arange(k, dtype=np.int64),
                    "item_id": lo.tolist(),
                    "item_id_2": hi.tolist(),
                    "label": [None] * k,
                },
                schema=QUEUE_SCHEMA,
            )
        )
    if not parts:
        return pl.DataFrame(schema=QUEUE_SCHEMA)
    return pl.concat(parts).sort(["issue_type", "position"])


def panel_answers(answers: pl.DataFrame, roles: Sequence[str] | None, n_stop: int | None) -> pl.DataFrame:
    eff = effective_answers(answers)
    if roles is not None:
        eff = eff.filter(pl.col("role").is_in(list(roles)))
    if n_stop is not None:
        eff = truncate_sessions(eff, n_stop)
    return eff


def confirmed_issues(
    answers: pl.DataFrame,
    queue: pl.DataFrame,
    *,
    roles: Sequence[str] | None = ("expert",),
    n_stop: int | None = None,
) -> pl.DataFrame:
    """Per candidate: n_yes, n_no, n_annotators, n_panel, seen_by_all, unanimous, majority.

    Schema ``CONFIRMED_SCHEMA``.

    All queue rows, plus answered candidates of the queue's datasets that are not in the queue (position
    null); answers for other datasets are ignored. Panel = annotators of the
    given ``roles`` (None = all) who answered that (dataset, issue_type); see ``protocol``. ``n_stop``
    re-applies the stopping rule to the recorded sessions (None = take the answers as recorded).
    """
    datasets = queue["dataset"].unique().to_list()
    answers = answers.filter(pl.col("dataset").is_in(datasets))
    agg = aggregate_answers(panel_answers(answers, roles, n_stop), roles=None)
    q = queue.select(list(QUEUE_SCHEMA)).with_columns(pl.col("item_id_2").fill_null("").alias("_k2"))
    a = agg.with_columns(pl.col("item_id_2").fill_null("").alias("_k2")).drop("item_id_2")
    key = ["dataset", "issue_type", "item_id", "_k2"]
    out = q.join(a, on=key, how="full", coalesce=True)
    out = out.with_columns(
        pl.when(pl.col("_k2") == "").then(None).otherwise(pl.col("_k2")).alias("item_id_2")
    )
    panel = agg.group_by(["dataset", "issue_type"]).agg(pl.col("n_panel").max().alias("_p"))
    out = out.join(panel, on=["dataset", "issue_type"], how="left").with_columns(
        pl.col("n_yes").fill_null(0),
        pl.col("n_no").fill_null(0),
        pl.col("n_annotators").fill_null(0),
        pl.col("_p").fill_null(0).alias("n_panel"),
    )
    out = out.with_columns(
        ((pl.col("n_annotators") == pl.col("n_panel")) & (pl.col("n_panel") > 0)).alias("seen_by_all"),
        ((pl.col("n_yes") == pl.col("n_panel")) & (pl.col("n_panel") > 0)).alias("unanimous"),
        (2 * pl.col("n_yes") > pl.col("n_panel")).alias("majority"),
    )
    return (
        out.select(list(CONFIRMED_SCHEMA))
        .cast(CONFIRMED_SCHEMA)
        .sort(["dataset", "issue_type", "position", "item_id", "item_id_2"], nulls_last=True)
    )


def check_rule(rule: str) -> None:
    if rule not in RULES:
        raise ValueError(f"rule must be one of {RULES}, got {rule!r}")


def removed_files(
    files: pl.DataFrame, confirmed: pl.DataFrame, rule: str = "unanimous", seed: int = 0
) -> pl.DataFrame:
    """Files the cleaning removes under ``rule``: columns file_name, reason ("irrelevant"|"near_duplicate").

    Confirmed irrelevant files, and for each connected group of confirmed near-duplicate pairs all but one
    seeded random member (``protocol.select_removals``). Label errors are never removed (Gröger et al. 2023 §3.4).
    Candidates naming files absent from ``files`` are ignored.
    """
    check_rule(rule)
    check_files(files, ("file_name",))
    names = set(files["file_name"].to_list())
    c = confirmed.filter(pl.col(rule))
    irr = [f for f in c.filter(pl.col("issue_type") == "irrelevant")["item_id"].to_list() if f in names]
    nd = c.filter(pl.col("issue_type") == "near_duplicate")
    pairs = [
        (a, b)
        for a, b in zip(nd["item_id"].to_list(), nd["item_id_2"].to_list(), strict=True)
        if a in names and b in names
    ]
    rem = select_removals(irr, pairs, seed)
    return pl.DataFrame(
        {"file_name": list(rem), "reason": list(rem.values())},
        schema={"file_name": pl.String(), "reason": pl.String()},
    ).sort("file_name")


def cleaned_file_list(
    files: pl.DataFrame, confirmed: pl.DataFrame, rule: str = "unanimous", seed: int = 0
) -> pl.DataFrame:
    """Kept files (one column ``file_name``, in ``files`` order) = ``files`` minus :func:`removed_files`."""
    rem = removed_files(files, confirmed, rule, seed)
    return files.select("file_name").filter(~pl.col("file_name").is_in(rem["file_name"].to_list()))


def label_error_prevalence(
    confirmed: pl.DataFrame, files: pl.DataFrame, *, dataset: str | None = None
) -> pl.DataFrame:
    """Estimated label-error prevalence per rule: confirmed label errors / N with a Clopper-Pearson 95% CI.

    Reported, not corrected (Gröger et al. 2023 §3.4); a lower bound because only the top of the ranking is reviewed.
    """
    check_files(files, ("file_name",))
    ds = dataset or (confirmed["dataset"][0] if confirmed.height else "")
    le = confirmed.filter((pl.col("issue_type") == "label_error") & (pl.col("dataset") == ds))
    names = set(files["file_name"].to_list())
    rows = []
    for rule in RULES:
        k = len({f for f in le.filter(pl.col(rule))["item_id"].to_list() if f in names})
        p, lo, hi = label_error_prevalence_ci(k, files.height)
        rows.append(
            dict(
                dataset=ds,
                rule=rule,
                n_label_errors=k,
                n_items=files.height,
                prevalence=p,
                ci_low=lo,
                ci_high=hi,
            )
        )
    return pl.DataFrame(rows, schema=PREVALENCE_SCHEMA)


def issue_table(confirmed: pl.DataFrame, sizes: Mapping[str, int]) -> pl.DataFrame:
    """Gröger et al. 2023 Table 1: confirmed issues per dataset, rule and issue type, count and % of dataset size."""
    rows = []
    for ds in sorted(sizes):
        part = confirmed.filter(pl.col("dataset") == ds)
        for rule in RULES:
            for it in ISSUE_TYPES:
                k = int(part.filter((pl.col("issue_type") == it) & pl.col(rule)).height)
                rows.append(
                    dict(
                        dataset=ds,
                        size=int(sizes[ds]),
                        rule=rule,
                        issue_type=it,
                        n_issues=k,
                        percent=100.0 * k / sizes[ds] if sizes[ds] else float("nan"),
                    )
                )
    return pl.DataFrame(rows, schema=ISSUE_TABLE_SCHEMA)
