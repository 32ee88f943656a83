"""The human audit that produces `human_correct` (Rethinking Correctness 2026 §2.4): sample, two annotators,
agreement, joint
decision.

1. ``draw_audit_sample`` (module ``audit_sample``, re-exported here): the EM-stratified, blind sample
   ``exports/audit_sample.csv``.
2. Two annotators answer each item ("Is this answer correct for this case?" plus an error category when
   not): in the confirmation web tool (``inbox/correctness_audit/<annotator>.jsonl``, append-only, undo is a
   record) or by CSV (``correctness/audit_annotations/*.csv``: dataset, model, case_id, annotator_id,
   human_correct, error_category; other columns, e.g. those of the sample file, are ignored).
3. ``audit_agreement``: per group and overall, raw agreement and Cohen's κ on correctness between the two
   annotators with percentile bootstrap intervals over items, and agreement on the error category among
   items both judged incorrect. Items whose correctness or category differ are listed for the joint
   decision (``exports/audit_disagreements.csv``); a filled copy dropped as ``correctness/adjudication/*.csv``
   (dataset, model, case_id, human_correct, error_category) is the joint decision. Agreed items become
   decision "independent", adjudicated ones "joint"; undecided ones are left out and counted.
"""

from __future__ import annotations

import csv
import json
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from noisycal_platform.cleaning.agreement import cohen_kappa, kappa_bootstrap, percentile_ci
from noisycal_platform.correctness.audit import ERROR_CATEGORIES
from noisycal_platform.correctness.audit_sample import (
    AUDIT_SAMPLE_COLUMNS,
    AuditPaths,
    draw_audit_sample,
    em_strata,
    read_audit_sample,
    sample_csv_text,
)
from noisycal_platform.correctness.io import KEY, KEY_SCHEMA, CorrectnessInputError
from noisycal_platform.files import read_json_lines
from noisycal_platform.metrics import bootstrap_counts
from noisycal_platform.spreadsheet import safe_csv_text, unsafe_cell
from noisycal_platform.undo import cancelled_ids, entries_in_time_order

__all__ = [
    "AGREEMENT_SCHEMA",
    "ANNOTATION_SCHEMA",
    "AUDIT_SAMPLE_COLUMNS",
    "CONSENSUS_COLUMNS",
    "AuditAgreement",
    "AuditPaths",
    "audit_agreement",
    "consensus_csv_text",
    "disagreements_csv_text",
    "draw_audit_sample",
    "effective_correctness_answers",
    "em_strata",
    "read_adjudications",
    "read_annotation_csvs",
    "read_audit_sample",
    "run_audit_agreement",
    "sample_csv_text",
]

ANNOTATION_SCHEMA = {
    **KEY_SCHEMA,
    "annotator_id": pl.String,
    "human_correct": pl.Boolean,
    "error_category": pl.String,
    "source": pl.String,
}
#: The columns of correctness/audit/consensus.csv (and its .parquet twin), in order.
CONSENSUS_COLUMNS = [*KEY, "human_correct", "error_category", "em_stratum", "decision"]
AGREEMENT_SCHEMA = {
    "scope_kind": pl.String,  # all | group
    "scope": pl.String,
    "annotator_a": pl.String,
    "annotator_b": pl.String,
    "n_items": pl.Int64,  # sampled items both annotators answered
    "n_agree": pl.Int64,
    "raw_agreement": pl.Float64,
    "raw_agreement_lo": pl.Float64,
    "raw_agreement_hi": pl.Float64,
    "kappa": pl.Float64,
    "kappa_lo": pl.Float64,
    "kappa_hi": pl.Float64,
    "n_both_incorrect": pl.Int64,
    "category_agreement": pl.Float64,  # among items both judged incorrect
    "n_disagreements": pl.Int64,  # correctness or category differs
    "n_joint": pl.Int64,  # of which decided jointly
    "n_undecided": pl.Int64,  # of which not decided yet: left out of human_correct
    "n_incomplete": pl.Int64,  # sampled items with fewer than two annotations
    "n_boot": pl.Int64,
    "ci_level": pl.Float64,
}



# ------------------------------------------------------------------------------------------ annotations


