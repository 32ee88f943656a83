"""Annotator registry in ``$NOISYCAL_HOME/annotators.json``: name, role, sha256(token), revoked, created.

Tokens come from ``secrets.token_urlsafe`` and are shown once; only their SHA-256 is stored, and a presented
token is checked with ``secrets.compare_digest`` against every stored hash (the datasette pattern).
The file is replaced atomically (temp + fsync + rename) under an exclusive lock.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import re
import secrets
import tempfile
import threading
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path

from noisycal_platform.contracts import ANSWER_ROLES
from noisycal_platform.paths import validate_name

__all__ = [
    "ANSWER_ROLES",
    "LOGIN_ROLES",
    "NAME_RE",
    "Annotator",
    "AnnotatorStore",
    "hash_token",
]

LOGIN_ROLES = (*ANSWER_ROLES, "admin")  # login roles: admins see progress, never answer
# Names become file names (inbox/confirmations/<name>.jsonl): a conservative portable subset.
NAME_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
TOKEN_BYTES = 32


def hash_token(token: str) -> str:
    """Hex SHA-256 of the token's UTF-8 bytes (what annotators.json stores)."""
    return hashlib.sha256(token.encode("utf-8")).hexdigest()


@dataclass(frozen=True)
class Annotator:
    name: str
    role: str
    token_sha256: str
    revoked: bool
    created: str

    def public(self) -> dict[str, object]:
        """The record without its hash (what ``list_annotators`` returns)."""
        return {"name": self.name, "role": self.role, "revoked": self.revoked, "created": self.created}


def _validate_name(name: object) -> str:
    """The home-wide name check (``paths.validate_name``), then the portable file-name subset: an annotator
    name is also the file name of their answer log on whatever filesystem the clinic uses."""
    validate_name(name, "annotator")
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ValueError(
            f"name must match {NAME_RE.pattern} (letters, digits, '_', '.', '-'; at most 64), got {name!r}"
        )
    return name


class AnnotatorStore:
    """Read/write ``annotators.json``; the reader re-reads the file when its stat changes (so a revocation
    made by the CLI while the server runs takes effect on the next request)."""

    def __init__(self, home: Path) -> None:
        self.path = Path(home) / "annotators.json"
        self._lock = threading.Lock()
        self._cache_key: tuple[int, int, int] | None = None
        self._cache: list[Annotator] = []

    # --- reading ---
    def load(self) -> list[Annotator]:
        try:
            st = self.path.stat()
        except FileNotFoundError:
            return []
        key = (st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            if key != self._cache_key:
                self._cache = self._parse(self.path.read_text(encoding="utf-8"))
                self._cache_key = key
            return list(self._cache)

    @staticmethod
    def _parse(text: str) -> list[Annotator]:
        raw = json.loads(text) if text.strip() else []
        if not isinstance(raw, list):
            raise ValueError("annotators.json must hold a JSON list of annotator records")
        return [
            Annotator(
                name=str(r["name"]), role=str(r["role"]), token_sha256=str(r["token_sha256"]),
                revoked=bool(r.get("revoked", False)), created=str(r.get("created", "")),
            )
            for r in raw
        ]

    def find_by_token(self, token: str) -> Annotator | None:
        """The annotator whose stored hash equals sha256(token), compared in constant time with each record
        (revoked ones included: the caller answers 403 for those, 401 for no match)."""
        digest = hash_token(token)
        match = None
        for a in self.load():
            if secrets.compare_digest(a.token_sha256, digest):
                match = a
        return match

    # --- writing ---
    @contextmanager
    def _locked(self) -> Iterator[list[Annotator]]:
        # Lock the home folder itself (flock on a directory fd): no extra lock file beside annotators.json,
        # and the lock survives the atomic rename of the file it guards.
        self.path.parent.mkdir(parents=True, exist_ok=True)
        dfd = os.open(self.path.parent, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(dfd, fcntl.LOCK_EX)
            current = self._parse(self.path.read_text(encoding="utf-8")) if self.path.exists() else []
            yield current
        finally:
            fcntl.flock(dfd, fcntl.LOCK_UN)
            os.close(dfd)

    def _write(self, records: list[Annotator]) -> None:
        payload = [
            {"name": a.name, "role": a.role, "token_sha256": a.token_sha256, "revoked": a.revoked,
             "created": a.created}
            for a in records
        ]
        fd, tmp = tempfile.mkstemp(prefix=".annotators.", suffix=".tmp", dir=self.path.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as f:
                json.dump(payload, f, indent=2)
                f.write("\n")
                f.flush()
                os.fsync(f.fileno())
            os.chmod(tmp, 0o600)
            os.replace(tmp, self.path)
        except BaseException:
            Path(tmp).unlink(missing_ok=True)
            raise
        dfd = os.open(self.path.parent, os.O_RDONLY)
        try:
            os.fsync(dfd)
        finally:
            os.close(dfd)

    def add(self, name: str, role: str) -> str:
        """Create ``name`` with ``role`` and return its new token (shown once). A revoked name is re-issued a
        fresh token; an active one raises ValueError (revoke it first)."""
        _validate_name(name)
        if role not in LOGIN_ROLES:
            raise ValueError(f"role must be one of {LOGIN_ROLES}, got {role!r}")
        token = secrets.token_urlsafe(TOKEN_BYTES)
        created = datetime.now(UTC).isoformat(timespec="seconds")
        with self._locked() as current:
            for a in current:
                if a.name == name and not a.revoked:
                    raise ValueError(f"name {name!r} already exists and is active; revoke it first")
            kept = [a for a in current if a.name != name]
            kept.append(Annotator(name, role, hash_token(token), False, created))
            self._write(kept)
        return token

    def revoke(self, name: str) -> None:
        """Mark ``name`` revoked (its token is refused with 403 from the next request on)."""
        _validate_name(name)
        with self._locked() as current:
            if not any(a.name == name for a in current):
                raise ValueError(f"name {name!r} is not a known annotator")
            self._write([
                Annotator(a.name, a.role, a.token_sha256, True, a.created) if a.name == name else a
                for a in current
            ])
