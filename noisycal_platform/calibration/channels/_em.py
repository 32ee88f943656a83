"""EM on answer-pattern counts for class-conditional binary channels (Hanada and Futami 2026 §4.3, §F.1–F.2).

One engine serves marginal Dawid–Skene (one group) and shared-channel score-group EM (G groups, a prior
π_g per group, channels shared). Items are compressed to (group, pattern) cells with counts w_p, so an
iteration costs O(P·K) with P ≤ G·3^K, whatever the number of items (Hanada and Futami 2026 §F.3).

E-step (log space, products over observed annotators only):
    log L1_p = Σ_j [c_pj=1] log(1−b_j) + [c_pj=0] log b_j + log π_g
    log L0_p = Σ_j [c_pj=1] log a_j + [c_pj=0] log(1−a_j) + log(1−π_g)
    γ_p = L1_p / (L0_p + L1_p)
M-step (counts-weighted):
    π_g = Σ_{p∈g} w_p γ_p / Σ_{p∈g} w_p
    a_j = Σ_p w_p(1−γ_p)[c_pj=1] / Σ_p w_p(1−γ_p)[c_pj≠2]
    1−b_j = Σ_p w_p γ_p [c_pj=1] / Σ_p w_p γ_p [c_pj≠2]
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ._base import Channel, NotIdentifiableError, exchange_labels

__all__ = ["EMRun", "fit_em_multistart", "fit_summary"]

EPS = 1e-10


@dataclass(frozen=True)
class EMRun:
    prior: np.ndarray  # (G,)
    fpr: np.ndarray  # (K,)
    fnr: np.ndarray  # (K,)
    log_likelihood: float
    n_iter: int
    converged: bool


def _e_step(
    obs1: np.ndarray, obs0: np.ndarray, grp: np.ndarray, prior: np.ndarray, fpr: np.ndarray, fnr: np.ndarray
) -> tuple[np.ndarray, np.ndarray]:
    """Posterior γ_p = P(Y=1 | pattern p, group) and per-cell log marginal likelihood."""
    l1 = obs1 @ np.log(1.0 - fnr) + obs0 @ np.log(fnr) + np.log(prior)[grp]
    l0 = obs1 @ np.log(fpr) + obs0 @ np.log(1.0 - fpr) + np.log(1.0 - prior)[grp]
    m = np.maximum(l0, l1)  # subtract the row maximum before exponentiating
    ll = m + np.log(np.exp(l0 - m) + np.exp(l1 - m))
    return np.exp(l1 - ll), ll


def _m_step(
    obs1: np.ndarray, obs: np.ndarray, grp: np.ndarray, counts: np.ndarray, gamma: np.ndarray, n_groups: int
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Closed-form maximisers of the expected complete-data log-likelihood (§F.1), clipped to [ε, 1−ε]."""
    w1 = counts * gamma
    w0 = counts - w1
    prior = np.bincount(grp, weights=w1, minlength=n_groups) / np.bincount(
        grp, weights=counts, minlength=n_groups
    )
    with np.errstate(invalid="ignore", divide="ignore"):
        fpr = (w0 @ obs1) / (w0 @ obs)
        fnr = 1.0 - (w1 @ obs1) / (w1 @ obs)
    # an annotator with no answers in a class gives 0/0 (NaN, never ±inf: the numerator's answers are a subset
    # of the denominator's) and gets 0.5; written with where/minimum/maximum, the same values as nan_to_num and
    # clip at a fraction of their per-call cost (this runs once per EM iteration)
    fpr = np.minimum(np.maximum(np.where(np.isnan(fpr), 0.5, fpr), EPS), 1 - EPS)
    fnr = np.minimum(np.maximum(np.where(np.isnan(fnr), 0.5, fnr), EPS), 1 - EPS)
    return np.minimum(np.maximum(prior, EPS), 1 - EPS), fpr, fnr


