"""SelfClean confirmation protocol (Gröger et al. 2023 §3.3-3.4): stopping rule, undo, sessions, aggregation, removals.

Definitions used throughout the cleaning package:

* **candidate** = (dataset, issue_type, item_id, item_id_2); item_id_2 is null except for near-duplicate
  pairs, which are stored with ``item_id < item_id_2`` (lexicographic) so a pair has one identity.
* **effective answer** = a "yes"/"no" record that no effective "undo" cancels; when one annotator has
  several effective answers for one candidate (re-answered after an undo), the latest counts
  (timestamp, then record order). Records are never erased; undo only changes what counts.
* **session** = the effective answers of one (dataset, issue_type, annotator) in ranking order
  (``position``). A session stops after ``n`` consecutive "no" (§3.3); with ``n = 0`` (p = 1) it is
  treated as 1 (stop at the first "no"), because a session cannot stop before its first answer.
* **panel** = the annotators with at least one effective answer for (dataset, issue_type), optionally
  restricted to some roles (the paper aggregates the three experts, §3.4).
* **unanimous**: every panel member answered the candidate and all said "yes" (§3.4).
  **majority**: more than half of the panel said "yes" (n_yes > |panel|/2); a candidate that only part
  of the panel saw can still reach it. With a panel of three: unanimous = 3 yes, majority = ≥ 2 yes.
"""

from __future__ import annotations

import math
import numbers
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

import numpy as np
import polars as pl
from scipy import sparse
from scipy.sparse.csgraph import connected_components

from noisycal_platform.contracts import (
    ANSWER_ROLES,
    ANSWERS,
    CONFIRMATION_FIELDS,
    ISSUE_TYPES,
    confirmation_problem,
    parse_utc_timestamp,
)
from noisycal_platform.undo import LogEntry, cancelled_ids

__all__ = [
    "ANSWERS",
    "ANSWER_ROLES",
    "ANSWER_SCHEMA",
    "ISSUE_TYPES",
    "KEY",
    "RULES",
    "aggregate_answers",
    "answers_from_records",
    "effective_answers",
    "label_error_prevalence_ci",
    "queue_depth",
    "select_removals",
    "session_stop_index",
    "stopping_count",
    "truncate_sessions",
]

RULES = ("unanimous", "majority")
KEY = ("dataset", "issue_type", "item_id", "item_id_2")
SESSION = ("dataset", "issue_type", "annotator_id")

_FIELD_TYPES: dict[str, pl.DataType] = {"position": pl.Int64(), "timestamp": pl.Datetime("us", "UTC")}
# raw/confirmations: the contract's record fields (text unless typed above) + the file each came from
ANSWER_SCHEMA: dict[str, pl.DataType] = {
    **{k: _FIELD_TYPES.get(k, pl.String()) for k in CONFIRMATION_FIELDS},
    "source_file": pl.String(),
}


def stopping_count(p_chance: float = 0.05, p_plus: float = 0.05) -> int:
    """n_clean = ⌊ln p_chance / ln(1 − p₊)⌋ consecutive "no" answers end a session (Gröger et al. 2023 §3.3).

    A run of n "no" has probability (1 − p₊)^n if each item were an issue with probability p₊; the seed
    asks for (1 − p₊)^n ≤ p_chance but takes the floor, so at the defaults n = 58 and 0.95^58 = 0.051.
    p_chance = 1 or p₊ = 1 gives 0.
    """
    for name, p in (("p_chance", p_chance), ("p_plus", p_plus)):
        if isinstance(p, bool) or not isinstance(p, numbers.Real) or not math.isfinite(p) or not 0 < p <= 1:
            raise ValueError(f"{name} must be in (0, 1], got {p!r}")
    if p_chance == 1 or p_plus == 1:
        return 0
    # tiny epsilon so that exact ratios (e.g. 0.25 vs 0.5**2) are not floored one too low
    return math.floor(math.log(float(p_chance)) / math.log1p(-float(p_plus)) + 1e-9)


def answers_from_records(
    records: Iterable[Mapping[str, Any]], source_file: str | None = None
) -> pl.DataFrame:
    """Validated answer records -> frame (``ANSWER_SCHEMA``: the record fields + ``source_file``).

    Each record is checked once with :func:`noisycal_platform.contracts.confirmation_problem` (ValueError
    names the record's answer_id and field). Repeated identical answer_ids are collapsed (exactly-once);
    the same answer_id with different content is an error. Near-duplicate pairs are stored with
    ``item_id < item_id_2``. ``source_file`` fills records that do not carry one.
    """
    rows: dict[str, dict] = {}
    for i, rec in enumerate(records):
        aid = rec.get("answer_id") if isinstance(rec, Mapping) else None
        where = f"record {i} (answer_id={aid!r})"
        problem = confirmation_problem(rec)
        if problem is not None:
            raise ValueError(f"{where}: {problem}")
        a, b = rec["item_id"], rec.get("item_id_2")
        if b is not None:
            a, b = min(a, b), max(a, b)
        row = dict(
            answer_id=aid,
            dataset=rec["dataset"],
            issue_type=rec["issue_type"],
            item_id=a,
            item_id_2=b,
            annotator_id=rec["annotator_id"],
            role=rec["role"],
            answer=rec["answer"],
            undoes=rec.get("undoes"),
            position=int(rec["position"]),
            timestamp=parse_utc_timestamp(rec["timestamp"]),
            source_file=rec.get("source_file", source_file),
        )
        if aid in rows:
            old = {k: v for k, v in rows[aid].items() if k != "source_file"}
            if old != {k: v for k, v in row.items() if k != "source_file"}:
                raise ValueError(f"{where}: answer_id repeated with different content")
            continue
        rows[aid] = row
    return pl.DataFrame(list(rows.values()), schema=ANSWER_SCHEMA)


