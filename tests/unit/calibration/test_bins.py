"""`nanquantile_columns` against numpy's ``nanquantile(axis=0)``: random columns with and without NaN, all-NaN
columns, ties, one row, scalar and vector q; the same values to the last bit (NaN where numpy gives NaN)."""

from __future__ import annotations

import warnings

import numpy as np

from noisycal_platform.calibration.inference.bins import nanquantile_columns


def test_nanquantile_columns_equals_numpy_nanquantile():
    rng = np.random.default_rng(2303)
    for _ in range(300):
        r, m = int(rng.integers(0, 40)), int(rng.integers(0, 30))
        x = rng.normal(size=(r, m)) * 10 ** rng.uniform(-5, 2)
        x[rng.random(x.shape) < rng.choice([0.0, 0.05, 0.5])] = np.nan
        if m and rng.random() < 0.3:
            x[:, 0] = np.nan
        if rng.random() < 0.3:
            x = np.round(x, 1)  # ties
        for q in ([0.025, 0.975], 0.5, [0.0, 1.0, 0.3]):
            with warnings.catch_warnings():
                warnings.simplefilter("ignore", RuntimeWarning)  # all-NaN columns
                got, want = nanquantile_columns(x, q), np.nanquantile(x, q, axis=0)
            assert got.shape == want.shape
            np.testing.assert_array_equal(got, want)
