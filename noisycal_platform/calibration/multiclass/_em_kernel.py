"""The compiled multi-class Dawid–Skene EM on pattern counts (numba; imported on the first EM call, not at import).

Parameters of a run are one flat vector θ = (π (C), T (K·C·C) row-major: θ[C + (j·C + y)·C + a] = T_j[y, a]),
the vector SQUAREM extrapolates. The answer patterns enter as the CSR structure of their one-hot matrix
O (P, K·C): pattern p's observed answers are the columns ``col[ptr[p]:ptr[p + 1]]``, column j·C + a for annotator j
answering a (missing answers have no column). One EM step (`_step`): per pattern the terms
L_py = π_y Π_{observed (j, a)} T_j[y, a], γ_py = L_py / Σ_y' L_py', w_p γ_py added to Σ_p w_p γ_py and to the
one-hot counts N_j[y, a] = Σ_p w_p γ_py O_p[j, a], then the M-step normalises (`_prior_from_sums`,
`_t_from_sums`). The work is
(Σ_p observed answers of p)·C multiply-adds per step and no per-call overhead.

Runs (starts, or replicates with their own counts) are independent; each is `_run` from its start with the
SQUAREM step of `dawid_skene._em_runs`' docstring. No ``fastmath`` (the NaN tests, the EPS floors and the order
of the sums must stay IEEE-exact), no ``parallel`` (``nogil=True``: a caller may run its own threads). Only
element loops, no slice assignments or array expressions: those expand to generic broadcasting code that made
the compile several times longer.

Compiled once on first use and cached on disk (``cache=True``); the callers pass int64 and float64 C-contiguous
arrays only, so there is one specialisation. First-call cost: see `dawid_skene`'s module docstring.
"""

from __future__ import annotations

import numpy as np
from numba import njit

__all__ = ["em_runs", "m_step"]

EPS = 1e-10  # = dawid_skene.EPS (probabilities clipped at EPS and renormalised)
T_FLOOR = 1e-300  # T floored at 1e-300: a zero entry of a known matrix gives log ≈ −690, not 0·(−inf) = NaN
PRODUCT_MIN = 1e-280  # terms L_py at least this are products; a pattern with a smaller one goes to log space


@njit(nogil=True, cache=True)
def _floor_eps(v):  # pragma: no cover - compiled
    """max(v, EPS) with NaN kept (as np.maximum)."""
    return EPS if v < EPS else v


@njit(nogil=True, cache=True)
def _copy(dst, src):  # pragma: no cover - compiled
    for i in range(src.size):
        dst[i] = src[i]


@njit(nogil=True, cache=True)
def _simplex_rows(x, c):  # pragma: no cover - compiled
    """Every row of length c of the flat x: entries floored at EPS, each row renormalised (in place)."""
    for o in range(0, x.size, c):
        s = 0.0
        for a in range(c):
            v = _floor_eps(x[o + a])
            x[o + a] = v
            s += v
        for a in range(c):
            x[o + a] /= s


@njit(nogil=True, cache=True)
def _prior_from_sums(sp, tot_w, prior):  # pragma: no cover - compiled
    """M-step for π: Σ_p w_p γ_py / Σ_p w_p, clipped at EPS and renormalised, into ``prior`` (C,)."""
    for y in range(sp.size):
        prior[y] = sp[y] / tot_w
    _simplex_rows(prior, sp.size)


