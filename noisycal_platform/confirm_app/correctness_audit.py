"""The correctness question type of the confirmation tool (seed 002 §2.4): "Is this answer correct for this
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

Routes (mounted by ``app.build_app`` with the app's own login, CSRF and origin checks):
``GET /correctness``, ``POST /correctness/answer``, ``POST /correctness/undo``.
"""

from __future__ import annotations

import re
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import polars as pl
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response
from starlette.routing import Route

from noisycal_platform.confirm_app.answers import AnswerLog, Outcome, _now
from noisycal_platform.correctness.audit import ERROR_CATEGORIES
from noisycal_platform.correctness.audit_workflow import AuditPaths, effective_correctness_answers, read_audit_sample
from noisycal_platform.correctness.labels import parse_model_output

__all__ = ["QUESTION", "RECORD_TYPE", "CorrectnessLog", "CorrectnessState", "correctness_routes", "correctness_state"]

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


class _SampleCache:
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


def correctness_routes(
    home: Path,
    *,
    render: Callable[..., Response],
    authenticate: Callable[[Request], Any],
    check_same_origin: Callable[[Request], None],
    read_form: Callable[..., Any],
    check_csrf: Callable[[Any, dict[str, str]], None],
    require_answerer: Callable[[Any], None],
    refused: Callable[[int, str], Exception],
) -> list[Route]:
    """The three routes, built on the host app's helpers (login, CSRF, origin checks, form limits)."""
    log = CorrectnessLog(home)
    cache = _SampleCache(AuditPaths(home).sample)

    def sample_or_404() -> pl.DataFrame:
        try:
            s = cache.get()
        except Exception as err:  # a file another process wrote: a parse error means "unavailable"
            raise refused(503, f"The audit sample cannot be read: {err}") from err
        if s is None:
            raise refused(404, "There is no audit sample yet (noisycal audit sample).")
        return s

    async def posted(request: Request, fields: set[str]) -> tuple[Any, dict[str, str]]:
        """The host's checks on an answering POST (origin, login, form limits, CSRF, answering role)."""
        check_same_origin(request)
        session = authenticate(request)
        form = await read_form(request, {"csrf", *fields})
        check_csrf(session, form)
        require_answerer(session)
        return session, form

    async def page(request: Request) -> Response:
        session = authenticate(request)
        sample = sample_or_404()
        records = await run_in_threadpool(log.records, session.annotator.name)
        st = correctness_state(records, sample)
        item = None
        if st.next_position is not None:
            row = sample.row(st.next_position, named=True)
            parsed = parse_model_output(row["raw_output"])
            item = {**row, "reasoning": parsed.reasoning}
        return render(request, "correctness_question.html", session=session, q=QUESTION, state=st, item=item,
                      categories=ERROR_CATEGORIES, read_only=session.annotator.role == "admin")

    async def answer(request: Request) -> Response:
        session, form = await posted(request, {"position", "dataset", "model", "case_id", "answer", "error_category"})
        sample = sample_or_404()
        pos = form.get("position", "")
        if not pos.isdigit() or len(pos) > 12:
            raise refused(422, "Field 'position' must be a non-negative integer.")
        ans = form.get("answer")
        cat = form.get("error_category") or None
        if ans not in ("correct", "incorrect"):
            raise refused(422, "Field 'answer' must be 'correct' or 'incorrect'.")
        if (ans == "correct") != (cat is None) or (cat is not None and cat not in ERROR_CATEGORIES):
            raise refused(422, f"An incorrect answer needs an error category in {list(ERROR_CATEGORIES)}; a correct "
                               "one none.")
        key = (form.get("dataset", ""), form.get("model", ""), form.get("case_id", ""))
        outcome = await run_in_threadpool(log.answer_item, session.annotator.name, session.annotator.role,
                                          sample, int(pos), key, ans, cat)
        if outcome.kind == "conflict":
            raise refused(409, outcome.detail.capitalize() + ".")
        return RedirectResponse("/correctness", status_code=303)

    async def undo(request: Request) -> Response:
        session, form = await posted(request, {"undoes"})
        undoes = form.get("undoes", "")
        if not _ANSWER_ID_RE.fullmatch(undoes):
            raise refused(422, "Field 'undoes' must be an answer id (32 hex digits).")
        outcome = await run_in_threadpool(log.undo_item, session.annotator.name, session.annotator.role, undoes)
        if outcome.kind == "conflict":
            raise refused(409, outcome.detail.capitalize() + ".")
        return RedirectResponse("/correctness", status_code=303)

    return [
        Route("/correctness", page, methods=["GET"]),
        Route("/correctness/answer", answer, methods=["POST"]),
        Route("/correctness/undo", undo, methods=["POST"]),
    ]
