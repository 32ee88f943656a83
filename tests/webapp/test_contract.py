"""The app's replay of answer logs agrees with the pipeline's reading of the same files (one contract,
``noisycal_platform.contracts``): ``cleaning.pipeline.answers_from_records`` +
``cleaning.protocol.effective_answers`` and
``session_stop_index`` are an independent implementation of undo and of the stopping rule (Gröger et al. 2023 §3.3)."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from noisycal_platform.confirm_app.answers import AnswerLog, session_state
from noisycal_platform.confirm_app.queue import QueueRegistry


@pytest.mark.parametrize("seed", range(3))
def test_replay_matches_the_pipelines_effective_answers(fx, seed):
    from noisycal_platform.cleaning.pipeline.protocol_tables import confirmed_issues
    from noisycal_platform.cleaning.protocol import answers_from_records, effective_answers, session_stop_index

    rng = np.random.default_rng(seed)
    snap = QueueRegistry(fx.home).get("derm")
    log = AnswerLog(fx.home)
    for name, role in (("e1", "expert"), ("e2", "expert"), ("l1", "lay")):
        for issue_type in ("irrelevant", "near_duplicate", "label_error"):
            cands = snap.candidates(issue_type)
            for _ in range(30):  # random walk of answers and undos through the app's own write path
                st = session_state(log.records(name), snap, issue_type)
                if st.last_answer is not None and (st.finished or rng.random() < 0.3):
                    out = log.undo(name, role, snap, issue_type, st.last_answer["answer_id"])
                elif not st.finished:
                    c = cands[st.next_index]
                    ans = "no" if rng.random() < 0.7 else "yes"
                    out = log.answer(name, role, snap, issue_type, c.position, c.item_id, c.item_id_2, ans)
                else:
                    continue
                assert out.kind == "recorded"

    records = log.records("e1") + log.records("e2") + log.records("l1")
    answers = answers_from_records(records)
    theirs = effective_answers(answers)
    for name in ("e1", "e2", "l1"):
        for issue_type in ("irrelevant", "near_duplicate", "label_error"):
            ours = session_state(log.records(name), snap, issue_type)
            part = theirs.filter((theirs["annotator_id"] == name) & (theirs["issue_type"] == issue_type))
            pair = [(a, b) if b is None else (min(a, b), max(a, b))
                    for a, b in zip(part["item_id"], part["item_id_2"], strict=True)]
            assert dict(zip(pair, part["answer"], strict=True)) == ours.answers
            # stopping rule: the pipeline's stop index over the answers in ranking order
            no = (part.sort("position")["answer"] == "no").to_numpy()
            assert session_stop_index(no, snap.stopping_count) == ours.answered
            assert ours.finished == (ours.answered == len(snap.candidates(issue_type))
                                     or ours.consecutive_no >= snap.stopping_count)

    # the admin page's live counts equal the pipeline's confirmed_issues (experts panel; lay panel)
    from noisycal_platform.confirm_app.annotators import AnnotatorStore
    from noisycal_platform.confirm_app.app import _admin_tables

    queue = pl.read_parquet(fx.home / "exports" / "confirmation_queue" / "derm.parquet")
    tables = {t["issue_type"]: t["counts"] for t in _admin_tables(QueueRegistry(fx.home), log,
                                                                   AnnotatorStore(fx.home))}
    for role in ("expert", "lay"):
        conf = confirmed_issues(answers, queue, roles=(role,))
        for issue_type, counts in tables.items():
            part = conf.filter(pl.col("issue_type") == issue_type)
            assert counts[role]["unanimous"] == int(part["unanimous"].sum()), (role, issue_type)
            assert counts[role]["majority"] == int(part["majority"].sum()), (role, issue_type)


def test_kept_replays_equal_fresh_ones_and_follow_every_change():
    """`effective_answers` keeps recent results: a kept result equals a fresh replay (`_replay_effective`), the
    caller's copies can be changed without touching the next answer, and a log that changed in any field
    (an answer flipped, an undo added) is replayed again rather than served from the kept results."""
    from noisycal_platform.confirm_app import answers as answers_mod

    records = [
        {"answer_id": f"{i:032x}", "dataset": "d", "issue_type": "near_duplicate", "item_id": f"a{i}.png",
         "item_id_2": f"b{i}.png", "annotator_id": "e1", "role": "expert", "answer": "yes" if i % 3 else "no",
         "undoes": None, "position": i, "timestamp": f"2026-12-07T05:00:{i:02d}.000000Z"}
        for i in range(40)
    ]
    first = answers_mod.effective_answers(records, "d", "near_duplicate")
    assert first == answers_mod._replay_effective(records, "d", "near_duplicate") and len(first) == 40
    first[0]["answer"] = "changed by the caller"
    again = answers_mod.effective_answers(records, "d", "near_duplicate")
    assert again == answers_mod._replay_effective(records, "d", "near_duplicate")
    flipped = [dict(r) for r in records]
    flipped[5]["answer"] = "no" if flipped[5]["answer"] == "yes" else "yes"
    got = answers_mod.effective_answers(flipped, "d", "near_duplicate")
    assert got[5]["answer"] == flipped[5]["answer"] != again[5]["answer"]
    undo = {**records[-1], "answer_id": f"{99:032x}", "answer": "undo", "undoes": records[-1]["answer_id"],
            "timestamp": "2026-12-07T05:01:00.000000Z"}
    assert [r["answer_id"] for r in answers_mod.effective_answers([*records, undo], "d", "near_duplicate")] == [
        r["answer_id"] for r in records[:-1]
    ]
    assert answers_mod.effective_answers(records, "d", "other_dataset") == []
