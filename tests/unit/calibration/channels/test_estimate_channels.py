"""Dispatcher and non-identification (Hanada and Futami 2026 §D.1)."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from noisycal_platform.calibration import Channel, NotIdentifiableError, estimate_channels


def _joint(prev, chans):
    """P(A1, A2) for two conditionally independent annotators (exact)."""
    out = {}
    for a1, a2 in itertools.product((0, 1), repeat=2):
        p = 0.0
        for y, py in ((0, 1 - prev), (1, prev)):
            q = 1.0
            for a, c in zip((a1, a2), chans, strict=True):
                p1 = (1 - c.fnr) if y else c.fpr
                q *= p1 if a else 1 - p1
            p += py * q
        out[(a1, a2)] = p
    return out


def test_two_annotators_without_scores_form_a_continuum_and_are_refused():
    # Hanada and Futami 2026 §D.1: different channel settings give the same joint table (0.31, 0.19, 0.19, 0.31)
    settings = [
        (0.5, (Channel(0.2, 0.2), Channel(0.3, 0.3))),
        (0.5, (Channel(0.1, 0.1), Channel(0.35, 0.35))),
    ]
    for prev, chans in settings:
        j = _joint(prev, chans)
        assert [j[k] for k in ((0, 0), (0, 1), (1, 0), (1, 1))] == pytest.approx([0.31, 0.19, 0.19, 0.31])
    # a data set with exactly that table: the estimator must refuse rather than pick one setting
    a = np.array([[0, 0]] * 31 + [[0, 1]] * 19 + [[1, 0]] * 19 + [[1, 1]] * 31, float)
    with pytest.raises(NotIdentifiableError, match="scores or groups"):
        estimate_channels(a)
    with pytest.raises(NotIdentifiableError):
        estimate_channels(a, method="score_group_em")


def test_one_annotator_refused_even_with_scores():
    a = np.array([[1.0], [0.0], [1.0]])
    with pytest.raises(NotIdentifiableError, match="one annotator"):
        estimate_channels(a, scores=np.array([0.2, 0.5, 0.9]))


def test_auto_picks_dawid_skene_for_three_and_score_groups_for_two():
    rng = np.random.default_rng(0)
    n = 30_000
    s = rng.random(n)
    y = rng.random(n) < s
    a = np.where(y[:, None], rng.random((n, 3)) > 0.1, rng.random((n, 3)) < 0.1).astype(float)
    assert estimate_channels(a).method == "dawid_skene"
    assert estimate_channels(a[:, :2], scores=s).method == "score_group_em"
    assert estimate_channels(a[:, :2], scores=s, method="two_group").method == "two_group"
    g = (s > 0.5).astype(int)
    fit = estimate_channels(a[:, :2], groups=g, method="two_group")
    assert fit.diagnostics["groups"] == (0, 1)


def test_bad_arguments_are_named():
    a = np.zeros((4, 3))
    with pytest.raises(ValueError, match="method"):
        estimate_channels(a, method="magic")
    with pytest.raises(ValueError, match="scores"):
        estimate_channels(a[:, :2], scores=np.array([0.1, 2.0, 0.3, 0.4]))
    with pytest.raises(ValueError, match="groups"):
        estimate_channels(a, groups=np.zeros(3))
