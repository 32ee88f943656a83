"""Multi-class Dawid–Skene: the binary path at C = 2, crowd-kit's DawidSkene, CIFAR-10N against clean labels,
orientation, identifiability errors, known matrices."""

from __future__ import annotations

import warnings

import numpy as np
import pytest

from noisycal_platform.calibration.channels import NotIdentifiableError, dawid_skene
from noisycal_platform.calibration.multiclass import ConfusionFit, estimate_confusion, is_multiclass, known_confusion
from tests.shared_data import needs_shared, shared_path
from tests.unit.calibration.multiclass._sim import draw_annotations, simulate

CIFAR = shared_path("data", "cifar10n", "cifar10n_multiclass.csv")


def _binary(n: int, seed: int, missing: float = 0.2) -> np.ndarray:
    rng = np.random.default_rng(seed)
    y = (rng.random(n) < 0.3).astype(int)
    fpr, fnr = np.array([0.1, 0.2, 0.05]), np.array([0.05, 0.1, 0.2])
    a = (rng.random((n, 3)) < np.where(y[:, None] == 1, 1 - fnr, fpr)).astype(float)
    a[rng.random(a.shape) < missing] = np.nan
    return a


def _crowdkit_confusion(a: np.ndarray, n_classes: int, n_iter: int):
    """crowd-kit DawidSkene run for a fixed number of EM iterations (tol = −inf: its ELBO stopping rule can stop
    on a rounding-level decrease long before convergence); returns T (K, C, C) and the prior (C,)."""
    pd = pytest.importorskip("pandas")
    ck = pytest.importorskip("crowdkit.aggregation")
    k = a.shape[1]
    obs = ~np.isnan(a)
    rows, cols = np.nonzero(obs)
    long = pd.DataFrame({"task": rows, "worker": cols, "label": a[rows, cols].astype(int)})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer = ck.DawidSkene(n_iter=n_iter, tol=-np.inf).fit(long)
    e = peer.errors_  # index (worker, observed label), columns true label: P(observed | true)
    t = np.zeros((k, n_classes, n_classes))
    for (j, obs_label), row in e.iterrows():
        t[int(j), :, int(obs_label)] = row.reindex(range(n_classes)).to_numpy()
    prior = peer.priors_.reindex(range(n_classes)).to_numpy()
    return t, prior


def test_two_classes_equal_the_binary_dawid_skene_to_1e12():
    a = _binary(20_000, 1)
    # Both EMs are iterated until one step moves the parameters by < 1e-14, so both sit within ~1e-14 of the
    # same maximum-likelihood fixed point (their default tolerance 1e-11 leaves each ~1e-11 from it).
    b = dawid_skene(a, tol=1e-14)
    m = estimate_confusion(a, tol=1e-14)
    f = m.to_channel_fit()
    np.testing.assert_allclose(f.fpr, b.fpr, rtol=0, atol=1e-12)
    np.testing.assert_allclose(f.fnr, b.fnr, rtol=0, atol=1e-12)
    assert m.prevalence[1] == pytest.approx(b.prevalence, abs=1e-12)
    assert m.log_likelihood == pytest.approx(b.diagnostics["log_likelihood"], rel=1e-12)
    assert [c.fpr for c in m.channels] == list(f.fpr)
    assert m.confusion.shape == (3, 2, 2) and m.converged
    np.testing.assert_allclose(m.gaps, b.gaps, rtol=0, atol=1e-12)


@pytest.mark.parametrize(
    ("n_items", "seed"),
    [pytest.param(2_000, 21, id="2k_items"), pytest.param(10_000, 11, id="10k_items", marks=pytest.mark.slow)],
)
def test_matches_crowdkit_dawid_skene_3_annotators_5_classes(n_items, seed):
    _, _, a, _ = simulate(n_items, seed, accuracy=(0.8, 0.92))
    fit = estimate_confusion(a)
    t, prior = _crowdkit_confusion(a, 5, n_iter=150)
    np.testing.assert_allclose(fit.confusion, t, rtol=0, atol=1e-4)
    np.testing.assert_allclose(fit.prevalence, prior, rtol=0, atol=1e-4)


def test_recovers_known_asymmetric_confusions():
    _, y, a, t = simulate(40_000, 3, missing=0.1)
    fit = estimate_confusion(a)
    # sampling error of a confusion entry at ~8,000 items per class and annotator: sd ≤ 0.006
    np.testing.assert_allclose(fit.confusion, t, rtol=0, atol=0.03)
    np.testing.assert_allclose(fit.prevalence, np.bincount(y, minlength=5) / len(y), rtol=0, atol=0.01)
    assert fit.converged and all(fit.diagnostics["diagonally_dominant"])