def run_em(
    pats: np.ndarray,
    grp: np.ndarray,
    counts: np.ndarray,
    n_groups: int,
    prior: np.ndarray,
    fpr: np.ndarray,
    fnr: np.ndarray,
    max_iter: int = 5000,
    tol: float = 1e-11,
) -> EMRun:
    """EM from the given start until the largest parameter change is below ``tol``."""
    obs1 = (pats == 1).astype(float)
    obs = (pats != 2).astype(float)
    obs0 = obs - obs1
    prior = np.clip(np.asarray(prior, float), EPS, 1 - EPS)
    fpr = np.clip(np.asarray(fpr, float), EPS, 1 - EPS)
    fnr = np.clip(np.asarray(fnr, float), EPS, 1 - EPS)
    converged = False
    it = 0
    for it in range(1, max_iter + 1):  # noqa: B007 - iterations, not samples
        gamma, _ = _e_step(obs1, obs0, grp, prior, fpr, fnr)
        new = _m_step(obs1, obs, grp, counts, gamma, n_groups)
        change = max(np.abs(new[0] - prior).max(), np.abs(new[1] - fpr).max(), np.abs(new[2] - fnr).max())
        prior, fpr, fnr = new
        if change < tol:
            converged = True
            break
    _, ll = _e_step(obs1, obs0, grp, prior, fpr, fnr)
    return EMRun(prior, fpr, fnr, float(counts @ ll), it, converged)


def run_em_batched(
    pats: np.ndarray,
    grp: np.ndarray,
    counts: np.ndarray,
    n_groups: int,
    prior: np.ndarray,
    fpr: np.ndarray,
    fnr: np.ndarray,
    max_iter: int = 5000,
    tol: float = 1e-11,
) -> list[EMRun]:
    """`run_em` from S starts at once: prior (S, G), fpr and fnr (S, K) → one `EMRun` per start, in order.

    Every start runs its own EM and stops on its own test (largest parameter change < ``tol``, ``max(...)``
    taken as `run_em` does), in one compiled loop (`_em_kernel.em_starts`: the same formulas in the same order,
    sums sequential in cell order, so the runs equal `run_em`'s to rounding; tests/unit/calibration/channels/
    test_em_batched.py compares them on random tables). What is saved is numpy's per-call overhead on these
    small arrays, up to 5,000 steps per start.
    """
    from ._em_kernel import em_starts  # numba: compiled (or loaded from its cache) on the first call

    obs1 = (pats == 1).astype(float)
    obs = (pats != 2).astype(float)
    obs0 = obs - obs1
    prior = np.clip(np.array(prior, float, ndmin=2), EPS, 1 - EPS)
    fpr = np.clip(np.array(fpr, float, ndmin=2), EPS, 1 - EPS)
    fnr = np.clip(np.array(fnr, float, ndmin=2), EPS, 1 - EPS)
    n_starts = prior.shape[0]
    if fpr.shape[0] != n_starts or fnr.shape[0] != n_starts:
        raise ValueError(f"starts disagree: prior {prior.shape}, fpr {fpr.shape}, fnr {fnr.shape}")
    grp = np.ascontiguousarray(grp, dtype=np.int64)
    counts = np.ascontiguousarray(counts, dtype=np.float64)
    n_cells, k = obs1.shape
    if prior.shape != (n_starts, n_groups) or fpr.shape != (n_starts, k) or fnr.shape != (n_starts, k):
        raise ValueError(f"starts must be prior (S, {n_groups}), fpr and fnr (S, {k}); got {prior.shape}, "
                         f"{fpr.shape}, {fnr.shape}")
    groups_ok = n_cells == 0 or 0 <= grp.min() <= grp.max() < n_groups
    if grp.shape != (n_cells,) or counts.shape != (n_cells,) or not groups_ok:
        raise ValueError(f"grp and counts must have one entry per pattern cell ({n_cells}), groups in [0, {n_groups})")
    n_per_group = np.bincount(grp, weights=counts, minlength=n_groups)
    out_prior, out_fpr, out_fnr = (np.ascontiguousarray(x) for x in (prior, fpr, fnr))
    n_iter, converged = em_starts(
        np.ascontiguousarray(obs1), np.ascontiguousarray(obs0), np.ascontiguousarray(obs), grp, counts,
        n_per_group, out_prior, out_fpr, out_fnr, int(max_iter), float(tol), EPS,
    )
    runs = []
    for s in range(n_starts):  # loop over starts (few): the final log-likelihood, as run_em computes it
        _, ll_s = _e_step(obs1, obs0, grp, out_prior[s], out_fpr[s], out_fnr[s])
        ll_total = float(counts @ ll_s)
        params = (out_prior[s].copy(), out_fpr[s].copy(), out_fnr[s].copy())
        runs.append(EMRun(*params, ll_total, int(n_iter[s]), bool(converged[s])))
    return runs


