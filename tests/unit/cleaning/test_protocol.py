"""Protocol: stopping rule (Gröger et al. 2023 §3.3), undo, sessions, aggregation, removals (§3.4)."""

import json
import math

import numpy as np
import polars as pl
import pytest
from scipy.stats import beta

from noisycal_platform.cleaning.protocol import (
    aggregate_answers,
    answers_from_records,
    effective_answers,
    label_error_prevalence_ci,
    select_removals,
    session_stop_index,
    stopping_count,
    truncate_sessions,
)
from tests.shared_data import needs_shared, shared_path
from tests.unit.cleaning._answers import answer_record, stamp


def rec(aid, ann, item, answer, pos, t, undoes=None, role="expert", it="irrelevant", item2=None):
    return answer_record(aid, ann, item, answer, pos, stamp(t), role=role, issue_type=it, item_id_2=item2,
                         undoes=undoes)


def test_stopping_count_paper_value():
    assert stopping_count() == 58  # Gröger et al. 2023 §3.3
    assert stopping_count(0.05, 0.05) == 58


@pytest.mark.parametrize("pc", [0.01, 0.05, 0.1, 0.3, 0.5, 0.9])
@pytest.mark.parametrize("pp", [0.01, 0.05, 0.1, 0.25, 0.6, 0.95])
def test_stopping_count_is_the_largest_n_with_run_probability_above_p_chance(pc, pp):
    # floor(ln pc / ln(1-pp)) = largest n with (1-pp)^n >= pc  (closed form, checked by brute force)
    n = stopping_count(pc, pp)
    brute = max(k for k in range(0, 10_000) if (1 - pp) ** k >= pc * (1 - 1e-12))
    assert n == brute


def test_stopping_count_exact_ratio_and_edges():
    assert stopping_count(0.25, 0.5) == 2  # ln .25 / ln .5 = 2 exactly; must not floor to 1
    assert stopping_count(1.0, 0.05) == 0
    assert stopping_count(0.05, 1.0) == 0
    assert stopping_count(1.0, 1.0) == 0


@pytest.mark.parametrize("bad", [0, -0.1, 1.5, math.nan, "0.05"])
def test_stopping_count_rejects_bad_probabilities(bad):
    with pytest.raises(ValueError, match="p_chance"):
        stopping_count(bad, 0.05)
    with pytest.raises(ValueError, match="p_plus"):
        stopping_count(0.05, bad)


def test_session_stop_index_hand_cases():
    no = np.array([0, 1, 1, 0, 1, 1, 1, 0], bool)
    assert session_stop_index(no, 3) == 7  # third consecutive "no" is answer 7 (1-based)
    assert session_stop_index(no, 2) == 3
    assert session_stop_index(no, 4) == 8  # never reached: keep everything
    assert session_stop_index(no, 0) == 2  # n = 0 treated as 1: stop at the first "no"
    assert session_stop_index(np.zeros(0, bool), 3) == 0


def test_undo_cancels_named_answer_and_reanswer_wins():
    recs = [
        rec("a1", "e1", "x", "yes", 0, 1),
        rec("u1", "e1", "x", "undo", 0, 2, undoes="a1"),
        rec("a2", "e1", "x", "no", 0, 3),
        rec("b1", "e1", "y", "yes", 1, 4),
    ]
    eff = effective_answers(answers_from_records(recs))
    assert dict(zip(eff["item_id"], eff["answer"], strict=True)) == {"x": "no", "y": "yes"}
    assert set(eff["answer_id"]) == {"a2", "b1"}


def test_undo_of_undo_restores_and_nothing_is_erased():
    recs = [
        rec("a1", "e1", "x", "yes", 0, 1),
        rec("u1", "e1", "x", "undo", 0, 2, undoes="a1"),
        rec("u2", "e1", "x", "undo", 0, 3, undoes="u1"),
    ]
    raw = answers_from_records(recs)
    eff = effective_answers(raw)
    assert eff["answer_id"].to_list() == ["a1"]
    assert raw.height == 3  # the raw frame keeps every record


def test_undo_errors():
    with pytest.raises(ValueError, match="unknown answer_id"):
        effective_answers(answers_from_records([rec("u1", "e1", "x", "undo", 0, 1, undoes="zz")]))
    recs = [rec("a1", "e1", "x", "yes", 0, 1), rec("u1", "e2", "x", "undo", 0, 2, undoes="a1")]
    with pytest.raises(ValueError, match="annotator"):
        effective_answers(answers_from_records(recs))


def test_truncate_sessions_matches_stop_index():
    answers = ["yes", "no", "no", "yes", "no", "no", "no", "yes"]
    recs = [rec(f"a{i}", "e1", f"i{i}", a, i, i) for i, a in enumerate(answers)]
    recs += [rec(f"b{i}", "e2", f"i{i}", "no", i, 20 + i) for i in range(5)]
    eff = effective_answers(answers_from_records(recs))
    out = truncate_sessions(eff, 2)
    assert out.filter(pl.col("annotator_id") == "e1")["position"].to_list() == [0, 1, 2]
    assert out.filter(pl.col("annotator_id") == "e2")["position"].to_list() == [0, 1]
    assert truncate_sessions(eff, 58).height == eff.height


