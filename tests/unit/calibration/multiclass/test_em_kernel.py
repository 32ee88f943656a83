"""The compiled multi-class Dawid–Skene EM (`_em_kernel`, behind `dawid_skene._em_runs`) against a straightforward
numpy EM written from the formulas of the module docstring: dense one-hot answers, log space with the largest term
scaled to 1, SQUAREM as in `_em_runs`' docstring, one run at a time. Random pattern tables of K = 1..5 annotators
and C = 2..9 classes with missing answers, random starts, one EM step, one SQUAREM cycle and full runs, known
matrices (π only), a class nobody answers, a single pattern, patterns without items, and terms small enough that
the kernel leaves the product form for log space."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.calibration.multiclass.dawid_skene import (
    EPS,
    _answers,
    _em_runs,
    _random_start,
    _soft_vote_start,
)


def _onehot(pats: np.ndarray, c: int) -> np.ndarray:
    """(P, K, C) one-hot answers; a missing answer (code C) is an all-zero row."""
    p, k = pats.shape
    o = np.zeros((p, k, c))
    for j in range(k):  # loop over annotators
        obs = pats[:, j] < c
        o[np.flatnonzero(obs), j, pats[obs, j]] = 1.0
    return o


def _simplex(x: np.ndarray) -> np.ndarray:
    x = np.maximum(x, EPS)
    return x / x.sum(axis=-1, keepdims=True)


def _ref_m_step(o: np.ndarray, w: np.ndarray, gamma: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    c = gamma.shape[1]
    wg = gamma * w[:, None]
    prior = wg.sum(axis=0) / w.sum()
    n = np.einsum("py,pja->jya", wg, o)
    tot = n.sum(axis=2, keepdims=True)
    t = np.where(tot > 0, n / np.where(tot > 0, tot, 1.0), 1.0 / c)
    return _simplex(prior), _simplex(t)


def _ref_step(o, w, prior, t, fixed_t):
    """F(π, T) and the log-likelihood at (π, T)."""
    log_l = np.log(prior)[None, :] + np.einsum("pja,jya->py", o, np.log(np.maximum(t, 1e-300)))
    m = log_l.max(axis=1, keepdims=True)
    e = np.exp(log_l - m)
    s = e.sum(axis=1, keepdims=True)
    ll = float(np.sum(w * (m[:, 0] + np.log(s[:, 0]))))
    new_prior, new_t = _ref_m_step(o, w, e / s)
    return new_prior, (t if fixed_t else new_t), ll


def _ref_run(o, w, prior, t, max_iter, tol, fixed_t=False, accelerate=True):
    """One EM run with SQUAREM (S3) unless not ``accelerate``, the stopping rule a plain step's max-abs change < tol."""
    c = len(prior)
    it, converged = 0, False
    while it < max_iter:
        p1, t1, _ = _ref_step(o, w, prior, t, fixed_t)
        it += 1
        if max(np.abs(p1 - prior).max(), np.abs(t1 - t).max()) < tol:
            prior, t, converged = p1, t1, True
            break
        if not accelerate or it + 2 > max_iter:
            prior, t = p1, t1
            continue
        p2, t2, ll1 = _ref_step(o, w, p1, t1, fixed_t)
        it += 1
        x0, x1, x2 = (np.concatenate([a, b.ravel()]) for a, b in ((prior, t), (p1, t1), (p2, t2)))
        r = x1 - x0
        v = x2 - x1 - r
        nv = np.linalg.norm(v)
        alpha = -1.0 if nv == 0 else min(-1.0, -np.linalg.norm(r) / nv)
        x = x0 - 2 * alpha * r + alpha**2 * v
        pa, ta = _simplex(x[:c]), _simplex(x[c:].reshape(t.shape))
        if fixed_t:
            ta = t
        p3, t3, ll_a = _ref_step(o, w, pa, ta, fixed_t)
        it += 1
        prior, t = (p3, t3) if np.isfinite(ll_a) and ll_a >= ll1 else (p2, t2)
    _, _, ll = _ref_step(o, w, prior, t, fixed_t)
    return prior, t, ll, it, converged


def _table(rng: np.random.Generator, k: int, c: int, missing: float, n: int = 5_000):
    """Distinct answer patterns (P, K) (codes 0..C, C = missing) and their counts, drawn through random
    diagonal-heavy confusion matrices; patterns nobody answered are dropped."""
    prior = rng.dirichlet(np.ones(c) * 2)
    t = rng.dirichlet(np.ones(c), size=(k, c)) + 3 * np.eye(c)
    t /= t.sum(axis=2, keepdims=True)
    y = rng.choice(c, size=n, p=prior)
    u = rng.random((n, k, 1))
    ans = np.minimum((u > np.cumsum(t[:, y, :].transpose(1, 0, 2), axis=2)).sum(axis=2), c - 1)
    ans[rng.random((n, k)) < missing] = c
    ans = ans[(ans < c).any(axis=1)]
    pats, counts = np.unique(ans, axis=0, return_counts=True)
    return pats, counts.astype(float)


