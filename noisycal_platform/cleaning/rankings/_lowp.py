"""Integer screening products for the rankings' GEMM passes; exactness is kept by the float64 re-evaluation.

A tile of inner products is one float32 GEMM of the unit rows, f = x_a·x_bᵀ, stored as the int32 values
Q = trunc(f·2²⁹) (``ScreenRows.gemm``): the scaling by a power of two is exact and |f| < 2, so with S² = 2²⁹ every
screening value ŝ_ij = Q_ij / S² obeys

    |ŝ_ij − x_i·x_j| ≤ |f_ij − x_i·x_j| + 2⁻²⁹ ≤ γ_{D+1}·max‖x‖²·1.25 + 2⁻²⁹

(``margin``: the float32 GEMM bound of ``_kernels.sim_error_bound``, any summation order). The rankings screen with
eps2 = 2·margin + 2·max|‖x_i‖² − 1| (``eps2``), so every decision they take on ŝ keeps the pairs that the exact
float64 distance needs. Float thresholds t become integer thresholds floor(t·S²) − 1 (``int_threshold``: never
above the exact one); the kernels' "everything passes" threshold, similarity −2, is −2³⁰ − 1, above the int32
minimum they mask with.

Why not int8: quantising the rows to int8 (one global scale 127 / max|x|) and multiplying with ``torch._int_mm``
gave a margin set by the largest entry: 0.207 in similarity on HAM10000's 832-column baseline (one large entry per
colour histogram), so millions of pairs reached the float64 re-evaluation. Measured on an AVX-512 VNNI Xeon
(2026-12-07, the HAM10000 embeddings of ``bench_ham10000_platform.py``, top 2,000 pairs): the int8 screen took
2.5 s for the baseline's near duplicates against 0.29 s with these products, 0.93 against 0.40 s for its label
errors, 0.56 against 0.42 s and 0.72 against 0.56 s for the 1,280-column encoder; on ``bench_rankings``' synthetic
100,000 × 192 (seed 1) both took 1.2 s and 2.6 s. The same pairs and scores either way. Without int8 dot-product
units (the AVX2 EPYC) ``_int_mm`` was a plain loop, 30 times slower than a float32 GEMM.

Reference for the rounding argument: N. J. Higham, "Accuracy and Stability of Numerical Algorithms" (2002), §3.1.
"""

from __future__ import annotations

import math
import threading

import numpy as np

from ._kernels import BLOCK_ELEMS, sim_error_bound

__all__ = ["ScreenRows", "screen_rows"]


class ScreenRows:
    """Unit float32 rows with the integer screening products of the rankings and their rigorous error margin."""

    def __init__(self, x: np.ndarray) -> None:
        n, dim = x.shape
        self.qf = np.ascontiguousarray(x, dtype=np.float32)
        self.scale2 = float(2**29)
        self._local = threading.local()
        x_max = dev = 0.0
        step = max(1, BLOCK_ELEMS // (8 * max(dim, 1)))
        for a in range(0, n, step):  # chunked: no full float64 copy
            xa = self.qf[a : a + step].astype(np.float64)
            nn = np.einsum("nd,nd->n", xa, xa)
            x_max = max(x_max, float(np.sqrt(nn.max())))
            dev = max(dev, float(np.abs(nn - 1.0).max()))
        self.margin = sim_error_bound(dim) * max(1.0, x_max * x_max) + 2.0**-28 + 1e-12
        self.eps2 = 2.0 * self.margin + 2.0 * dev + 1e-12

    def gemm(self, r0: int, r1: int, c0: int, c1: int, out: np.ndarray) -> np.ndarray:
        """Q = trunc(2²⁹·x[r0:r1]·x[c0:c1]ᵀ) into the int32 buffer ``out`` (float32 GEMM, one thread per caller)."""
        buf = getattr(self._local, "buf", None)
        if buf is None or buf.size < out.size:
            buf = self._local.buf = np.empty(out.size, np.float32)
        f = buf[: out.size].reshape(out.shape)
        np.matmul(self.qf[r0:r1], self.qf[c0:c1].T, out=f)
        f *= np.float32(self.scale2)  # exact: a power of two
        np.copyto(out, f, casting="unsafe")
        return out

    def gemm_rows(self, rows: np.ndarray, c0: int, c1: int) -> np.ndarray:
        """Q for the gathered rows ``rows`` against x[c0:c1] (int32)."""
        f = self.qf[np.asarray(rows, np.int64)] @ self.qf[c0:c1].T
        f *= np.float32(self.scale2)
        return f.astype(np.int32)

    def int_threshold(self, t: float) -> int:
        """Integer threshold T with Q >= T for every Q / S² >= t (T = floor(t·S²) − 1, clamped to int32)."""
        if not math.isfinite(t):
            return -(2**31) if t < 0 else 2**31 - 1
        v = math.floor(t * self.scale2) - 1
        return int(min(max(v, -(2**31)), 2**31 - 1))

    def to_sim(self, v: np.ndarray | int | float) -> np.ndarray | float:
        """Q / S² as float64 (screening similarity units)."""
        return np.asarray(v, np.float64) / self.scale2 if isinstance(v, np.ndarray) else float(v) / self.scale2


def screen_rows(x: np.ndarray) -> ScreenRows:
    """The screening rows of the rankings' GEMM passes (module doc)."""
    return ScreenRows(x)

