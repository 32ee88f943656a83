"""The near-duplicate queue extends as annotators go (Gröger et al. 2023 §3.3: only the stopping rule or the end of the
candidates ends a session): re-ranking to ``queue_depth`` after each batch of answers."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from noisycal_platform.cleaning.pipeline.protocol_tables import confirmation_queue
from noisycal_platform.cleaning.protocol import answers_from_records, queue_depth
from noisycal_platform.cleaning.rankings import rank_near_duplicates
from noisycal_platform.cleaning.sessions import session_endings
from tests.unit.cleaning._answers import answer_record, stamp

N_IMAGES = 8  # 28 pairs: the true end of the near-duplicate candidates
N_STOP = 2


def _files() -> pl.DataFrame:
    return pl.DataFrame({"file_name": [f"im{i}.png" for i in range(N_IMAGES)], "label": ["0"] * N_IMAGES})


def _queue(emb: np.ndarray, answers: pl.DataFrame, initial: int) -> pl.DataFrame:
    """One refill: the ranking re-computed to the depth the answers call for, exported as the queue."""
    depth = queue_depth(answers, "d", "near_duplicate", initial=initial, n_stop=N_STOP)
    return confirmation_queue("d", None, rank_near_duplicates(emb, top_k=depth), None, _files())


def _answer_along(queue: pl.DataFrame, upto: int, yes_every: int = 1) -> pl.DataFrame:
    """Annotator ``a`` answers the queue's first ``upto`` pairs in order; every ``yes_every``-th answer is yes."""
    rows = queue.filter(pl.col("issue_type") == "near_duplicate").sort("position").head(upto)
    recs = [answer_record(f"x{p}", "a", r["item_id"], "yes" if p % yes_every == 0 else "no", p, stamp(p),
                          issue_type="near_duplicate", item_id_2=r["item_id_2"])
            for p, r in enumerate(rows.iter_rows(named=True))]
    return answers_from_records(recs)


def test_queue_depth_keeps_two_stopping_runs_beyond_the_deepest_answer():
    none = answers_from_records([])
    assert queue_depth(none, "d", "near_duplicate", initial=10, n_stop=3) == 10
    assert queue_depth(none, "d", "near_duplicate", initial=5, n_stop=3) == 0 + 2 * 3  # two runs from rank 0
    recs = [answer_record(f"x{p}", "a", f"i{p}", "yes", p, stamp(p), issue_type="near_duplicate",
                          item_id_2=f"j{p}") for p in (0, 1, 6)]
    recs.append(answer_record("u", "a", "i6", "undo", 6, stamp(9), issue_type="near_duplicate", item_id_2="j6",
                              undoes="x6"))  # the deepest answer undone: rank 2 is the deepest that counts
    ans = answers_from_records(recs)
    assert queue_depth(ans, "d", "near_duplicate", initial=5, n_stop=3) == 2 + 2 * 3
    assert queue_depth(ans, "d", "irrelevant", initial=10, n_stop=3) == 10  # other issue types: own answers
    assert queue_depth(ans, "other", "near_duplicate", initial=10, n_stop=3) == 10  # other datasets too
    with pytest.raises(ValueError, match="issue_type"):
        queue_depth(ans, "d", "near_dup", initial=5, n_stop=3)


def test_an_annotator_past_the_initial_length_gets_more_candidates_until_the_true_end():
    rng = np.random.default_rng(0)
    emb = rng.standard_normal((N_IMAGES, 4))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    initial = 4
    queue = _queue(emb, answers_from_records([]), initial)
    assert queue.height == initial
    # every answer "yes": the stopping rule never fires; answering the whole queue would end it if it were fixed
    answers = _answer_along(queue, initial)
    fixed = session_endings(answers, queue, N_STOP)
    assert fixed["ended_by"].to_list() == ["end_of_candidates"]  # what a fixed-length queue would record
    queue = _queue(emb, answers, initial)
    assert queue.height == initial + 2 * N_STOP  # refilled: two stopping runs beyond the deepest answer
    assert session_endings(answers, queue, N_STOP)["ended_by"].to_list() == [None]  # still open
    # the first pairs keep their ranks: the refill only appends
    assert queue.sort("position").head(initial)["item_id_2"].to_list() == _queue(
        emb, answers_from_records([]), initial).sort("position")["item_id_2"].to_list()
    while True:  # the annotator keeps going, the queue keeps refilling
        answers = _answer_along(queue, queue.height)
        deeper = _queue(emb, answers, initial)
        if deeper.height == queue.height:
            break
        queue = deeper
    pairs = N_IMAGES * (N_IMAGES - 1) // 2
    assert queue.height == pairs
    end = session_endings(answers, queue, N_STOP).row(0, named=True)
    assert (end["ended_by"], end["answered"], end["candidates"]) == ("end_of_candidates", pairs, pairs)


def test_the_stopping_rule_ends_a_session_inside_the_refilled_queue():
    rng = np.random.default_rng(1)
    emb = rng.standard_normal((N_IMAGES, 4))
    emb /= np.linalg.norm(emb, axis=1, keepdims=True)
    queue = _queue(emb, answers_from_records([]), 4)
    answers = _answer_along(queue, 4, yes_every=1)
    queue = _queue(emb, answers, 4)
    # then two consecutive "no": the stopping rule ends it, with candidates still left in the queue
    rows = queue.sort("position").slice(4, N_STOP)
    more = [answer_record(f"n{p}", "a", r["item_id"], "no", 4 + p, stamp(100 + p), issue_type="near_duplicate",
                          item_id_2=r["item_id_2"]) for p, r in enumerate(rows.iter_rows(named=True))]
    answers = pl.concat([answers, answers_from_records(more)])
    queue = _queue(emb, answers, 4)
    end = session_endings(answers, queue, N_STOP).row(0, named=True)
    assert end["ended_by"] == "stopping_rule" and end["answered"] == 4 + N_STOP < end["candidates"]


def test_only_an_uncapped_pair_ranking_short_of_all_pairs_extends():
    import polars as pl

    from noisycal_platform.cleaning.pipeline.confirmation import extending_issue_types

    images = pl.DataFrame({"idx": [0, 1, 2, 3]})  # 4 images: 6 pairs in all
    ranked = pl.DataFrame({"embedding_kind": ["dino"] * 5 + ["baseline"] * 6})
    assert extending_issue_types(images, ranked, None) == ["near_duplicate"]
    assert extending_issue_types(images, ranked, 5) == []  # a cap the clinic set is not extended
    every = pl.DataFrame({"embedding_kind": ["dino"] * 6})
    assert extending_issue_types(images, every, None) == []  # every pair is ranked: the true end
