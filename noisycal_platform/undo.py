"""The undo rule, defined once: which logged records an undo cancels.

Answers are never erased; an undo is a record of its own whose ``undoes`` names the ``answer_id`` it cancels
(an answer, or another undo). Records are taken in time order: by ``timestamp``, ties (and records without one)
by their position in the log, so the result does not depend on the order in which the records were read
when each carries a timestamp.

The rule. An undo ``u`` is *valid* when the record it names exists, comes before ``u`` in that order and
belongs to the same person (when both records carry an ``annotator_id``). A record is *effective* unless an
effective valid undo names it. Only later records can cancel a record, so this is a well-founded definition,
evaluated in one pass from the latest record back: when an undo is reached its own status is already final.

Consequences:

- a chain ``a``, ``u1 → a``, ``u2 → u1``, ``u3 → u2`` alternates: ``u3`` cancels ``u2``, so ``u1`` stands and
  ``a`` is cancelled (an odd-length chain cancels ``a``, an even-length one restores it);
- two undos of the same answer both cancel it; undoing one of them leaves the other standing, so the answer
  stays cancelled until every undo naming it is itself undone;
- an invalid undo cancels nothing: :func:`cancelled_ids` raises on it with ``strict=True`` (the cleaning
  pipeline, whose confirmation logs were validated at ingestion) and skips it with ``strict=False`` (the
  correctness audit's tool log, read as it is). No record other than the cancelled ones is ever dropped.

The tool itself only ever writes an undo of the annotator's most recent effective answer, so its logs hold
no chains or double undos; the cases above arise only in merged or hand-edited logs.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

__all__ = ["LogEntry", "UndoError", "cancelled_ids", "entries_in_time_order"]


class UndoError(ValueError):
    """An undo that names no earlier record of the same person (raised with ``strict=True``)."""


@dataclass(frozen=True)
class LogEntry:
    """What the rule reads of one record: its id, its author (None: unknown) and, for an undo, the id it names."""

    answer_id: str
    annotator_id: str | None = None
    undoes: str | None = None  # None: not an undo


def entries_in_time_order(records: Iterable[dict]) -> list[LogEntry]:
    """:class:`LogEntry` of each record (dicts with ``answer_id``, ``answer``, ``undoes``, optional
    ``annotator_id`` and ``timestamp``), sorted by timestamp, ties and missing timestamps by log position."""
    rows = list(records)
    stamps = [r.get("timestamp") for r in rows]
    if all(s is not None for s in stamps):
        order = sorted(range(len(rows)), key=lambda i: (stamps[i], i))
    else:
        order = list(range(len(rows)))
    out = []
    for i in order:
        r = rows[i]
        who = r.get("annotator_id")
        out.append(LogEntry(answer_id=str(r.get("answer_id")), annotator_id=None if who is None else str(who),
                            undoes=str(r.get("undoes")) if r.get("answer") == "undo" else None))
    return out


def cancelled_ids(entries: Sequence[LogEntry], *, strict: bool) -> set[str]:
    """The ids of the records that are not effective (see the module docstring), ``entries`` in time order.

    An id that occurs more than once refers to its first occurrence (a repeated copy of one record).
    """
    first: dict[str, int] = {}
    for k, e in enumerate(entries):
        first.setdefault(e.answer_id, k)
    cancelled: set[str] = set()
    for k in range(len(entries) - 1, -1, -1):
        e = entries[k]
        if e.undoes is None or first[e.answer_id] != k:
            continue
        j = first.get(e.undoes)
        problem = None
        if j is None:
            problem = f"undo {e.answer_id!r} names unknown answer_id {e.undoes!r}"
        elif j >= k:
            problem = f"undo {e.answer_id!r} names answer {e.undoes!r}, which is not earlier"
        elif None not in (e.annotator_id, entries[j].annotator_id) and e.annotator_id != entries[j].annotator_id:
            problem = (f"undo {e.answer_id!r} by {e.annotator_id!r} names answer {e.undoes!r} "
                       f"of annotator {entries[j].annotator_id!r}")
        if problem is not None:
            if strict:
                raise UndoError(f"answers: {problem}")
            continue
        if e.answer_id not in cancelled:  # every later undo has been seen: this one's status is final
            cancelled.add(e.undoes)
    return cancelled
