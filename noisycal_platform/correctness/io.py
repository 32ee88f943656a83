"""Readers for issue-5 inputs: model generations (JSONL) and human audit labels (CSV), validated once.

A bad file raises CorrectnessInputError naming the file, the line (JSONL) or row (CSV, 1 = first data row) and
the field. A malformed *model output* is not an input error: it is kept, its answer is null and parse_error
says why.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

import polars as pl

from noisycal_platform.contracts import id_problem
from noisycal_platform.correctness.audit import ERROR_CATEGORIES
from noisycal_platform.correctness.labels import parse_model_output
from noisycal_platform.io import InputError, RawTable, parse_table, read_bytes_safely
from noisycal_platform.spreadsheet import exact_twin, unsafe_cell

__all__ = [
    "AUDIT_SCHEMA",
    "EM_STRATA",
    "GENERATIONS_SCHEMA",
    "GENERATION_FIELDS",
    "CorrectnessInputError",
    "read_audit_labels",
    "read_generations",
]

EM_STRATA = ("EM-accepted", "EM-rejected")
DECISIONS = ("independent", "joint")
#: The key of one prediction (one generation record): the dataset, the model and the case it answered.
KEY = ["dataset", "model", "case_id"]
KEY_SCHEMA: dict[str, Any] = dict.fromkeys(KEY, pl.String)

# Fields of one generation record (JSONL object), as written by collect.py and demo_data.py.
GENERATION_FIELDS: dict[str, Any] = {
    "case_id": pl.String,
    "dataset": pl.String,
    "model": pl.String,
    "task_question": pl.String,
    "candidate_labels": pl.List(pl.String),
    "reference_labels": pl.List(pl.String),
    "multi_label": pl.Boolean,
    "raw_output": pl.String,  # JSON {"reasoning": str, "answer": str} as generated
    "answer_top_logits": pl.List(pl.List(pl.Float64)),  # per answer token: top-K raw logits (K >= 2)
    "answer_logsumexp": pl.List(pl.Float64),  # per answer token: logsumexp over the full vocabulary
    "answer_mean_logit": pl.List(pl.Float64),  # per answer token: mean logit over the full vocabulary
    "vocab_size": pl.Int64,  # V (logits dimension); null when there are no answer-token logits
    "sample_answers": pl.List(pl.String),  # N sampled answers (extracted answer, or raw text if malformed)
    "sample_token_logliks": pl.List(pl.List(pl.Float64)),  # per sample: log-likelihood of each sampled token
}
GENERATIONS_SCHEMA: dict[str, Any] = {
    **GENERATION_FIELDS,
    "answer": pl.String,  # parsed from raw_output; null when malformed
    "parse_error": pl.String,  # null when raw_output parsed
    "source_file": pl.String,
    "source_line": pl.Int64,
}
AUDIT_SCHEMA: dict[str, Any] = {
    **KEY_SCHEMA,  # dataset is optional in the CSV; filled from the generations when joined
    "human_correct": pl.Boolean,
    "error_category": pl.String,  # null iff human_correct
    "em_stratum": pl.String,  # EM-accepted | EM-rejected
    "decision": pl.String,  # independent | joint
    "source_file": pl.String,
    "source_row": pl.Int64,
}


class CorrectnessInputError(InputError):
    """An input file violates the contract; carries path, location ("line 3" / "row 3") and field.

    A kind of :class:`noisycal_platform.io.InputError` (``file``, ``row``, ``column``, ``safe``), so every
    reader of user input fails with one exception type."""

    def __init__(self, path: Path, location: str, field: str, message: str) -> None:
        self.path, self.location, self.field, self.message = Path(path), location, field, message
        kind, _, number = location.partition(" ")
        self.file, self.column, self.problem, self.detail = str(path), field, message, None
        self.row = int(number) if kind in ("row", "line") and number.isdigit() else None
        self.safe = f"{path}: {location}: field {field!r}: {_safe_text(message)}"
        ValueError.__init__(self, f"{path}: {location}: field {field!r}: {message}")


def _safe_text(message: str) -> str:
    return message.split(", got ")[0].split(": [")[0]


def _is_num(x: Any) -> bool:
    return isinstance(x, int | float) and not isinstance(x, bool) and math.isfinite(x)


def _check_record(obj: Any, err) -> dict[str, Any]:
    if not isinstance(obj, dict):
        raise err("<record>", f"expected a JSON object, got {type(obj).__name__}")
    for name in ("case_id", "dataset", "model", "task_question", "raw_output"):
        if not isinstance(obj.get(name), str) or (name != "raw_output" and not obj[name]):
            raise err(name, f"must be a non-empty string, got {obj.get(name)!r}")
    cands = obj.get("candidate_labels")
    if not isinstance(cands, list) or not cands or not all(isinstance(c, str) and c for c in cands):
        raise err("candidate_labels", f"must be a non-empty list of strings, got {cands!r}")
    if len(set(cands)) != len(cands):
        raise err("candidate_labels", f"has duplicates: {cands!r}")
    refs = obj.get("reference_labels")
    if not isinstance(refs, list) or not all(isinstance(r, str) for r in refs):
        raise err("reference_labels", f"must be a list of strings, got {refs!r}")
    if set(refs) - set(cands):
        raise err("reference_labels", f"{sorted(set(refs) - set(cands))} not in candidate_labels")
    if not isinstance(obj.get("multi_label"), bool):
        raise err("multi_label", f"must be true/false, got {obj.get('multi_label')!r}")
    if not obj["multi_label"] and len(refs) != 1:
        raise err("reference_labels", f"single-label task needs exactly one reference label, got {refs!r}")
    v = obj.get("vocab_size")
    no_logits = v is None and obj.get("answer_top_logits") == []  # e.g. a server's output (collect.py)
    if not no_logits and (not isinstance(v, int) or isinstance(v, bool) or v < 2):
        raise err("vocab_size", f"must be an integer >= 2 (null only with no answer_top_logits), got {v!r}")
    top = obj.get("answer_top_logits")
    if not isinstance(top, list) or not all(
        isinstance(t, list) and len(t) >= 2 and all(map(_is_num, t)) for t in top
    ):
        raise err("answer_top_logits", "must be a list (tokens) of lists of >= 2 finite numbers")
    for name in ("answer_logsumexp", "answer_mean_logit"):
        x = obj.get(name)
        if not isinstance(x, list) or not all(map(_is_num, x)):
            raise err(name, "must be a list of finite numbers")
        if len(x) != len(top):
            raise err(name, f"has {len(x)} tokens, answer_top_logits has {len(top)}")
    for i, (t, lse) in enumerate(zip(top, obj["answer_logsumexp"], strict=True)):
        if lse < max(t) - 1e-6:
            raise err("answer_logsumexp", f"token {i}: logsumexp {lse} < top logit {max(t)}")
    samples, lls = obj.get("sample_answers"), obj.get("sample_token_logliks")
    if not isinstance(samples, list) or not all(isinstance(s, str) for s in samples):
        raise err("sample_answers", "must be a list of strings")
    if not isinstance(lls, list) or len(lls) != len(samples):
        raise err("sample_token_logliks", f"must be a list with one entry per sample ({len(samples)})")
    for i, s in enumerate(lls):
        if not isinstance(s, list) or not s or not all(_is_num(x) and x <= 1e-9 for x in s):
            raise err("sample_token_logliks", f"sample {i}: must be a non-empty list of log-likelihoods <= 0")
    return {k: obj[k] for k in GENERATION_FIELDS}


def _safe_reason(exc: CorrectnessInputError) -> str:
    """The reason without the quoted value (quarantine entries never quote file content)."""
    return _safe_text(exc.message)


def _reject(rejected: list[dict] | None, exc: CorrectnessInputError, where: str, number: int | None) -> None:
    if rejected is None:
        raise exc
    rejected.append({"file": exc.path.name, where: number, "column": exc.field, "reason": _safe_reason(exc)})


def _file_bytes(f: Path) -> bytes:
    try:
        return read_bytes_safely(f)[0]
    except InputError as exc:
        raise CorrectnessInputError(f, "file", "<file>", exc.problem) from None


def read_generations(path: str | Path, rejected: list[dict] | None = None) -> pl.DataFrame:
    """Read one generations JSONL file (or every *.jsonl in a folder) into a frame with GENERATIONS_SCHEMA.

    With ``rejected`` (a list), each bad line (or refused file) is appended there as ``{file, line, column,
    reason}`` and the other lines are read; without it the first bad line raises CorrectnessInputError.
    """
    path = Path(path)
    files = sorted(path.glob("*.jsonl")) if path.is_dir() else [path]
    if not files:
        raise CorrectnessInputError(path, "folder", "<file>", "no *.jsonl files")
    rows: list[dict[str, Any]] = []
    seen: dict[tuple[str, str, str], str] = {}
    for f in files:
        try:
            data = _file_bytes(f)
        except CorrectnessInputError as exc:
            _reject(rejected, exc, "line", None)
            continue
        complete = data.split(b"\n")
        if complete and complete[-1] == b"":
            complete = complete[:-1]
        for lineno, raw in enumerate(complete, start=1):
            if not raw.strip():
                continue

            def err(field: str, msg: str, _f=f, _n=lineno) -> CorrectnessInputError:
                return CorrectnessInputError(_f, f"line {_n}", field, msg)

            try:
                try:
                    obj = json.loads(raw.decode("utf-8"))
                except UnicodeDecodeError:
                    raise err("<record>", "not valid UTF-8") from None
                except (json.JSONDecodeError, RecursionError) as exc:
                    raise err("<record>", f"not valid JSON ({getattr(exc, 'msg', 'nested too deeply')})") from None
                rec = _check_record(obj, err)
                key = (rec["dataset"], rec["model"], rec["case_id"])
                if key in seen:
                    raise err("case_id", f"duplicate (dataset, model, case_id), first seen at {seen[key]}")
            except CorrectnessInputError as exc:
                _reject(rejected, exc, "line", lineno)
                continue
            seen[key] = f"{f.name}:{lineno}"
            parsed = parse_model_output(rec["raw_output"])
            rows.append(
                {
                    **rec,
                    "answer": parsed.answer,
                    "parse_error": parsed.error,
                    "source_file": str(f),
                    "source_line": lineno,
                }
            )
    # column-wise construction: polars builds nested-list columns far faster than from row dicts
    return pl.DataFrame(
        {
            name: pl.Series(name, [r[name] for r in rows], dtype=dtype)
            for name, dtype in GENERATIONS_SCHEMA.items()
        }
    )


_TRUE, _FALSE = {"1", "true", "yes", "correct"}, {"0", "false", "no", "incorrect"}


def _audit_row(r: dict, err) -> dict[str, Any]:
    case_id = (r.get("case_id") or "").strip()
    if not case_id:
        raise err("case_id", "empty")
    if id_problem(case_id):
        raise err("case_id", id_problem(case_id))
    hc_raw = (r.get("human_correct") or "").strip().lower()
    if hc_raw not in _TRUE | _FALSE:
        raise err("human_correct", f"must be 0/1 or true/false, got {r.get('human_correct')!r}")
    hc = hc_raw in _TRUE
    cat = (r.get("error_category") or "").strip() or None
    if hc and cat is not None:
        raise err("error_category", f"must be empty for a human-correct answer, got {cat!r}")
    if not hc and cat not in ERROR_CATEGORIES:
        raise err("error_category", f"must be one of {list(ERROR_CATEGORIES)}, got {cat!r}")
    stratum = (r.get("em_stratum") or "").strip()
    if stratum not in EM_STRATA:
        raise err("em_stratum", f"must be one of {list(EM_STRATA)}, got {stratum!r}")
    decision = (r.get("decision") or "").strip().lower()
    if decision not in DECISIONS:
        raise err("decision", f"must be one of {list(DECISIONS)}, got {r.get('decision')!r}")
    return {
        "dataset": (r.get("dataset") or "").strip() or None,
        "model": (r.get("model") or "").strip() or None,
        "case_id": case_id,
        "human_correct": hc,
        "error_category": cat,
        "em_stratum": stratum,
        "decision": decision,
    }


def _audit_table(f: Path, data: bytes) -> RawTable:
    """One audit CSV as string columns, its spreadsheet quotes undone (``spreadsheet.unsafe_cell``). The
    platform's own ``consensus.csv`` is read from its exact ``.parquet`` twin while the twin belongs to it
    (booleans as ``consensus_csv_text`` writes them: 1/0)."""
    twin = exact_twin(f, data)
    if twin is not None:
        shown = twin.select(
            pl.col(c).cast(pl.Int8).cast(pl.String) if t == pl.Boolean else pl.col(c).cast(pl.String)
            for c, t in twin.schema.items()
        ).fill_null("")
        return RawTable(f, shown, [], header=shown.columns, data=data)
    table = parse_table(f, data, allow_no_rows=True)
    undone = table.frame.with_columns(
        pl.Series(c, [unsafe_cell(v) if isinstance(v, str) else v for v in table.frame[c].to_list()], dtype=pl.String)
        for c, t in table.frame.schema.items()
        if t == pl.String
    )
    return RawTable(f, undone, table.problems, header=table.header, rows=table.rows, data=data)


def read_audit_labels(path: str | Path, rejected: list[dict] | None = None) -> pl.DataFrame:
    """Read one human-audit CSV (or every *.csv in a folder) into a frame with AUDIT_SCHEMA.

    With ``rejected`` (a list), each bad row (or unreadable file) is appended there as ``{file, row, column,
    reason}`` and the other rows are read; without it the first problem raises CorrectnessInputError.
    """
    path = Path(path)
    files = sorted(path.glob("*.csv")) if path.is_dir() else [path]
    if not files:
        raise CorrectnessInputError(path, "folder", "<file>", "no *.csv files")
    rows: list[dict[str, Any]] = []
    for f in files:
        try:
            try:
                table = _audit_table(f, _file_bytes(f))
            except InputError as exc:
                where = f"row {exc.row}" if exc.row is not None else "file"
                raise CorrectnessInputError(f, where, exc.column or "<file>", exc.problem) from None
            header = table.header or []
            for col in ("case_id", "human_correct", "error_category", "em_stratum", "decision"):
                if col not in header:
                    raise CorrectnessInputError(f, "header", col, "missing column")
        except CorrectnessInputError as exc:
            _reject(rejected, exc, "row", None)
            continue
        bad = {p.row: p for p in table.problems}
        for rowno, r in enumerate(table.frame.iter_rows(named=True), start=1):

            def err(field: str, msg: str, _f=f, _n=rowno) -> CorrectnessInputError:
                return CorrectnessInputError(_f, f"row {_n}", field, msg)

            try:
                if rowno in bad:
                    raise err(bad[rowno].column or "<row>", bad[rowno].reason)
                row = _audit_row(r, err)
            except CorrectnessInputError as exc:
                _reject(rejected, exc, "row", rowno)
                continue
            rows.append({**row, "source_file": str(f), "source_row": rowno})
    return pl.DataFrame(rows, schema=AUDIT_SCHEMA)