def effective_correctness_answers(records: Iterable[dict]) -> list[dict]:
    """The correct/incorrect records that no undo cancels, in log order. Undo follows the one rule of
    :mod:`noisycal_platform.undo` (an undo names the answer_id it cancels; an undo of an undo restores it); an
    undo naming no earlier record of the same person cancels nothing (the tool's log is read as it is)."""
    recs = list(records)
    cancelled = cancelled_ids(entries_in_time_order(recs), strict=False)
    seen: set[str] = set()
    out = []
    for r in recs:
        aid = str(r.get("answer_id"))
        if r.get("answer") in ("correct", "incorrect") and aid not in cancelled and aid not in seen:
            seen.add(aid)
            out.append(r)
    return out


def _web_annotations(folder: Path) -> list[dict]:
    out = []
    for f in sorted(folder.glob("*.jsonl")) if folder.is_dir() else []:
        latest: dict[tuple, dict] = {}
        for r in effective_correctness_answers(read_json_lines(f)):
            latest[(r.get("dataset"), r.get("model"), r.get("case_id"))] = r  # the tool allows one per item
        for (ds, model, case), r in latest.items():
            out.append(
                {
                    "dataset": ds,
                    "model": model,
                    "case_id": case,
                    "annotator_id": str(r["annotator_id"]),
                    "human_correct": r["answer"] == "correct",
                    "error_category": r.get("error_category"),
                    "source": str(f),
                }
            )
    return out


_TRUE, _FALSE = {"1", "true", "yes", "correct"}, {"0", "false", "no", "incorrect"}


def _read_label_csv(path: Path, need: Sequence[str]) -> list[tuple[int, dict]]:
    with path.open(encoding="utf-8", newline="") as fh:
        reader = csv.DictReader(fh)
        for col in need:
            if col not in (reader.fieldnames or []):
                raise CorrectnessInputError(path, "header", col, f"missing column (header {reader.fieldnames})")
        return [(n, {k: unsafe_cell(v) if isinstance(v, str) else v for k, v in r.items()})
                for n, r in enumerate(reader, start=1)]


def _label(path: Path, n: int, r: dict) -> tuple[bool, str | None]:
    raw = (r.get("human_correct") or "").strip().lower()
    if raw not in _TRUE | _FALSE:
        raise CorrectnessInputError(path, f"row {n}", "human_correct", f"must be 0/1 or true/false, got {raw!r}")
    ok = raw in _TRUE
    cat = (r.get("error_category") or "").strip() or None
    if ok and cat is not None:
        raise CorrectnessInputError(path, f"row {n}", "error_category", f"must be empty when correct, got {cat!r}")
    if not ok and cat not in ERROR_CATEGORIES:
        raise CorrectnessInputError(path, f"row {n}", "error_category", f"must be one of {list(ERROR_CATEGORIES)}")
    return ok, cat


def read_annotation_csvs(folder: str | Path) -> list[dict]:
    """Annotations given by CSV (dataset, model, case_id, annotator_id, human_correct, error_category)."""
    folder = Path(folder)
    out = []
    for f in sorted(folder.glob("*.csv")) if folder.is_dir() else []:
        for n, r in _read_label_csv(f, [*KEY, "annotator_id", "human_correct", "error_category"]):
            ok, cat = _label(f, n, r)
            who = (r.get("annotator_id") or "").strip()
            if not who:
                raise CorrectnessInputError(f, f"row {n}", "annotator_id", "empty")
            out.append(
                {
                    **{k: r[k].strip() for k in KEY},
                    "annotator_id": who,
                    "human_correct": ok,
                    "error_category": cat,
                    "source": f"{f}:row {n}",
                }
            )
    return out


def read_adjudications(folder: str | Path) -> dict[tuple[str, str, str], tuple[bool, str | None]]:
    """Joint decisions: (dataset, model, case_id) -> (human_correct, error_category); a repeat is an error."""
    folder = Path(folder)
    out: dict[tuple[str, str, str], tuple[bool, str | None]] = {}
    for f in sorted(folder.glob("*.csv")) if folder.is_dir() else []:
        for n, r in _read_label_csv(f, [*KEY, "human_correct", "error_category"]):
            if not (r.get("human_correct") or "").strip():
                continue  # a disagreement not decided yet
            key = tuple(r[k].strip() for k in KEY)
            if key in out:
                raise CorrectnessInputError(f, f"row {n}", "case_id", f"{key} decided twice")
            out[key] = _label(f, n, r)
    return out


