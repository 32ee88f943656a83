"""Int8 screening products for the rankings' GEMM passes; exactness is kept by the float64 re-evaluation.

The unit float32 rows x_i are quantised once with one global scale S = 127 / max|x| (less when D·127² would
overflow int32): q_i = round(S·x_i) (int8),
and a tile of inner products is the exact integer product Q = q_a·q_bᵀ (int32, ``torch._int_mm``: VNNI/AMX
int8 kernels, several times the float32 GEMM rate on current x86 CPUs). With e_i = q_i / S − x_i (computed in
float64), every screening value ŝ_ij = Q_ij / S² obeys

    |ŝ_ij − x_i·x_j| = |x_i·e_j + e_i·x_j + e_i·e_j| ≤ 2·max‖x‖·max‖e‖ + max‖e‖²      (Cauchy–Schwarz)

(``margin``; a 1e-9 slack covers the float64 rounding of the bound itself). It replaces the float32 GEMM
error bound of ``_kernels.sim_error_bound`` in the screening margin: eps2 = 2·margin + 2·max|‖x_i‖² − 1|
(``eps2``), so every decision the rankings take on ŝ keeps the pairs that the exact float64 distance needs.
Float thresholds t become integer thresholds floor(t·S²) − 1 (``int_threshold``: never above the exact one).

Where the CPU has no int8 dot-product instructions (AVX-512 VNNI, AVX-VNNI or AMX; ``int8_products_fast``),
torch's CPU ``_int_mm`` is a plain loop: about 2 GOP/s on the 2-core AVX2 EPYC (Zen 3) against about 70 GFLOP/s
for a float32 GEMM, 30 times slower. There Q is computed by a float32 GEMM of the int8 values instead, which is
exact: every product and every partial sum is an integer of magnitude at most D·qmax² <= 2^24 (qmax is capped so),
and float32 holds such integers exactly in any summation order. The same Q, the same decisions.

The near-duplicate and label-error rankings take their rows from :func:`screen_rows`: on such a CPU that is
:class:`Float32Rows`, the same float32 GEMM on the float32 rows themselves with the float32 GEMM's margin, far
tighter than the quantisation's where one entry of a row dwarfs the others (the results are the same: both screens
are rigorous and the survivors are re-evaluated in float64).

Reference for the rounding argument: N. J. Higham, "Accuracy and Stability of Numerical Algorithms" (2002), §3.1.
"""

from __future__ import annotations

import functools
import math
import threading

import numpy as np

from ._kernels import BLOCK_ELEMS

INT8_GEMM: bool | None = None  # None: ``int8_products_fast()`` decides; tests set True/False to run either path
_INT8_FLAGS = ("avx512_vnni", "avx_vnni", "amx_int8")  # /proc/cpuinfo flags of x86 int8 dot-product units
_F32_EXACT = 1 << 24  # float32 holds every integer up to 2^24 exactly


def _torch():
    import torch  # heavy: imported on first use (STYLE: heavy imports inside the function)

    return torch


@functools.cache
def _cpu_has_int8_units() -> bool:
    try:
        with open("/proc/cpuinfo") as f:
            for line in f:
                if line.startswith("flags"):
                    return any(flag in line.split() for flag in _INT8_FLAGS)
    except OSError:
        pass
    return False


def int8_products_fast() -> bool:
    """Whether ``torch._int_mm`` beats a float32 GEMM here: only with int8 dot-product units (``INT8_GEMM``
    overrides). Without them the rankings keep the int8 screening values but compute them by exact float32
    GEMMs (``Int8Rows.gemm``). The MST (``_mst.exact_mst``) uses float32 products on every CPU."""
    return _cpu_has_int8_units() if INT8_GEMM is None else bool(INT8_GEMM)


