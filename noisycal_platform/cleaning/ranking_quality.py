"""Ranking quality and annotation speed-up (Gröger et al. 2023 §4.4, Appendix C Tables 3-4).

* Against the answers: on the candidates every panel member answered, y = unanimous "yes", the ranking
  score is the rank (earlier = more suspicious); AUROC, AP and AUPRG (higher is better) next to the
  positive rate, which is the uninformed baseline for AP (0.5 for AUROC, 0 for AUPRG).
* Against a known truth (the demo's injected contamination): the whole ranking, with the candidates the
  ranking never listed (e.g. pairs beyond the top-k) tied at the bottom, so rankings with different
  candidate sets are comparable.
* Speed-up = n_total / n_annotated, with n_total = N items (N(N−1)/2 for pairs) and n_annotated the
  mean number of candidates an annotator answered (exhaustive review = every annotator answers all).
  Micro-average = Σ n_total / Σ n_annotated over datasets; macro-average = mean of the factors.
"""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np
import polars as pl

from noisycal_platform.metrics import curve_metrics

if TYPE_CHECKING:
    from noisycal_platform.cleaning.rankings.types import PairRanking, Ranking
    from noisycal_platform.cleaning.simulate import Truth

__all__ = [
    "QUALITY_SCHEMA",
    "SPEEDUP_SCHEMA",
    "TRUTH_FILE",
    "TRUTH_SCHEMA",
    "ranked_list_metrics",
    "ranking_quality_by_annotator",
    "ranking_quality_vs_answers",
    "ranking_truth_table",
    "read_truth",
    "speedup_averages",
    "speedup_table",
]

#: A dataset folder may ship its known contamination here (the demo does): irrelevant file names,
#: near-duplicate pairs ``[a, b]`` and flipped labels ``{"file_name", ...}``.
TRUTH_FILE = "truth.json"

QUALITY_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "issue_type": pl.String(),
    "n_items": pl.Int64(),
    "n_positive": pl.Int64(),
    "positive_rate": pl.Float64(),
    "auroc": pl.Float64(),
    "ap": pl.Float64(),
    "auprg": pl.Float64(),
}
TRUTH_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "ranking": pl.String(),
    "issue_type": pl.String(),
    "n_total": pl.Int64(),
    "n_ranked": pl.Int64(),
    "n_positive": pl.Int64(),
    "n_positive_ranked": pl.Int64(),
    "positive_rate": pl.Float64(),
    "auroc": pl.Float64(),
    "ap": pl.Float64(),
    "auprg": pl.Float64(),
    "recall_at_k": pl.Float64(),
}
SPEEDUP_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),  # or "micro-average" / "macro-average"
    "issue_type": pl.String(),
    "n_total": pl.Float64(),
    "n_annotators": pl.Int64(),
    "n_annotated_mean": pl.Float64(),
    "n_annotated_union": pl.Int64(),
    "speed_up": pl.Float64(),
}


def ranked_list_metrics(y_ranked, n_pos_unranked: int = 0, n_neg_unranked: int = 0) -> dict[str, float]:
    """AUROC/AP/AUPRG of a ranked list (most suspicious first) of 0/1 truths, with an unranked tail.

    The tail (``n_pos_unranked`` positives, ``n_neg_unranked`` negatives) forms one tie group below the
    list. ``recall_at_k`` = share of all positives inside the list. nan when a class is missing.
    """
    y = np.asarray(y_ranked, dtype=float)
    if y.ndim != 1 or not np.isin(y, (0, 1)).all():
        raise ValueError(f"y_ranked must be a 1-D 0/1 vector, got shape {y.shape}")
    if n_pos_unranked < 0 or n_neg_unranked < 0:
        raise ValueError(f"unranked counts must be >= 0, got {n_pos_unranked}, {n_neg_unranked}")
    pos = np.r_[y, float(n_pos_unranked)]
    neg = np.r_[1 - y, float(n_neg_unranked)]
    res = {k: float(v) for k, v in curve_metrics(pos, neg).items()}
    total_pos = y.sum() + n_pos_unranked
    res["recall_at_k"] = float(y.sum() / total_pos) if total_pos > 0 else float("nan")
    return res


