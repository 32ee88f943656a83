"""Shared kernels for the rankings: input normalisation, the distance, exact re-evaluation.

Definition used by all three rankings (Gröger et al. 2023 §3.2, SelfClean): the embeddings are L2-normalised
in float64 and stored as float32 ``x_i``; the distance is

    d(i, j) = min(||x_i - x_j||² / 4, 1)   (= (1 - cos)/2 for unit vectors)

evaluated in float64 from the float32 vectors (differences first, so identical rows have d = 0
exactly and near duplicates keep full relative precision). Blocks of inner products are screened in
float32 (GEMM) and every decision that float32 rounding (or the ~1e-7 deviation of the stored norms
from 1) could flip is re-evaluated in float64 using the rigorous margin :func:`screen_margin`, so the
results equal a float64 brute force on the full distance matrix. Float64 thresholds are turned
into float32 ones by :func:`floor32` (rounded down, never up).

GEMM tiles run on :func:`ordered_map`: a few worker threads, each with a single-threaded BLAS and
its own tile buffer, results in input order.
"""

from __future__ import annotations

import contextlib
import contextvars
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import ThreadPoolExecutor

import numpy as np

# elements (float32) per inner-product block: 16 Mi elements = 64 MiB
BLOCK_ELEMS = 1 << 24
RECORDS_CAP = 1 << 20  # candidate records of a ``Records`` held before a compaction pass (read at call time)
MAX_WORKERS = 4  # cap on the tile worker threads of :func:`ordered_map` (read at call time)

OrderedMap = Callable[[Callable, Iterable], Iterator]
# workers of ``ordered_map`` inside ``blas_on_workers`` (the BLAS thread count it found); None outside it
_WORKER_THREADS: contextvars.ContextVar[int | None] = contextvars.ContextVar("worker_threads", default=None)


