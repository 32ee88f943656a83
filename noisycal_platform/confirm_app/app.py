"""The confirmation tool as a Starlette app (server-rendered Jinja2 pages, no external assets).

Routes
- ``GET  /login?token=T``          sets the session cookie (HttpOnly, SameSite=Strict), continues to ``/``
- ``GET  /``                       choose a dataset and an issue type (admins go to ``/admin``)
- ``GET  /q/{dataset}/{issue}``    the next binary question, or the "finished" page
- ``POST /q/{dataset}/{issue}/answer`` and ``/undo``   write one record (PRG: 303 back to the question)
- ``GET  /img/{dataset}?f=NAME&s=m|l``   a cached thumbnail of a candidate image inside the dataset root
- ``GET  /admin``                  progress and live unanimous/majority counts (admin role)
- ``POST /logout``

Security: every route needs the session cookie ``<token>.<nonce>``; the token is checked
against the stored sha256 with ``secrets.compare_digest`` (none → 401, unknown → 401, revoked → 403).
Writes are refused when ``Sec-Fetch-Site`` says cross-site/same-site or ``Origin`` differs from the host (the
header check of datasette/csrf.py), AND unless the form carries the session's CSRF token
HMAC-SHA256(token, nonce), where the nonce is drawn at each login. Bodies over 4 KiB → 413, non-form
bodies → 415, unparseable → 400, bad field values → 422; nothing is written in any of those cases.
"""

from __future__ import annotations

import hashlib
import hmac
import re
import secrets
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, quote, urlsplit

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import FileResponse, HTMLResponse, RedirectResponse, Response
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from noisycal_platform.cleaning.protocol import aggregate_answers, answers_from_records
from noisycal_platform.cleaning.protocol import effective_answers as protocol_effective_answers
from noisycal_platform.confirm_app.annotators import ANSWER_ROLES, Annotator, AnnotatorStore
from noisycal_platform.confirm_app.answers import (
    AnswerLog,
    Outcome,
    SessionState,
    effective_answers,
    session_state,
    valid_records,
)
from noisycal_platform.confirm_app.correctness_audit import correctness_routes
from noisycal_platform.confirm_app.images import SIZES, PathRefused, ThumbnailCache, confine
from noisycal_platform.confirm_app.queue import ISSUE_TYPES, QueueRegistry, QueueSnapshot

__all__ = ["COOKIE", "MAX_BODY", "QUESTIONS", "build_app"]

COOKIE = "nc_session"
MAX_BODY = 4096
MAX_FIELD = 1024
MAX_TOKEN = 256
_ANSWER_ID_RE = re.compile(r"^[0-9a-f]{32}$")

# Seed 001 Appendix E: the question per issue type, verbatim, with a short headline and button texts.
QUESTIONS: dict[str, dict[str, str]] = {
    "irrelevant": {
        "title": "Irrelevant samples",
        "headline": "Is this image irrelevant?",
        "text": "Your task is to judge if the image shown is irrelevant. Select yes when the image is not a "
                "valid input for the task at hand.",
        "yes": "Yes, irrelevant",
        "no": "No, a valid input",
    },
    "near_duplicate": {
        "title": "Near duplicates",
        "headline": "Do these two images show the same object?",
        "text": "Your task is to judge whether the two images shown together are pictures of the same "
                "object. Note that pictures of the same object can be identical or different shots with the "
                "same object of interest.",
        "yes": "Yes, same object",
        "no": "No, different objects",
    },
    "label_error": {
        "title": "Label errors",
        "headline": "Is this image's label an error?",
        "text": "Your task is to judge whether the image's label is correct. Please select that the label is "
                "an error only if you think it is wrong and not when there is low uncertainty or ambiguity.",
        "yes": "Yes, the label is an error",
        "no": "No, the label is fine",
    },
}


class Refused(Exception):
    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Session:
    annotator: Annotator
    csrf: str


def _csrf_for(token: str, nonce: str) -> str:
    return hmac.new(token.encode(), f"csrf:{nonce}".encode(), hashlib.sha256).hexdigest()