def ranking_quality_vs_answers(confirmed: pl.DataFrame) -> pl.DataFrame:
    """Per (dataset, issue_type): ranking vs unanimous answers on candidates all panel members answered.

    ``confirmed``: output of ``pipeline.confirmed_issues`` (needs position, seen_by_all, unanimous).
    """
    need = {"dataset", "issue_type", "position", "seen_by_all", "unanimous"}
    if need - set(confirmed.columns):
        raise ValueError(f"confirmed: missing columns {sorted(need - set(confirmed.columns))}")
    df = confirmed.filter(pl.col("seen_by_all") & pl.col("position").is_not_null())
    rows = []
    for (ds, it), part in sorted(df.group_by(["dataset", "issue_type"]), key=lambda g: g[0]):
        part = part.sort("position")
        y = part["unanimous"].cast(pl.Float64).to_numpy()
        res = curve_metrics(y, 1 - y)
        rows.append(dict(dataset=ds, issue_type=it, n_items=y.size, n_positive=int(y.sum()),
                         positive_rate=float(y.mean()), **{k: float(v) for k, v in res.items()}))
    return pl.DataFrame(rows, schema=QUALITY_SCHEMA)


def ranking_quality_by_annotator(effective: pl.DataFrame) -> pl.DataFrame:
    """Per (dataset, issue_type, annotator): ranking vs that annotator's own answers on the candidates they
    answered (Gröger et al. 2023 Figures 10-14). ``effective``: ``protocol.effective_answers`` output.

    Columns: ``QUALITY_SCHEMA`` + annotator_id, role.
    """
    need = {"dataset", "issue_type", "annotator_id", "role", "position", "yes"}
    if need - set(effective.columns):
        raise ValueError(f"effective: missing columns {sorted(need - set(effective.columns))}")
    rows = []
    keys = ["dataset", "issue_type", "annotator_id"]
    for (ds, it, ann), part in sorted(effective.group_by(keys), key=lambda g: g[0]):
        part = part.sort("position")
        y = part["yes"].cast(pl.Float64).to_numpy()
        res = curve_metrics(y, 1 - y)
        rows.append(dict(dataset=ds, issue_type=it, annotator_id=ann, role=part["role"][0], n_items=y.size,
                         n_positive=int(y.sum()), positive_rate=float(y.mean()),
                         **{k: float(v) for k, v in res.items()}))
    return pl.DataFrame(rows, schema={**QUALITY_SCHEMA, "annotator_id": pl.String(), "role": pl.String()})


def speedup_table(effective: pl.DataFrame, n_items: dict[str, int]) -> pl.DataFrame:
    """Speed-up of the protocol over exhaustive review per (dataset, issue_type) + micro/macro averages.

    ``effective``: effective answers (filter roles beforehand); ``n_items``: dataset -> N.
    """
    rows = []
    for (ds, it), part in sorted(effective.group_by(["dataset", "issue_type"]), key=lambda g: g[0]):
        if ds not in n_items or n_items[ds] < 2:
            raise ValueError(f"n_items must give N >= 2 for dataset {ds!r}, got {n_items.get(ds)!r}")
        n = n_items[ds]
        total = n * (n - 1) / 2 if it == "near_duplicate" else float(n)
        per = part.group_by("annotator_id").len()["len"].to_numpy()
        union = part.select(pl.struct("item_id", pl.col("item_id_2").fill_null("")).n_unique()).item()
        mean = float(per.mean())
        rows.append(dict(dataset=ds, issue_type=it, n_total=total, n_annotators=per.size,
                         n_annotated_mean=mean, n_annotated_union=int(union), speed_up=total / mean))
    return speedup_averages(pl.DataFrame(rows, schema=SPEEDUP_SCHEMA))


def speedup_averages(per_dataset: pl.DataFrame) -> pl.DataFrame:
    """``per_dataset`` speed-up rows followed by the micro-average (Σ n_total / Σ n_annotated_mean) and the
    macro-average (mean of the factors) per issue type, over every dataset in the table."""
    out = (
        per_dataset.select(list(SPEEDUP_SCHEMA))
        .cast(SPEEDUP_SCHEMA)
        .filter(~pl.col("dataset").is_in(["micro-average", "macro-average"]))
    )
    avg = []
    for it in sorted(set(out["issue_type"].to_list())):
        part = out.filter(pl.col("issue_type") == it)
        avg.append(dict(dataset="micro-average", issue_type=it, n_total=part["n_total"].sum(),
                        n_annotators=None, n_annotated_mean=part["n_annotated_mean"].sum(),
                        n_annotated_union=None,
                        speed_up=part["n_total"].sum() / part["n_annotated_mean"].sum()))
        avg.append(dict(dataset="macro-average", issue_type=it, n_total=None, n_annotators=None,
                        n_annotated_mean=None, n_annotated_union=None, speed_up=part["speed_up"].mean()))
    return pl.concat([out, pl.DataFrame(avg, schema=SPEEDUP_SCHEMA)])


