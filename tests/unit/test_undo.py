"""The one undo rule (``noisycal_platform.undo``) and its two users: the cleaning protocol and the correctness audit."""

from __future__ import annotations

import itertools

import pytest

from noisycal_platform.cleaning.protocol import answers_from_records, effective_answers
from noisycal_platform.correctness.audit_workflow import effective_correctness_answers
from noisycal_platform.undo import LogEntry, UndoError, cancelled_ids, entries_in_time_order


def _chain(n: int) -> list[LogEntry]:
    """``a`` then n undos, each naming the one before."""
    out = [LogEntry("a", "p")]
    for k in range(1, n + 1):
        out.append(LogEntry(f"u{k}", "p", undoes=out[-1].answer_id))
    return out


@pytest.mark.parametrize("n", range(0, 7))
def test_a_chain_alternates(n: int) -> None:
    cancelled = cancelled_ids(_chain(n), strict=True)
    # by hand: the last undo stands, so u_n, u_{n-2}, ... stand and each cancels the record before it
    assert ("a" in cancelled) == (n % 2 == 1)
    assert cancelled == {("a" if k == 1 else f"u{k - 1}") for k in range(n, 0, -2)}


def test_two_undos_of_one_answer() -> None:
    log = [LogEntry("a", "p"), LogEntry("u1", "p", "a"), LogEntry("u2", "p", "a")]
    assert cancelled_ids(log, strict=True) == {"a"}
    log.append(LogEntry("u3", "p", "u1"))  # undoing one of them leaves the other standing
    assert cancelled_ids(log, strict=True) == {"a", "u1"}
    log.append(LogEntry("u4", "p", "u2"))
    assert cancelled_ids(log, strict=True) == {"u1", "u2"}


def test_invalid_undos_raise_when_strict_and_cancel_nothing_otherwise() -> None:
    cases = {
        "unknown answer_id": [LogEntry("a", "p"), LogEntry("u", "p", "zz")],
        "not earlier": [LogEntry("u", "p", "a"), LogEntry("a", "p")],
        "of annotator": [LogEntry("a", "p"), LogEntry("u", "q", "a")],
    }
    for message, log in cases.items():
        with pytest.raises(UndoError, match=message):
            cancelled_ids(log, strict=True)
        assert cancelled_ids(log, strict=False) == set()
    # an unknown author on either side is not another person's
    assert cancelled_ids([LogEntry("a", None), LogEntry("u", "p", "a")], strict=True) == {"a"}


def test_time_order_not_read_order() -> None:
    recs = [
        {"answer_id": "a", "answer": "yes", "timestamp": "2026-01-01T00:00:01Z"},
        {"answer_id": "u1", "answer": "undo", "undoes": "a", "timestamp": "2026-01-01T00:00:02Z"},
        {"answer_id": "u2", "answer": "undo", "undoes": "u1", "timestamp": "2026-01-01T00:00:03Z"},
    ]
    for perm in itertools.permutations(recs):
        assert cancelled_ids(entries_in_time_order(perm), strict=True) == {"u1"}
    # without timestamps the log order is the time order
    assert [e.answer_id for e in entries_in_time_order([{"answer_id": "x"}, {"answer_id": "y"}])] == ["x", "y"]


def _cleaning(aid: str, answer: str, t: int, undoes: str | None = None) -> dict:
    return {"answer_id": aid, "dataset": "d", "issue_type": "irrelevant", "item_id": "x", "item_id_2": None,
            "annotator_id": "e1", "role": "expert", "answer": answer, "undoes": undoes, "position": 0,
            "timestamp": f"2026-01-01T00:00:{t:02d}Z"}


@pytest.mark.parametrize("n", range(0, 5))
def test_cleaning_and_correctness_agree_on_chains(n: int) -> None:
    clean = [_cleaning("a", "yes", 1)] + [
        _cleaning(f"u{k}", "undo", 1 + k, "a" if k == 1 else f"u{k - 1}") for k in range(1, n + 1)]
    kept = effective_answers(answers_from_records(clean))["answer_id"].to_list()
    corr = [{**r, "answer": "correct" if r["answer"] == "yes" else r["answer"]} for r in clean]
    kept_corr = [r["answer_id"] for r in effective_correctness_answers(corr)]
    expected = [] if n % 2 else ["a"]  # by hand, as in test_a_chain_alternates
    assert kept == expected
    assert kept_corr == expected
