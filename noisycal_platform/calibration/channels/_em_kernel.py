"""The compiled multi-start EM of the binary-channel point fits (numba; imported on the first `run_em_batched`).

Each start iterates `_em`'s E-step and M-step on the (group, pattern) cells, written per cell:

    l1_p = Σ_j [c_pj = 1] log(1 − b_j) + Σ_j [c_pj = 0] log b_j + log π_g(p),
    l0_p = Σ_j [c_pj = 1] log a_j + Σ_j [c_pj = 0] log(1 − a_j) + log(1 − π_g(p)),
    m = max(l0, l1), ll_p = m + log(e^(l0 − m) + e^(l1 − m)), γ_p = e^(l1 − ll),

then π_g = Σ_{p∈g} w_p γ_p / Σ_{p∈g} w_p, a_j = Σ_p w_p(1 − γ_p)[c_pj = 1] / Σ_p w_p(1 − γ_p)[c_pj ≠ 2] and
1 − b_j = Σ_p w_p γ_p [c_pj = 1] / Σ_p w_p γ_p [c_pj ≠ 2] (0/0 → 0.5), clipped to [ε, 1 − ε] (NaN kept), until
``max(Δπ, Δa, Δb) < tol`` with `run_em`'s ``max`` (each Δ the largest change of its block, NaN propagating
inside a block; a later block replaces the running value only if greater). The same formulas in the same order
as the numpy `run_em`; sums run sequentially in cell order. Hand-written because numpy spends its time on
per-call overhead for arrays of a few dozen cells, for up to 5,000 steps per start.

No ``fastmath``; ``error_model="numpy"`` (0/0 is NaN); ``nogil``; cached on disk after the first compile.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["em_starts"]


@njit(nogil=True, cache=True, error_model="numpy")
def _clip(v, eps):  # pragma: no cover - compiled
    """np.minimum(np.maximum(v, eps), 1 − eps) with NaN kept."""
    if v < eps:
        return eps
    if v > 1.0 - eps:
        return 1.0 - eps
    return v


@njit(nogil=True, cache=True, error_model="numpy")
def _block_change(new, old):  # pragma: no cover - compiled
    """np.abs(new − old).max() (NaN if any difference is NaN)."""
    c = 0.0
    for i in range(new.size):
        d = abs(new[i] - old[i])
        if d != d:
            return np.nan
        if d > c:
            c = d
    return c


@njit(nogil=True, cache=True, error_model="numpy")
def em_starts(obs1, obs0, obs, grp, counts, n_per_group, prior, fpr, fnr, max_iter, tol, eps):  # pragma: no cover
    """EM from every start (rows of ``prior`` (S, G), ``fpr``/``fnr`` (S, K), updated in place) on the cells:
    obs1/obs0/obs (P, K) 1.0 where the answer is 1 / 0 / given, grp (P,) group, counts (P,), n_per_group (G,).
    Returns the steps taken (S,) (``max_iter`` when not converged) and converged (S,)."""
    n_starts, n_groups = prior.shape
    n_cells, k = obs1.shape
    n_iter = np.full(n_starts, max_iter, np.int64)
    converged = np.zeros(n_starts, np.bool_)
    log_tp, log_fn, log_fp, log_tn = np.empty(k), np.empty(k), np.empty(k), np.empty(k)
    log_pi, log_1mpi = np.empty(n_groups), np.empty(n_groups)
    w1_group = np.empty(n_groups)
    new_prior, new_fpr, new_fnr = np.empty(n_groups), np.empty(k), np.empty(k)
    num0, den0, num1, den1 = np.empty(k), np.empty(k), np.empty(k), np.empty(k)
    for s in range(n_starts):
        for it in range(1, max_iter + 1):
            for j in range(k):
                log_tp[j] = np.log(1.0 - fnr[s, j])
                log_fn[j] = np.log(fnr[s, j])
                log_fp[j] = np.log(fpr[s, j])
                log_tn[j] = np.log(1.0 - fpr[s, j])
                num0[j] = 0.0
                den0[j] = 0.0
                num1[j] = 0.0
                den1[j] = 0.0
            for g in range(n_groups):
                log_pi[g] = np.log(prior[s, g])
                log_1mpi[g] = np.log(1.0 - prior[s, g])
                w1_group[g] = 0.0
            for p in range(n_cells):
                a1 = 0.0
                a0 = 0.0
                b1 = 0.0
                b0 = 0.0
                for j in range(k):
                    a1 += obs1[p, j] * log_tp[j]
                    a0 += obs0[p, j] * log_fn[j]
                    b1 += obs1[p, j] * log_fp[j]
                    b0 += obs0[p, j] * log_tn[j]
                l1 = a1 + a0 + log_pi[grp[p]]
                l0 = b1 + b0 + log_1mpi[grp[p]]
                m = l0 if l0 > l1 else l1
                if l0 != l0 or l1 != l1:
                    m = np.nan
                ll = m + np.log(np.exp(l0 - m) + np.exp(l1 - m))
                w1 = counts[p] * np.exp(l1 - ll)
                w0 = counts[p] - w1
                w1_group[grp[p]] += w1
                for j in range(k):
                    num0[j] += w0 * obs1[p, j]
                    den0[j] += w0 * obs[p, j]
                    num1[j] += w1 * obs1[p, j]
                    den1[j] += w1 * obs[p, j]
            for g in range(n_groups):
                new_prior[g] = _clip(w1_group[g] / n_per_group[g], eps)
            for j in range(k):
                a = num0[j] / den0[j]
                b = 1.0 - num1[j] / den1[j]
                new_fpr[j] = _clip(0.5 if a != a else a, eps)
                new_fnr[j] = _clip(0.5 if b != b else b, eps)
            change = _block_change(new_prior, prior[s])
            c_fpr = _block_change(new_fpr, fpr[s])
            c_fnr = _block_change(new_fnr, fnr[s])
            if c_fpr > change:
                change = c_fpr
            if c_fnr > change:
                change = c_fnr
            for g in range(n_groups):
                prior[s, g] = new_prior[g]
            for j in range(k):
                fpr[s, j] = new_fpr[j]
                fnr[s, j] = new_fnr[j]
            if change < tol:
                n_iter[s] = it
                converged[s] = True
                break
    return n_iter, converged