def _starts(rng: np.random.Generator, r: int, k: int, c: int):
    ss = [_random_start(rng, k, c) for _ in range(r)]
    return np.stack([s[0] for s in ss]), np.stack([s[1] for s in ss])


# The reference computes in log space with numpy's einsum, pairwise sums and SIMD exp/log, the kernel multiplies
# probabilities in sequential loops: agreement is at rounding level on every CPU, but which last bits differ depends
# on numpy's SIMD dispatch (AVX2 vs AVX-512 kernels), and a sum over up to 5,000 patterns carries up to n·eps ≈ 6e-13
# on either side. So every step-level comparison uses the portable relative 1e-9 (it passed at 1e-12 on AMD AVX2).
RTOL = 1e-9


def _check(pats, counts, prior, t, max_iter, tol, fixed_t=False, accelerate=True, rtol=RTOL, atol=0.0):
    """Kernel runs (all at once, one counts row per run) against the reference run by run."""
    c = prior.shape[1]
    ptr, col = _answers(pats, c)
    counts = np.broadcast_to(counts, (len(prior), counts.shape[-1]))
    got = _em_runs(ptr, col, counts, prior, t, max_iter, tol, fixed_t, accelerate)
    o = _onehot(pats, c)
    for i in range(len(prior)):  # loop over runs
        want = _ref_run(o, counts[i], prior[i], t[i], max_iter, tol, fixed_t, accelerate)
        np.testing.assert_allclose(got[0][i], want[0], rtol=rtol, atol=atol)
        np.testing.assert_allclose(got[1][i], want[1], rtol=rtol, atol=atol)
        assert got[2][i] == pytest.approx(want[2], rel=max(rtol, RTOL))
        assert got[4][i] == want[4]
        if tol == 0 or max_iter <= 3:  # no stopping test can flip: the same number of steps for certain
            assert got[3][i] == want[3]
    return got


CASES = [(k, c) for k in range(1, 6) for c in (2, 3, 5, 7, 9)]


@pytest.mark.parametrize(("k", "c"), CASES, ids=[f"K{k}_C{c}" for k, c in CASES])
def test_one_step_and_one_squarem_cycle_equal_the_reference(k, c):
    rng = np.random.default_rng(100 * k + c)
    pats, counts = _table(rng, k, c, missing=0.3)
    prior, t = _starts(rng, 3, k, c)
    _check(pats, counts, prior, t, max_iter=1, tol=1e-11)
    _check(pats, counts, prior, t, max_iter=3, tol=1e-11)


@pytest.mark.parametrize(("k", "c"), CASES, ids=[f"K{k}_C{c}" for k, c in CASES])
def test_fixed_step_counts_equal_the_reference_to_1e9(k, c):
    rng = np.random.default_rng(1000 + 10 * k + c)
    pats, counts = _table(rng, k, c, missing=0.2)
    prior, t = _starts(rng, 3, k, c)
    # tol = 0: every run makes exactly max_iter steps. Plain EM carries a rounding-level difference along (seen on
    # these cases with 20,000 items: 5e-14 relative after 100 steps); SQUAREM extrapolations amplify it (seen:
    # 4e-12 after three cycles, 4e-7 after seven), so the accelerated runs are compared over three cycles. Entries
    # below 1e-6 are compared at an absolute 1e-15 (their relative error is that of the sums they are quotients of).
    _check(pats, counts, prior, t, max_iter=60, tol=0.0, accelerate=False, rtol=1e-9, atol=1e-15)
    _check(pats, counts, prior, t, max_iter=9, tol=0.0, rtol=1e-9, atol=1e-15)


@pytest.mark.parametrize(("k", "c"), [(1, 2), (2, 4), (3, 7), (3, 9), (4, 3), (5, 6)])
def test_full_runs_reach_the_reference_fixed_point(k, c):
    rng = np.random.default_rng(7 * k + c)
    pats, counts = _table(rng, k, c, missing=0.2, n=20_000)
    prior, t = _starts(rng, 4, k, c)
    # Both runs stop once a plain step moves (π, T) by < 1e-13; along a slowly contracting direction (rate ρ)
    # that leaves each up to 1e-13/(1 − ρ) from the fixed point, and a rounding-level difference in when a SQUAREM
    # step is accepted moves the stopping point: estimates within 1e-8, the (flat) log-likelihood within RTOL.
    got = _check(pats, counts, prior, t, max_iter=5000, tol=1e-13, atol=1e-8, rtol=0)
    assert got[4].all()


