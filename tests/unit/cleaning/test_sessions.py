"""How confirmation sessions end (Gröger et al. 2023 Appendix C, Figure 9): the stopping rule or the end of the
candidates, checked against hand-made logs and against the confirmation web tool's own walk."""

import numpy as np
import polars as pl
import pytest

from noisycal_platform.cleaning.pipeline.schemas import QUEUE_SCHEMA
from noisycal_platform.cleaning.protocol import answers_from_records
from noisycal_platform.cleaning.sessions import SESSION_ENDINGS_SCHEMA, session_endings
from noisycal_platform.confirm_app.answers import session_state
from noisycal_platform.confirm_app.queue import QueueRegistry, snapshot_folder, write_snapshot
from tests.unit.cleaning._answers import answer_record, stamp

N_CAND = 6


def _queue(n: int = N_CAND) -> pl.DataFrame:
    rows = [("d", "irrelevant", p, f"f{p}", None, None) for p in range(n)]
    rows += [("d", "near_duplicate", p, f"f{p}", f"g{p}", None) for p in range(n)]
    return pl.DataFrame(rows, schema=QUEUE_SCHEMA, orient="row")


def _records(plan: dict[tuple[str, str], list[str]]) -> list[dict]:
    """Answers in queue order; "u" undoes the previous answer (recorded, not erased)."""
    recs, k = [], 0
    for (ann, it), answers in plan.items():
        pos, last = 0, None
        for a in answers:
            if a == "u":
                recs.append(answer_record(f"a{k}", ann, f"f{pos - 1}", "undo", pos - 1, stamp(k), issue_type=it,
                                          item_id_2=f"g{pos - 1}" if it == "near_duplicate" else None, undoes=last))
                pos -= 1
            else:
                recs.append(answer_record(f"a{k}", ann, f"f{pos}", a, pos, stamp(k), issue_type=it,
                                          item_id_2=f"g{pos}" if it == "near_duplicate" else None))
                last, pos = f"a{k}", pos + 1
            k += 1
    return recs


def test_hand_made_sessions():
    plan = {
        ("e1", "irrelevant"): ["yes", "no", "no", "no"],  # 3 "no" in a row -> stopping rule after 4 answers
        ("e2", "irrelevant"): ["no", "yes", "no", "yes", "no", "no"],  # all 6 answered, no run of 3
        ("e3", "irrelevant"): ["no", "no"],  # open
        ("e1", "near_duplicate"): ["no", "no", "yes", "u", "no"],  # undo: the re-given "no" completes the run
    }
    out = session_endings(answers_from_records(_records(plan)), _queue(), 3)
    assert out.schema == pl.Schema(SESSION_ENDINGS_SCHEMA)
    got = {(r["annotator_id"], r["issue_type"]): (r["answered"], r["yes"], r["consecutive_no"], r["ended_by"])
           for r in out.iter_rows(named=True)}
    assert got == {
        ("e1", "irrelevant"): (4, 1, 3, "stopping_rule"),
        ("e2", "irrelevant"): (6, 2, 2, "end_of_candidates"),
        ("e3", "irrelevant"): (2, 0, 2, None),
        ("e1", "near_duplicate"): (3, 0, 3, "stopping_rule"),
    }
    row = out.filter(pl.col("annotator_id") == "e2").row(0, named=True)
    assert row["candidates"] == N_CAND and row["percent_yes"] == pytest.approx(100 * 2 / 6, rel=1e-12)


@pytest.mark.parametrize("seed", range(4))
def test_agrees_with_the_web_tools_walk(tmp_path, seed):
    rng = np.random.default_rng(seed)
    queue = _queue(12)
    folder = snapshot_folder(tmp_path)
    write_snapshot(folder, "d", queue, dataset_root=str(tmp_path), stopping_count=3, p_chance=0.05, p_plus=0.05)
    snap = QueueRegistry(tmp_path).get("d")
    plan = {}
    for a in range(6):
        for it in ("irrelevant", "near_duplicate"):
            seq = list(rng.choice(["yes", "no", "no", "no", "u"], size=int(rng.integers(0, 16))))
            depth, clean = 0, []
            for x in seq:  # an undo needs an answer before it; never more answers than candidates
                if x == "u" and depth > 0:
                    clean.append(x)
                    depth -= 1
                elif x != "u" and depth < 12:
                    clean.append(str(x))
                    depth += 1
            if clean:
                plan[(f"a{a}", it)] = clean
    recs = _records(plan)
    out = session_endings(answers_from_records(recs), queue, 3)
    reason = {"stopping_rule": "stopping_rule", "exhausted": "end_of_candidates", None: None}
    for r in out.iter_rows(named=True):
        mine = [x for x in recs if x["annotator_id"] == r["annotator_id"]]
        st = session_state(mine, snap, r["issue_type"])
        assert (r["answered"], r["yes"], r["consecutive_no"]) == (st.answered, st.yes, st.consecutive_no)
        assert r["ended_by"] == reason[st.finish_reason], (r, st)
