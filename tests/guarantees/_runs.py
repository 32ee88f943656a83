"""Simulation runners of the guarantee tier (and of benchmarks/bench_size_power.py, on other seeds).

Each runner takes one data seed, simulates one data set with known truth, runs the SHIPPED estimator or check
on it (public functions, unchanged) and returns a few numbers. The shipped functions take one data set per call
(their bootstrap replicates are batched inside), so data sets are mapped over a process pool (`run_many`, two
workers on the 2-core CI box, one BLAS thread each) rather than batched into one array; the per-call cost is
mostly the point fit of the channels, which no public batch function does across data sets (its EM starts run as
one batch, `channels._em.run_em_batched`). The whole tier: 295–302 s of CPU (user + sys) on 2026-12-03, 434 s before
that batching (loaded box); 249 s wall, 366 s CPU on a nearly idle box afterwards (README, "What the statistics
guarantee").

The simulation designs are those of the unit tests (their ``_sim`` / ``_replicate`` functions are reused):
- binary: tests/unit/calibration/test_inference.py (s ~ Beta(2, 3); P(Y=1 | s) = s or min(s^0.8 + 0.03, 1);
  three annotators, FPR (0.10, 0.05, 0.25), FNR (0.20, 0.10, 0.15)); channels estimated and refitted.
- multi-class: tests/unit/calibration/multiclass/test_inference.py (5 classes, 3 annotators with asymmetric
  confusion matrices, diagonals 0.7–0.9; the issue-12 setting); p_true or p ∝ p_true^1.5.
- subgroups: tests/unit/calibration/test_subgroups.py (two sites of 600 items, 'bad' shifted by +0.12).
- assumption checks: tests/unit/calibration/test_diagnostics.py (n = 5,000 calibrated, three annotators).
"""

from __future__ import annotations

import ctypes
import ctypes.util
import functools
import math
import multiprocessing
import os
import sys
from collections.abc import Callable, Sequence
from concurrent.futures import ProcessPoolExecutor

import numpy as np
from scipy.stats import binom
from threadpoolctl import threadpool_limits

from noisycal_platform.calibration import calibration_test
from noisycal_platform.calibration.diagnostics import assumption_checks
from noisycal_platform.calibration.multiclass import calibration_test_multiclass
from tests.unit.calibration import test_diagnostics as diag_sim
from tests.unit.calibration import test_inference as bin_sim
from tests.unit.calibration import test_subgroups as sub_sim
from tests.unit.calibration.multiclass import test_inference as mc_sim

CHECK_ALPHA = 0.05
BINARY_N_BOOT = 200
MULTICLASS_N_BOOT = 100
SUBGROUP_N_BOOT = 150
DIAG_N_REPLICATES = 100


def workers() -> int:
    """Processes for `run_many`: ``NOISYCAL_GUARANTEE_WORKERS`` or 2 (never more than the CPUs)."""
    return max(1, min(int(os.environ.get("NOISYCAL_GUARANTEE_WORKERS", "2")), os.cpu_count() or 1))


M_TRIM_THRESHOLD, M_MMAP_THRESHOLD = -1, -3  # glibc mallopt parameters (malloc.h)
MALLOC_KEEP_BYTES = 256 << 20


def _keep_freed_memory() -> None:
    """glibc only: serve allocations up to 256 MiB from the heap and keep up to 256 MiB of freed memory in it.

    A multi-class replicate allocates ~46 MB of short-lived numpy temporaries; with glibc's defaults they are
    mmapped or trimmed back to the kernel when freed and page-faulted in again by the next replicate (measured on
    the 2-core box: 11,700 minor faults per call, 39 of the multi-class file's 142 CPU s in system time). A pool
    worker runs thousands of such calls, so it keeps the memory instead. No effect elsewhere (musl, macOS)."""
    if not sys.platform.startswith("linux"):
        return
    libc = ctypes.CDLL(ctypes.util.find_library("c"))
    mallopt = getattr(libc, "mallopt", None)
    if mallopt is not None:
        mallopt(M_MMAP_THRESHOLD, MALLOC_KEEP_BYTES)
        mallopt(M_TRIM_THRESHOLD, MALLOC_KEEP_BYTES)


def _pool_worker_setup() -> None:
    """Pool initializer: one BLAS thread per worker (the workers already fill the cores, and OpenBLAS's own
    threads, two per process on the CI box, only contend with the other worker and spin between calls), and
    freed memory kept (`_keep_freed_memory`)."""
    threadpool_limits(1, user_api="blas")
    _keep_freed_memory()


def _pool_context() -> multiprocessing.context.BaseContext:
    """Workers forked from a fork server that has imported this module and nothing else ran in.

    Not a plain fork of the caller: inside ``make test`` the tier runs after tests that used Polars, whose
    thread pool does not survive a fork (a forked worker's first parallel ``collect`` waits forever for pool
    threads that exist only in the parent; Polars documents that it is not fork-safe). The server starts once
    per process (a few seconds of imports) and forks each pool's workers from its clean state."""
    ctx = multiprocessing.get_context("forkserver")
    ctx.set_forkserver_preload([__name__])
    return ctx