# ------------------------------------------------------------------------------------------ agreement


@dataclass(frozen=True)
class AuditAgreement:
    """agreement: AGREEMENT_SCHEMA rows; disagreements: items for the joint decision; consensus: audit labels
    in io.AUDIT_SCHEMA order (dataset, model, case_id, human_correct, error_category, em_stratum, decision)."""

    agreement: pl.DataFrame
    disagreements: pl.DataFrame
    consensus: pl.DataFrame


def _rng(seed: int, *key: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32("\x1f".join(key).encode())])


def _annotations_in_sample(sample: pl.DataFrame, annotations: Sequence[dict]) -> tuple[pl.DataFrame, list[str]]:
    """The annotations of sampled items and the sorted annotator ids; an item labelled twice by one annotator,
    or a third annotator, is an error."""
    ann = pl.DataFrame(list(annotations), schema=ANNOTATION_SCHEMA)
    in_sample = ann.join(sample.select(KEY), on=KEY, how="semi")
    dup = in_sample.group_by(*KEY, "annotator_id").len().filter(pl.col("len") > 1)
    if dup.height:
        raise ValueError(
            f"an annotator labelled an item twice (web and CSV?): {dup.select(*KEY, 'annotator_id').rows()[:3]}"
        )
    who = sorted(in_sample["annotator_id"].unique().to_list())
    if len(who) > 2:
        raise ValueError(f"the audit protocol has two annotators; found {who}")
    return in_sample, who


def _sample_strata(sample: pl.DataFrame, generations: pl.DataFrame) -> pl.DataFrame:
    """KEY and em_stratum of every sampled item (`em_strata`); an item without a generation is an error."""
    strata = sample.select(KEY).join(
        generations.select(*KEY, "answer", "candidate_labels", "reference_labels", "multi_label"), on=KEY, how="left"
    )
    if strata["multi_label"].null_count():
        raise ValueError(
            "audit sample items without a generation: "
            + str(strata.filter(pl.col("multi_label").is_null()).select(KEY).rows()[:3])
        )
    return strata.select(KEY).with_columns(em_strata(strata))


def _side_by_side(sample: pl.DataFrame, in_sample: pl.DataFrame, a_id: str | None, b_id: str | None) -> pl.DataFrame:
    """One row per sampled item: a_correct, a_category, b_correct, b_category (null where not answered)."""
    wide = sample.select(KEY)
    for tag, name in (("a", a_id), ("b", b_id)):
        part = in_sample.filter(pl.col("annotator_id") == name).select(
            *KEY, pl.col("human_correct").alias(f"{tag}_correct"), pl.col("error_category").alias(f"{tag}_category")
        )
        wide = wide.join(part, on=KEY, how="left")
    return wide


def _answered_by_both(
    wide: pl.DataFrame, adjudications: dict[tuple[str, str, str], tuple[bool, str | None]]
) -> pl.DataFrame:
    """Items both annotators answered, with ``_differs`` (correctness or, both incorrect, category differs) and the
    joint decision (j_correct, j_category; null: not decided)."""
    both = wide.filter(pl.col("a_correct").is_not_null() & pl.col("b_correct").is_not_null())
    differs = (pl.col("a_correct") != pl.col("b_correct")) | (
        ~pl.col("a_correct") & ~pl.col("b_correct") & (pl.col("a_category") != pl.col("b_category"))
    )
    both = both.with_columns(differs.alias("_differs"))
    decided = pl.DataFrame(
        [
            {"dataset": k[0], "model": k[1], "case_id": k[2], "j_correct": v[0], "j_category": v[1]}
            for k, v in adjudications.items()
        ],
        schema={
            **KEY_SCHEMA,
            "j_correct": pl.Boolean,
            "j_category": pl.String,
        },
    )
    return both.join(decided, on=KEY, how="left")


def _consensus(both: pl.DataFrame, strata: pl.DataFrame) -> pl.DataFrame:
    """Agreed items (decision "independent") and jointly decided ones ("joint"), in io.AUDIT_SCHEMA order."""
    agreed = both.filter(~pl.col("_differs")).select(
        *KEY,
        pl.col("a_correct").alias("human_correct"),
        pl.col("a_category").alias("error_category"),
        pl.lit("independent").alias("decision"),
    )
    joint = both.filter(pl.col("_differs") & pl.col("j_correct").is_not_null()).select(
        *KEY,
        pl.col("j_correct").alias("human_correct"),
        pl.col("j_category").alias("error_category"),
        pl.lit("joint").alias("decision"),
    )
    return (
        pl.concat([agreed, joint])
        .join(strata, on=KEY, how="left")
        .select(*KEY, "human_correct", "error_category", "em_stratum", "decision")
        .sort(KEY)
    )