def _key_cols(df: pl.DataFrame) -> pl.DataFrame:
    return df.with_columns(pl.col("item_id_2").fill_null("").alias("_k2"))


def effective_answers(answers: pl.DataFrame) -> pl.DataFrame:
    """Apply undo records and keep each annotator's latest effective answer per candidate.

    Input: the raw/confirmations frame (``ANSWER_SCHEMA``; ``source_file`` optional). Undo follows the one
    rule of :mod:`noisycal_platform.undo` (records in timestamp order; an undo cancels the earlier record of
    the same annotator it names, which may itself be an undo, restoring the answer before it). Raises
    ValueError for an undo naming an unknown, a later or another annotator's answer. Output: the yes/no
    rows that count, plus a boolean column ``yes``; undo rows are dropped from the *view* only.
    """
    missing = [c for c in ANSWER_SCHEMA if c not in answers.columns and c != "source_file"]
    if missing:
        raise ValueError(f"answers: missing columns {missing}")
    df = answers.with_row_index("_row").sort(["timestamp", "_row"])
    entries = [LogEntry(answer_id=a, annotator_id=w, undoes=u if ans == "undo" else None)
               for a, w, ans, u in df.select("answer_id", "annotator_id", "answer", "undoes").iter_rows()]
    cancelled = cancelled_ids(entries, strict=True)
    eff = df.filter(pl.col("answer").is_in(["yes", "no"]) & ~pl.col("answer_id").is_in(list(cancelled)))
    eff = _key_cols(eff)
    eff = (
        eff.group_by([*KEY[:3], "_k2", "annotator_id"], maintain_order=True)
        .agg(pl.all().sort_by("timestamp", "_row").last())
        .sort(["dataset", "issue_type", "annotator_id", "position", "_row"])
    )
    return eff.with_columns((pl.col("answer") == "yes").alias("yes")).drop("_k2", "_row")


def queue_depth(answers: pl.DataFrame, dataset: str, issue_type: str, *, initial: int, n_stop: int,
                ahead: int = 2) -> int:
    """Candidates the queue of (dataset, issue_type) must hold: max(initial, m + ahead · n), with m the deepest
    answered rank (1 + the largest ``position`` of an effective answer; 0 before any) and n = max(n_stop, 1).

    Re-ranking to this depth whenever answers arrive keeps ``ahead`` stopping runs of candidates beyond the
    deepest answer, so only the stopping rule (§3.3) or the true end of the ranking ends a session, never a
    fixed queue length. ``answers``: raw/confirmations records (``ANSWER_SCHEMA``).
    """
    for name, v in (("initial", initial), ("n_stop", n_stop), ("ahead", ahead)):
        if isinstance(v, bool) or not isinstance(v, numbers.Integral) or v < 0:
            raise ValueError(f"{name} must be an int >= 0, got {v!r}")
    if issue_type not in ISSUE_TYPES:
        raise ValueError(f"issue_type must be one of {ISSUE_TYPES}, got {issue_type!r}")
    mine = answers.filter((pl.col("dataset") == dataset) & (pl.col("issue_type") == issue_type))
    pos = effective_answers(mine)["position"] if mine.height else pl.Series([], dtype=pl.Int64)
    deepest = 0 if pos.len() == 0 or pos.max() is None else int(pos.max()) + 1  # type: ignore[arg-type]
    return max(int(initial), deepest + int(ahead) * max(int(n_stop), 1))


def session_stop_index(no: np.ndarray, n_stop: int) -> int:
    """Number of answers a session keeps: up to and including the n-th consecutive "no" (§3.3)."""
    no = np.asarray(no, dtype=bool)
    n = max(int(n_stop), 1)
    idx = np.arange(no.size)
    last_yes = np.maximum.accumulate(np.where(~no, idx, -1)) if no.size else idx
    run = idx - last_yes
    hit = np.flatnonzero(run >= n)
    return int(hit[0]) + 1 if hit.size else int(no.size)


