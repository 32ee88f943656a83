"""The local confirmation tool (Gröger et al. 2023 §3.3 and Appendix E).

Annotators confirm ranked candidates (irrelevant samples, near-duplicate pairs, label errors) one binary
question at a time, in ranking order, until the stopping rule fires (``stopping_count`` consecutive "no").
The app reads only the queue snapshot the pipeline exports (``exports/confirmation_queue/``) and writes only
``inbox/confirmations/<annotator>.jsonl``, ``annotators.json`` and ``cache/thumbnails/``; it never imports
dagster and never opens the warehouse.

Public functions (used by ``noisycal serve-confirmations`` and ``noisycal annotators ...``):
``create_app``, ``serve``, ``add_annotator``, ``revoke_annotator``, ``list_annotators``.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from noisycal_platform.confirm_app.annotators import LOGIN_ROLES

__all__ = [
    "DEFAULT_HOST",
    "DEFAULT_PORT",
    "HOST_HELP",
    "LOGIN_ROLES",
    "add_annotator",
    "create_app",
    "list_annotators",
    "revoke_annotator",
    "serve",
]

DEFAULT_HOST = "127.0.0.1"
DEFAULT_PORT = 8765
HOST_HELP = (
    "Interface to listen on. The default 127.0.0.1 serves this machine only. 0.0.0.0 exposes the tool - the "
    "question pages and the images of every dataset with an exported queue - to every host that can reach "
    "this machine over plain HTTP (tokens are still required, but travel unencrypted)."
)


def _home(home: str | Path) -> Path:
    if not isinstance(home, (str, Path)) or not str(home):
        raise ValueError(f"home must be a folder path, got {home!r}")
    return Path(home).expanduser().resolve()


def create_app(home: str | Path) -> Any:
    """The ASGI app (Starlette) serving the confirmation tool over ``home``."""
    from noisycal_platform.confirm_app.app import build_app

    return build_app(_home(home))


def serve(home: str | Path, host: str = DEFAULT_HOST, port: int = DEFAULT_PORT) -> None:
    """Run the tool with uvicorn until interrupted (one process: the per-annotator locks are in-process plus
    ``flock``, so several workers would also be safe, but one is enough)."""
    if not isinstance(port, int) or not 0 <= port <= 65535:
        raise ValueError(f"port must be an integer in [0, 65535], got {port!r}")
    if not isinstance(host, str) or not host:
        raise ValueError(f"host must be a non-empty string, got {host!r}")
    import uvicorn

    app = create_app(home)
    shown = f"[{host}]" if ":" in host else host
    print(f"noisycal confirmation tool on http://{shown}:{port}/  (home: {_home(home)})", flush=True)
    if host not in ("127.0.0.1", "localhost", "::1"):
        print(f"warning: listening on {host}: {HOST_HELP}", flush=True)
    uvicorn.run(app, host=host, port=port, log_level="info", access_log=False, workers=1)


def add_annotator(home: str | Path, name: str, role: str) -> tuple[str, str]:
    """Register ``name`` with ``role`` in {"expert", "lay", "admin"}; return ``(token, login_url_path)``.
    The token is shown only now (annotators.json keeps its sha256); the path is ``/login?token=...``."""
    from urllib.parse import quote

    from noisycal_platform.confirm_app.annotators import AnnotatorStore

    token = AnnotatorStore(_home(home)).add(name, role)
    return token, f"/login?token={quote(token, safe='')}"


def revoke_annotator(home: str | Path, name: str) -> None:
    """Revoke ``name``: its token is refused (403) from the next request on; its answers stay."""
    from noisycal_platform.confirm_app.annotators import AnnotatorStore

    AnnotatorStore(_home(home)).revoke(name)


def list_annotators(home: str | Path) -> list[dict[str, object]]:
    """Every registered annotator as ``{"name", "role", "revoked", "created"}`` (never the token hash)."""
    from noisycal_platform.confirm_app.annotators import AnnotatorStore

    return [a.public() for a in AnnotatorStore(_home(home)).load()]