def _disagreements(both: pl.DataFrame, sample: pl.DataFrame, a_id: str | None, b_id: str | None) -> pl.DataFrame:
    """The differing items with what the annotators saw and answered, for the joint decision."""
    shown = sample.with_columns(
        pl.col(c).map_elements(lambda x: json.dumps(list(x)), return_dtype=pl.String)
        for c in ("candidate_labels", "reference_labels")
        if sample[c].dtype != pl.String
    )
    return (
        both.filter(pl.col("_differs"))
        .join(shown, on=KEY, how="left")
        .select(
            *KEY,
            "task_question",
            "candidate_labels",
            "reference_labels",
            "answer",
            "raw_output",
            pl.lit(a_id).alias("annotator_a"),
            "a_correct",
            "a_category",
            pl.lit(b_id).alias("annotator_b"),
            "b_correct",
            "b_category",
            pl.col("j_correct").alias("human_correct"),
            pl.col("j_category").alias("error_category"),
        )
        .sort(KEY)
    )


def _agreement_row(
    kind: str, scope: str, part: pl.DataFrame, all_items: pl.DataFrame, ids: tuple[str | None, str | None], *,
    n_boot: int, seed: int, ci_level: float,
) -> dict:
    """One AGREEMENT_SCHEMA row: p_o and κ (Cohen 1960) with percentile bootstrap intervals over the items of
    ``part`` (answered by both), category agreement and the disagreement counts."""
    a = part["a_correct"].cast(pl.Int64).to_numpy()
    b = part["b_correct"].cast(pl.Int64).to_numpy()
    n = a.size
    agree = (a == b).astype(np.float64)
    if n:
        w = bootstrap_counts(n, n_boot, _rng(seed, scope, "raw_agreement"))
        p_lo, p_hi = percentile_ci((w @ agree) / w.sum(axis=1), ci_level)
        k_lo, k_hi = percentile_ci(kappa_bootstrap(a, b, n_boot, _rng(seed, scope, "kappa")), ci_level)
    else:
        p_lo = p_hi = k_lo = k_hi = float("nan")
    inc = part.filter(~pl.col("a_correct") & ~pl.col("b_correct"))
    dis = part.filter(pl.col("_differs"))
    return {
        "scope_kind": kind,
        "scope": scope,
        "annotator_a": ids[0],
        "annotator_b": ids[1],
        "n_items": n,
        "n_agree": int(agree.sum()),
        "raw_agreement": float(agree.mean()) if n else float("nan"),
        "raw_agreement_lo": p_lo,
        "raw_agreement_hi": p_hi,
        "kappa": cohen_kappa(a, b) if n else float("nan"),
        "kappa_lo": k_lo,
        "kappa_hi": k_hi,
        "n_both_incorrect": inc.height,
        "category_agreement": float((inc["a_category"] == inc["b_category"]).mean()) if inc.height else None,
        "n_disagreements": dis.height,
        "n_joint": int(dis["j_correct"].is_not_null().sum()),
        "n_undecided": int(dis["j_correct"].is_null().sum()),
        "n_incomplete": all_items.height - part.height,
        "n_boot": n_boot,
        "ci_level": ci_level,
    }


