"""The confirmation tool's guard: every check a request passes before a route reads or writes anything.

Every route needs the session cookie ``<token>.<nonce>``; the token is checked against the stored sha256 with
``secrets.compare_digest`` (none → 401, unknown → 401, revoked → 403). Writes are refused when
``Sec-Fetch-Site`` says cross-site/same-site or ``Origin`` differs from the host (the header check of
datasette/csrf.py), AND unless the form carries the session's CSRF token HMAC-SHA256(token, nonce), where the
nonce is drawn at each login. Bodies over 4 KiB → 413, non-form bodies → 415, unparseable → 400, bad field
values → 422; nothing is written in any of those cases. :class:`SecurityHeaders` adds the CSP and hardening
headers to every response.
"""

from __future__ import annotations

import hashlib
import hmac
import secrets
from dataclasses import dataclass
from urllib.parse import parse_qs, urlsplit

from starlette.requests import Request
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from noisycal_platform.confirm_app.annotators import ANSWER_ROLES, Annotator
from noisycal_platform.confirm_app.context import AppContext

__all__ = [
    "COOKIE",
    "MAX_BODY",
    "MAX_FIELD",
    "MAX_TOKEN",
    "Refused",
    "SecurityHeaders",
    "Session",
    "annotator_for",
    "answering_post",
    "authenticate",
    "check_csrf",
    "check_same_origin",
    "csrf_for",
    "read_form",
    "require_answerer",
]

COOKIE = "nc_session"
MAX_BODY = 4096
MAX_FIELD = 1024
MAX_TOKEN = 256


class Refused(Exception):
    """A request the guard or a route turns down: ``status`` and a message for the page."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass(frozen=True)
class Session:
    annotator: Annotator
    csrf: str


def csrf_for(token: str, nonce: str) -> str:
    """The form token of the session (token, nonce): HMAC-SHA256 keyed by the login token."""
    return hmac.new(token.encode(), f"csrf:{nonce}".encode(), hashlib.sha256).hexdigest()


class SecurityHeaders:
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


def authenticate(ctx: AppContext, request: Request) -> Session:
    """The session of the request's cookie ``<token>.<nonce>``: 401 without a valid one, 403 when revoked."""
    raw = request.cookies.get(COOKIE)
    if not raw:
        raise Refused(401, "Sign in with your personal login link.")
    token, sep, nonce = raw.rpartition(".")
    if not sep or not token or not nonce or len(raw) > MAX_TOKEN:
        raise Refused(401, "Your session is not valid. Sign in with your personal login link.")
    annotator = annotator_for(ctx, token, "Unknown token. Sign in with your personal login link.")
    return Session(annotator, csrf_for(token, nonce))

def annotator_for(ctx: AppContext, token: str, unknown: str) -> Annotator:
    """The annotator a token belongs to: 401 with ``unknown`` when none does, 403 when revoked."""
    annotator = ctx.store.find_by_token(token)
    if annotator is None:
        raise Refused(401, unknown)
    if annotator.revoked:
        raise Refused(403, "This login has been revoked.")
    return annotator

def check_same_origin(request: Request) -> None:
    """Refuse (403) a write a browser marks as cross-site, or whose Origin is not this host."""
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
    """The urlencoded body as one value per field of ``allowed``: 415/413/400/422 for anything else."""
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
    """Refuse (403) a form without the session's CSRF token."""
    given = form.get("csrf", "")
    if not given or not secrets.compare_digest(given.encode(), session.csrf.encode()):
        raise Refused(403, "Missing or wrong form token (CSRF). Reload the page and try again.")


def require_answerer(session: Session) -> None:
    """Refuse (403) a login that does not answer (admin)."""
    if session.annotator.role not in ANSWER_ROLES:
        raise Refused(403, "Admin logins cannot answer questions; use an expert or lay login.")


async def answering_post(ctx: AppContext, request: Request, fields: set[str]) -> tuple[Session, dict[str, str]]:
    """What every answering POST checks first: same origin, session, form (``fields`` + csrf), the CSRF token, a
    role that answers; returns (session, form)."""
    check_same_origin(request)
    session = authenticate(ctx, request)
    form = await read_form(request, {"csrf", *fields})
    check_csrf(session, form)
    require_answerer(session)
    return session, form
