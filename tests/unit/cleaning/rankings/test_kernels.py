"""Shared ranking kernels: float32 threshold rounding and the order-preserving thread map."""

from __future__ import annotations

import threading

import numpy as np
import pytest

from noisycal_platform.cleaning.rankings._kernels import floor32, ordered_map


def test_floor32_is_the_largest_float32_not_above():
    rng = np.random.default_rng(0)
    t = np.concatenate([rng.standard_normal(10_000), [0.0, -0.0, 1.0, -2.0, 1 + 2**-30, -(1 + 2**-30), 1e-50]])
    f = floor32(t)
    assert f.dtype == np.float32
    assert np.all(f.astype(np.float64) <= t)
    up = np.nextafter(f, np.float32(np.inf))
    assert np.all(up.astype(np.float64) > t)
    assert float(floor32(0.1)) <= 0.1 < float(np.nextafter(floor32(0.1), np.float32(1)))


def test_floor32_never_drops_a_value_a_plain_cast_would():
    # s >= t in float64 implies s >= floor32(t) in float32
    rng = np.random.default_rng(1)
    s = rng.random(20_000).astype(np.float32)
    t = s.astype(np.float64) - rng.random(20_000) * 1e-8
    assert np.all(s >= floor32(t))


@pytest.mark.parametrize("workers", [1, 2, 4])
def test_ordered_map_keeps_order_and_limits_blas(workers):
    from threadpoolctl import threadpool_info

    def blas_threads() -> list[int]:
        return [i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"]

    before = blas_threads()
    seen = set()

    def fn(i: int) -> tuple[int, list[int]]:
        seen.add(threading.get_ident())
        return i * i, blas_threads()

    with ordered_map(True, workers) as pmap:
        res = list(pmap(fn, iter(range(50))))
    assert [r[0] for r in res] == [i * i for i in range(50)]
    if max(before, default=1) > 1 and workers > 1:
        assert all(max(r[1]) == 1 for r in res)  # single-threaded BLAS inside the workers
        assert threading.get_ident() not in seen
    assert blas_threads() == before  # restored


@pytest.mark.parametrize("depth", [1, 2, 8])
def test_blas_on_workers_keeps_the_workers_and_a_single_threaded_blas(depth):
    from threadpoolctl import threadpool_info, threadpool_limits

    from noisycal_platform.cleaning.rankings._kernels import blas_on_workers

    def blas_threads() -> int:
        return max((i["num_threads"] for i in threadpool_info() if i["user_api"] == "blas"), default=1)

    with threadpool_limits(2, user_api="blas"):
        before = blas_threads()
        seen = set()

        def fn(i: int) -> tuple[int, int]:
            seen.add(threading.get_ident())
            return i * i, blas_threads()

        with blas_on_workers():
            assert blas_threads() == 1  # on the calling thread too
            with blas_on_workers():  # nested: no change
                assert blas_threads() == 1
            with ordered_map(True, depth=depth) as pmap:
                res = list(pmap(fn, iter(range(50))))
            assert blas_threads() == 1
        assert blas_threads() == before
    assert [r[0] for r in res] == [i * i for i in range(50)]
    assert all(r[1] == 1 for r in res)
    if before > 1:  # the pool still had the BLAS' thread count of workers, none of them the caller
        assert threading.get_ident() not in seen and len(seen) >= 1


def test_ordered_map_serial_is_plain_map():
    with ordered_map(False) as pmap:
        assert pmap is map
