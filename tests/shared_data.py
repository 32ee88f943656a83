"""Where the read-only shared data sets are: ``../shared`` beside the repository (as CI lays it out), else
``/work/shared`` (a developer checkout).

A test that needs one of them is decorated with ``needs_shared(path, what)``. With the data present the test
runs. With it missing, the test is skipped with the reason outside CI; with ``CI=true`` in the environment it
FAILS with the same reason (``tests/conftest.py`` turns the ``shared_data`` mark into ``pytest.fail``), so a CI
run without the data is loud instead of silently green."""

from __future__ import annotations

import os
from collections.abc import Iterable
from pathlib import Path

import pytest

_REPO = Path(__file__).resolve().parents[1]
SHARED = next((p for p in (_REPO.parent / "shared", Path("/work/shared")) if p.is_dir()), _REPO.parent / "shared")


def shared_path(*parts: str) -> Path:
    return SHARED.joinpath(*parts)


def in_ci(environ: os._Environ[str] | dict[str, str] | None = None) -> bool:
    """``CI`` set to ``true`` or ``1`` (any case), as GitHub Actions, GitLab CI and most runners export it."""
    env = os.environ if environ is None else environ
    return env.get("CI", "").strip().lower() in ("true", "1")


def needs_shared(path: Path, what: str) -> pytest.MarkDecorator:
    """The mark for a test that reads ``path``: nothing to do when it exists; else a skip (outside CI) or a
    ``shared_data`` mark carrying the failure message (``CI=true``). Decided when the module is imported."""
    if path.exists():
        return pytest.mark.shared_data(path=str(path))
    reason = f"{what} not present at {path} (expected under ../shared/data beside the repository)"
    if in_ci():
        return pytest.mark.shared_data(path=str(path), missing=f"CI=true: {reason}; a CI run must have the data")
    return pytest.mark.skip(reason=reason)


def missing_shared_message(marks: Iterable[pytest.Mark]) -> str | None:
    """The failure message of the first ``shared_data`` mark that records missing data, else None."""
    for mark in marks:
        if mark.name == "shared_data" and mark.kwargs.get("missing"):
            return str(mark.kwargs["missing"])
    return None
