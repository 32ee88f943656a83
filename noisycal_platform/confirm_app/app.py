"""The confirmation tool as a Starlette app (server-rendered Jinja2 pages, no external assets).

Routes
- ``GET  /login?token=T``          sets the session cookie (HttpOnly, SameSite=Strict), continues to ``/``
- ``GET  /``                       choose a dataset and an issue type (admins go to ``/admin``)
- ``GET  /q/{dataset}/{issue}``    the next binary question, or the "finished" page
- ``POST /q/{dataset}/{issue}/answer`` and ``/undo``   write one record (PRG: 303 back to the question)
- ``GET  /img/{dataset}?f=NAME&s=m|l``   a cached thumbnail of a candidate image inside the dataset root
- ``GET  /admin``                  progress and live unanimous/majority counts (admin role)
- ``POST /logout``

- ``/correctness`` pages: ``correctness_pages.CORRECTNESS_ROUTES``

Each route is a module-level function of (:class:`~.context.AppContext`, request), listed in :data:`ROUTES`;
:func:`build_app` binds the tables to one context. Security (login, CSRF, origin, form limits, headers) is
the guard's (:mod:`noisycal_platform.confirm_app.guard`).
"""

from __future__ import annotations

import re
import secrets
from collections.abc import Awaitable, Callable
from pathlib import Path
from urllib.parse import quote

from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, RedirectResponse, Response
from starlette.routing import Route

from noisycal_platform.cleaning.protocol import aggregate_answers, answers_from_records
from noisycal_platform.cleaning.protocol import effective_answers as protocol_effective_answers
from noisycal_platform.confirm_app.annotators import ANSWER_ROLES, AnnotatorStore
from noisycal_platform.confirm_app.answers import (
    AnswerLog,
    Outcome,
    SessionState,
    effective_answers,
    session_state,
    valid_records,
)
from noisycal_platform.confirm_app.context import QUESTIONS, AppContext, render
from noisycal_platform.confirm_app.correctness_pages import CORRECTNESS_ROUTES
from noisycal_platform.confirm_app.guard import (
    COOKIE,
    MAX_BODY,
    MAX_TOKEN,
    Refused,
    SecurityHeaders,
    Session,
    annotator_for,
    answering_post,
    authenticate,
    check_csrf,
    check_same_origin,
    read_form,
)
from noisycal_platform.confirm_app.images import SIZES, PathRefused, confine
from noisycal_platform.confirm_app.queue import ISSUE_TYPES, QueueRegistry, QueueSnapshot

__all__ = ["COOKIE", "MAX_BODY", "QUESTIONS", "ROUTES", "build_app"]

_ANSWER_ID_RE = re.compile(r"^[0-9a-f]{32}$")
RouteFunction = Callable[[AppContext, Request], Awaitable[Response]]


# ------------------------------------------------------------------ helpers
def snapshot(ctx: AppContext, dataset: str) -> QueueSnapshot:
    """The dataset's queue snapshot: 503 when unreadable, 404 when there is none."""
    try:
        snap = ctx.queues.get(dataset)
    except Exception as err:  # a file another process wrote: a parse error means "unavailable"
        raise Refused(503, f"The queue snapshot for this dataset cannot be read: {err}") from err
    if snap is None:
        raise Refused(404, "No confirmation queue for this dataset.")
    return snap

def issue(snap: QueueSnapshot, issue_type: str) -> str:
    """``issue_type`` when the snapshot has candidates of it, else 404."""
    if issue_type not in ISSUE_TYPES or not snap.candidates(issue_type):
        raise Refused(404, "No candidates of this issue type for this dataset.")
    return issue_type


async def answer_form(
    ctx: AppContext, request: Request, fields: set[str]
) -> tuple[Session, dict[str, str], str, QueueSnapshot, str]:
    """The guard's answering-POST checks, then the dataset's snapshot and the issue type; returns
    (session, form, dataset, snapshot, type)."""
    session, form = await answering_post(ctx, request, fields)
    dataset = request.path_params["dataset"]
    snap = snapshot(ctx, dataset)
    return session, form, dataset, snap, issue(snap, request.path_params["issue_type"])


def next_question(outcome: Outcome, dataset: str, issue_type: str) -> Response:
    """A logged answer or undo goes back to the question page; an invalid one is 422, a conflict 409."""
    if outcome.kind == "invalid":
        raise Refused(422, outcome.detail.capitalize() + ".")
    if outcome.kind == "conflict":
        raise Refused(409, outcome.detail.capitalize() + ".")
    return RedirectResponse(q_url(dataset, issue_type), status_code=303)

def q_url(dataset: str, issue_type: str) -> str:
    return f"/q/{quote(dataset, safe='')}/{issue_type}"

def img_url(dataset: str, name: str, size: str = "m") -> str:
    return f"/img/{quote(dataset, safe='')}?f={quote(name, safe='')}&s={size}"


