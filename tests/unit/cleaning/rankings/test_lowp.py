"""Int8 screening products (``_lowp``): the stated margin bounds the error against float64 products."""

from __future__ import annotations

import numpy as np

from noisycal_platform.cleaning.rankings._kernels import as_unit_embeddings
from noisycal_platform.cleaning.rankings._lowp import Int8Rows, single_thread_torch

from ._brute import clustered


def test_margin_bounds_every_product_and_thresholds_round_down():
    x = as_unit_embeddings(np.concatenate([clustered(300, dim=40, n_clusters=5, seed=3), np.eye(40)[:7]]))
    x[5] = x[4]  # an exact duplicate
    lp = Int8Rows(x)
    exact = x.astype(np.float64) @ x.astype(np.float64).T
    with single_thread_torch():
        q = np.empty((x.shape[0], x.shape[0]), np.int32)
        lp.gemm(0, x.shape[0], 0, x.shape[0], q)
    qq = lp.q.numpy().astype(np.int64)
    np.testing.assert_array_equal(q, qq @ qq.T)  # the int32 product is exact
    err = np.abs(q / lp.scale2 - exact)
    assert err.max() <= lp.margin
    assert lp.margin < 0.1  # a useful screen: about 2·127⁻¹·max|x|·sqrt(D/12)
    dev = np.abs(np.einsum("nd,nd->n", x.astype(np.float64), x.astype(np.float64)) - 1).max()
    assert lp.eps2 >= 2 * lp.margin + 2 * dev
    for t in np.linspace(-1.2, 1.2, 97):
        keep = q >= lp.int_threshold(float(t))
        assert keep[q / lp.scale2 >= t].all()
    assert lp.int_threshold(-np.inf) <= q.min() and lp.int_threshold(np.inf) >= q.max()