def _soft_vote_start(pats: np.ndarray, grp: np.ndarray, counts: np.ndarray, n_groups: int):
    obs = pats != 2
    n_obs = obs.sum(axis=1)
    gamma = np.where(n_obs > 0, (pats == 1).sum(axis=1) / np.maximum(n_obs, 1), 0.5)
    return _m_step((pats == 1).astype(float), obs.astype(float), grp, counts, gamma, n_groups)


def _screen_gaps(r: EMRun, orient: bool) -> np.ndarray:
    gaps = 1.0 - r.fpr - r.fnr
    return gaps if orient else np.abs(gaps)  # unoriented runs (tests) are screened on |δ_j|


def fit_em_multistart(
    pats: np.ndarray,
    grp: np.ndarray,
    counts: np.ndarray,
    n_groups: int,
    n_starts: int,
    seed: int,
    min_gap: float,
    init: tuple[np.ndarray, np.ndarray, np.ndarray] | None = None,
    orient: bool = True,
    max_iter: int = 5000,
    tol: float = 1e-11,
) -> tuple[EMRun, dict]:
    """Multi-start EM with orientation by global label exchange and gap screening (Hanada and Futami 2026 §F.2).

    Start 0 is ``init`` if given, else the soft-vote posterior followed by one M-step (crowd-kit's start).
    The other ``n_starts − 1`` starts draw a_j, b_j ~ U(0.02, 0.45) and π_g ~ U(0.1, 0.9) from
    ``np.random.default_rng(seed)``. After convergence a run with Σ_j δ_j < 0 is exchanged
    (π, a, b) → (1−π, 1−b, 1−a) (when ``orient``). Runs whose minimum gap is ≤ ``min_gap`` or that are
    not finite are screened out; the largest log-likelihood among the rest is returned.
    """
    k = pats.shape[1]
    rng = np.random.default_rng(seed)
    starts = [init if init is not None else _soft_vote_start(pats, grp, counts, n_groups)]
    for _ in range(max(n_starts, 1) - 1):
        starts.append(
            (rng.uniform(0.1, 0.9, n_groups), rng.uniform(0.02, 0.45, k), rng.uniform(0.02, 0.45, k))
        )
    runs: list[EMRun] = []
    stacked = (np.stack([np.asarray(x[i], float) for x in starts]) for i in range(3))
    for r in run_em_batched(pats, grp, counts, n_groups, *stacked, max_iter=max_iter, tol=tol):
        if orient and np.sum(1.0 - r.fpr - r.fnr) < 0:
            p, a, b = exchange_labels(r.prior, r.fpr, r.fnr)
            r = EMRun(p, a, b, r.log_likelihood, r.n_iter, r.converged)
        runs.append(r)
    ok = [
        r
        for r in runs
        if np.isfinite(r.log_likelihood)
        and np.all(np.isfinite(r.fpr))
        and np.min(_screen_gaps(r, orient)) > min_gap
    ]
    if not ok:
        best = max(runs, key=lambda r: r.log_likelihood if np.isfinite(r.log_likelihood) else -np.inf)
        gaps = _screen_gaps(best, orient)
        j = int(np.argmin(gaps))
        raise NotIdentifiableError(
            f"no EM start gave channels with every gap > min_gap={min_gap}: annotator column {j} has "
            f"estimated gap {gaps[j]:.4f} (gaps {np.round(gaps, 4).tolist()}). An annotator whose labels "
            "carry (almost) no information about Y cannot be inverted; drop it, supply its channel as known, "
            "or add informative annotators (three informative ones identify the channels, Hanada and Futami 2026 §D.5)"
        )
    best = max(ok, key=lambda r: r.log_likelihood)
    info = {
        "n_starts": len(runs),
        "starts_accepted": len(ok),
        "start_log_likelihoods": [float(r.log_likelihood) for r in runs],
    }
    return best, info


def fit_summary(run: EMRun, n_items: int) -> tuple[tuple[Channel, ...], dict]:
    """Channels of a run and the diagnostics every EM fit reports (log-likelihood, iterations, min gap, items)."""
    channels = tuple(Channel(float(f), float(b)) for f, b in zip(run.fpr, run.fnr, strict=True))
    diagnostics = {
        "log_likelihood": run.log_likelihood,
        "n_iter": run.n_iter,
        "min_gap": float((1.0 - run.fpr - run.fnr).min()),
        "n_items": n_items,
    }
    return channels, diagnostics
