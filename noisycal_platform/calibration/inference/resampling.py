"""Resampling for the calibration test (Hanada and Futami 2026 §C): items compressed once to (fine bin, score group,
answer
pattern) cells, bootstrap draws of the cells, and answers simulated under H0 from given channels.

See `noisycal_platform.calibration.inference` for the approximations (moment-matched score sums, binomial
positives per presence set).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from scipy import sparse

from ..channels import ChannelFit

__all__ = ["SUB", "simulate_answers"]

SUB = 4  # fine bins per evaluation bin (a power of two, so floor(s·4B)//4 == floor(s·B) exactly)


@dataclass(frozen=True, eq=False)
class _Cells:
    """Items compressed to (fine bin, group, pattern) cells; only annotated patterns are kept."""

    fine: np.ndarray  # (C,) fine bin of the cell
    group: np.ndarray  # (C,)
    pat: np.ndarray  # (C,) index into pats
    count: np.ndarray  # (C,) float
    ssum: np.ndarray
    ssq: np.ndarray
    pats: np.ndarray  # (P, K) codes
    n_groups: int


def _fine_bins(s: np.ndarray, n_fine: int) -> np.ndarray:
    """Fine bin min(floor(s·n_fine), n_fine − 1) of every score."""
    return np.minimum(np.floor(s * n_fine).astype(np.int64), n_fine - 1)


def _compress(s: np.ndarray, codes: np.ndarray, groups: np.ndarray, n_groups: int, n_fine: int) -> _Cells:
    n, k = codes.shape
    n_pat = 3**k
    fine = _fine_bins(s, n_fine)
    pat = np.zeros(n, np.int64)
    for j in range(k):  # loop over annotators
        pat += codes[:, j].astype(np.int64) * 3**j
    key = (fine * n_groups + groups) * n_pat + pat
    uniq, inv = np.unique(key, return_inverse=True)
    count = np.bincount(inv).astype(float)
    ssum = np.bincount(inv, weights=s)
    ssq = np.bincount(inv, weights=s * s)
    p_all = uniq % n_pat
    used, p_idx = np.unique(p_all, return_inverse=True)
    pats = np.stack([(used // 3**j) % 3 for j in range(k)], axis=1).astype(np.int8)
    keep = (pats[p_idx] != 2).any(axis=1)  # unannotated items are excluded from NC-ECE
    rest = uniq // n_pat
    return _Cells(
        rest[keep] // n_groups,
        rest[keep] % n_groups,
        p_idx[keep],
        count[keep],
        ssum[keep],
        ssq[keep],
        pats,
        n_groups,
    )


def _scatter(rows: np.ndarray, cols: np.ndarray, shape: tuple[int, int]) -> sparse.csr_matrix:
    return sparse.csr_matrix((np.ones(rows.size), (rows, cols)), shape=shape)


def simulate_answers(
    n_h: np.ndarray,
    p_pos: np.ndarray,
    masks: np.ndarray,
    fpr: np.ndarray,
    fnr: np.ndarray,
    k: int,
    n_rep: int,
    rng: np.random.Generator,
) -> tuple[np.ndarray, np.ndarray]:
    """Replicate answer counts for H item sets, each with ``n_h`` items, P(Y = 1) = ``p_pos`` and presence set
    ``masks`` (bit j = annotator j labelled): positives ~ Binomial(n, p), then the answers of positives and of
    negatives ~ Multinomial over the 2^K answer vectors (absent annotators fixed), from channels (fpr, fnr).

    Returns counts (R, H·2^K) in (set, answer vector) order and codes (H, 2^K, K): 0/1, 2 = not labelled.
    """
    answers = ((np.arange(1 << k)[:, None] >> np.arange(k)) & 1).astype(bool)  # (2^K, K)
    pres = ((np.asarray(masks)[:, None] >> np.arange(k)) & 1).astype(bool)  # (H, K)

    def probs(p_one: np.ndarray) -> np.ndarray:  # (H, 2^K): P(answers | Y) with absent annotators fixed at 0
        p = np.where(answers[None], p_one, 1.0 - p_one)
        return np.where(pres[:, None, :], p, ~answers[None]).prod(axis=2)

    n_int = np.round(n_h).astype(np.int64)
    pos = rng.binomial(n_int, np.clip(p_pos, 0.0, 1.0), size=(n_rep, n_int.size))
    draws = rng.multinomial(pos, probs(1.0 - fnr)) + rng.multinomial(n_int - pos, probs(fpr))  # (R, H, 2^K)
    codes = np.where(pres[:, None, :], answers[None].astype(np.int64), 2)
    return draws.reshape(n_rep, -1), codes


def _null_counts(cells: _Cells, fit: ChannelFit, n_rep: int, rng: np.random.Generator):
    """Replicate counts under H0 for every (fine bin, group, presence set): P(Y = 1) = the set's mean score."""
    k = cells.pats.shape[1]
    present = cells.pats[cells.pat] != 2  # (C, K)
    mask = present @ (1 << np.arange(k))  # presence set of each cell
    key = (cells.fine * cells.n_groups + cells.group) * (1 << k) + mask
    hk, hinv = np.unique(key, return_inverse=True)
    n_h = np.bincount(hinv, weights=cells.count)
    s_h = np.bincount(hinv, weights=cells.ssum) / n_h
    draws, codes = simulate_answers(n_h, s_h, hk % (1 << k), fit.fpr, fit.fnr, k, n_rep, rng)
    return draws, hk, codes


def _bootstrap_draws(cells: _Cells, n_boot: int, rng: np.random.Generator) -> tuple[np.ndarray, np.ndarray]:
    """Resample the items through their cells: counts (R, C) multinomial, score sums (R, C) moment-matched."""
    n_items = int(cells.count.sum())  # an exact integer held in float64
    counts = rng.multinomial(n_items, cells.count / cells.count.sum(), size=n_boot).astype(float)
    mean_c = cells.ssum / cells.count
    var_c = np.maximum(cells.ssq / cells.count - mean_c**2, 0.0)
    ssum = counts * mean_c + np.sqrt(counts * var_c) * rng.standard_normal(counts.shape)
    return counts, ssum
