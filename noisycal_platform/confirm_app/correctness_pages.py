"""The correctness audit's pages (``GET /correctness``, ``POST /correctness/answer``, ``POST /correctness/undo``):
route functions of an :class:`~noisycal_platform.confirm_app.context.AppContext`, behind the tool's guard.
The log and the state replay are in :mod:`noisycal_platform.confirm_app.correctness_audit`."""

from __future__ import annotations

import re

import polars as pl
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import RedirectResponse, Response

from noisycal_platform.confirm_app.context import AppContext, render
from noisycal_platform.confirm_app.correctness_audit import QUESTION, correctness_state
from noisycal_platform.confirm_app.guard import Refused, answering_post, authenticate
from noisycal_platform.correctness.audit import ERROR_CATEGORIES
from noisycal_platform.correctness.labels import parse_model_output

__all__ = ["CORRECTNESS_ROUTES"]

_ANSWER_ID_RE = re.compile(r"^[0-9a-f]{32}$")


def sample_or_404(ctx: AppContext) -> pl.DataFrame:
    try:
        s = ctx.audit_sample.get()
    except Exception as err:  # a file another process wrote: a parse error means "unavailable"
        raise Refused(503, f"The audit sample cannot be read: {err}") from err
    if s is None:
        raise Refused(404, "There is no audit sample yet (noisycal audit sample).")
    return s


async def page(ctx: AppContext, request: Request) -> Response:
    session = authenticate(ctx, request)
    sample = sample_or_404(ctx)
    records = await run_in_threadpool(ctx.correctness.records, session.annotator.name)
    st = correctness_state(records, sample)
    item = None
    if st.next_position is not None:
        row = sample.row(st.next_position, named=True)
        parsed = parse_model_output(row["raw_output"])
        item = {**row, "reasoning": parsed.reasoning}
    return render(ctx, request, "correctness_question.html", session=session, q=QUESTION, state=st, item=item,
                  categories=ERROR_CATEGORIES, read_only=session.annotator.role == "admin")


async def answer(ctx: AppContext, request: Request) -> Response:
    fields = {"position", "dataset", "model", "case_id", "answer", "error_category"}
    session, form = await answering_post(ctx, request, fields)
    sample = sample_or_404(ctx)
    pos = form.get("position", "")
    if not pos.isdigit() or len(pos) > 12:
        raise Refused(422, "Field 'position' must be a non-negative integer.")
    ans = form.get("answer")
    cat = form.get("error_category") or None
    if ans not in ("correct", "incorrect"):
        raise Refused(422, "Field 'answer' must be 'correct' or 'incorrect'.")
    if (ans == "correct") != (cat is None) or (cat is not None and cat not in ERROR_CATEGORIES):
        raise Refused(422, f"An incorrect answer needs an error category in {list(ERROR_CATEGORIES)}; a correct "
                           "one none.")
    key = (form.get("dataset", ""), form.get("model", ""), form.get("case_id", ""))
    outcome = await run_in_threadpool(ctx.correctness.answer_item, session.annotator.name, session.annotator.role,
                                      sample, int(pos), key, ans, cat)
    if outcome.kind == "conflict":
        raise Refused(409, outcome.detail.capitalize() + ".")
    return RedirectResponse("/correctness", status_code=303)


async def undo(ctx: AppContext, request: Request) -> Response:
    session, form = await answering_post(ctx, request, {"undoes"})
    undoes = form.get("undoes", "")
    if not _ANSWER_ID_RE.fullmatch(undoes):
        raise Refused(422, "Field 'undoes' must be an answer id (32 hex digits).")
    outcome = await run_in_threadpool(ctx.correctness.undo_item, session.annotator.name, session.annotator.role,
                                      undoes)
    if outcome.kind == "conflict":
        raise Refused(409, outcome.detail.capitalize() + ".")
    return RedirectResponse("/correctness", status_code=303)


#: (path, route function, methods)
CORRECTNESS_ROUTES = [
    ("/correctness", page, ["GET"]),
    ("/correctness/answer", answer, ["POST"]),
    ("/correctness/undo", undo, ["POST"]),
]