def run_many(fn: Callable[[int], tuple[float, ...]], seeds: Sequence[int]) -> np.ndarray:
    """``np.array([fn(s) for s in seeds])`` (rows in seed order), over a pool of `workers` processes forked from a
    clean fork server (`_pool_context`; single-threaded BLAS in each; chunks of ~1/32 of a worker's share, so that
    the last ones end together)."""
    seeds = list(seeds)
    n_proc = workers()
    if n_proc == 1:
        return np.array([fn(s) for s in seeds], dtype=float)
    ctx = _pool_context()
    with ProcessPoolExecutor(n_proc, mp_context=ctx, initializer=_pool_worker_setup) as pool:
        return np.array(list(pool.map(fn, seeds, chunksize=max(1, len(seeds) // (32 * n_proc)))), dtype=float)


# --- the binomial rules of the tier -------------------------------------------------------------------------------


def coverage_threshold(n_rep: int, target: float, z: float = 1.0) -> int:
    """Fewest covering runs that pass: ⌈R·(target − z·sqrt(target(1 − target)/R))⌉ (one binomial s.e. of slack)."""
    return math.ceil(n_rep * (target - z * math.sqrt(target * (1 - target) / n_rep)) - 1e-9)


def size_threshold(n_rep: int, target: float, z: float = 1.0) -> int:
    """Most rejecting runs that pass: ⌊R·(target + z·sqrt(target(1 − target)/R))⌋."""
    return math.floor(n_rep * (target + z * math.sqrt(target * (1 - target) / n_rep)) + 1e-9)


def pass_probability_coverage(n_rep: int, threshold: int, coverage: float) -> float:
    """P(Binom(R, coverage) ≥ threshold)."""
    return float(binom.sf(threshold - 1, n_rep, coverage))


def pass_probability_size(n_rep: int, threshold: int, size: float) -> float:
    """P(Binom(R, size) ≤ threshold)."""
    return float(binom.cdf(threshold, n_rep, size))


# --- binary -------------------------------------------------------------------------------------------------------


@functools.cache
def binary_truth() -> float:
    return float(bin_sim._population_nc_ece())


def binary_miscalibrated(seed: int) -> tuple[float, float, float]:
    """n = 3,000, P(Y=1 | s) = min(s^0.8 + 0.03, 1), channels estimated: (ci_low, ci_high, rejected)."""
    res = calibration_test(*bin_sim._sim(3000, seed, True), n_boot=BINARY_N_BOOT, seed=seed)
    return res.ci_low, res.ci_high, float(res.rejected)


def binary_calibrated(seed: int) -> tuple[float]:
    """n = 3,000, calibrated, channels estimated: (p_value,)."""
    res = calibration_test(*bin_sim._sim(3000, seed, False), n_boot=BINARY_N_BOOT, seed=seed)
    return (res.p_value,)


# --- multi-class --------------------------------------------------------------------------------------------------


@functools.cache
def multiclass_truth(kind: str) -> float:
    return float(mc_sim._population(kind))


def _multiclass(seed: int, n: int, miscalibrated: bool, known: bool) -> tuple[float, ...]:
    p, a = mc_sim._sim(n, seed, miscalibrated)
    out: list[float] = []
    for kind in ("top_label", "classwise"):
        res = calibration_test_multiclass(p, a, mc_sim.T if known else None, kind=kind,
                                          n_boot=MULTICLASS_N_BOOT, seed=seed)
        out += [res.ci_low, res.ci_high, res.p_value]
    return tuple(out)


def multiclass_miscalibrated_known(seed: int) -> tuple[float, ...]:
    """n = 3,000, p ∝ p_true^1.5, the true confusion matrices held fixed: (lo, hi, p) top-label then classwise."""
    return _multiclass(seed, 3000, True, True)


def multiclass_miscalibrated_estimated(seed: int) -> tuple[float, ...]:
    """As `multiclass_miscalibrated_known`, confusion matrices by Dawid–Skene refitted in every replicate."""
    return _multiclass(seed, 3000, True, False)


def multiclass_calibrated_known(seed: int) -> tuple[float, ...]:
    """n = 1,500, calibrated, true confusion matrices fixed: (lo, hi, p) top-label then classwise."""
    return _multiclass(seed, 1500, False, True)


def multiclass_calibrated_estimated(seed: int) -> tuple[float, ...]:
    """n = 1,500, calibrated, confusion matrices estimated and refitted."""
    return _multiclass(seed, 1500, False, False)


# --- subgroups, assumption checks ---------------------------------------------------------------------------------


def subgroup_flags(seed: int) -> tuple[float, float]:
    """Two sites of 600 items (binary), the whole version's channels, Holm over the two: (good, bad) flagged."""
    flags = sub_sim._flags(seed, SUBGROUP_N_BOOT)
    return float(flags["good"]), float(flags["bad"])


def _checks(seed: int, violation: str | None) -> tuple[float, float]:
    a, s = diag_sim._sim(5000, seed, violation)
    res = assumption_checks(a, s, n_replicates=DIAG_N_REPLICATES, seed=seed)
    return res.independence_p_value, res.invariance_p_value


def checks_clean(seed: int) -> tuple[float, float]:
    """n = 5,000, calibrated, independent score-invariant annotators: (independence p, invariance p)."""
    return _checks(seed, None)


def checks_copy(seed: int) -> tuple[float, float]:
    """Annotator 1 copies annotator 0 on 30% of items (dependence)."""
    return _checks(seed, "copy")


def checks_score(seed: int) -> tuple[float, float]:
    """Annotator 1's FPR rises from 0.05 to 0.30 with the score."""
    return _checks(seed, "score")