def test_aggregation_unanimous_and_majority():
    # panel e1, e2, e3 (experts) + l1 (lay, filtered out by default)
    recs = [
        rec("1", "e1", "A", "yes", 0, 1),
        rec("2", "e2", "A", "yes", 0, 2),
        rec("3", "e3", "A", "yes", 0, 3),
        rec("4", "e1", "B", "yes", 1, 4),
        rec("5", "e2", "B", "yes", 1, 5),
        rec("6", "e3", "B", "no", 1, 6),
        rec("7", "e1", "C", "yes", 2, 7),
        rec("8", "e2", "C", "yes", 2, 8),  # e3 stopped before C
        rec("9", "e1", "D", "yes", 3, 9),
        rec("10", "l1", "D", "yes", 3, 10, role="lay"),
    ]
    agg = aggregate_answers(effective_answers(answers_from_records(recs))).sort("item_id")
    assert agg["n_panel"].to_list() == [3, 3, 3, 3]
    assert agg["unanimous"].to_list() == [True, False, False, False]
    assert agg["majority"].to_list() == [True, True, True, False]  # 3, 2, 2, 1 yes of 3
    assert agg["seen_by_all"].to_list() == [True, True, False, False]
    everyone = aggregate_answers(effective_answers(answers_from_records(recs)), roles=None).sort("item_id")
    assert everyone["n_panel"][0] == 4 and everyone["n_yes"].to_list() == [3, 2, 2, 2]


def test_chain_of_three_duplicates_keeps_exactly_one():
    pairs = [("a", "b"), ("b", "c")]
    for seed in range(20):
        rem = select_removals([], pairs, seed)
        assert len(rem) == 2 and set(rem) < {"a", "b", "c"}
        assert set(rem.values()) == {"near_duplicate"}
    kept = {({"a", "b", "c"} - set(select_removals([], pairs, s))).pop() for s in range(40)}
    assert kept == {"a", "b", "c"}  # the seeded choice is random over the group


def test_removals_groups_irrelevant_and_determinism():
    pairs = [("a", "b"), ("c", "d"), ("d", "e"), ("e", "c"), ("x", "y")]
    rem = select_removals(["y", "z"], pairs, seed=3)
    assert rem["y"] == "irrelevant" and rem["z"] == "irrelevant"
    assert "x" not in rem  # y is already dropped as irrelevant, so x is the group's survivor
    assert sum(f in rem for f in "ab") == 1
    assert sum(f in rem for f in "cde") == 2
    assert select_removals(["y", "z"], pairs, seed=3) == rem


def test_label_error_prevalence_clopper_pearson():
    k, n = 3, 170
    p, lo, hi = label_error_prevalence_ci(k, n)
    assert p == pytest.approx(3 / 170)
    assert lo == pytest.approx(beta.ppf(0.025, k, n - k + 1), rel=1e-6)
    assert hi == pytest.approx(beta.ppf(0.975, k + 1, n - k), rel=1e-6)
    assert label_error_prevalence_ci(0, 10)[1] == 0.0
    with pytest.raises(ValueError):
        label_error_prevalence_ci(5, 3)


REVISED = shared_path("data", "selfclean_revised")
SIZES = {"MED-NODE": 170, "PH2": 200, "DDI": 656, "Derm7pt": 2022, "PAD-UFES-20": 2298, "SD-128": 5619}
LISTS = {
    "MED-NODE": "MED-NODE",
    "DDI": "DDI",
    "Derm7pt": "derm7pt",
    "PAD-UFES-20": "PAD-UFES-20",
    "SD-128": "SD-128",
}


@needs_shared(REVISED, "shared SelfClean revised benchmark data")
@pytest.mark.parametrize("ds", sorted(SIZES))
def test_removals_on_published_unanimous_issues(ds):
    """The published file lists (Gröger et al. 2023 §3.4) remove one sample per confirmed pair. Where no near-duplicate
    group has more than two images our per-group rule gives the same count; on SD-128 (13 groups of 3-5)
    it keeps exactly one image per group instead (brute-force check by flood fill)."""
    issues = json.loads((REVISED / "detailed_issue_lists" / f"{ds}_data_quality_issues.json").read_text())
    irr = [str(i) for i in issues["IrrelevantSamples"]]
    pairs = [(str(i), str(j)) for _, (i, j) in issues["NearDuplicates"]]
    rem = select_removals(irr, pairs, seed=0)
    adj: dict[str, set[str]] = {}
    for a, b in pairs:
        adj.setdefault(a, set()).add(b)
        adj.setdefault(b, set()).add(a)
    seen: set[str] = set()
    for start in adj:
        if start in seen:
            continue
        group, stack = set(), [start]
        while stack:
            x = stack.pop()
            if x not in group:
                group.add(x)
                stack.extend(adj[x] - group)
        seen |= group
        survivors = [x for x in group if x not in rem]
        assert len(survivors) == (0 if group <= set(irr) else 1)
    if ds in LISTS:
        rows = (REVISED / "revised_filelists" / f"{LISTS[ds]}_cleaned_file_list.csv").read_text().splitlines()
        published_removed = SIZES[ds] - (len(rows) - 1)
        if ds == "SD-128":
            assert (published_removed, len(rem)) == (154, 156)
        else:
            assert len(rem) == published_removed
    else:
        assert rem == {}
