"""Where the read-only shared data sets are: ``../shared`` beside the repository (as CI lays it out), else
``/work/shared`` (a developer checkout)."""

from pathlib import Path

_REPO = Path(__file__).resolve().parents[1]
SHARED = next((p for p in (_REPO.parent / "shared", Path("/work/shared")) if p.is_dir()), _REPO.parent / "shared")


def shared_path(*parts: str) -> Path:
    return SHARED.joinpath(*parts)