def test_batched_counts_with_empty_patterns_equal_the_reference():
    rng = np.random.default_rng(5)
    pats, counts = _table(rng, 3, 4, missing=0.25)
    r = 4
    w = rng.poisson(counts, size=(r, len(counts))).astype(float)
    w[:, rng.random(len(counts)) < 0.3] = 0.0  # patterns without items in every run
    w[0, 1::2] = 0.0
    prior, t = _starts(rng, r, 3, 4)
    c = 4
    ptr, col = _answers(pats, c)
    got = _em_runs(ptr, col, w, prior, t, 3, 1e-11)
    o = _onehot(pats, c)
    for i in range(r):  # loop over runs
        want = _ref_run(o, w[i], prior[i], t[i], 3, 1e-11)
        np.testing.assert_allclose(got[0][i], want[0], rtol=RTOL, atol=0)
        np.testing.assert_allclose(got[1][i], want[1], rtol=RTOL, atol=0)
        assert got[2][i] == pytest.approx(want[2], rel=RTOL)


def test_known_matrices_fit_only_the_prior():
    rng = np.random.default_rng(6)
    pats, counts = _table(rng, 2, 5, missing=0.3)
    prior, t = _starts(rng, 2, 2, 5)
    t[1, 0, 2, :] = 0.0  # a zero entry of a known matrix: floored at 1e-300 in the logs, kept as given
    t[1, 0, 2, 2] = 1.0
    got = _check(pats, counts, prior, t, max_iter=1, tol=1e-11, fixed_t=True)
    np.testing.assert_array_equal(got[1], t)
    _check(pats, counts, prior, t, max_iter=5000, tol=1e-13, fixed_t=True, atol=1e-8, rtol=0)


def test_a_class_nobody_answers_and_a_single_pattern():
    rng = np.random.default_rng(8)
    pats, counts = _table(rng, 3, 5, missing=0.2)
    keep = (pats != 4).all(axis=1)  # answer 4 never given: its column of every T_j goes to EPS
    pats, counts = pats[keep], counts[keep]
    prior, t = _starts(rng, 3, 3, 5)
    got = _check(pats, counts, prior, t, max_iter=3, tol=1e-11)
    assert np.all(got[1][..., 4] < 1e-9)
    _check(pats, counts, prior, t, max_iter=60, tol=0.0, accelerate=False, rtol=1e-9, atol=1e-15)
    _check(pats, counts, prior, t, max_iter=5000, tol=1e-13, atol=1e-8, rtol=0)
    one = np.array([[0, 2, 5]])  # one pattern, annotator 2 missing
    _check(one, np.array([17.0]), prior, t, max_iter=3, tol=1e-11)
    _check(one, np.array([17.0]), prior, t, max_iter=60, tol=0.0, accelerate=False, rtol=1e-9, atol=1e-15)
    _check(one, np.array([17.0]), prior, t, max_iter=5000, tol=1e-13, atol=1e-8, rtol=0)


def test_terms_below_the_product_range_go_to_log_space():
    # off-diagonal entries 1e-110 and 5 annotators: in pattern (0, 1, 2, 0, 1) every term π_y Π_j T_j[y, a_j] is
    # ≈ 1e-330 or less, so all products underflow to 0 (γ = 0/0); in log space the largest term is scaled to 1
    c, k = 3, 5
    t = np.full((k, c, c), 1e-110)
    t[:, np.arange(c), np.arange(c)] = 1.0
    t /= t.sum(axis=2, keepdims=True)
    pats = np.array([[0, 1, 2, 0, 1], [0, 0, 0, 0, 0], [1, 1, 1, 1, 1], [2, 2, 2, 2, 2], [0, 3, 3, 0, 3]])
    counts = np.array([4.0, 50.0, 30.0, 20.0, 3.0])
    prior = np.array([[0.5, 0.3, 0.2]])
    got = _check(pats, counts, prior, t[None], max_iter=1, tol=1e-11)
    assert np.isfinite(got[0]).all() and np.isfinite(got[1]).all() and np.isfinite(got[2]).all()
    _check(pats, counts, prior, t[None], max_iter=3, tol=1e-11)
    _check(pats, counts, prior, t[None], max_iter=1, tol=1e-11, fixed_t=True)


def test_soft_vote_start_is_one_m_step_of_the_vote_shares():
    rng = np.random.default_rng(9)
    for k, c in ((3, 2), (4, 7), (5, 9)):
        pats, counts = _table(rng, k, c, missing=0.3)
        ptr, col = _answers(pats, c)
        prior, t = _soft_vote_start(ptr, col, pats, counts, k, c)
        votes = _onehot(pats, c).sum(axis=1)
        want = _ref_m_step(_onehot(pats, c), counts, votes / np.maximum(votes.sum(axis=1, keepdims=True), 1.0))
        np.testing.assert_allclose(prior, want[0], rtol=RTOL, atol=0)
        np.testing.assert_allclose(t, want[1], rtol=RTOL, atol=0)
