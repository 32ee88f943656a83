"""The label space is decided once, by `versions.version`: predictions with classes give a `MulticlassVersion`
whose channels are multi-class Dawid–Skene confusion matrices, 0/1 labels a `BinaryVersion` with binary channels.
`estimate_channels` (binary) and `estimate_class_channels` (C classes) do not dispatch."""

import numpy as np
import polars as pl
import pytest

from noisycal_platform.calibration import ChannelFit, estimate_channels
from noisycal_platform.calibration.multiclass import estimate_class_channels, estimate_confusion
from noisycal_platform.calibration.versions import BinaryVersion, MulticlassVersion, version

from ._sim import simulate


def _long(ann: np.ndarray, label) -> pl.DataFrame:
    """Long annotations (item i{row:05d}, annotator a{col}); NaN = not labelled."""
    rows = [
        {"item_id": f"i{i:05d}", "annotator_id": f"a{j}", **label(int(v))}
        for (i, j), v in np.ndenumerate(ann)
        if not np.isnan(v)
    ]
    return pl.DataFrame(rows)


def test_class_predictions_get_a_multiclass_version_with_confusion_matrices():
    probs, _, ann, truth = simulate(4000, seed=3, n_classes=5, missing=0.1)
    classes = [f"c{k}" for k in range(5)]
    annotations = _long(ann, lambda v: {"label": None, "label_text": classes[v]}).with_columns(
        pl.col("label").cast(pl.Int64)
    )
    predictions = pl.DataFrame({
        "item_id": [f"i{i:05d}" for i in range(len(probs))],
        "score": probs.max(axis=1),
        "n_classes": [5] * len(probs),
        "classes": [classes] * len(probs),
        "probabilities": probs.tolist(),
    })
    v = version(annotations, predictions)
    assert isinstance(v, MulticlassVersion) and v.kind == "multiclass"
    np.testing.assert_array_equal(v.matrix.values, ann)  # item, annotator and class order kept
    fit = v.channels(v.estimate_channels(seed=0))
    assert fit.confusion.shape == (3, 5, 5) and fit.prevalence.shape == (5,)
    # the version calls the multi-class estimator with the same seed and starts: the same deterministic EM
    direct = estimate_confusion(ann, seed=0)
    np.testing.assert_allclose(fit.confusion, direct.confusion, rtol=1e-9, atol=1e-12)
    # and it recovers the simulated channels (known truth), as the estimator's own tests require
    assert np.abs(fit.confusion - truth).max() < 0.06


def test_binary_labels_get_a_binary_version_and_other_methods_are_refused_for_many_classes():
    rng = np.random.default_rng(0)
    y = rng.random(3000) < 0.4
    ann = np.stack([np.where(rng.random(3000) < 0.85, y, ~y) for _ in range(3)], axis=1).astype(float)
    direct = estimate_channels(ann)
    assert isinstance(direct, ChannelFit)
    annotations = _long(ann, lambda v: {"label": v})
    predictions = pl.DataFrame({"item_id": [f"i{i:05d}" for i in range(3000)], "score": rng.random(3000)})
    v = version(annotations, predictions)
    assert isinstance(v, BinaryVersion) and v.kind == "binary"
    stored = v.channels(v.estimate_channels(n_check_replicates=5))
    np.testing.assert_allclose([c.fpr for c in stored.channels], direct.fpr, rtol=1e-9)
    np.testing.assert_allclose([c.fnr for c in stored.channels], direct.fnr, rtol=1e-9)
    _, _, many, _ = simulate(500, seed=1, n_classes=4)
    with pytest.raises(ValueError, match="multi-class Dawid"):
        estimate_class_channels(many, method="two_group")