# ------------------------------------------------------------------ routes
async def login(ctx: AppContext, request: Request) -> Response:
    token = request.query_params.get("token", "")
    if not token:
        raise Refused(401, "The login link has no token.")
    if len(token) > MAX_TOKEN:
        raise Refused(400, "Malformed token.")
    annotator = annotator_for(ctx, token, "Unknown token.")
    # 200 + same-document continue (not a 303): a SameSite=Strict cookie set during a navigation that
    # started on another site is not sent on the redirect that follows it.
    resp = render(ctx, request, "login.html", annotator=annotator)
    resp.set_cookie(COOKIE, f"{token}.{secrets.token_urlsafe(16)}", httponly=True, samesite="strict",
                    path="/", secure=request.url.scheme == "https")
    return resp

async def logout(ctx: AppContext, request: Request) -> Response:
    check_same_origin(request)
    session = authenticate(ctx, request)
    check_csrf(session, await read_form(request, {"csrf"}))
    resp = render(ctx, request, "message.html", title="Signed out", message="You are signed out.")
    resp.delete_cookie(COOKIE, path="/")
    return resp

async def index(ctx: AppContext, request: Request) -> Response:
    session = authenticate(ctx, request)
    if session.annotator.role == "admin":
        return RedirectResponse("/admin", status_code=303)
    records = await run_in_threadpool(ctx.log.records, session.annotator.name)
    rows = []
    for ds in ctx.queues.datasets():
        try:
            snap = ctx.queues.get(ds)
        except Exception:  # unreadable snapshot: listed nowhere until the pipeline rewrites it
            continue
        if snap is None:
            continue
        for t in ISSUE_TYPES:
            if snap.candidates(t):
                rows.append({"dataset": ds, "issue_type": t, "url": q_url(ds, t),
                             "state": session_state(records, snap, t)})
    return render(ctx, request, "index.html", session=session, rows=rows)

async def question(ctx: AppContext, request: Request) -> Response:
    session = authenticate(ctx, request)
    dataset = request.path_params["dataset"]
    snap = snapshot(ctx, dataset)
    issue_type = issue(snap, request.path_params["issue_type"])
    records = await run_in_threadpool(ctx.log.records, session.annotator.name)
    st: SessionState = session_state(records, snap, issue_type)
    cands = snap.candidates(issue_type)
    cand = cands[st.next_index] if st.next_index is not None else None
    images: list[dict[str, str]] = []
    prefetch: list[str] = []
    if cand is not None:
        names = [cand.item_id] + ([cand.item_id_2] if cand.item_id_2 is not None else [])
        images = [{"m": img_url(dataset, n, "m"), "l": img_url(dataset, n, "l")} for n in names]
        nxt = st.next_index + 1 if st.next_index is not None else None
        if nxt is not None and nxt < len(cands):
            c2 = cands[nxt]
            prefetch = [img_url(dataset, n) for n in (c2.item_id, c2.item_id_2) if n is not None]
    return render(
        ctx, request, "question.html", session=session, dataset=dataset, issue_type=issue_type,
        q=QUESTIONS[issue_type], state=st, cand=cand, images=images, prefetch=prefetch,
        answer_url=q_url(dataset, issue_type) + "/answer", undo_url=q_url(dataset, issue_type) + "/undo",
        read_only=session.annotator.role not in ANSWER_ROLES, extending=issue_type in snap.extending,
    )

async def answer(ctx: AppContext, request: Request) -> Response:
    fields = {"position", "item_id", "item_id_2", "answer"}
    session, form, dataset, snap, issue_type = await answer_form(ctx, request, fields)
    pos_s = form.get("position", "")
    if not pos_s.isdigit() or len(pos_s) > 12:
        raise Refused(422, "Field 'position' must be a non-negative integer.")
    if form.get("answer") not in ("yes", "no"):
        raise Refused(422, "Field 'answer' must be 'yes' or 'no'.")
    if "item_id" not in form or not form["item_id"]:
        raise Refused(422, "Field 'item_id' is required.")
    item2 = form.get("item_id_2") or None
    outcome = await run_in_threadpool(
        ctx.log.answer, session.annotator.name, session.annotator.role, snap, issue_type, int(pos_s),
        form["item_id"], item2, form["answer"],
    )
    return next_question(outcome, dataset, issue_type)

async def undo(ctx: AppContext, request: Request) -> Response:
    session, form, dataset, snap, issue_type = await answer_form(ctx, request, {"undoes"})
    undoes = form.get("undoes", "")
    if not _ANSWER_ID_RE.fullmatch(undoes):
        raise Refused(422, "Field 'undoes' must be an answer id (32 hex digits).")
    outcome = await run_in_threadpool(
        ctx.log.undo, session.annotator.name, session.annotator.role, snap, issue_type, undoes
    )
    return next_question(outcome, dataset, issue_type)

