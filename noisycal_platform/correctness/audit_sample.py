"""The audit sample (Rethinking Correctness 2026 §2.4): per dataset x model group, exactly ``per_stratum`` EM-accepted
and
``per_stratum`` EM-rejected predictions drawn without replacement (seeded), shown in one shuffled order.

The sample file ``exports/audit_sample.csv`` holds what the annotators see (task, candidate and reference
labels, answer, raw output) and nothing else: no UE score, no criterion verdict, not even the EM stratum
(Rethinking Correctness 2026 §2.4: automatic decisions were hidden during annotation). ``AuditPaths`` names every
audit file.
"""

from __future__ import annotations

import csv
import io
import json
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import polars as pl

from noisycal_platform.correctness.criteria import exact_match
from noisycal_platform.correctness.io import EM_STRATA, KEY_SCHEMA, CorrectnessInputError
from noisycal_platform.paths import HomePath
from noisycal_platform.spreadsheet import exact_twin, safe_csv_text, unsafe_cell

__all__ = [
    "AUDIT_SAMPLE_COLUMNS",
    "AuditPaths",
    "draw_audit_sample",
    "em_strata",
    "read_audit_sample",
    "sample_csv_text",
]

AUDIT_SAMPLE_COLUMNS = [
    "position",
    "dataset",
    "model",
    "case_id",
    "task_question",
    "candidate_labels",  # JSON list
    "reference_labels",  # JSON list
    "multi_label",
    "answer",
    "raw_output",
]


@dataclass(frozen=True)
class AuditPaths:
    """Where the audit files live under a platform home."""

    home: Path

    sample = HomePath("exports", "audit_sample.csv")
    web_answers = HomePath("inbox", "correctness_audit")
    annotation_csvs = HomePath("correctness", "audit_annotations")
    adjudications = HomePath("correctness", "adjudication")
    disagreements = HomePath("exports", "audit_disagreements.csv")
    consensus = HomePath("correctness", "audit", "consensus.csv")


def em_strata(generations: pl.DataFrame) -> pl.Series:
    """EM stratum ("EM-accepted"/"EM-rejected") of every generation, by the platform's exact match."""
    rows = generations.select("answer", "candidate_labels", "reference_labels", "multi_label").iter_rows()
    acc = [exact_match(a, c, r, multi_label=m).accepted for a, c, r, m in rows]
    return pl.Series("em_stratum", [EM_STRATA[0] if x else EM_STRATA[1] for x in acc], dtype=pl.String)


def draw_audit_sample(generations: pl.DataFrame, *, per_stratum: int = 25, seed: int = 0) -> pl.DataFrame:
    """Stratified audit sample (Rethinking Correctness 2026 §2.4): per (dataset, model) exactly `per_stratum`
    predictions of each
    EM stratum, without replacement, then one seeded shuffle of the whole sample (`position` = display order).
    Raises ValueError naming the group and stratum when a stratum holds fewer than `per_stratum`."""
    if per_stratum < 1:
        raise ValueError(f"per_stratum must be >= 1, got {per_stratum}")
    if generations.height == 0:
        raise ValueError("no generations to sample from")
    g = generations.with_columns(em_strata(generations)).with_row_index("_row")
    rng = np.random.default_rng(seed)
    picked: list[np.ndarray] = []
    short = []
    for (ds, model, stratum), part in sorted(
        g.group_by(["dataset", "model", "em_stratum"]), key=lambda kv: tuple(map(str, kv[0]))
    ):
        if part.height < per_stratum:
            short.append(f"{ds}/{model} {stratum}: {part.height} predictions")
            continue
        rows = part.sort("case_id")["_row"].to_numpy()
        picked.append(rng.choice(rows, size=per_stratum, replace=False))
    present = set(g.select("dataset", "model", "em_stratum").unique().iter_rows())
    for ds, model in g.select("dataset", "model").unique().iter_rows():
        short += [f"{ds}/{model} {st}: 0 predictions" for st in EM_STRATA if (ds, model, st) not in present]
    if short:
        raise ValueError(f"strata smaller than --per-stratum {per_stratum}: {sorted(set(short))}")
    order = rng.permutation(np.concatenate(picked))
    sample = g[order.tolist()]
    return sample.select(
        pl.int_range(0, sample.height, dtype=pl.Int64).alias("position"),
        "dataset",
        "model",
        "case_id",
        "task_question",
        pl.col("candidate_labels").map_elements(lambda x: json.dumps(list(x)), return_dtype=pl.String),
        pl.col("reference_labels").map_elements(lambda x: json.dumps(list(x)), return_dtype=pl.String),
        "multi_label",
        "answer",
        "raw_output",
    )