class _SecurityHeaders:
    """Pure ASGI middleware: a per-response CSP nonce for the inline <style>/<script>; hardening headers."""

    def __init__(self, app: ASGIApp) -> None:
        self.app = app

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        nonce = secrets.token_urlsafe(16)
        scope.setdefault("state", {})["csp_nonce"] = nonce

        async def send_with_headers(message: Message) -> None:
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                names = {k.lower() for k, _ in headers}
                extra = {
                    b"content-security-policy": (
                        f"default-src 'self'; script-src 'nonce-{nonce}'; style-src 'nonce-{nonce}'; "
                        "img-src 'self'; object-src 'none'; base-uri 'none'; form-action 'self'; "
                        "frame-ancestors 'none'"
                    ).encode(),
                    b"x-content-type-options": b"nosniff",
                    b"x-frame-options": b"DENY",
                    b"referrer-policy": b"same-origin",
                    b"cross-origin-opener-policy": b"same-origin",
                    b"cross-origin-resource-policy": b"same-origin",
                }
                if b"cache-control" not in names:
                    extra[b"cache-control"] = b"no-store"
                headers.extend((k, v) for k, v in extra.items() if k not in names)
                message["headers"] = headers
            await send(message)

        await self.app(scope, receive, send_with_headers)


def build_app(home: Path) -> Starlette:
    """The ASGI app over ``home`` (see module docstring)."""
    home = Path(home).expanduser().resolve()
    store = AnnotatorStore(home)
    queues = QueueRegistry(home)
    log = AnswerLog(home)
    thumbs = ThumbnailCache(home)
    env = Environment(
        loader=PackageLoader("noisycal_platform.confirm_app", "templates"),
        autoescape=select_autoescape(["html"]),
        trim_blocks=True,
        lstrip_blocks=True,
    )

    # ------------------------------------------------------------------ helpers
    def render(request: Request, name: str, status: int = 200, **ctx: object) -> HTMLResponse:
        nonce = request.scope.get("state", {}).get("csp_nonce", "")
        body = env.get_template(name).render(nonce=nonce, questions=QUESTIONS, **ctx)
        return HTMLResponse(body, status_code=status)

    def authenticate(request: Request) -> Session:
        raw = request.cookies.get(COOKIE)
        if not raw:
            raise Refused(401, "Sign in with your personal login link.")
        token, sep, nonce = raw.rpartition(".")
        if not sep or not token or not nonce or len(raw) > MAX_TOKEN:
            raise Refused(401, "Your session is not valid. Sign in with your personal login link.")
        annotator = annotator_for(token, "Unknown token. Sign in with your personal login link.")
        return Session(annotator, _csrf_for(token, nonce))

    def annotator_for(token: str, unknown: str) -> Annotator:
        """The annotator a token belongs to: 401 with ``unknown`` when none does, 403 when revoked."""
        annotator = store.find_by_token(token)
        if annotator is None:
            raise Refused(401, unknown)
        if annotator.revoked:
            raise Refused(403, "This login has been revoked.")
        return annotator

    def check_same_origin(request: Request) -> None:
        # Sec-Fetch-Site is set by the browser and cannot be forged by a page: when present it decides.
        # Clients without it fall back to Origin (no Origin = not a browser form: the CSRF token decides).
        site = request.headers.get("sec-fetch-site")
        if site is not None:
            if site not in ("same-origin", "none"):
                raise Refused(403, "Cross-site request refused.")
            return
        origin = request.headers.get("origin")
        if origin is not None:
            host = request.headers.get("host", "")
            parts = urlsplit(origin) if origin != "null" else None
            if parts is None or parts.netloc != host or parts.scheme not in ("http", "https"):
                raise Refused(403, "Cross-origin request refused.")

    async def read_form(request: Request, allowed: set[str]) -> dict[str, str]:
        ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
        if ctype != "application/x-www-form-urlencoded":
            raise Refused(415, "Forms must be sent as application/x-www-form-urlencoded.")
        declared = request.headers.get("content-length")
        if declared is not None:
            if not declared.isdigit():
                raise Refused(400, "Malformed Content-Length.")
            if int(declared) > MAX_BODY:
                raise Refused(413, "Request body too large.")
        size, chunks = 0, []
        async for chunk in request.stream():
            size += len(chunk)
            if size > MAX_BODY:
                raise Refused(413, "Request body too large.")
            chunks.append(chunk)
        try:
            text = b"".join(chunks).decode("ascii")
            parsed = parse_qs(text, keep_blank_values=True, strict_parsing=bool(text), max_num_fields=16,
                              errors="strict")
        except (UnicodeDecodeError, ValueError) as err:
            raise Refused(400, "Malformed form.") from err
        out: dict[str, str] = {}
        for k, values in parsed.items():
            if k not in allowed:
                raise Refused(422, f"Unexpected field {k!r}.")
            if len(values) != 1:
                raise Refused(422, f"Field {k!r} given more than once.")
            if len(values[0]) > MAX_FIELD:
                raise Refused(413, f"Field {k!r} is too long.")
            if any(ord(c) < 32 for c in values[0]):
                raise Refused(422, f"Field {k!r} has control characters.")
            out[k] = values[0]
        return out

    def check_csrf(session: Session, form: dict[str, str]) -> None:
        given = form.get("csrf", "")
        if not given or not secrets.compare_digest(given.encode(), session.csrf.encode()):
            raise Refused(403, "Missing or wrong form token (CSRF). Reload the page and try again.")

    def snapshot(dataset: str) -> QueueSnapshot:
        try:
            snap = queues.get(dataset)
        except Exception as err:  # a file another process wrote: a parse error means "unavailable"
            raise Refused(503, f"The queue snapshot for this dataset cannot be read: {err}") from err
        if snap is None:
            raise Refused(404, "No confirmation queue for this dataset.")
        return snap

    def issue(snap: QueueSnapshot, issue_type: str) -> str:
        if issue_type not in ISSUE_TYPES or not snap.candidates(issue_type):
            raise Refused(404, "No candidates of this issue type for this dataset.")
        return issue_type

    def require_answerer(session: Session) -> None:
        if session.annotator.role not in ANSWER_ROLES:
            raise Refused(403, "Admin logins cannot answer questions; use an expert or lay login.")

    async def answer_form(
        request: Request, fields: set[str]
    ) -> tuple[Session, dict[str, str], str, QueueSnapshot, str]:
        """What an answer and an undo check first: same origin, session, form (``fields`` + csrf), a role that
        answers, the dataset's snapshot and the issue type; returns (session, form, dataset, snapshot, type)."""
        check_same_origin(request)
        session = authenticate(request)
        form = await read_form(request, {"csrf", *fields})
        check_csrf(session, form)
        require_answerer(session)
        dataset = request.path_params["dataset"]
        snap = snapshot(dataset)
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
    async def login(request: Request) -> Response:
        token = request.query_params.get("token", "")
        if not token:
            raise Refused(401, "The login link has no token.")
        if len(token) > MAX_TOKEN:
            raise Refused(400, "Malformed token.")
        annotator = annotator_for(token, "Unknown token.")
        # 200 + same-document continue (not a 303): a SameSite=Strict cookie set during a navigation that
        # started on another site is not sent on the redirect that follows it.
        resp = render(request, "login.html", annotator=annotator)
        resp.set_cookie(COOKIE, f"{token}.{secrets.token_urlsafe(16)}", httponly=True, samesite="strict",
                        path="/", secure=request.url.scheme == "https")
        return resp

    async def logout(request: Request) -> Response:
        check_same_origin(request)
        session = authenticate(request)
        check_csrf(session, await read_form(request, {"csrf"}))
        resp = render(request, "message.html", title="Signed out", message="You are signed out.")
        resp.delete_cookie(COOKIE, path="/")
        return resp

    async def index(request: Request) -> Response:
        session = authenticate(request)
        if session.annotator.role == "admin":
            return RedirectResponse("/admin", status_code=303)
        records = await run_in_threadpool(log.records, session.annotator.name)
        rows = []
        for ds in queues.datasets():
            try:
                snap = queues.get(ds)
            except Exception:  # unreadable snapshot: listed nowhere until the pipeline rewrites it
                continue
            if snap is None:
                continue
            for t in ISSUE_TYPES:
                if snap.candidates(t):
                    rows.append({"dataset": ds, "issue_type": t, "url": q_url(ds, t),
                                 "state": session_state(records, snap, t)})
        return render(request, "index.html", session=session, rows=rows)

    async def question(request: Request) -> Response:
        session = authenticate(request)
        dataset = request.path_params["dataset"]
        snap = snapshot(dataset)
        issue_type = issue(snap, request.path_params["issue_type"])
        records = await run_in_threadpool(log.records, session.annotator.name)
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
            request, "question.html", session=session, dataset=dataset, issue_type=issue_type,
            q=QUESTIONS[issue_type], state=st, cand=cand, images=images, prefetch=prefetch,
            answer_url=q_url(dataset, issue_type) + "/answer", undo_url=q_url(dataset, issue_type) + "/undo",
            read_only=session.annotator.role not in ANSWER_ROLES, extending=issue_type in snap.extending,
        )

    async def answer(request: Request) -> Response:
        fields = {"position", "item_id", "item_id_2", "answer"}
        session, form, dataset, snap, issue_type = await answer_form(request, fields)
        pos_s = form.get("position", "")
        if not pos_s.isdigit() or len(pos_s) > 12:
            raise Refused(422, "Field 'position' must be a non-negative integer.")
        if form.get("answer") not in ("yes", "no"):
            raise Refused(422, "Field 'answer' must be 'yes' or 'no'.")
        if "item_id" not in form or not form["item_id"]:
            raise Refused(422, "Field 'item_id' is required.")
        item2 = form.get("item_id_2") or None
        outcome = await run_in_threadpool(
            log.answer, session.annotator.name, session.annotator.role, snap, issue_type, int(pos_s),
            form["item_id"], item2, form["answer"],
        )
        return next_question(outcome, dataset, issue_type)

    async def undo(request: Request) -> Response:
        session, form, dataset, snap, issue_type = await answer_form(request, {"undoes"})
        undoes = form.get("undoes", "")
        if not _ANSWER_ID_RE.fullmatch(undoes):
            raise Refused(422, "Field 'undoes' must be an answer id (32 hex digits).")
        outcome = await run_in_threadpool(
            log.undo, session.annotator.name, session.annotator.role, snap, issue_type, undoes
        )
        return next_question(outcome, dataset, issue_type)

    async def image(request: Request) -> Response:
        authenticate(request)
        snap = snapshot(request.path_params["dataset"])
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
            thumb = await run_in_threadpool(thumbs.get, real, size)
        except ValueError as err:
            raise Refused(422, str(err)) from None
        return FileResponse(thumb, media_type="image/jpeg",
                            headers={"cache-control": "private, max-age=3600"})

    async def admin(request: Request) -> Response:
        session = authenticate(request)
        if session.annotator.role != "admin":
            raise Refused(403, "The admin page needs an admin login.")
        tables = await run_in_threadpool(_admin_tables, queues, log, store)
        return render(request, "admin.html", session=session, tables=tables)

    async def on_refused(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, Refused)
        return render(request, "message.html", status=exc.status, title=f"{exc.status}",
                      message=exc.message)

    async def favicon(request: Request) -> Response:
        return Response(status_code=204)  # keeps browsers from logging a 404; reveals nothing

    routes = [
        Route("/favicon.ico", favicon, methods=["GET"]),
        Route("/login", login, methods=["GET"]),
        Route("/logout", logout, methods=["POST"]),
        Route("/", index, methods=["GET"]),
        Route("/admin", admin, methods=["GET"]),
        Route("/q/{dataset}/{issue_type}", question, methods=["GET"]),
        Route("/q/{dataset}/{issue_type}/answer", answer, methods=["POST"]),
        Route("/q/{dataset}/{issue_type}/undo", undo, methods=["POST"]),
        Route("/img/{dataset}", image, methods=["GET"]),
    ]
    routes += correctness_routes(home, render=render, authenticate=authenticate, check_same_origin=check_same_origin,
                                 read_form=read_form, check_csrf=check_csrf, require_answerer=require_answerer,
                                 refused=Refused)
    app = Starlette(routes=routes, exception_handlers={Refused: on_refused})
    app.add_middleware(_SecurityHeaders)
    return app


def _admin_tables(queues: QueueRegistry, log: AnswerLog, store: AnnotatorStore) -> list[dict]:
    """Per dataset and issue type: each annotator's progress and the live unanimous/majority counts of "yes"
    (seed 001 §3.4: an issue is confirmed only if all experts flag it). An annotator who stopped before a
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

