"""``estimate_channels`` is the one entry point: class indices with C > 2 go to multi-class Dawid–Skene, 0/1
labels keep the binary path."""

import numpy as np
import pytest

from noisycal_platform.calibration import ChannelFit, estimate_channels
from noisycal_platform.calibration.multiclass import ConfusionFit, estimate_confusion

from ._sim import simulate


def test_class_indices_get_confusion_matrices_from_the_same_entry_point():
    _, _, ann, truth = simulate(4000, seed=3, n_classes=5, missing=0.1)
    fit = estimate_channels(ann, seed=0)
    assert isinstance(fit, ConfusionFit) and fit.confusion.shape == (3, 5, 5) and fit.prevalence.shape == (5,)
    # the dispatch calls the multi-class estimator with the same seed and starts: the same deterministic EM
    direct = estimate_confusion(ann, seed=0)
    np.testing.assert_allclose(fit.confusion, direct.confusion, rtol=1e-9, atol=1e-12)
    # and it recovers the simulated channels (known truth), as the estimator's own tests require
    assert np.abs(fit.confusion - truth).max() < 0.06


def test_binary_labels_keep_the_binary_path_and_other_methods_are_refused_for_many_classes():
    rng = np.random.default_rng(0)
    y = rng.random(3000) < 0.4
    ann = np.stack([np.where(rng.random(3000) < 0.85, y, ~y) for _ in range(3)], axis=1).astype(float)
    assert isinstance(estimate_channels(ann), ChannelFit)
    _, _, many, _ = simulate(500, seed=1, n_classes=4)
    with pytest.raises(ValueError, match="multi-class Dawid"):
        estimate_channels(many, method="two_group")