def test_orientation_undoes_a_permuted_start():
    _, _, a, t = simulate(20_000, 4)
    ref = estimate_confusion(a)
    perm = np.array([2, 0, 1, 4, 3])  # latent class y of the start sits at row perm[y]
    start_t = np.empty_like(t)
    start_t[:, perm, :] = ref.confusion
    start_p = np.empty(5)
    start_p[perm] = ref.prevalence
    fit = estimate_confusion(a, n_starts=1, init=(start_p, start_t))
    assert fit.diagnostics["permutation"] != list(range(5))
    np.testing.assert_allclose(fit.confusion, ref.confusion, rtol=0, atol=1e-8)
    np.testing.assert_allclose(fit.prevalence, ref.prevalence, rtol=0, atol=1e-8)


def test_integer_minus_one_input_equals_float_nan_input():
    _, _, a, _ = simulate(5_000, 5, missing=0.3)
    ai = np.where(np.isnan(a), -1, a).astype(np.int16)
    f, g = estimate_confusion(a, n_starts=2), estimate_confusion(ai, n_starts=2)
    np.testing.assert_array_equal(f.confusion, g.confusion)
    assert is_multiclass(a) and is_multiclass(ai) and not is_multiclass(_binary(10, 0))


def test_two_annotators_are_not_identifiable():
    _, _, a, _ = simulate(2_000, 6)
    with pytest.raises(NotIdentifiableError, match="at least 3 annotators"):
        estimate_confusion(a[:, :2])


def test_a_class_never_used_is_not_identifiable():
    _, _, a, _ = simulate(2_000, 7)
    with pytest.raises(NotIdentifiableError, match=r"class\(es\) \[5\] never appear"):
        estimate_confusion(a, n_classes=6)


def test_uninformative_annotators_are_not_identifiable():
    rng = np.random.default_rng(8)
    a = rng.integers(0, 4, size=(5_000, 3)).astype(float)  # answers independent of any latent class
    with pytest.raises(NotIdentifiableError, match="informative"):
        estimate_confusion(a)


def test_out_of_range_label_is_rejected():
    _, _, a, _ = simulate(500, 9)
    a[3, 1] = 2.5
    with pytest.raises(ValueError, match="integer class indices"):
        estimate_confusion(a)
    with pytest.raises(ValueError, match="n_classes=4"):
        estimate_confusion(np.nan_to_num(a, nan=0).round(), n_classes=4)


def test_known_confusion_fits_only_the_prevalence():
    rng = np.random.default_rng(10)
    _, y, _, t = simulate(30_000, 10)
    a = draw_annotations(rng, y, t[:1])  # one annotator: identifiable only with T known
    fit = estimate_confusion(a, known=t[:1])
    assert fit.method == "known" and fit.converged
    np.testing.assert_array_equal(fit.confusion, t[:1])
    # MLE of π with T known: the corrected-label mean T^{-T} (answer shares) is its moment counterpart
    shares = np.bincount(a[:, 0].astype(int), minlength=5) / len(a)
    np.testing.assert_allclose(fit.prevalence, np.linalg.solve(t[0].T, shares), rtol=0, atol=2e-3)
    wrapped = known_confusion(t)
    np.testing.assert_allclose(wrapped.gaps, [np.linalg.svd(m, compute_uv=False)[-1] for m in t], rtol=1e-12)
    assert isinstance(wrapped, ConfusionFit) and np.isnan(wrapped.prevalence).all()
    with pytest.raises(ValueError, match="only for 2 classes"):
        _ = wrapped.channels
    with pytest.raises(ValueError, match="sums to"):
        known_confusion(t * 0.9)


@pytest.mark.slow
@needs_shared(CIFAR, "shared CIFAR-10N fixture")
def test_cifar10n_matches_crowdkit_and_the_clean_label_confusions():
    pd = pytest.importorskip("pandas")
    d = pd.read_csv(CIFAR)
    a = d[["annotator_1", "annotator_2", "annotator_3"]].to_numpy(dtype=float)
    y = d["clean_label"].to_numpy()
    fit = estimate_confusion(a)
    t, prior = _crowdkit_confusion(a, 10, n_iter=150)
    np.testing.assert_allclose(fit.confusion, t, rtol=0, atol=1e-4)
    np.testing.assert_allclose(fit.prevalence, prior, rtol=0, atol=1e-4)
    measured = np.stack([np.stack([np.bincount(a[y == c, j].astype(int), minlength=10) / np.sum(y == c)
                                   for c in range(10)]) for j in range(3)])
    dev = np.abs(fit.confusion - measured)
    diag = np.eye(10, dtype=bool)
    # the ML fit overstates the diagonal (annotators share what makes an image hard); largest seen: 0.0598
    assert dev[:, diag].max() < 0.07
    assert dev[:, ~diag].max() < 0.035


def test_an_annotator_who_merges_two_classes_is_not_invertible():
    rng = np.random.default_rng(12)
    _, y, _, t = simulate(5_000, 12)
    merged = t.copy()
    merged[2, 4] = merged[2, 3]  # annotator 2 answers class 4 items exactly as class 3 items: T_2 is singular
    a = draw_annotations(rng, y, merged)
    with pytest.raises(NotIdentifiableError, match="annotator column 2 has smallest singular value"):
        estimate_confusion(a, n_starts=3)
