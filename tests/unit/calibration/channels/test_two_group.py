"""Closed form for two annotators in two groups (Hanada and Futami 2026 §4.2, §D.2) on exact population moments."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.calibration import NotIdentifiableError, dawid_skene, two_group, two_group_from_moments
from tests.shared_data import needs_shared, shared_path


def _population_moments(prev, fpr, fnr):
    """m_jg = a_j + δ_j π_g, c_g = δ_1 δ_2 π_g (1 − π_g) — the model's exact moments."""
    prev, fpr, fnr = map(np.asarray, (prev, fpr, fnr))
    gap = 1 - fpr - fnr
    means = fpr[:, None] + gap[:, None] * prev[None, :]
    covs = gap[0] * gap[1] * prev * (1 - prev)
    return means, covs


def test_research_note_fixture_exact():
    # calibration_anchors §3.5(3): π = (0.7, 0.2), (a, b) = (0.1, 0.1), (0.2, 0.2);
    # m = (0.66, 0.26 | 0.62, 0.32), c = (0.1008, 0.0768)
    chans, prev = two_group_from_moments([[0.66, 0.26], [0.62, 0.32]], [0.1008, 0.0768])
    assert prev == pytest.approx((0.7, 0.2), abs=1e-12)
    assert (chans[0].fpr, chans[0].fnr) == pytest.approx((0.1, 0.1), abs=1e-12)
    assert (chans[1].fpr, chans[1].fnr) == pytest.approx((0.2, 0.2), abs=1e-12)


@pytest.mark.parametrize(
    "prev,fpr,fnr",
    [
        ((0.15, 0.8), (0.05, 0.3), (0.2, 0.1)),
        ((0.6, 0.3), (0.02, 0.1), (0.01, 0.25)),
        ((0.9, 0.1), (0.2, 0.2), (0.3, 0.1)),
    ],
)
def test_returns_generating_channels_and_group_prevalences(prev, fpr, fnr):
    means, covs = _population_moments(prev, fpr, fnr)
    chans, got = two_group_from_moments(means, covs)
    assert got == pytest.approx(prev, abs=1e-10)
    assert [c.fpr for c in chans] == pytest.approx(fpr, abs=1e-10)
    assert [c.fnr for c in chans] == pytest.approx(fnr, abs=1e-10)


def test_exact_population_as_weighted_data():
    # A finite data set whose empirical moments equal the population ones: enumerate (group, Y, A1, A2)
    # with integer counts proportional to their probabilities (all probabilities are multiples of 1/10^4).
    prev, fpr, fnr = (0.5, 0.1), (0.1, 0.2), (0.2, 0.1)
    rows, groups = [], []
    for g, p in enumerate(prev):
        for y in (0, 1):
            py = p if y else 1 - p
            for a1 in (0, 1):
                for a2 in (0, 1):
                    q1 = (1 - fnr[0] if a1 else fnr[0]) if y else (fpr[0] if a1 else 1 - fpr[0])
                    q2 = (1 - fnr[1] if a2 else fnr[1]) if y else (fpr[1] if a2 else 1 - fpr[1])
                    k = round(py * q1 * q2 * 10_000)
                    rows += [[a1, a2]] * k
                    groups += [g] * k
    fit = two_group(np.array(rows, float), np.array(groups))
    assert fit.diagnostics["group_prevalence"] == pytest.approx(prev, abs=1e-9)
    assert fit.fpr == pytest.approx(fpr, abs=1e-9)
    assert fit.fnr == pytest.approx(fnr, abs=1e-9)


def test_equal_group_prevalences_are_not_identified():
    means, covs = _population_moments((0.4, 0.4), (0.1, 0.2), (0.1, 0.1))
    with pytest.raises(NotIdentifiableError, match="different class proportions"):
        two_group_from_moments(means, covs)


def test_random_groups_on_real_data_are_refused():
    rng = np.random.default_rng(0)
    y = rng.random(20_000) < 0.4
    a = np.where(y[:, None], rng.random((20_000, 2)) > 0.1, rng.random((20_000, 2)) < 0.1).astype(float)
    with pytest.raises(NotIdentifiableError):
        two_group(a, rng.integers(0, 2, 20_000))


CIFAR = shared_path("data", "cifar10n", "cifar10n_binary_vehicle.csv")


@needs_shared(CIFAR, "shared CIFAR-10N fixture")
def test_cifar10n_grouped_by_third_annotator_agrees_with_dawid_skene():
    import polars as pl

    a = pl.read_csv(CIFAR).select("annotator_1", "annotator_2", "annotator_3").to_numpy().astype(float)
    fit = two_group(a[:, :2], a[:, 2])
    ds = dawid_skene(a)
    # research notes: the 2x2 closed form with groups = annotator 3's vote equals DS to ~4 decimals
    np.testing.assert_allclose(fit.fpr, ds.fpr[:2], atol=1e-3)
    np.testing.assert_allclose(fit.fnr, ds.fnr[:2], atol=1e-3)
