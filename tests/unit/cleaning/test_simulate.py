"""Simulated raters: exact answer-record format, determinism, stopping rule, undo path, set sensitivities."""

import json
import re
from datetime import datetime

import numpy as np
import polars as pl
import pytest

from noisycal_platform.cleaning.protocol import answers_from_records, effective_answers, session_stop_index
from noisycal_platform.cleaning.simulate import Rater, Truth, simulate_answers

KEYS = [
    "answer_id",
    "dataset",
    "issue_type",
    "item_id",
    "item_id_2",
    "annotator_id",
    "role",
    "answer",
    "undoes",
    "position",
    "timestamp",
]


def _queue(n=400):
    files = [f"f{i:04d}.png" for i in range(n)]
    rows = []
    for p in range(n):
        rows.append(("demo", "irrelevant", p, files[p], None, None))
        rows.append(("demo", "label_error", p, files[(p * 7) % n], None, "3"))
    for p in range(n - 1):
        rows.append(("demo", "near_duplicate", p, files[p], files[p + 1], None))
    schema = {
        "dataset": pl.String,
        "issue_type": pl.String,
        "position": pl.Int64,
        "item_id": pl.String,
        "item_id_2": pl.String,
        "label": pl.String,
    }
    return pl.DataFrame(rows, schema=schema, orient="row"), files


def _truth(files):
    return Truth.from_sets(
        irrelevant=[files[i] for i in (0, 2, 3, 30, 90) if i < len(files)],
        near_duplicates=[
            (files[i + 1], files[i]) for i in (1, 4, 50) if i + 1 < len(files)
        ],  # given unsorted on purpose
        label_errors=[files[(p * 7) % len(files)] for p in (0, 1, 10)],
    )


def test_record_format_and_roundtrip():
    q, files = _queue(120)
    recs = simulate_answers(q, _truth(files), [("e1", "expert", 0.9, 0.95)], seed=0, undo_rate=0.1)
    assert recs and all(list(r) == KEYS for r in recs)
    for r in recs:
        assert re.fullmatch(r"[0-9a-f]{32}", r["answer_id"])
        assert datetime.fromisoformat(r["timestamp"]).utcoffset().total_seconds() == 0
        assert (r["answer"] == "undo") == (r["undoes"] is not None)
        assert (r["item_id_2"] is not None) == (r["issue_type"] == "near_duplicate")
    lines = [json.dumps(r) for r in recs]
    frame = answers_from_records(json.loads(x) for x in lines)
    assert frame.height == len(recs)
    assert len({r["answer_id"] for r in recs}) == len(recs)


def test_deterministic_given_seed():
    q, files = _queue(100)
    raters = [Rater("e1", "expert", 0.9, 0.95), Rater("l1", "lay", 0.7, 0.9)]
    a = simulate_answers(q, _truth(files), raters, seed=4)
    assert a == simulate_answers(q, _truth(files), raters, seed=4)
    assert a != simulate_answers(q, _truth(files), raters, seed=5)


def test_undo_path_and_stopping_rule():
    q, files = _queue(300)
    recs = simulate_answers(q, _truth(files), [("e1", "expert", 0.9, 0.9)], seed=1, n_stop=10, undo_rate=0.2)
    undos = [r for r in recs if r["answer"] == "undo"]
    assert len(undos) > 5
    by_id = {r["answer_id"]: r for r in recs}
    eff = effective_answers(answers_from_records(recs))
    eff_ids = set(eff["answer_id"])
    for u in undos:
        assert u["undoes"] not in eff_ids  # every slip is cancelled
        assert by_id[u["undoes"]]["position"] == u["position"]
    for (_, it), part in eff.group_by(["dataset", "issue_type"]):
        part = part.sort("position")
        assert part["position"].to_list() == list(range(part.height))  # walked in order, no gaps
        no = ~part["yes"].to_numpy()
        assert session_stop_index(no, 10) == part.height  # stops exactly at the 10th consecutive "no"
        assert part.height == len(q.filter(pl.col("issue_type") == it)) or no[-10:].all()


def test_set_sensitivity_and_specificity_are_reproduced():
    # perfect stopping disabled (n_stop huge): every rater sees every candidate
    n = 2000
    files = [f"g{i:05d}" for i in range(n)]
    q = pl.DataFrame(
        {
            "dataset": "d",
            "issue_type": "irrelevant",
            "position": np.arange(n),
            "item_id": files,
            "item_id_2": pl.Series([None] * n, dtype=pl.String),
            "label": [None] * n,
        }
    )
    rng = np.random.default_rng(0)
    true_set = {f for f in files if rng.random() < 0.3}
    recs = simulate_answers(
        q,
        Truth.from_sets(irrelevant=true_set),
        [("e", "expert", 0.8, 0.9)],
        seed=2,
        n_stop=10**6,
        undo_rate=0.0,
    )
    yes = np.array([r["answer"] == "yes" for r in recs])
    truth = np.array([r["item_id"] in true_set for r in recs])
    se, sp = yes[truth].mean(), (~yes[~truth]).mean()
    assert se == pytest.approx(0.8, abs=3 * np.sqrt(0.16 / truth.sum()))
    assert sp == pytest.approx(0.9, abs=3 * np.sqrt(0.09 / (~truth).sum()))


def test_truth_flags_and_validation():
    q, files = _queue(20)
    t = _truth(files)
    flags = t.flags(q)
    nd = q.with_columns(pl.Series("f", flags)).filter(pl.col("issue_type") == "near_duplicate")
    assert nd.filter(pl.col("f"))["position"].to_list() == [1, 4]
    with pytest.raises(ValueError, match="role"):
        Rater("x", "boss", 0.9, 0.9)
    with pytest.raises(ValueError, match="sensitivity"):
        Rater("x", "lay", 1.2, 0.9)
    with pytest.raises(ValueError, match="duplicate annotator_id"):
        simulate_answers(q, t, [("a", "lay", 0.9, 0.9), ("a", "lay", 0.9, 0.9)])


def test_per_issue_type_rates():
    q, files = _queue(300)
    t = Truth.from_sets(irrelevant=files[:150], label_errors=files)  # label_error rows all true
    lay = Rater("l", "lay", {"irrelevant": 1.0, "near_duplicate": 1.0, "label_error": 0.0}, 1.0)
    recs = simulate_answers(q, t, [lay], seed=0, n_stop=5, undo_rate=0.0)
    le = [r["answer"] for r in recs if r["issue_type"] == "label_error"]
    irr = [r["answer"] for r in recs if r["issue_type"] == "irrelevant"]
    assert le == ["no"] * 5  # sensitivity 0: five misses, then the session stops
    assert irr[:150] == ["yes"] * 150 and irr[150:] == ["no"] * 5
    with pytest.raises(ValueError, match="one per issue"):
        Rater("x", "lay", {"irrelevant": 0.9}, 0.9)