class Int8Rows:
    """Int8 copy of unit float32 rows with its screening scale and rigorous error margin."""

    def __init__(self, x: np.ndarray) -> None:
        torch = _torch()
        n, dim = x.shape
        self.fast = int8_products_fast()
        amax = float(np.abs(x).max()) if x.size else 1.0
        # |Q| <= D·qmax² stays within int32 (torch._int_mm) or, for the float32 GEMM, within 2^24 (exact)
        qmax = min(127, math.isqrt((2**31 - 1 if self.fast else _F32_EXACT) // max(dim, 1)))
        self.scale = qmax / amax if amax > 0 else 1.0
        self.scale2 = self.scale * self.scale
        q = np.empty((n, dim), np.int8)
        e_max = x_max = dev = 0.0
        step = max(1, BLOCK_ELEMS // (8 * dim))
        for a in range(0, n, step):  # chunked: no full float64 copy
            xa = x[a : a + step].astype(np.float64)
            qa = np.rint(xa * self.scale)
            q[a : a + step] = qa
            e = qa / self.scale - xa
            e_max = max(e_max, float(np.sqrt(np.einsum("nd,nd->n", e, e).max())))
            nn = np.einsum("nd,nd->n", xa, xa)
            x_max = max(x_max, float(np.sqrt(nn.max())))
            dev = max(dev, float(np.abs(nn - 1.0).max()))
        self.q = torch.from_numpy(q)
        self.qf = None if self.fast else q.astype(np.float32)  # exact float32 copy for the GEMM fallback
        self._local = threading.local()
        self.margin = 2.0 * x_max * e_max + e_max * e_max + 1e-9
        self.eps2 = 2.0 * self.margin + 2.0 * dev + 1e-12

    def gemm(self, r0: int, r1: int, c0: int, c1: int, out: np.ndarray) -> np.ndarray:
        """Q = q[r0:r1]·q[c0:c1]ᵀ into the int32 buffer ``out`` (shape (r1 - r0, c1 - c0)); one thread per caller."""
        if self.qf is not None:  # exact float32 GEMM of the int8 values, then int32
            buf = getattr(self._local, "buf", None)
            if buf is None or buf.size < out.size:
                buf = self._local.buf = np.empty(out.size, np.float32)
            f = buf[: out.size].reshape(out.shape)
            np.matmul(self.qf[r0:r1], self.qf[c0:c1].T, out=f)
            np.copyto(out, f, casting="unsafe")
            return out
        torch = _torch()
        torch.set_num_threads(1)  # per calling thread (OpenMP); callers hold `single_thread_torch`, which restores
        torch._int_mm(self.q[r0:r1], self.q[c0:c1].T, out=torch.from_numpy(out))
        return out

    def gemm_rows(self, rows: np.ndarray, c0: int, c1: int) -> np.ndarray:
        """Q for the gathered rows ``rows`` against q[c0:c1] (int32)."""
        if self.qf is not None:
            return (self.qf[np.asarray(rows, np.int64)] @ self.qf[c0:c1].T).astype(np.int32)
        torch = _torch()
        torch.set_num_threads(1)
        return torch._int_mm(self.q[torch.from_numpy(np.asarray(rows, np.int64))], self.q[c0:c1].T).numpy()

    def int_threshold(self, t: float) -> int:
        """Integer threshold T with Q >= T for every Q / S² >= t (T = floor(t·S²) − 1, clamped to int32)."""
        if not math.isfinite(t):
            return -(2**31) if t < 0 else 2**31 - 1
        v = math.floor(t * self.scale2) - 1
        return int(min(max(v, -(2**31)), 2**31 - 1))

    def to_sim(self, v: np.ndarray | int | float) -> np.ndarray | float:
        """Q / S² as float64 (screening similarity units)."""
        return np.asarray(v, np.float64) / self.scale2 if isinstance(v, np.ndarray) else float(v) / self.scale2


class Float32Rows(Int8Rows):
    """The screening of :class:`Int8Rows` where the CPU has no int8 dot-product units (``int8_products_fast``): the
    product is a float32 GEMM there either way, so it runs on the float32 rows themselves instead of their int8
    copy, and the margin is the float32 GEMM's instead of the quantisation's (on HAM10000's 832-column baseline,
    whose largest entry is far above the typical one, the int8 margin made eps2 0.207: 3.6 million pairs of the
    top 2,000 near-duplicate search re-evaluated in float64, 16 of its 20 CPU s).

    Q = trunc(f·2²⁹) (int32), f the float32 GEMM value: the scaling by a power of two is exact and |f| < 2, so
    |Q / S² − x_i·x_j| ≤ |f − x_i·x_j| + 2⁻²⁹ ≤ γ_{D+1}·max‖x‖² · 1.25 + 2⁻²⁹ (``_kernels.sim_error_bound``, any
    summation order; ``margin``), with S² = 2²⁹ (so the kernels' "everything passes" threshold, similarity −2, is
    −2³⁰ − 1, above the int32 minimum they mask with); eps2 = 2·margin + 2·max|‖x_i‖² − 1| as for the int8 rows. The
    rankings that screen with it re-evaluate their survivors in float64, so their results are the same; only the
    number of survivors changes."""

    def __init__(self, x: np.ndarray) -> None:
        from ._kernels import sim_error_bound

        n, dim = x.shape
        self.fast = False
        self.q = None
        self.qf = np.ascontiguousarray(x, dtype=np.float32)
        self.scale = 2.0**14.5
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


def screen_rows(x: np.ndarray) -> Int8Rows:
    """The screening rows of the rankings' GEMM passes: :class:`Int8Rows` on a CPU with int8 dot-product units,
    else :class:`Float32Rows` (the same float32 GEMM cost as the int8 values' exact float32 product, a far tighter
    margin)."""
    return Int8Rows(x) if int8_products_fast() else Float32Rows(x)


class single_thread_torch:
    """Context for a ranking that calls `Int8Rows.gemm`: torch's intra-op thread count is restored on exit (the
    products run one thread each; the rankings' worker threads share the cores)."""

    def __enter__(self) -> single_thread_torch:
        torch = _torch()
        self.n = torch.get_num_threads()
        torch.set_num_threads(1)
        return self

    def __exit__(self, *exc: object) -> None:
        _torch().set_num_threads(self.n)