async def image(ctx: AppContext, request: Request) -> Response:
    authenticate(ctx, request)
    snap = snapshot(ctx, request.path_params["dataset"])
    name = request.query_params.get("f", "")
    size = request.query_params.get("s", "m")
    if size not in SIZES:
        raise Refused(422, "Unknown image size.")
    try:
        real = confine(snap.dataset_root, name)
    except PathRefused as err:
        raise Refused(err.status, f"Image refused: {err.reason}.") from None
    if name not in snap.item_ids:
        raise Refused(404, "Not a candidate image of this queue.")
    try:
        thumb = await run_in_threadpool(ctx.thumbs.get, real, size)
    except ValueError as err:
        raise Refused(422, str(err)) from None
    return FileResponse(thumb, media_type="image/jpeg",
                        headers={"cache-control": "private, max-age=3600"})

async def admin(ctx: AppContext, request: Request) -> Response:
    session = authenticate(ctx, request)
    if session.annotator.role != "admin":
        raise Refused(403, "The admin page needs an admin login.")
    tables = await run_in_threadpool(_admin_tables, ctx.queues, ctx.log, ctx.store)
    return render(ctx, request, "admin.html", session=session, tables=tables)

async def favicon(ctx: AppContext, request: Request) -> Response:
    return Response(status_code=204)  # keeps browsers from logging a 404; reveals nothing


#: (path, route function, methods)
ROUTES: list[tuple[str, RouteFunction, list[str]]] = [
    ("/favicon.ico", favicon, ["GET"]),
    ("/login", login, ["GET"]),
    ("/logout", logout, ["POST"]),
    ("/", index, ["GET"]),
    ("/admin", admin, ["GET"]),
    ("/q/{dataset}/{issue_type}", question, ["GET"]),
    ("/q/{dataset}/{issue_type}/answer", answer, ["POST"]),
    ("/q/{dataset}/{issue_type}/undo", undo, ["POST"]),
    ("/img/{dataset}", image, ["GET"]),
]


def _bound(ctx: AppContext, fn: RouteFunction) -> Callable[[Request], Awaitable[Response]]:
    async def endpoint(request: Request) -> Response:
        return await fn(ctx, request)

    endpoint.__name__ = endpoint.__qualname__ = fn.__name__
    return endpoint


def build_app(home: Path) -> Starlette:
    """The ASGI app over ``home`` (see module docstring): both route tables bound to one context."""
    ctx = AppContext.at(home)

    async def on_refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        return render(ctx, request, "message.html", status=exc.status, title=f"{exc.status}",
                      message=exc.message)

    routes = [Route(path, _bound(ctx, fn), methods=methods) for path, fn, methods in (*ROUTES, *CORRECTNESS_ROUTES)]
    app = Starlette(routes=routes, exception_handlers={Refused: on_refused})
    app.add_middleware(SecurityHeaders)
    return app


def _admin_tables(queues: QueueRegistry, log: AnswerLog, store: AnnotatorStore) -> list[dict]:
    """Per dataset and issue type: each annotator's progress and the live unanimous/majority counts of "yes"
    (Gröger et al. 2023 §3.4: an issue is confirmed only if all experts flag it). An annotator who stopped before a
    candidate counts as not flagging it; counts are given for experts and for lay raters separately."""
    roles = {a.name: a.role for a in store.load()}
    all_records = log.all_records()
    tables = []
    for ds in queues.datasets():
        try:
            snap = queues.get(ds)
        except Exception:  # unreadable snapshot: skipped (the question page says why)
            continue
        if snap is None:
            continue
        for t in ISSUE_TYPES:
            if not snap.candidates(t):
                continue
            people = []
            session_records: list[dict] = []
            for name, recs in all_records.items():
                eff = effective_answers(recs, ds, t)
                if not eff:
                    continue
                st = session_state(recs, snap, t)
                role = str(eff[-1].get("role") or roles.get(name, "?"))  # the recorded role, as the pipeline
                people.append({"name": name, "role": role, "state": st})
                session_records += [r for r in valid_records(recs) if r["dataset"] == ds and r["issue_type"] == t]
            counts = {}
            eff_all = protocol_effective_answers(answers_from_records(session_records)) if session_records else None
            for role in ANSWER_ROLES:
                agg = aggregate_answers(eff_all, roles=(role,)) if eff_all is not None else None
                counts[role] = {
                    "n": int(agg["n_panel"].max() or 0) if agg is not None and agg.height else 0,
                    "unanimous": int(agg["unanimous"].sum()) if agg is not None else 0,
                    "majority": int(agg["majority"].sum()) if agg is not None else 0,
                }
            tables.append({"dataset": ds, "issue_type": t, "title": QUESTIONS[t]["title"],
                           "total": len(snap.candidates(t)), "people": people, "counts": counts,
                           "stopping_count": snap.stopping_count})
    return tables

