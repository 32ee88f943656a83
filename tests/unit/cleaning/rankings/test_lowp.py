"""Int8 screening products (``_lowp``): the stated margin bounds the error against float64 products."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.cleaning.rankings import _lowp
from noisycal_platform.cleaning.rankings._kernels import as_unit_embeddings
from noisycal_platform.cleaning.rankings._lowp import Int8Rows, single_thread_torch

from ._brute import clustered


@pytest.mark.parametrize("int8", [True, False])  # torch._int_mm, or the exact float32 GEMM (no int8 units)
def test_margin_bounds_every_product_and_thresholds_round_down(monkeypatch, int8):
    monkeypatch.setattr(_lowp, "INT8_GEMM", int8)
    x = as_unit_embeddings(np.concatenate([clustered(300, dim=40, n_clusters=5, seed=3), np.eye(40)[:7]]))
    x[5] = x[4]  # an exact duplicate
    lp = Int8Rows(x)
    exact = x.astype(np.float64) @ x.astype(np.float64).T
    with single_thread_torch():
        q = np.empty((x.shape[0], x.shape[0]), np.int32)
        lp.gemm(0, x.shape[0], 0, x.shape[0], q)
    qq = lp.q.numpy().astype(np.int64)
    np.testing.assert_array_equal(q, qq @ qq.T)  # the int32 product is exact
    rows = np.array([6, 0, 5, 5])
    np.testing.assert_array_equal(lp.gemm_rows(rows, 3, 40), (qq[rows] @ qq[3:40].T).astype(np.int32))
    err = np.abs(q / lp.scale2 - exact)
    assert err.max() <= lp.margin
    assert lp.margin < 0.1  # a useful screen: about 2·127⁻¹·max|x|·sqrt(D/12)
    dev = np.abs(np.einsum("nd,nd->n", x.astype(np.float64), x.astype(np.float64)) - 1).max()
    assert lp.eps2 >= 2 * lp.margin + 2 * dev
    for t in np.linspace(-1.2, 1.2, 97):
        keep = q >= lp.int_threshold(float(t))
        assert keep[q / lp.scale2 >= t].all()
    assert lp.int_threshold(-np.inf) <= q.min() and lp.int_threshold(np.inf) >= q.max()


def test_float32_products_stay_exact_at_the_widest_rows(monkeypatch):
    """Without int8 units Q is a float32 GEMM of the int8 values: exact while D·qmax² <= 2^24 (qmax capped)."""
    monkeypatch.setattr(_lowp, "INT8_GEMM", False)
    rng = np.random.default_rng(5)
    dim = 3000  # 127²·3000 > 2^24: the cap lowers qmax
    x = as_unit_embeddings(np.abs(rng.standard_normal((40, dim))) + 1.0)  # all-positive: |Q| near D·qmax²
    lp = Int8Rows(x)
    qq = lp.q.numpy().astype(np.int64)
    assert np.abs(qq).max() <= int(np.sqrt((1 << 24) // dim))
    with single_thread_torch():
        q = np.empty((40, 40), np.int32)
        lp.gemm(0, 40, 0, 40, q)
    np.testing.assert_array_equal(q, qq @ qq.T)


def test_float32_rows_bound_every_product_and_are_the_screen_without_int8_units(monkeypatch):
    """Without int8 units the rankings screen with the float32 rows (``Float32Rows``): Q / S² is within the stated
    margin of the float64 product, thresholds round down, and on rows with one large entry per row (where the int8
    scale is set by that entry) the margin is orders of magnitude below the int8 one."""
    monkeypatch.setattr(_lowp, "INT8_GEMM", False)
    rng = np.random.default_rng(9)
    raw = np.abs(rng.standard_normal((200, 64))) * 0.05
    raw[np.arange(200), rng.integers(0, 64, 200)] += 3.0  # one spike per row, as in a colour histogram
    x = as_unit_embeddings(raw)
    lp = _lowp.screen_rows(x)
    assert isinstance(lp, _lowp.Float32Rows) and lp.scale2 == 2.0**29
    exact = x.astype(np.float64) @ x.astype(np.float64).T
    q = np.empty((200, 200), np.int32)
    lp.gemm(0, 200, 0, 200, q)
    assert np.abs(q / lp.scale2 - exact).max() <= lp.margin
    rows = np.array([3, 0, 199, 3])
    assert np.abs(lp.gemm_rows(rows, 10, 90) / lp.scale2 - exact[rows, 10:90]).max() <= lp.margin  # own GEMM order
    for t in np.linspace(-1.2, 1.2, 97):
        assert (q >= lp.int_threshold(float(t)))[q / lp.scale2 >= t].all()
    assert lp.margin < 1e-4 and lp.margin * 100 < Int8Rows(x).margin
    monkeypatch.setattr(_lowp, "INT8_GEMM", True)
    assert type(_lowp.screen_rows(x)) is Int8Rows