@njit(nogil=True, cache=True)
def _t_from_sums(nn, c, t):  # pragma: no cover - compiled
    """M-step for T: N_j[y, a] / Σ_a' N_j[y, a'] (a row with no weight becomes uniform), clipped at EPS and
    renormalised, into the flat ``t`` [(j·C + y)·C + a]; ``nn`` is flat [(j·C + a)·C + y]."""
    for j in range(nn.size // (c * c)):
        for y in range(c):
            tot = 0.0
            for a in range(c):
                tot += nn[(j * c + a) * c + y]
            o = (j * c + y) * c
            for a in range(c):
                t[o + a] = nn[(j * c + a) * c + y] / tot if tot > 0 else 1.0 / c  # NaN tot: uniform (as np.where)
    _simplex_rows(t, c)


@njit(nogil=True, cache=True)
def m_step(ptr, col, counts, gamma, out):  # pragma: no cover - compiled
    """The M-step alone into θ ``out``, from posteriors ``gamma`` (P, C) and item counts (P,) (the soft-vote start)."""
    n_pat, c = gamma.shape
    sp = np.zeros(c)
    nn = np.zeros(out.size - c)
    tot_w = 0.0
    for p in range(n_pat):
        w = counts[p]
        tot_w += w
        for y in range(c):
            g = gamma[p, y] * w
            sp[y] += g
            for i in range(ptr[p], ptr[p + 1]):
                nn[col[i] * c + y] += g
    _prior_from_sums(sp, tot_w, out[:c])
    _t_from_sums(nn, c, out[c:])


@njit(nogil=True, cache=True)
def _log_terms(ptr, col, p, c, th, e):  # pragma: no cover - compiled
    """Pattern p's terms in log space: e_y = exp(log L_py − m), m = max_y log L_py (the largest term scaled to 1);
    returns (Σ_y e_y, m). T is floored at T_FLOOR as in the products."""
    for y in range(c):
        e[y] = np.log(th[y])
    for i in range(ptr[p], ptr[p + 1]):
        q = col[i]
        j, a = q // c, q % c
        for y in range(c):
            v = th[c + (j * c + y) * c + a]
            e[y] += np.log(T_FLOOR if v < T_FLOOR else v)
    m = e[0]
    for y in range(1, c):
        if e[y] > m or e[y] != e[y]:  # NaN wins (as ndarray.max)
            m = e[y]
    s = 0.0
    for y in range(c):
        e[y] = np.exp(e[y] - m)
        s += e[y]
    return s, m


@njit(nogil=True, cache=True)
def _step(ptr, col, w, tot_w, c, th, out, fixed_t, tq, e, sp, nn):  # pragma: no cover - compiled
    """One EM step F(θ) into ``out`` (T copied when ``fixed_t``); returns the log-likelihood at θ. ``tq`` and ``nn``
    (K·C·C, flat [(j·C + a)·C + y]), ``e`` and ``sp`` (C,) are work arrays.

    The terms L_py = π_y Π_j T_j[y, a_pj] are products (no exp per term) when every one of them is at least
    PRODUCT_MIN (all factors are ≤ 1, so no partial product underflowed and each has full precision); otherwise the
    pattern is redone in log space with the largest term scaled to 1 (`_log_terms`), which keeps a term that the
    product would underflow. Both give γ_py = L_py / Σ_y' L_py' and log Σ_y L_py."""
    kc = tq.size // c
    for y in range(c):
        sp[y] = 0.0
    for q in range(kc):  # q = j·C + a
        j, a = q // c, q % c
        for y in range(c):
            v = th[c + (j * c + y) * c + a]
            tq[q * c + y] = T_FLOOR if v < T_FLOOR else v
            nn[q * c + y] = 0.0
    ll = 0.0
    for p in range(w.size):
        for y in range(c):
            e[y] = th[y]
        for i in range(ptr[p], ptr[p + 1]):
            o = col[i] * c
            for y in range(c):
                e[y] *= tq[o + y]
        s = 0.0
        small = False
        for y in range(c):
            s += e[y]
            small |= not (e[y] >= PRODUCT_MIN)  # NaN too
        if small:
            s, m = _log_terms(ptr, col, p, c, th, e)
            lse = m + np.log(s)
        else:
            lse = np.log(s)
        wp = w[p]
        ll += wp * lse
        ws = wp / s
        for y in range(c):
            e[y] *= ws  # w_p γ_py
            sp[y] += e[y]
        if not fixed_t:
            for i in range(ptr[p], ptr[p + 1]):
                o = col[i] * c
                for y in range(c):
                    nn[o + y] += e[y]
    _prior_from_sums(sp, tot_w, out[:c])
    if fixed_t:
        for i in range(c, th.size):
            out[i] = th[i]
    else:
        _t_from_sums(nn, c, out[c:])
    return ll


@njit(nogil=True, cache=True)
def _run(ptr, col, w, c, th, max_iter, tol, fixed_t, accelerate):  # pragma: no cover - compiled
    """One EM run from θ, updated in place; returns (log-likelihood, EM steps, converged)."""
    dim = th.size
    tot_w = 0.0
    for p in range(w.size):
        tot_w += w[p]
    tq, nn = np.empty(dim - c), np.empty(dim - c)
    e, sp = np.empty(c), np.empty(c)
    th1, th2, th3, tha = np.empty(dim), np.empty(dim), np.empty(dim), np.empty(dim)
    it = 0
    converged = False
    while it < max_iter:
        _step(ptr, col, w, tot_w, c, th, th1, fixed_t, tq, e, sp, nn)
        it += 1
        change = 0.0
        nan = False
        for i in range(dim):
            d = abs(th1[i] - th[i])
            nan |= d != d
            change = max(change, d)
        if not nan and change < tol:  # a NaN change never stops (as numpy's comparison)
            _copy(th, th1)
            converged = True
            break
        if not accelerate or it + 2 > max_iter:
            _copy(th, th1)
            continue
        ll1 = _step(ptr, col, w, tot_w, c, th1, th2, fixed_t, tq, e, sp, nn)
        it += 1
        nr = 0.0
        nv = 0.0
        for i in range(dim):
            r = th1[i] - th[i]
            v = th2[i] - th1[i] - r
            nr += r * r
            nv += v * v
        nr, nv = np.sqrt(nr), np.sqrt(nv)
        if nv == 0:
            alpha = -1.0
        else:
            alpha = -nr / nv
            if not (alpha < -1.0) and alpha == alpha:  # min(−1, −‖r‖/‖v‖), NaN kept (as np.minimum)
                alpha = -1.0
        for i in range(dim):
            r = th1[i] - th[i]
            v = th2[i] - th1[i] - r
            tha[i] = th[i] - 2 * alpha * r + alpha * alpha * v  # θ0 − 2αr + α²v
        _simplex_rows(tha, c)  # back onto the simplices: π and every row of T
        if fixed_t:
            for i in range(c, dim):
                tha[i] = th[i]
        ll_a = _step(ptr, col, w, tot_w, c, tha, th3, fixed_t, tq, e, sp, nn)
        it += 1
        if np.isfinite(ll_a) and ll_a >= ll1:  # else the extrapolation lost likelihood: keep F(F(θ0))
            _copy(th, th3)
        else:
            _copy(th, th2)
    ll = _step(ptr, col, w, tot_w, c, th, th1, fixed_t, tq, e, sp, nn)
    return ll, it, converged


@njit(nogil=True, cache=True)
def em_runs(ptr, col, counts, c, theta, max_iter, tol, fixed_t, accelerate, ll, n_iter, converged):  # pragma: no cover
    """R independent runs: counts (R, P), θ (R, C + K·C·C) (updated in place); fills ll (R,), n_iter (R,) and
    converged (R,)."""
    for r in range(counts.shape[0]):  # loop over runs
        out = _run(ptr, col, counts[r], c, theta[r], max_iter, tol, fixed_t, accelerate)
        ll[r] = out[0]
        n_iter[r] = out[1]
        converged[r] = out[2]
