"""The correctness question type of the confirmation tool (Rethinking Correctness 2026 §2.4): "Is this answer correct
for this
case?".

Each annotator walks the audit sample (``exports/audit_sample.csv``, drawn by ``noisycal audit sample``) in its
shuffled order and answers every item: correct, or incorrect with the primary error category
(missing/partial, extra/wrong, invalid/uncertain). The page shows the task, the candidate labels, the
reference labels, the model's answer, its reasoning and the raw output; it shows no confidence, no UE score
and no automatic verdict (the sample file holds none).

Answers go to their own append-only log ``inbox/correctness_audit/<annotator>.jsonl`` (record type
``correctness_audit``), written like the cleaning answers: under the per-annotator thread lock and ``flock``,
re-decided under the lock, one ``write`` and ``fsync`` before the response; an undo is a record naming the
answer it cancels. The cleaning confirmation log and its records are untouched.

Routes: ``correctness_pages.CORRECTNESS_ROUTES`` (``GET /correctness``, ``POST /correctness/answer``,
``POST /correctness/undo``), behind the app's own guard (login, CSRF and origin checks).
"""

from __future__ import annotations

import re
import uuid
from dataclasses import dataclass
from pathlib import Path

import polars as pl

from noisycal_platform.confirm_app.answers import AnswerLog, Outcome, _now
from noisycal_platform.correctness.audit_workflow import AuditPaths, effective_correctness_answers, read_audit_sample

__all__ = ["QUESTION", "RECORD_TYPE", "CorrectnessLog", "CorrectnessState", "SampleCache", "correctness_state"]

RECORD_TYPE = "correctness_audit"
QUESTION = {
    "title": "Correctness audit",
    "headline": "Is this answer correct for this case?",
    "text": "Judge whether the model's answer satisfies the task and the reference labels, using what is shown "
    "here. If it is not correct, choose the primary error: missing/partial (reference labels left out), "
    "extra/wrong (labels that are not in the reference; also when omissions and extra labels co-occur) or "
    "invalid/uncertain (no usable answer, hedged, or outside the candidate labels).",
}
_ANSWER_ID_RE = re.compile(r"^[0-9a-f]{32}$")
Key = tuple[str, str, str]


class CorrectnessLog(AnswerLog):
    """All annotators' correctness logs under ``inbox/correctness_audit/`` (the cleaning AnswerLog's durable
    append, in its own folder)."""

    def __init__(self, home: Path) -> None:
        super().__init__(home)
        self.folder = AuditPaths(Path(home)).web_answers

    def record_problem(self, record: dict) -> object | None:
        """Correctness records are not cleaning confirmations: their fields (answer, error category, the
        sample item) are checked by the routes and :meth:`answer_item` before a record is built."""
        return None

    def answer_item(self, annotator_id: str, role: str, sample: pl.DataFrame, position: int, key: Key,
                    answer: str, error_category: str | None) -> Outcome:
        """Record the answer for the item at ``position`` if it is this annotator's next one; acknowledge a
        repeat for an already answered item without a second record."""
        if not 0 <= position < sample.height:
            return Outcome("conflict", "no item at this position in the audit sample")
        row = sample.row(position, named=True)
        if (row["dataset"], row["model"], row["case_id"]) != key:
            return Outcome("conflict", "the audit sample changed since this page was loaded; reload it")

        def decide(records: list[dict]) -> Outcome | dict:
            st = correctness_state(records, sample)
            if key in st.answers:
                return Outcome("duplicate", "this item was already answered")
            if st.next_position != position:
                return Outcome("conflict", "this is not the next item; reload the page")
            return {
                "answer_id": uuid.uuid4().hex, "record_type": RECORD_TYPE, "dataset": key[0], "model": key[1],
                "case_id": key[2], "position": position, "annotator_id": annotator_id, "role": role,
                "answer": answer, "error_category": error_category, "undoes": None, "timestamp": _now(),
            }

        return self._locked_append(annotator_id, decide)

    def undo_item(self, annotator_id: str, role: str, undoes: str) -> Outcome:
        """Record an undo of ``undoes`` if it is the most recent effective answer."""

        def decide(records: list[dict]) -> Outcome | dict:
            eff = effective_correctness_answers(records)
            if eff and str(eff[-1].get("answer_id")) == undoes:
                t = eff[-1]
                return {
                    "answer_id": uuid.uuid4().hex, "record_type": RECORD_TYPE, "dataset": t.get("dataset"),
                    "model": t.get("model"), "case_id": t.get("case_id"), "position": t.get("position"),
                    "annotator_id": annotator_id, "role": role, "answer": "undo", "error_category": None,
                    "undoes": undoes, "timestamp": _now(),
                }
            if any(r.get("answer") == "undo" and r.get("undoes") == undoes for r in records):
                return Outcome("duplicate", "this answer was already undone")
            return Outcome("conflict", "only the most recent answer can be undone; reload the page")

        return self._locked_append(annotator_id, decide)


@dataclass(frozen=True)
class CorrectnessState:
    """Where one annotator stands in the audit sample."""

    answered: int
    total: int
    next_position: int | None  # first item (in display order) without an answer; None when all are answered
    last_answer: dict | None
    answers: dict[Key, dict]


def correctness_state(records: list[dict], sample: pl.DataFrame) -> CorrectnessState:
    """Replay the log against the sample."""
    eff = [r for r in effective_correctness_answers(records) if r.get("record_type", RECORD_TYPE) == RECORD_TYPE]
    answers = {(str(r.get("dataset")), str(r.get("model")), str(r.get("case_id"))): r for r in eff}
    keys = list(sample.select("dataset", "model", "case_id").iter_rows())
    nxt = next((i for i, k in enumerate(keys) if k not in answers), None)
    done = sum(1 for k in keys if k in answers)
    return CorrectnessState(done, len(keys), nxt, eff[-1] if eff else None, answers)


class SampleCache:
    """The audit sample, re-read when the file changes (size, mtime)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._stamp: tuple[int, int] | None = None
        self._frame: pl.DataFrame | None = None

    def get(self) -> pl.DataFrame | None:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return None
        stamp = (st.st_size, st.st_mtime_ns)
        if stamp != self._stamp:
            self._frame, self._stamp = read_audit_sample(self.path), stamp
        return self._frame
