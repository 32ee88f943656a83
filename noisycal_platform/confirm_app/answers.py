"""The per-annotator answer log ``inbox/confirmations/<annotator_id>.jsonl`` and the session state derived
from it.

Records follow ``contracts.CONFIRMATION_FIELDS`` (checked by ``contracts.confirmation_problem`` before any
write); nothing is ever erased: an undo is a record of its own naming the answer it cancels. The state of a
session (dataset, issue type) is a replay of the log, so a closed browser, a restart or a second tab all see
the same state. The stopping rule (Gröger et al. 2023 §3.3): walk the ranking in order; stop after ``stopping_count``
consecutive "no" answers, n_clean = ⌊ln p_chance / ln(1−p₊)⌋, which the pipeline has already put in the
snapshot's meta JSON.

Writes take a per-annotator lock (a thread lock plus ``flock`` on the log itself), re-derive the state under
the lock, append one line with a single ``write`` and ``fsync`` before returning, so an acknowledged answer
survives a SIGKILL and two tabs never record the same candidate twice.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import threading
import uuid
from collections import OrderedDict
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Literal

from noisycal_platform.cleaning.protocol import answers_from_records
from noisycal_platform.cleaning.protocol import effective_answers as protocol_effective_answers
from noisycal_platform.confirm_app.queue import Candidate, QueueSnapshot, pair_key
from noisycal_platform.contracts import confirmation_log_problems, confirmation_problem
from noisycal_platform.files import fsync_dir, json_lines, read_json_lines
from noisycal_platform.ingest import fault_point

__all__ = [
    "AnswerLog",
    "Outcome",
    "SessionState",
    "effective_answers",
    "session_state",
    "valid_records",
]

FinishReason = Literal["stopping_rule", "exhausted"]


def valid_records(records: Iterable[dict]) -> list[dict]:
    """The records that satisfy the confirmation contract one by one and together (``contracts``); a
    hand-edited or torn line never breaks a session, it is simply not counted (ingestion reports it)."""
    ok = [r for r in records if confirmation_problem(r) is None]
    bad = confirmation_log_problems(ok)
    return [r for i, r in enumerate(ok) if i not in bad]


#: Recent results of `effective_answers`, keyed by (dataset, issue type, a BLAKE2b digest of the records' repr).
#: A question page and the answer posted from it replay the same log, and the admin page replays each log twice;
#: the replay costs ~55 µs per record (2026-12-07, 200 records: 11 ms), so a long session paid it on every click.
_EFFECTIVE_CACHE_SIZE = 8
_effective_cache: OrderedDict[tuple[str, str, bytes], tuple[dict, ...]] = OrderedDict()
_effective_cache_lock = threading.Lock()


def effective_answers(records: Iterable[dict], dataset: str, issue_type: str) -> list[dict]:
    """The yes/no records of one session that no undo cancels, in log order: the records of the session
    put through the pipeline's own ``cleaning.protocol.effective_answers`` (one rule for undo, in one
    place), mapped back to the logged records. Equal records give equal results, so the last few are kept
    (`_effective_cache`); the caller gets its own copies of the record dicts."""
    records = list(records)
    key = (dataset, issue_type, hashlib.blake2b(repr(records).encode("utf-8", "surrogatepass")).digest())
    with _effective_cache_lock:
        hit = _effective_cache.get(key)
        if hit is not None:
            _effective_cache.move_to_end(key)
    if hit is None:
        hit = tuple(_replay_effective(records, dataset, issue_type))
        with _effective_cache_lock:
            _effective_cache[key] = hit
            while len(_effective_cache) > _EFFECTIVE_CACHE_SIZE:
                _effective_cache.popitem(last=False)
    return [dict(r) for r in hit]


def _replay_effective(records: list[dict], dataset: str, issue_type: str) -> list[dict]:
    """`effective_answers` without the cache."""
    recs = [r for r in valid_records(records) if r["dataset"] == dataset and r["issue_type"] == issue_type]
    if not recs:
        return []
    order = {r["answer_id"]: i for i, r in reversed(list(enumerate(recs)))}  # first occurrence
    eff = protocol_effective_answers(answers_from_records(recs))
    picked = sorted((recs[order[a]] for a in eff["answer_id"].to_list()), key=lambda r: order[r["answer_id"]])
    return [dict(r) for r in picked]


def _key(r: dict) -> tuple[str, str | None]:
    b = r.get("item_id_2")
    return pair_key(str(r.get("item_id")), None if b is None else str(b))


@dataclass(frozen=True)
class SessionState:
    """Where one annotator stands in one ranking."""

    answered: int                   # candidates answered along the ranking (the walked prefix)
    yes: int                        # of which "yes"
    consecutive_no: int             # trailing run of "no" in that prefix
    stopping_count: int
    total: int                      # candidates in the ranking
    next_index: int | None          # index (into the ranking list) of the next question; None when finished
    finish_reason: FinishReason | None
    last_answer: dict | None        # most recent effective answer (the one `u` undoes)
    answers: dict[tuple[str, str | None], str]  # candidate key -> "yes"/"no"

    @property
    def finished(self) -> bool:
        return self.finish_reason is not None

    @property
    def started(self) -> bool:
        return self.last_answer is not None


def session_state(records: Iterable[dict], snap: QueueSnapshot, issue_type: str) -> SessionState:
    """Replay the log for (snap.dataset, issue_type) and walk the ranking: O(answers), not O(ranking)."""
    eff = effective_answers(records, snap.dataset, issue_type)
    by_key = {_key(r): str(r["answer"]) for r in eff}
    cands: list[Candidate] = snap.candidates(issue_type)
    n, stop = len(cands), snap.stopping_count
    idx = run = yes = 0
    reason: FinishReason | None = None
    while idx < n:
        ans = by_key.get(cands[idx].key)
        if ans is None:
            break
        run = run + 1 if ans == "no" else 0
        yes += ans == "yes"
        idx += 1
        if run >= stop:
            reason = "stopping_rule"
            break
    if reason is None and idx >= n:
        reason = "exhausted"
    return SessionState(
        answered=idx, yes=yes, consecutive_no=run, stopping_count=stop, total=n,
        next_index=None if reason else idx, finish_reason=reason,
        last_answer=eff[-1] if eff else None, answers=by_key,
    )


@dataclass(frozen=True)
class Outcome:
    """What a write did: ``recorded`` (a line was appended), ``duplicate`` (already recorded: acknowledged,
    nothing appended), ``conflict`` (refused: nothing appended; ``detail`` says why) or ``invalid`` (the
    record would break the confirmation contract: refused before anything is written or acknowledged)."""

    kind: Literal["recorded", "duplicate", "conflict", "invalid"]
    detail: str = ""
    record: dict | None = None


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="microseconds")


class AnswerLog:
    """All annotators' logs under ``inbox/confirmations/``."""

    def __init__(self, home: Path) -> None:
        self.folder = Path(home) / "inbox" / "confirmations"
        self._guard = threading.Lock()
        self._locks: dict[str, threading.Lock] = {}

    def path(self, annotator_id: str) -> Path:
        return self.folder / f"{annotator_id}.jsonl"

    def records(self, annotator_id: str) -> list[dict]:
        return read_json_lines(self.path(annotator_id))

    def all_records(self) -> dict[str, list[dict]]:
        """annotator file stem -> records, for every log in the drop folder (admin page)."""
        if not self.folder.is_dir():
            return {}
        return {p.stem: read_json_lines(p) for p in sorted(self.folder.glob("*.jsonl")) if p.is_file()}

    def _thread_lock(self, annotator_id: str) -> threading.Lock:
        with self._guard:
            return self._locks.setdefault(annotator_id, threading.Lock())

    # --- writes ---
    def answer(self, annotator_id: str, role: str, snap: QueueSnapshot, issue_type: str, position: int,
               item_id: str, item_id_2: str | None, answer: str) -> Outcome:
        """Record ``answer`` ("yes"/"no") for the candidate at ``position`` if it is the next one; acknowledge
        a repeat for an already answered candidate without a second record."""
        idx = snap.index_of(issue_type, position)
        if idx is None:
            return Outcome("conflict", f"no candidate at this position in the {issue_type} queue")
        cand = snap.candidates(issue_type)[idx]
        if cand.item_id != item_id or cand.item_id_2 != item_id_2:
            return Outcome("conflict", "the queue changed since this page was loaded; reload it")

        def decide(records: list[dict]) -> Outcome | dict:
            st = session_state(records, snap, issue_type)
            if cand.key in st.answers:
                return Outcome("duplicate", "this candidate was already answered")
            if st.finished:
                return Outcome("conflict", "this session has already finished")
            if st.next_index != idx:
                return Outcome("conflict", "this is not the next question; reload the page")
            return {
                "answer_id": uuid.uuid4().hex, "dataset": snap.dataset, "issue_type": issue_type,
                "item_id": cand.item_id, "item_id_2": cand.item_id_2, "annotator_id": annotator_id,
                "role": role, "answer": answer, "undoes": None, "position": cand.position,
                "timestamp": _now(),
            }

        return self._locked_append(annotator_id, decide)

    def undo(self, annotator_id: str, role: str, snap: QueueSnapshot, issue_type: str,
             undoes: str) -> Outcome:
        """Record an undo of ``undoes`` if it is this session's most recent effective answer; acknowledge a
        repeat (already undone) without a second record."""

        def decide(records: list[dict]) -> Outcome | dict:
            eff = effective_answers(records, snap.dataset, issue_type)
            if eff and str(eff[-1].get("answer_id")) == undoes:
                target = eff[-1]
                return {
                    "answer_id": uuid.uuid4().hex, "dataset": snap.dataset, "issue_type": issue_type,
                    "item_id": target.get("item_id"), "item_id_2": target.get("item_id_2"),
                    "annotator_id": annotator_id, "role": role, "answer": "undo", "undoes": undoes,
                    "position": target.get("position"), "timestamp": _now(),
                }
            ds, t = snap.dataset, issue_type
            same = [r for r in records if r.get("dataset") == ds and r.get("issue_type") == t]
            if any(r.get("answer") == "undo" and r.get("undoes") == undoes for r in same):
                return Outcome("duplicate", "this answer was already undone")
            return Outcome("conflict", "only the most recent answer can be undone; reload the page")

        return self._locked_append(annotator_id, decide)

    def record_problem(self, record: dict) -> object | None:
        """Why ``record`` breaks this log's record contract (the confirmation contract), or None."""
        return confirmation_problem(record)

    def _locked_append(self, annotator_id: str, decide: Callable[[list[dict]], Outcome | dict]) -> Outcome:
        path = self.path(annotator_id)

        def judge(records: list[dict]) -> Outcome | dict:
            verdict = decide(records)
            if isinstance(verdict, dict):
                problem = self.record_problem(verdict)  # the contract ingestion applies, before any ack
                if problem is not None:
                    return Outcome("invalid", f"this answer cannot be recorded ({problem})")
            return verdict

        with self._thread_lock(annotator_id):
            # First look without creating the file: a refused or duplicate request must leave no trace.
            for create in (False, True):
                flags = os.O_RDWR | os.O_APPEND | os.O_NOFOLLOW | (os.O_CREAT if create else 0)
                if create:
                    self.folder.mkdir(parents=True, exist_ok=True)
                try:
                    fd = os.open(path, flags, 0o644)
                except FileNotFoundError:
                    verdict = judge([])
                    if isinstance(verdict, Outcome):
                        return verdict
                    continue  # needs a write: open again with O_CREAT, then re-decide under the lock
                try:
                    fcntl.flock(fd, fcntl.LOCK_EX)
                    data = _read_all(fd)
                    verdict = judge(json_lines(data))
                    if isinstance(verdict, Outcome):
                        return verdict
                    line = json.dumps(verdict, separators=(",", ":"), ensure_ascii=False) + "\n"
                    payload = line.encode("utf-8")
                    if data and not data.endswith(b"\n"):
                        payload = b"\n" + payload  # never glue a record onto a torn line
                    fault_point("answer_before_write")
                    _write_all(fd, payload)
                    os.fsync(fd)
                    if not data:
                        fsync_dir(self.folder)  # a new file: make its directory entry durable too
                    fault_point("answer_after_fsync")  # durable, not yet acknowledged
                    return Outcome("recorded", record=verdict)
                finally:
                    os.close(fd)  # closing releases the flock
        raise RuntimeError("unreachable")  # pragma: no cover


def _read_all(fd: int) -> bytes:
    os.lseek(fd, 0, os.SEEK_SET)
    chunks = []
    while True:
        b = os.read(fd, 1 << 20)
        if not b:
            return b"".join(chunks)
        chunks.append(b)


def _write_all(fd: int, payload: bytes) -> None:
    view = memoryview(payload)
    while view:
        n = os.write(fd, view)
        view = view[n:]