def audit_agreement(
    sample: pl.DataFrame,
    annotations: Sequence[dict],
    adjudications: dict[tuple[str, str, str], tuple[bool, str | None]],
    generations: pl.DataFrame,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    ci_level: float = 0.95,
) -> AuditAgreement:
    """κ = (p_o − p_e)/(1 − p_e) (Cohen 1960; scikit-learn) and raw agreement p_o on correctness between the
    two annotators, per group and overall, with percentile bootstrap intervals over items; the disagreements;
    and the consensus labels (agreements + joint decisions; undecided items left out and counted)."""
    in_sample, who = _annotations_in_sample(sample, annotations)
    strata = _sample_strata(sample, generations)
    a_id, b_id = [*who, None, None][:2]
    wide = _side_by_side(sample, in_sample, a_id, b_id)
    both = _answered_by_both(wide, adjudications)
    consensus = _consensus(both, strata)
    disagreements = _disagreements(both, sample, a_id, b_id)
    groups = [("all", "all", both, wide)] + [
        (
            "group",
            f"{ds}/{m}",
            both.filter((pl.col("dataset") == ds) & (pl.col("model") == m)),
            wide.filter((pl.col("dataset") == ds) & (pl.col("model") == m)),
        )
        for ds, m in wide.select("dataset", "model").unique().sort("dataset", "model").iter_rows()
    ]
    rows = [
        _agreement_row(kind, scope, part, all_items, (a_id, b_id), n_boot=n_boot, seed=seed, ci_level=ci_level)
        for kind, scope, part, all_items in groups
    ]
    return AuditAgreement(pl.DataFrame(rows, schema=AGREEMENT_SCHEMA), disagreements, consensus)


def consensus_csv_text(consensus: pl.DataFrame) -> str:
    """The consensus in the correctness/audit/*.csv format read by io.read_audit_labels (spreadsheet-safe:
    ``spreadsheet.safe_cell``; booleans as 1/0)."""
    rows = (
        [("1" if v is True else "0" if v is False else v) for v in r]
        for r in consensus.select(CONSENSUS_COLUMNS).iter_rows()
    )
    return safe_csv_text(CONSENSUS_COLUMNS, rows)


def disagreements_csv_text(disagreements: pl.DataFrame) -> str:
    """The disagreements for adjudication; fill human_correct/error_category and drop the file into
    correctness/adjudication/."""
    rows = ([("1" if v is True else "0" if v is False else v) for v in r] for r in disagreements.iter_rows())
    return safe_csv_text(disagreements.columns, rows)


def run_audit_agreement(
    home: str | Path, generations: pl.DataFrame, *, n_boot: int = 1000, seed: int = 0
) -> AuditAgreement | None:
    """Read the sample, the web and CSV annotations and the joint decisions under `home`; compute
    ``audit_agreement``; write exports/audit_disagreements.csv and correctness/audit/consensus.csv (each
    atomically, and only when its content changes), each spreadsheet-safe with its exact ``.parquet`` twin (the
    twin is what the platform reads back). None when there is no audit sample yet."""
    from noisycal_platform.spreadsheet import exact_twin, write_person_csv

    paths = AuditPaths(Path(home))
    if not paths.sample.is_file():
        return None
    sample = read_audit_sample(paths.sample)
    annotations = _web_annotations(paths.web_answers) + read_annotation_csvs(paths.annotation_csvs)
    res = audit_agreement(
        sample, annotations, read_adjudications(paths.adjudications), generations, n_boot=n_boot, seed=seed
    )
    for path, frame, text in (
        (paths.disagreements, res.disagreements, disagreements_csv_text(res.disagreements)),
        (paths.consensus, res.consensus.select(CONSENSUS_COLUMNS),
         consensus_csv_text(res.consensus) if res.consensus.height else None),
    ):
        if text is None:
            continue
        if not path.is_file() or path.read_text(encoding="utf-8") != text or exact_twin(path) is None:
            path.parent.mkdir(parents=True, exist_ok=True)
            write_person_csv(path, frame, text)  # a person opens it: the exact .parquet twin too
    return res


def write_audit_sample(home: str | Path, generations: pl.DataFrame, *, per_stratum: int, seed: int,
                       force: bool = False) -> tuple[pl.DataFrame, Path]:
    """Draw the audit sample of ``generations`` and write it to ``exports/audit_sample.csv`` (spreadsheet-safe,
    with its exact ``.parquet`` twin) atomically; an
    existing, different sample (answers may refer to it) is replaced only with ``force``. Returns (sample, path)."""
    from noisycal_platform.spreadsheet import write_person_csv

    sample = draw_audit_sample(generations, per_stratum=per_stratum, seed=seed)
    text = sample_csv_text(sample)
    path = AuditPaths(Path(home)).sample
    if path.is_file() and path.read_text(encoding="utf-8") != text and not force:
        raise ValueError(f"{path} exists with a different sample (answers may refer to it); pass --force to replace")
    path.parent.mkdir(parents=True, exist_ok=True)
    write_person_csv(path, sample, text)
    return sample, path