def truncate_sessions(effective: pl.DataFrame, n_stop: int) -> pl.DataFrame:
    """Keep each session's answers up to its stopping point (ranking order; ``n_stop`` ≥ 0)."""
    if not isinstance(n_stop, int | np.integer) or n_stop < 0:
        raise ValueError(f"n_stop must be an int >= 0, got {n_stop!r}")
    n = max(int(n_stop), 1)
    df = effective.sort([*SESSION, "position"])
    idx = pl.int_range(pl.len()).over(SESSION)
    df = df.with_columns(idx.alias("_i"))
    df = df.with_columns(
        pl.when(pl.col("yes")).then(pl.col("_i")).otherwise(-1).cum_max().over(SESSION).alias("_ly")
    )
    df = df.with_columns((pl.col("_i") - pl.col("_ly") >= n).alias("_hit"))
    stop = pl.when(pl.col("_hit")).then(pl.col("_i")).otherwise(None).min().over(SESSION)
    df = df.with_columns(stop.fill_null(pl.len().over(SESSION)).alias("_stop"))
    return df.filter(pl.col("_i") <= pl.col("_stop")).drop("_i", "_ly", "_hit", "_stop")


def aggregate_answers(effective: pl.DataFrame, roles: Sequence[str] | None = ("expert",)) -> pl.DataFrame:
    """Per answered candidate: n_yes, n_no, n_annotators, n_panel, seen_by_all, unanimous, majority.

    Panel and rules as in the module docstring; ``roles=None`` uses every annotator.
    """
    if roles is not None:
        bad = [r for r in roles if r not in ANSWER_ROLES]
        if bad:
            raise ValueError(f"roles must be a subset of {ANSWER_ROLES}, got {list(roles)}")
        effective = effective.filter(pl.col("role").is_in(list(roles)))
    eff = _key_cols(effective)
    panel = eff.group_by(["dataset", "issue_type"]).agg(pl.col("annotator_id").n_unique().alias("n_panel"))
    agg = eff.group_by([*KEY[:3], "_k2"]).agg(
        pl.col("item_id_2").first(),
        pl.col("yes").sum().cast(pl.Int64).alias("n_yes"),
        (~pl.col("yes")).sum().cast(pl.Int64).alias("n_no"),
        pl.col("annotator_id").n_unique().cast(pl.Int64).alias("n_annotators"),
    )
    agg = agg.join(panel, on=["dataset", "issue_type"], how="left").with_columns(
        pl.col("n_panel").cast(pl.Int64)
    )
    return agg.with_columns(
        (pl.col("n_annotators") == pl.col("n_panel")).alias("seen_by_all"),
        (pl.col("n_yes") == pl.col("n_panel")).alias("unanimous"),
        (2 * pl.col("n_yes") > pl.col("n_panel")).alias("majority"),
    ).drop("_k2")


def select_removals(
    irrelevant: Iterable[str],
    duplicate_pairs: Iterable[tuple[str, str]],
    seed: int | np.random.Generator = 0,
) -> dict[str, str]:
    """Files to drop: every confirmed irrelevant file, and per connected group of confirmed near-duplicate
    pairs all but one randomly chosen member (Gröger et al. 2023 §3.4; groups, not pairs, so a chain a–b–c keeps one).

    Irrelevant files are dropped first; the kept member of a group is drawn among its remaining files.
    Returns {file_name: reason} with reason "irrelevant" or "near_duplicate". Deterministic given ``seed``.
    """
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    removed = {f: "irrelevant" for f in sorted(set(irrelevant))}
    pairs = sorted({(min(a, b), max(a, b)) for a, b in duplicate_pairs if a != b})
    if not pairs:
        return removed
    nodes = sorted({x for p in pairs for x in p} - set(removed))
    if not nodes:
        return removed
    pos = {f: i for i, f in enumerate(nodes)}
    edges = np.array([(pos[a], pos[b]) for a, b in pairs if a in pos and b in pos], dtype=np.int64)
    n = len(nodes)
    if edges.size == 0:
        return removed
    g = sparse.coo_matrix((np.ones(len(edges)), (edges[:, 0], edges[:, 1])), shape=(n, n))
    _, comp = connected_components(g, directed=False)
    in_pair = np.zeros(n, bool)
    in_pair[edges.ravel()] = True
    key = rng.random(n)
    order = np.lexsort((key, comp))  # within each component, the smallest random key is kept
    first = np.r_[True, comp[order][1:] != comp[order][:-1]]
    keep = np.zeros(n, bool)
    keep[order[first]] = True
    for i in np.flatnonzero(~keep & in_pair):
        removed[nodes[i]] = "near_duplicate"
    return removed


def label_error_prevalence_ci(n_errors: int, n_items: int, level: float = 0.95) -> tuple[float, float, float]:
    """Prevalence k/N with an exact Clopper-Pearson interval (Gröger et al. 2023 §3.4: reported, not corrected).

    It is a lower bound: only the top of the ranking was reviewed.
    """
    if n_items <= 0 or not 0 <= n_errors <= n_items:
        raise ValueError(f"need 0 <= n_errors <= n_items and n_items > 0, got {n_errors}, {n_items}")
    from scipy.stats import binomtest  # lazy: scipy.stats is slow to import

    ci = binomtest(int(n_errors), int(n_items)).proportion_ci(confidence_level=level, method="exact")
    return n_errors / n_items, float(ci.low), float(ci.high)
