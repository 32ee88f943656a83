"""The compiled binary-channel EM of the replicate refits (numba; imported on the first `batched_em` call).

One table r (a replicate's (G, P) pattern counts w_gp) iterates the E/M step of `channels._em` written per
annotator: with d1_j = log(1 − b_j) − log a_j and d0_j = log b_j − log(1 − a_j) (b = FNR, a = FPR),

    logit γ_gp = Σ_j ([c_pj = 1] d1_j + [c_pj = 0] d0_j) + log π_g − log(1 − π_g),   w1_gp = w_gp γ_gp,
    π_g = Σ_p w1_gp / Σ_p w_gp,   a_j = Σ_p w0_p [c_pj = 1] / Σ_p w0_p [c_pj ≠ 2],
    1 − b_j = Σ_p w1_p [c_pj = 1] / Σ_p w1_p [c_pj ≠ 2]   (w1_p = Σ_g w1_gp, w0_p = Σ_g (w_gp − w1_gp)),

each clipped to [ε, 1 − ε] (NaN kept, as ``np.clip``), until its largest parameter change is below ``tol`` (a NaN
change never is) or ``max_iter`` steps. Tables are independent: each stops on its own test, so its result is the
same whatever else is in the call. Hand-written because numpy pays ~15 calls of per-call overhead per EM step on
arrays of a few dozen entries, and the replicates converge after very different numbers of steps.

No ``fastmath`` (the NaN propagation and the order of the sums stay IEEE); ``error_model="numpy"`` (0/0 is NaN, as
numpy, not ZeroDivisionError); ``nogil``; cached on disk after the first compile.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["em_tables"]


@njit(nogil=True, cache=True, error_model="numpy")
def _clip(v, eps):  # pragma: no cover - compiled
    """np.clip(v, eps, 1 − eps) with NaN kept."""
    if v < eps:
        return eps
    if v > 1.0 - eps:
        return 1.0 - eps
    return v


@njit(nogil=True, cache=True, error_model="numpy")
def _expit(x):  # pragma: no cover - compiled
    """1 / (1 + e^−x) without overflow (NaN kept)."""
    if x >= 0.0:
        return 1.0 / (1.0 + np.exp(-x))
    e = np.exp(x)
    return e / (1.0 + e)


@njit(nogil=True, cache=True, error_model="numpy")
def em_tables(counts, obs1, obs0, prior, fpr, fnr, max_iter, tol, eps):  # pragma: no cover - compiled
    """EM on every table of ``counts`` (R, G, P) from its start; ``prior`` (R, G), ``fpr``/``fnr`` (R, K) are
    updated in place. obs1/obs0 (P, K): 1.0 where the pattern's answer is 1 / 0. Returns done (R,) bool and
    the steps taken (R,)."""
    n_rep, n_grp, n_pat = counts.shape
    k = obs1.shape[1]
    done = np.zeros(n_rep, np.bool_)
    steps = np.zeros(n_rep, np.int64)
    d1 = np.empty(k)
    d0 = np.empty(k)
    lp = np.empty(n_pat)
    w1p = np.empty(n_pat)
    w0p = np.empty(n_pat)
    n_g = np.empty(n_grp)
    new_prior = np.empty(n_grp)
    for r in range(n_rep):
        for g in range(n_grp):
            s = 0.0
            for p in range(n_pat):
                s += counts[r, g, p]
            n_g[g] = s
        for it in range(max_iter):
            for j in range(k):
                d1[j] = np.log1p(-fnr[r, j]) - np.log(fpr[r, j])
                d0[j] = np.log(fnr[r, j]) - np.log1p(-fpr[r, j])
            for p in range(n_pat):
                s = 0.0
                for j in range(k):
                    s += obs1[p, j] * d1[j] + obs0[p, j] * d0[j]
                lp[p] = s
                w1p[p] = 0.0
                w0p[p] = 0.0
            for g in range(n_grp):
                log_odds = np.log(prior[r, g]) - np.log1p(-prior[r, g])
                s1 = 0.0
                for p in range(n_pat):
                    c = counts[r, g, p]
                    w1 = c * _expit(lp[p] + log_odds)
                    s1 += w1
                    w1p[p] += w1
                    w0p[p] += c - w1
                new_prior[g] = _clip(s1 / n_g[g], eps)
            change = 0.0
            nan_seen = False
            for g in range(n_grp):
                d = abs(new_prior[g] - prior[r, g])
                nan_seen |= d != d
                change = max(change, d)
                prior[r, g] = new_prior[g]
            for j in range(k):
                f1 = 0.0
                f = 0.0
                t1 = 0.0
                t = 0.0
                for p in range(n_pat):
                    seen = obs1[p, j] + obs0[p, j]
                    f1 += w0p[p] * obs1[p, j]
                    f += w0p[p] * seen
                    t1 += w1p[p] * obs1[p, j]
                    t += w1p[p] * seen
                a = _clip(f1 / f, eps)
                b = _clip(1.0 - t1 / t, eps)
                da = abs(a - fpr[r, j])
                db = abs(b - fnr[r, j])
                nan_seen |= (da != da) | (db != db)
                change = max(change, max(da, db))
                fpr[r, j] = a
                fnr[r, j] = b
            steps[r] = it + 1
            if not nan_seen and change < tol:
                done[r] = True
                break
    return done, steps
