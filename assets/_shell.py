"""What asset bodies of every stage share: a bad input fails its step once, naming the file.

An input error does not heal by itself, so the step is not retried (``TRANSIENT_RETRY`` is for a held lock or
a full disk); nothing is written for the partition, and the other partitions go on.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import dagster as dg

__all__ = ["failing_on"]


@contextmanager
def failing_on(
    *errors: type[Exception], file: str | Path | None = None, safe: bool = False, file_of_error: bool = False
) -> Iterator[None]:
    """Inside the block, an exception of one of ``errors`` fails the step without retry: its message becomes
    the failure's description (with ``safe``, its ``.safe`` form, which quotes no file content) and ``file``
    (with ``file_of_error``, the exception's own ``file``: one step may read several files) its metadata."""
    try:
        yield
    except errors as exc:
        named = getattr(exc, "file", None) if file_of_error else file
        metadata = {"file": str(named)} if named is not None else None
        description = exc.safe if safe else str(exc)  # type: ignore[attr-defined]
        raise dg.Failure(description=description, metadata=metadata, allow_retries=False) from None
