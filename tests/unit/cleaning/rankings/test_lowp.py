"""Integer screening products (``_lowp.ScreenRows``): the stated margin bounds the error against float64 products."""

from __future__ import annotations

import numpy as np

from noisycal_platform.cleaning.rankings import _lowp
from noisycal_platform.cleaning.rankings._kernels import as_unit_embeddings, sim_error_bound

from ._brute import clustered


def _check_screen(x: np.ndarray) -> _lowp.ScreenRows:
    """Q / S² within the stated margin of the float64 product (tile and gathered rows), thresholds round down."""
    lp = _lowp.screen_rows(x)
    assert isinstance(lp, _lowp.ScreenRows) and lp.scale2 == 2.0**29
    n = x.shape[0]
    exact = x.astype(np.float64) @ x.astype(np.float64).T
    q = np.empty((n, n), np.int32)
    lp.gemm(0, n, 0, n, q)
    assert np.abs(q / lp.scale2 - exact).max() <= lp.margin
    rows = np.array([3, 0, n - 1, 3])
    assert np.abs(lp.gemm_rows(rows, 1, n - 1) / lp.scale2 - exact[rows, 1 : n - 1]).max() <= lp.margin
    for t in np.linspace(-1.2, 1.2, 97):
        assert (q >= lp.int_threshold(float(t)))[q / lp.scale2 >= t].all()
    assert lp.int_threshold(-np.inf) <= q.min() and lp.int_threshold(np.inf) >= q.max()
    dev = np.abs(np.einsum("nd,nd->n", x.astype(np.float64), x.astype(np.float64)) - 1).max()
    assert lp.eps2 >= 2 * lp.margin + 2 * dev
    return lp


def test_margin_bounds_every_product_and_thresholds_round_down():
    x = as_unit_embeddings(np.concatenate([clustered(300, dim=40, n_clusters=5, seed=3), np.eye(40)[:7]]))
    x[5] = x[4]  # an exact duplicate
    lp = _check_screen(x)
    # the float32 GEMM's rounding bound (Higham §3.1) plus the 2⁻²⁹ of the truncation, nothing more
    assert lp.margin <= sim_error_bound(40) * (1 + 1e-5) + 2.0**-28 + 1e-12


def test_rows_with_one_large_entry_keep_a_tight_margin():
    """One spike per row, as in a colour histogram (the case where an int8 quantisation, scaled by the largest entry,
    had a margin of 0.2 on HAM10000's baseline): the margin stays the float32 GEMM's."""
    rng = np.random.default_rng(9)
    raw = np.abs(rng.standard_normal((200, 832))) * 0.05
    raw[np.arange(200), rng.integers(0, 832, 200)] += 3.0
    lp = _check_screen(as_unit_embeddings(raw))
    assert lp.margin < 1e-4