def ranking_truth_table(
    dataset: str,
    files: pl.DataFrame,
    truth: Truth,
    *,
    irrelevant: Ranking | None = None,
    near_dups: PairRanking | None = None,
    label_errors: Ranking | None = None,
    name: str = "selfclean",
) -> pl.DataFrame:
    """Each ranking against the known truth (``TRUTH_SCHEMA``): all N items, or all N(N−1)/2 pairs with the
    pairs beyond the ranked top-k tied at the bottom. ``name`` labels the embedding (e.g. "baseline")."""
    if "file_name" not in files.columns:
        raise ValueError(f"files: missing column file_name, got {files.columns}")
    names = np.asarray(files["file_name"].to_list(), dtype=object)
    n = len(names)
    rows = []
    for it, r, pos_set in (
        ("irrelevant", irrelevant, truth.irrelevant),
        ("label_error", label_errors, truth.label_errors),
    ):
        if r is None:
            continue
        order = np.asarray(r.order, dtype=np.int64)
        is_pos = files["file_name"].is_in(list(pos_set)).to_numpy()  # vectorised membership
        y = is_pos[order]
        total_pos = int(is_pos.sum())
        res = ranked_list_metrics(y, total_pos - int(y.sum()), (n - order.size) - (total_pos - int(y.sum())))
        rows.append(
            dict(
                dataset=dataset,
                ranking=name,
                issue_type=it,
                n_total=n,
                n_ranked=order.size,
                n_positive=total_pos,
                n_positive_ranked=int(y.sum()),
                positive_rate=total_pos / n,
                **res,
            )
        )
    if near_dups is not None:
        pairs = np.asarray(near_dups.pairs, dtype=np.int64).reshape(-1, 2)
        a, b = names[pairs[:, 0]], names[pairs[:, 1]]
        lo, hi = np.where(a < b, a, b), np.where(a < b, b, a)
        keys = pl.Series([f"{x}\x00{z}" for x, z in zip(lo, hi, strict=True)], dtype=pl.String)
        present = set(names.tolist())
        truth_keys = [f"{x}\x00{z}" for x, z in truth.near_duplicates if x in present and z in present]
        y = keys.is_in(truth_keys).to_numpy()
        total_pos = len(truth_keys)
        m = n * (n - 1) // 2
        pos_out = total_pos - int(y.sum())
        res = ranked_list_metrics(y, pos_out, m - len(a) - pos_out)
        rows.append(
            dict(
                dataset=dataset,
                ranking=name,
                issue_type="near_duplicate",
                n_total=m,
                n_ranked=len(a),
                n_positive=total_pos,
                n_positive_ranked=int(y.sum()),
                positive_rate=total_pos / m if m else float("nan"),
                **res,
            )
        )
    return pl.DataFrame(rows, schema=TRUTH_SCHEMA)


def read_truth(root: str | os.PathLike[str]) -> Truth | None:
    """The known contamination in ``<root>/truth.json`` as a ``Truth``, or None when the folder has none.

    Keys read: ``irrelevant`` (file names), ``near_duplicates`` (pairs), ``flipped`` (objects with
    ``file_name``); a file without them, or not JSON, is a ``ValueError`` naming the file.
    """
    from noisycal_platform.cleaning.simulate import Truth

    path = Path(root) / TRUTH_FILE
    if not path.is_file():
        return None
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
        flipped = [str(f["file_name"]) for f in data["flipped"]]
        return Truth.from_sets(
            [str(x) for x in data["irrelevant"]], [(str(a), str(b)) for a, b in data["near_duplicates"]], flipped
        )
    except (ValueError, KeyError, TypeError) as exc:
        raise ValueError(f"{path}: not a truth file ({type(exc).__name__}: {exc})") from None
