"""What every route of the confirmation tool reads: the stores under ``home`` and the page renderer.

One :class:`AppContext` is built per app (:func:`noisycal_platform.confirm_app.app.build_app`) and handed to
each route function of the module-level route tables (``app.ROUTES``, ``correctness_pages.CORRECTNESS_ROUTES``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from jinja2 import Environment, PackageLoader, select_autoescape
from starlette.requests import Request
from starlette.responses import HTMLResponse

from noisycal_platform.confirm_app.annotators import AnnotatorStore
from noisycal_platform.confirm_app.answers import AnswerLog
from noisycal_platform.confirm_app.correctness_audit import CorrectnessLog, SampleCache
from noisycal_platform.confirm_app.images import ThumbnailCache
from noisycal_platform.confirm_app.queue import QueueRegistry
from noisycal_platform.correctness.audit_workflow import AuditPaths

__all__ = ["QUESTIONS", "AppContext", "render"]

# Gröger et al. 2023 Appendix E: the question per issue type, verbatim, with a short headline and button texts.
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


@dataclass(frozen=True)
class AppContext:
    """The stores of one ``home``: logins, queue snapshots, both answer logs, thumbnails, the audit sample."""

    home: Path
    store: AnnotatorStore
    queues: QueueRegistry
    log: AnswerLog
    thumbs: ThumbnailCache
    correctness: CorrectnessLog
    audit_sample: SampleCache
    env: Environment

    @classmethod
    def at(cls, home: Path) -> AppContext:
        home = Path(home).expanduser().resolve()
        env = Environment(
            loader=PackageLoader("noisycal_platform.confirm_app", "templates"),
            autoescape=select_autoescape(["html"]),
            trim_blocks=True,
            lstrip_blocks=True,
        )
        return cls(home=home, store=AnnotatorStore(home), queues=QueueRegistry(home), log=AnswerLog(home),
                   thumbs=ThumbnailCache(home), correctness=CorrectnessLog(home),
                   audit_sample=SampleCache(AuditPaths(home).sample), env=env)


def render(ctx: AppContext, request: Request, name: str, status: int = 200, **values: object) -> HTMLResponse:
    """The template ``name`` with the response's CSP nonce and the question texts."""
    nonce = request.scope.get("state", {}).get("csp_nonce", "")
    body = ctx.env.get_template(name).render(nonce=nonce, questions=QUESTIONS, **values)
    return HTMLResponse(body, status_code=status)