def as_unit_embeddings(emb: np.ndarray, name: str = "emb", row_offset: int = 0) -> np.ndarray:
    """Validate ``emb`` (N×D, finite, no zero rows) and return its L2-normalised float32 copy.

    ``row_offset`` is added to the row numbers in the error messages (``emb`` a block of a larger array)."""
    x = np.asarray(emb)
    if x.ndim != 2:
        raise ValueError(f"{name} must be a 2-D array (N, D), got shape {x.shape}")
    if x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"{name} must have at least one row and one column, got shape {x.shape}")
    if not (np.issubdtype(x.dtype, np.floating) or np.issubdtype(x.dtype, np.integer)):
        raise ValueError(f"{name} must be numeric, got dtype {x.dtype}")
    out = np.empty(x.shape, dtype=np.float32)
    step = max(1, BLOCK_ELEMS // (4 * x.shape[1]))
    for a in range(0, x.shape[0], step):  # chunked: no full float64 copy of large inputs
        blk = np.asarray(x[a : a + step], dtype=np.float64)
        if not np.all(np.isfinite(blk)):
            bad = row_offset + a + int(np.flatnonzero(~np.isfinite(blk).all(axis=1))[0])
            raise ValueError(f"{name} has non-finite values in row {bad}")
        norms = np.linalg.norm(blk, axis=1)
        if np.any(norms == 0.0):
            bad = row_offset + a + int(np.flatnonzero(norms == 0.0)[0])
            raise ValueError(f"{name} has an all-zero row {bad}; cosine distance is undefined")
        out[a : a + step] = blk / norms[:, None]
    return out


def sim_error_bound(dim: int) -> float:
    """Rigorous bound on |float32 GEMM inner product - exact inner product| for unit vectors.

    Recursive summation of ``dim`` float32 products: |err| <= gamma_{dim+1} * sum|x_k y_k| with
    gamma_n = n u / (1 - n u), u = 2^-24, and sum|x_k y_k| <= ||x|| ||y|| <= 1 + 1e-6. Any blocked or
    pairwise summation order obeys the same bound. A safety factor 1.25 is added.
    """
    u = 2.0**-24
    n = dim + 1
    return 1.25 * (n * u / (1.0 - n * u)) * (1.0 + 1e-6)


def screen_margin(x: np.ndarray) -> float:
    """Margin (similarity units) that makes float32 screening decisions safe for the exact d.

    With s = <x_i, x_j> and n_i = ||x_i||²: d = (n_i + n_j - 2 s)/4, |s32 - s| <= eps and
    |n_i - 1| <= delta, so comparing float32 similarities with 2 eps + 2 delta (+1e-12) slack never
    drops a pair that the exact d would keep.
    """
    eps = sim_error_bound(x.shape[1])
    delta = 0.0
    step = max(1, BLOCK_ELEMS // (8 * x.shape[1]))
    for a in range(0, x.shape[0], step):
        xa = x[a : a + step].astype(np.float64)
        delta = max(delta, float(np.abs(np.einsum("nd,nd->n", xa, xa) - 1.0).max()))
    return 2.0 * eps + 2.0 * delta + 1e-12


def exact_dists(x: np.ndarray, i: np.ndarray, j: np.ndarray, parallel: bool = False) -> np.ndarray:
    """d = min(||x_i - x_j||² / 4, 1) in float64 for index arrays ``i``, ``j`` (chunked gather).

    ``parallel``: the chunks on worker threads (``ordered_map``; the gathers and ``einsum`` release the GIL), for
    large calls outside another pool; every chunk is the same computation either way, so are the values.
    """
    i = np.asarray(i, dtype=np.int64).ravel()
    j = np.asarray(j, dtype=np.int64).ravel()
    out = np.empty(i.shape[0], dtype=np.float64)
    step = max(1, BLOCK_ELEMS // (8 * x.shape[1]))

    def chunk(a: int) -> None:
        diff = x[i[a : a + step]].astype(np.float64)
        diff -= x[j[a : a + step]]
        out[a : a + step] = np.einsum("nd,nd->n", diff, diff)

    with ordered_map(parallel and i.shape[0] > step) as pmap:
        for _ in pmap(chunk, range(0, i.shape[0], step)):
            pass
    out *= 0.25
    return np.minimum(out, 1.0, out=out)


def floor32(t: np.ndarray | float) -> np.ndarray:
    """Largest float32 <= each float64 threshold (float32 ``s >= floor32(t)`` never drops an ``s >= t``).

    A plain cast rounds to nearest and may round a threshold up by half an ulp.
    """
    t = np.asarray(t, dtype=np.float64)
    t32 = t.astype(np.float32)
    return np.where(t32 > t, np.nextafter(t32, np.float32(-np.inf)), t32)


def _blas_threads() -> int:
    """The BLAS thread count (1 when threadpoolctl finds no BLAS)."""
    from threadpoolctl import threadpool_info

    return max((int(i["num_threads"]) for i in threadpool_info() if i.get("user_api") == "blas"), default=1)


@contextlib.contextmanager
def blas_on_workers() -> Iterator[None]:
    """A single-threaded BLAS for the whole block, while ``ordered_map`` inside it keeps as many workers as the BLAS
    had threads.

    For kernels that mix worker-thread GEMMs with GEMMs on the calling thread: after a multi-threaded OpenBLAS call
    its threads keep spinning for 50-200 ms, and a worker pool started meanwhile gets half the cores (2-core Xeon,
    2026-12-07: 313 block rescans took 92 ms on 2 workers right after a 2-thread GEMM, 63 ms on one worker, 40 ms
    on 2 workers 0.2 s later). Inside this block no BLAS thread is ever started.
    """
    from threadpoolctl import threadpool_limits

    if _WORKER_THREADS.get() is not None:  # nested: already single-threaded
        yield
        return
    token = _WORKER_THREADS.set(_blas_threads())
    try:
        with threadpool_limits(1, user_api="blas"):
            yield
    finally:
        _WORKER_THREADS.reset(token)


@contextlib.contextmanager
def ordered_map(parallel: bool, max_workers: int | None = None, depth: int = 2) -> Iterator[OrderedMap]:
    """Yield an order-preserving ``map`` over worker threads (plain ``map`` if not ``parallel``).

    A multi-threaded BLAS loses much on a busy shared box (its threads wait on each other: 4096²
    tiles ~15% slower, small GEMMs ~10x), so the workers split the tiles, each with a
    single-threaded BLAS (set for the whole process while the context is open); the numpy
    reductions release the GIL and run in parallel too. Workers = min(``max_workers`` (default
    ``MAX_WORKERS``), the BLAS thread count, or inside ``blas_on_workers`` the count it found); at most ``depth``
    tasks per worker are in flight (more keeps the workers busy behind a long task, holding more results), and
    results come back in input order, so callers that fold them in that order do not depend on the worker count.
    """
    try:
        from threadpoolctl import threadpool_limits
    except ImportError:  # pragma: no cover - threadpoolctl ships with scikit-learn
        parallel = False
    if not parallel:  # small inputs: a pool and the BLAS switch cost more (~6 ms) than they save
        yield map
        return
    budget = _WORKER_THREADS.get()
    nw = min(MAX_WORKERS if max_workers is None else max_workers, _blas_threads() if budget is None else budget)
    if nw <= 1:
        yield map
        return

    def imap(fn: Callable, items: Iterable) -> Iterator:
        pending: deque = deque()
        for it in items:
            pending.append(ex.submit(fn, it))
            if len(pending) >= depth * nw:
                yield pending.popleft().result()
        while pending:
            yield pending.popleft().result()

    with contextlib.ExitStack() as stack:
        if budget is None:
            stack.enter_context(threadpool_limits(1, user_api="blas"))
        ex = stack.enter_context(ThreadPoolExecutor(nw))
        yield imap


class TopPairs:
    """The pairs that can enter a top k, with the running float32 screening threshold (the row-block tasks and the
    cell-pruned pair ranking)."""

    def __init__(self, k: int, eps2: float) -> None:
        self.k, self.eps2 = k, eps2
        self.thr = -2.0  # similarity threshold (sims are >= -1 - eps: everything passes)
        self.top: np.ndarray | None = np.empty(0, np.float32)  # k largest s32 while fewer than k pairs are held
        self.i, self.j, self.d = np.empty(0, np.int64), np.empty(0, np.int64), np.empty(0)

    def screen(self, s: np.ndarray, row_max: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """(row, column) positions of strip ``s`` that pass the threshold (``row_max`` = maxima of its rows)."""
        if self.top is not None:
            flat = s.ravel()
            top = np.concatenate([self.top, flat[flat >= self.top.min()] if self.top.size >= self.k else flat])
            self.top = np.partition(top, top.size - self.k)[top.size - self.k :] if top.size > self.k else top
            if self.top.size >= self.k and np.isfinite(kth := float(self.top.min())):
                self.thr = max(self.thr, kth - self.eps2)  # k pairs have s32 >= kth, so top-k pairs s32 >= kth - eps2
        thr = floor32(self.thr)
        rows = np.flatnonzero(row_max >= thr)
        if rows.size == 0:
            return rows, rows
        flat = np.flatnonzero(s[rows] >= thr)
        return rows[flat // s.shape[1]], flat % s.shape[1]

    def add(self, i: np.ndarray, j: np.ndarray, d: np.ndarray) -> None:
        """Hold the exact pairs (global i < j, d) and tighten the threshold from the k-th smallest d."""
        self.i, self.j, self.d = np.r_[self.i, i], np.r_[self.j, j], np.r_[self.d, d]
        if self.d.size >= self.k:
            dk = float(np.partition(self.d, self.k - 1)[self.k - 1])
            keep = self.d <= dk  # ties kept: the final order is by (d, i, j)
            self.i, self.j, self.d = self.i[keep], self.j[keep], self.d[keep]
            self.thr = max(self.thr, 1.0 - 2.0 * dk - self.eps2)  # d <= dk  =>  s >= 1 - 2 dk up to the margin
            self.top = None

    def result(self) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        order = np.lexsort((self.j, self.i, self.d))[: self.k]
        return self.i[order], self.j[order], self.d[order]


class Records:
    """(point, partner, s32) candidates of one kind; ``nearest`` keeps s32 >= val - eps2, else s32 <= val + eps2
    (``val`` the running best per point, raised by the caller). Compacted past ``RECORDS_CAP`` records, the cap
    doubling with the survivors (amortised O(1) per record)."""

    def __init__(self, val: np.ndarray, eps2: float, nearest: bool) -> None:
        self.val, self.eps2, self.nearest = val, eps2, nearest
        self.p: list[np.ndarray] = []
        self.q: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.size, self.cap = 0, RECORDS_CAP

    def add(self, p: np.ndarray, q: np.ndarray, v: np.ndarray) -> None:
        self.p.append(p)
        self.q.append(q)
        self.v.append(v)
        self.size += p.size
        if self.size > self.cap:
            self._compact()
            self.cap = max(RECORDS_CAP, 2 * self.size)

    def _compact(self) -> None:
        p, q, v = np.concatenate(self.p), np.concatenate(self.q), np.concatenate(self.v)
        bound = self.val[p].astype(np.float64)
        keep = v >= bound - self.eps2 if self.nearest else v <= bound + self.eps2
        self.p, self.q, self.v = [p[keep]], [q[keep]], [v[keep]]
        self.size = int(keep.sum())

    def exact(self, x: np.ndarray) -> np.ndarray:
        """Per point the exact min (nearest) or max (farthest) float64 distance over the candidates."""
        out = np.full(self.val.size, np.inf if self.nearest else -np.inf)
        if self.p:
            self._compact()
            p, q = self.p[0], self.q[0]
            (np.minimum if self.nearest else np.maximum).at(out, p, exact_dists(x, p, q))
        return out