def sample_csv_text(sample: pl.DataFrame) -> str:
    """The sample as spreadsheet-safe CSV text (UTF-8, header AUDIT_SAMPLE_COLUMNS; ``spreadsheet.safe_cell``)."""
    rows = (
        [("true" if v is True else "false" if v is False else v) for v in r]
        for r in sample.select(AUDIT_SAMPLE_COLUMNS).iter_rows()
    )
    return safe_csv_text(AUDIT_SAMPLE_COLUMNS, rows)


def _sample_records(path: Path) -> list[dict]:
    """The sample's rows as the CSV's cells (strings, the spreadsheet quotes undone): from the exact ``.parquet``
    twin when it belongs to this CSV, else from the CSV itself (``spreadsheet.unsafe_cell``)."""
    data = path.read_bytes()
    twin = exact_twin(path, data)
    if twin is not None and set(AUDIT_SAMPLE_COLUMNS) <= set(twin.columns):
        as_written = {True: "true", False: "false", None: ""}  # as sample_csv_text writes them
        return [
            {k: as_written[v] if v is None or isinstance(v, bool) else str(v) for k, v in r.items()}
            for r in twin.select(AUDIT_SAMPLE_COLUMNS).iter_rows(named=True)
        ]
    reader = csv.DictReader(io.StringIO(data.decode("utf-8"), newline=""))
    missing = [c for c in AUDIT_SAMPLE_COLUMNS if c not in (reader.fieldnames or [])]
    if missing:
        raise CorrectnessInputError(path, "header", missing[0], f"missing column (header {reader.fieldnames})")
    return [{k: unsafe_cell(v) if isinstance(v, str) else v for k, v in r.items()} for r in reader]


def read_audit_sample(path: str | Path) -> pl.DataFrame:
    """Read exports/audit_sample.csv back (labels decoded from JSON), exactly as drawn: from its ``.parquet``
    twin when that belongs to the CSV on disk, else from the CSV; errors name file, row and column."""
    path = Path(path)
    rows = []
    for n, r in enumerate(_sample_records(path), start=1):
        try:
            cands, refs = json.loads(r["candidate_labels"]), json.loads(r["reference_labels"])
        except json.JSONDecodeError as exc:
            raise CorrectnessInputError(path, f"row {n}", "candidate_labels", f"not a JSON list: {exc}") from None
        if not r["position"].isdigit():
            raise CorrectnessInputError(path, f"row {n}", "position", f"not an integer: {r['position']!r}")
        rows.append(
            {
                **r,
                "position": int(r["position"]),
                "candidate_labels": cands,
                "reference_labels": refs,
                "multi_label": r["multi_label"] == "true",
                "answer": r["answer"] or None,
            }
        )
    schema = {
        "position": pl.Int64,
        **KEY_SCHEMA,
        "task_question": pl.String,
        "candidate_labels": pl.List(pl.String),
        "reference_labels": pl.List(pl.String),
        "multi_label": pl.Boolean,
        "answer": pl.String,
        "raw_output": pl.String,
    }
    return pl.DataFrame(rows, schema=schema).sort("position")
