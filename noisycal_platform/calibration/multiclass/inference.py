"""Calibration test for C classes: plug-in and debiased top-label / classwise NC-ECE, a bootstrap interval that
carries the confusion-matrix estimation error, and a test of H0 P(Y = c | p) = p_c (Hanada and Futami 2026 §3, §C.2–C.3,
extended from 2 to C classes with the corrected one-hot labels of Patrini et al. 2017).

Statistic. Row g has bins k of a score s_ig with target class t_ig: top-label one row, s = max_c p_c, t the
predicted class; classwise one row per class c, s = p_c, t = c. Per-bin moments m_gk = Σ_{i∈k}(Ỹ_{i,t} − s_ig)/N_g
and NC-ECE = (1/G) Σ_g Σ_k |m_gk| (G = 1 top-label, C classwise): the value of `nc_ece_multiclass`.

Compression. Ỹ_i depends only on the answer pattern of item i (at most (C+1)^K), so a replicate is a table of
counts over cells (target class, bin, pattern) per row plus score sums over (target class, bin, presence set);
the refit and the statistic read only these tables, never the items. With the channels held fixed or refitted,
a replicate costs O(C·B·(C+1)^K) after its counts are drawn. The tables hold only the cells a replicate can reach
(each item's rows with every pattern of its presence set; `_Layout`), and the pattern counts are drawn with them.

- bootstrap (items resampled with replacement): items with the same cells and the same fine sub-bins (width
  1/(4B)) share a bootstrap cell; cell counts are Multinomial(N, n_cell/N) and a cell's score sum is
  M·s̄ + sqrt(M·v)·Z (v its within-cell score variance, Z standard normal), the first two moments of the exact
  resample (the binary test's device; exact for cells of one item, the usual case for classwise);
- null (H0): Y_i ~ Categorical(p_i), then the answers of the annotators who labelled item i jointly from
  Π_j T_j[Y_i, a_j] (point-estimate channels, presence kept, scores fixed), one inverse-CDF draw per item from
  a sorted table (one compiled pass, `_draw_kernel`): exact, with no mean-score approximation per bin.
  (Multinomial counts over the C^K answer vectors per cell cost more: numpy's sampler visits every category,
  measured about 14 µs per 343-category draw.)

Channel refits: multi-class Dawid–Skene EM on each replicate's pattern counts (`batched_confusion_em`, Hanada and Futami
2026
§F.1.1 with C classes), one compiled EM run per replicate, warm-started at the point estimate. A replicate whose refit
is not finite, has a confusion matrix with smallest singular value ≤ ``min_gap`` or a class with prevalence
≤ 1e-6 is *unidentified*: counted, reported and left out of the quantiles.

Targets. By default classwise uses the minimum-variance unbiased pattern targets ("mvu", `corrected` module doc:
per class-bin cell, the unbiased function of the whole answer pattern of least variance under that cell's mean
predicted probabilities) and top-label the inverse-variance average of the annotators' corrected labels ("iv").
In the replicates the cells' probability vectors q stay those of the data (they set efficiency, not bias) and
the targets are recomputed from each refit. Chosen on tuning seeds (benchmarks/intervals.md, 2026-12-06 evening):
classwise, estimated channels, the debiased normal interval with "mvu" covered 0.943 at 1.098× the "iv" basic
interval's width, against 0.930 at 1.159× with "iv" (the limit is 1.15×); D's s.d. falls 4–9% (estimated /
known channels). Unlike "iv" it needs the annotators independent given the class (the Dawid–Skene model the
refits already assume); with known channels and dependent annotators "iv" stays unbiased and "mvu" need not.

The debiasing and interval (`debiased_normal_interval`: the debiased value ± z·its bootstrap s.d.) and the p-value
(`bootstrap_p_value`) are those of the binary `calibration_test`, applied to the G·B moments m_gk / G. Coverage of
the 95% interval (simulation on tuning seeds, 5 classes, n = 3,000, p ∝ p_true^1.5, 400 runs, n_boot = 100,
benchmarks/intervals.md): top-label 0.963 with known channels and 0.960 with refits, classwise 0.960 and 0.943
with "iv" targets; classwise with "mvu" (the default since 2026-12-06) 0.948 and 0.943 on other tuning seeds.
The basic bootstrap interval it replaced covered 0.93 / 0.92 and 0.89 / 0.88: with C·B = 75 moments, many near
zero, its bootstrap bias correction is not the plug-in's real bias.
The test's size is 5.0% at α = 0.05 (top-label, calibrated predictor, n = 1,500, refits).

Relation to the binary test (C = 2, classwise, weights "iv"): class 0's bins are the mirror of class 1's (bin(1 − s) =
B − 1 − bin(s) except at s·B integer) and Ỹ_0 = 1 − Ỹ_1 (rows of T^{-1} sum to 1), so m_0,B−1−k = −m_1,k and the
plug-in `nc_ece` and the class-1 moments equal the binary `calibration_test` with the same channels and weights
(to rounding). The replicates differ (other sampler, multi-class refit), so the interval, p-value and debiased
value agree only in distribution. Top-label with C = 2 bins max(s, 1 − s) and is a different statistic.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import polars as pl
from scipy import sparse

from ..inference import CalibrationTest, bootstrap_p_value, debiased_normal_interval
from ..inference.bins import nanquantile_columns
from ..nc_ece import _check_n_bins
from ._patterns import as_class_annotations, class_codes, pattern_digits
from .corrected import (
    MVU,
    PREVALENCE_CLIP,
    as_confusion,
    class_weights,
    iv_weights,
    mvu_pattern_targets,
    pattern_targets,
)
from .dawid_skene import MIN_PREVALENCE, ConfusionFit, batched_confusion_em, estimate_confusion
from .nc_ece import NC_ECE_KINDS, check_probs, nc_ece_multiclass, score_cell_probs

__all__ = ["MAX_CELLS_PER_REPLICATE", "calibration_test_multiclass"]

MAX_CELLS_PER_REPLICATE = 1 << 21  # C·B·(C+1)^K cells; more (many annotators and classes) is refused
_DRAW_ELEMENTS = 1 << 22  # items × rows drawn at once
_EVAL_ELEMENTS = 1 << 23  # replicates × cells evaluated at once


class _Layout:
    """Items → cells. ``slot`` (n, G): cell (t·B + k)·P of each item's row g before adding its pattern key;
    ``sslot`` (n, G): score cell (t·B + k)·M + presence set; ``score`` (n, G): s_ig. ``cols`` (J,): the cells a
    replicate can reach, increasing (every pattern of item i's presence set in each row of the item: null draws;
    bootstrap draws reach only the observed cells, among them), ``colmap`` (n_cells,) the column of each (−1:
    unreachable); ``col_seg``, ``col_pat``, ``col_t`` (J,): each column's t·B + k, pattern and target class."""

    def __init__(self, p: np.ndarray, codes: np.ndarray, kind: str, n_bins: int):
        n, k = codes.shape
        c = p.shape[1]
        self.n, self.k, self.c, self.n_bins, self.kind = n, k, c, n_bins, kind
        self.n_rows = 1 if kind == "top_label" else c
        self.n_pat = (c + 1) ** k
        self.n_masks = 1 << k
        self.pats = pattern_digits(np.arange(self.n_pat), k, c)  # (P, K), code C = missing
        self.present = self.pats < c
        self.pat_mask = self.present @ (1 << np.arange(k))
        self.mask_bits = ((np.arange(self.n_masks)[:, None] >> np.arange(k)) & 1).astype(float)  # (M, K)
        present_i = codes < c
        self.item_present = present_i
        self.item_mask = present_i @ (1 << np.arange(k))
        self.powers = (c + 1) ** np.arange(k)
        self.key = (codes.astype(np.int64) * self.powers).sum(axis=1)
        if kind == "top_label":
            t = p.argmax(axis=1)[:, None]
            s = np.take_along_axis(p, t, axis=1)
        else:
            t = np.broadcast_to(np.arange(c), (n, c))
            s = p
        b = np.minimum(np.floor(s * n_bins).astype(np.int64), n_bins - 1)
        self.score = np.asarray(s, np.float64)
        self.slot = (t * n_bins + b) * self.n_pat
        self.sslot = (t * n_bins + b) * self.n_masks + self.item_mask[:, None]
        self.n_cells = c * n_bins * self.n_pat
        self.n_scells = c * n_bins * self.n_masks
        pairs = np.unique(self.slot * self.n_masks + self.item_mask[:, None])  # (slot, presence set) occupied
        reach = [
            (pairs[pairs % self.n_masks == m] // self.n_masks)[:, None] + np.flatnonzero(self.pat_mask == m)
            for m in np.unique(pairs % self.n_masks)  # loop over presence sets (2^K)
        ]
        self.cols = np.unique(np.concatenate([x.ravel() for x in reach]))
        self.colmap = np.full(self.n_cells, -1, np.int64)
        self.colmap[self.cols] = np.arange(self.cols.size)
        self.col_seg = self.cols // self.n_pat
        self.col_pat = self.cols % self.n_pat
        self.col_t = self.col_seg // n_bins


class _Evaluator:
    """Cell tables of R replicates → NC-ECE (R,), scaled moments (R, G·B), mean corrected label (R, G, B), ok."""

    def __init__(
        self,
        lay: _Layout,
        weights: Any,
        t0: np.ndarray,
        prior0: np.ndarray,
        w_point: np.ndarray,
        refit: bool,
        min_gap: float,
        p: np.ndarray,
    ):
        self.lay, self.weights, self.refit, self.min_gap = lay, weights, refit, min_gap
        self.t0, self.prior0, self.w_point = t0, prior0, w_point
        lay_c = lay.c
        self.labels = np.where(lay.present, lay.pats, 0)
        self.annotated = lay.present.any(axis=1)
        self.mvu = isinstance(weights, str) and weights == MVU
        if self.mvu:  # q from the point data's scores, held fixed in the replicates (it sets efficiency, not bias)
            self.q = score_cell_probs(p, lay.kind, lay.n_bins)
            self.target = np.repeat(np.arange(lay_c), lay.n_bins)
            if not refit:  # fixed channels: one table of targets for every replicate
                self.f0 = mvu_pattern_targets(t0, self.q, self.target, self.labels, lay.present)[0]
        if not refit:  # fixed channels: the plug-in prevalence needs the equally weighted targets
            self.tinv0 = np.linalg.inv(t0)
            self.eq = pattern_targets(self.tinv0, np.ones((lay.k, lay_c)), self.labels, lay.present)[0]

    def channels(self, counts_p: np.ndarray):
        """(t, tinv (R, K, C, C), weights (R, K, C), ok (R,)) from the replicate pattern counts (R, P)."""
        lay = self.lay
        r = counts_p.shape[0]
        if self.refit:
            prior, t, _ = batched_confusion_em(counts_p, lay.pats, self.prior0, self.t0)
            with np.errstate(invalid="ignore"):
                finite = np.isfinite(t).all(axis=(1, 2, 3)) & np.isfinite(prior).all(axis=1)
                t_safe = np.where(finite[:, None, None, None], t, self.t0)
                sv = np.linalg.svd(t_safe, compute_uv=False)[..., -1].min(axis=1)
            ok = finite & (sv > self.min_gap) & (prior.min(axis=1) > MIN_PREVALENCE)
            t = np.where(ok[:, None, None, None], t_safe, self.t0)  # unidentified: any invertible value, masked
            tinv = np.linalg.inv(t)
            prev = prior
        else:
            t = np.broadcast_to(self.t0, (r, *self.t0.shape))
            tinv = np.broadcast_to(self.tinv0, t.shape)
            ok = np.ones(r, bool)
            n_ann = counts_p[:, self.annotated].sum(axis=1)
            with np.errstate(invalid="ignore", divide="ignore"):
                prev = np.clip((counts_p @ self.eq) / n_ann[:, None], PREVALENCE_CLIP, 1 - PREVALENCE_CLIP)
        if isinstance(self.weights, str) and self.weights == "iv":
            w = iv_weights(t, prev)
        else:
            w = np.broadcast_to(self.w_point, (r, *self.w_point.shape))
        return t, tinv, w, ok

    def __call__(self, cells: np.ndarray, scores: np.ndarray, counts_p: np.ndarray):
        """cells (R, J) counts on the layout's reachable columns ``cols``, counts_p (R, P) their pattern counts
        (each item once); scores (R, C·B·M) or (C·B·M,) (fixed) score sums."""
        from ._draw_kernel import column_sums  # numba: compiled (or loaded from its cache) on the first call

        lay = self.lay
        r = cells.shape[0]
        c, b, p, m, g = lay.c, lay.n_bins, lay.n_pat, lay.n_masks, lay.n_rows
        counts_p = np.array(counts_p, np.float64)
        counts_p[:, ~self.annotated] = 0.0
        t, tinv, w, ok = self.channels(counts_p)
        if self.mvu:
            f = self.f0 if not self.refit else mvu_pattern_targets(t, self.q, self.target, self.labels, lay.present)[0]
            tgt, tgt_idx = f.reshape(-1, c * b * p), lay.cols  # f (C·B, P) or (R, C·B, P), at the column's cell
            inc, inc_idx = self.annotated.astype(float)[None], lay.col_pat
            inc_mask = np.broadcast_to((np.arange(m) > 0)[None, :, None], (r, m, c))
        else:
            y, inc_b = pattern_targets(tinv, w, self.labels, lay.present)  # (R, P, C), at the column's (pattern, t)
            tgt, inc = y.reshape(r, p * c), inc_b.astype(float).reshape(r, p * c)
            tgt_idx = inc_idx = lay.col_pat * c + lay.col_t
            inc_mask = (np.einsum("mj,rjt->rmt", lay.mask_bits, w) > 0) & (np.arange(m) > 0)[None, :, None]
        sum_y = np.zeros((r, c * b))
        n_inc = np.zeros((r, c * b))
        col_major = bool(cells.flags.f_contiguous and not cells.flags.c_contiguous)
        column_sums(cells, lay.col_seg, np.ascontiguousarray(tgt, np.float64), tgt_idx,
                    np.ascontiguousarray(inc, np.float64), inc_idx, col_major, sum_y, n_inc)
        sum_y, n_inc = sum_y.reshape(r, c, b), n_inc.reshape(r, c, b)
        s4 = np.broadcast_to(scores, (r, c * b * m)).reshape(r, c, b, m)
        sum_s = np.einsum("rtbm,rmt->rtb", s4, inc_mask.astype(float))
        if g == 1:  # top-label: one row over all predicted classes
            sum_y, n_inc, sum_s = (x.sum(axis=1, keepdims=True) for x in (sum_y, n_inc, sum_s))
        n_row = n_inc.sum(axis=2, keepdims=True)
        with np.errstate(invalid="ignore", divide="ignore"):
            moments = ((sum_y - sum_s) / n_row / g).reshape(r, g * b)
            mean_y = sum_y / n_inc
        ok = ok & (n_row[:, :, 0] > 0).all(axis=1)
        value = np.abs(moments).sum(axis=1)
        value[~ok] = np.nan
        moments[~ok] = np.nan
        mean_y[~ok] = np.nan
        return value, moments, mean_y, ok


def _chunks(total: int, size: int):
    for lo in range(0, total, size):  # loop over replicate chunks (memory), each vectorised
        yield min(size, total - lo)


def _run_side(draw, ev: _Evaluator, lay: _Layout, n_rep: int):
    """Draw ``n_rep`` replicates' tables (cells on the reachable columns, score sums, pattern counts) in
    memory-sized chunks and evaluate them (the chunks, and so the random streams, as with dense (R, cells) tables)."""
    eval_size = max(1, _EVAL_ELEMENTS // lay.n_cells)
    draw_size = max(1, _DRAW_ELEMENTS // (lay.n * lay.n_rows))
    out = []
    for r_eval in _chunks(n_rep, eval_size):
        parts = [draw(r) for r in _chunks(r_eval, draw_size)]
        if len(parts) == 1:  # the usual case: no copy of the (R, columns) table
            cells, scores, counts_p = parts[0]
        else:
            cells, counts_p = (np.concatenate([x[i] for x in parts]) for i in (0, 2))
            scores = parts[0][1] if parts[0][1].ndim == 1 else np.concatenate([x[1] for x in parts])
        out.append(ev(cells, scores, counts_p))
    return tuple(np.concatenate([o[i] for o in out]) for i in range(4))


def _bootstrap_draw(lay: _Layout, rng: np.random.Generator):
    """Items resampled with replacement, through cells: items with the same cell in every row and the same fine
    sub-bin (width 1/(4B)) per row share a bootstrap cell; its count is Multinomial(N, n_cell/N) and its score
    sum per row M·s̄ + sqrt(M·v)·Z (v the within-cell score variance, Z standard normal), which matches the first
    two moments of the exact resample and is exact for a cell of one item or of equal scores."""
    n, g = lay.n, lay.n_rows
    sub = np.minimum(np.floor(lay.score * 4 * lay.n_bins).astype(np.int64), 4 * lay.n_bins - 1) % 4
    n_seg = lay.c * lay.n_bins
    if lay.n_cells * n_seg ** (g - 1) * 4**g < 1 << 62:
        # one int64 per item, ordered as its row [slot_0 + key, …, slot_{G−1} + key, sub_0, …] (the key is shared,
        # so rows with the same first cell compare by their slots): the cells and their order of np.unique(axis=0)
        code = lay.slot[:, 0] + lay.key
        digits = [(lay.slot[:, j] // lay.n_pat, n_seg) for j in range(1, g)] + [(sub[:, j], 4) for j in range(g)]
        for x, radix in digits:  # loop over the G − 1 + G remaining columns
            code = code * radix + x
        _, cell_of, count = np.unique(code, return_inverse=True, return_counts=True)
    else:
        _, cell_of, count = np.unique(
            np.concatenate([lay.slot + lay.key[:, None], sub], axis=1), axis=0, return_inverse=True,
            return_counts=True
        )
    cell_of = cell_of.ravel()
    n_occ = count.size
    mean = np.zeros((n_occ, g))
    sq = np.zeros((n_occ, g))
    np.add.at(mean, cell_of, lay.score)
    np.add.at(sq, cell_of, lay.score**2)
    mean /= count[:, None]
    sd = np.sqrt(np.maximum(sq / count[:, None] - mean**2, 0.0))  # (cells, G)
    first = np.zeros(n_occ, np.int64)
    first[cell_of[::-1]] = np.arange(n)[::-1]  # one item of every cell gives the cell's slots
    cols = np.arange(n_occ * g)
    to_cells = sparse.csr_matrix(
        (np.ones(n_occ * g), (lay.colmap[lay.slot[first] + lay.key[first, None]].ravel(), cols // g)),
        shape=(lay.cols.size, n_occ),
    )
    to_pats = sparse.csr_matrix((np.ones(n_occ), (lay.key[first], np.arange(n_occ))), shape=(lay.n_pat, n_occ))
    to_scores = sparse.csr_matrix(
        (np.ones(n_occ * g), (lay.sslot[first].ravel(), cols)), shape=(lay.n_scells, n_occ * g)
    )
    noisy = np.flatnonzero((sd > 0).any(axis=1))

    def draw(r: int):
        # counts and score sums are built cell-major, (cells, R) and (cells, G, R): the C-ordered right-hand sides
        # the sparse products read (a replicate-major table's transpose was copied first)
        if n_occ * 4 < n:  # few cells: one binomial per cell
            m_t = rng.multinomial(n, count / n, size=r).T.astype(float)
        else:  # many cells: N uniform items, counted by cell
            idx = cell_of[rng.integers(0, n, size=(r, n))] * r + np.arange(r)[:, None]
            m_t = np.bincount(idx.ravel(), minlength=n_occ * r).reshape(n_occ, r).astype(float)
        ssum_t = m_t[:, None, :] * mean[:, :, None]  # (cells, G, R)
        if noisy.size:
            z = rng.standard_normal((r, noisy.size, g)).transpose(1, 2, 0)
            ssum_t[noisy] += np.sqrt(m_t[noisy, None, :]) * sd[noisy, :, None] * z
        return (np.asarray(to_cells @ m_t).T, np.asarray(to_scores @ ssum_t.reshape(-1, r)).T,
                np.asarray(to_pats @ m_t).T)

    return draw


def _null_draw(lay: _Layout, p: np.ndarray, t: np.ndarray, rng: np.random.Generator):
    """H0: Y_i ~ Categorical(p_i), then the answers of the annotators who labelled item i jointly from
    Π_j T_j[Y_i, a_j]: one inverse-CDF draw over the answer vectors of its presence set; scores fixed."""
    from ._draw_kernel import null_columns  # numba: compiled (or loaded from its cache) on the first draw

    n, c, k = lay.n, lay.c, lay.k
    cum_p = np.cumsum(p, axis=1)[:, :-1]  # (n, C−1): Y = #{c : cum_c ≤ u}
    prob = np.ones((c, lay.n_pat))  # P(pattern | Y = y) over the annotators present in the pattern
    for j in range(k):  # loop over annotators
        prob *= np.where(lay.present[:, j], t[j][:, np.minimum(lay.pats[:, j], c - 1)], 1.0)
    # one sorted table: row q = mask·C + y holds q + the CDF over the patterns of that presence set
    values, keys, row_start, row_len = [], [], [], []
    offset = 0
    for m in range(lay.n_masks):  # loop over presence sets (2^K)
        pats_m = np.flatnonzero(lay.pat_mask == m)
        cdf = np.cumsum(prob[:, pats_m], axis=1)  # (C, n_m)
        values.append(((m * c + np.arange(c))[:, None] + cdf).ravel())
        keys.append(np.tile(pats_m, c))
        row_start.append(offset + pats_m.size * np.arange(c))
        row_len.append(np.full(c, pats_m.size))
        offset += c * pats_m.size
    table, entry_key = np.concatenate(values), np.concatenate(keys)
    row_start, row_last = np.concatenate(row_start), np.concatenate(row_start) + np.concatenate(row_len) - 1
    # guide table of the compiled search: M buckets per row (a power of two ≥ the longest row, at most 4,096;
    # q + b/M is exact), guide[q, b] = #{entries ≤ q + b/M}
    n_buckets = 1 << min(12, int(np.ceil(np.log2(int((row_last - row_start).max()) + 1))))
    guide = np.searchsorted(table, np.arange(row_start.size)[:, None] + np.arange(n_buckets) / n_buckets, side="right")
    q0 = lay.item_mask * c
    fixed_scores = np.bincount(lay.sslot.ravel(), weights=lay.score.ravel(), minlength=lay.n_scells)
    fixed_scores[np.arange(lay.n_scells) % lay.n_masks == 0] = 0.0  # unannotated items are never included
    args = tuple(
        np.ascontiguousarray(x, dtype=dt)
        for x, dt in ((cum_p, np.float64), (q0, np.int64), (table, np.float64), (row_start, np.int64),
                      (row_last, np.int64), (guide, np.int64), (entry_key, np.int64), (lay.slot, np.int64),
                      (lay.colmap, np.int64))
    )

    def draw(r: int):
        u = rng.random((r, n))  # the class draw, then the answer-vector draw: the stream order of the numpy form
        v = rng.random((r, n))
        cells = np.zeros((r, lay.cols.size), np.int32)  # counts ≤ N < 2^31
        counts_p = np.zeros((r, lay.n_pat), np.int32)
        null_columns(u, v, *args, cells, counts_p)
        return cells, fixed_scores, counts_p

    return draw


def calibration_test_multiclass(
    probs: Any,
    annotations: Any,
    channels: Any = None,
    *,
    kind: str = "top_label",
    weights: Any = None,
    n_bins: int = 15,
    n_boot: int = 1000,
    alpha: float = 0.05,
    seed: int = 0,
    min_gap: float = 0.05,
    fitted: ConfusionFit | None = None,
) -> CalibrationTest:
    """Plug-in and debiased multi-class NC-ECE, a bootstrap interval and a test of H0 P(Y = c | p) = p_c.

    Parameters
    ----------
    probs : (n, C) probabilities, rows summing to 1 within 1e-6.
    annotations : (n, K) class indices 0..C−1, NaN (float) or −1 (int) = missing.
    channels : None → confusion matrices estimated by `estimate_confusion` (multi-class Dawid–Skene) and
        re-estimated in every bootstrap and null replicate (``channels_refit`` True); otherwise a known
        `ConfusionFit`, (K, C, C) matrices or binary channels (C = 2), held fixed.
    kind : "top_label" or "classwise" (see module doc). weights : "iv", "equal" or a (K,) / (K, C) array; with
        estimated channels "iv" uses the fitted prevalence, with supplied ones the plug-in prevalence; or "mvu"
        (the minimum-variance unbiased pattern targets, `nc_ece_multiclass`). None (default): "mvu" for
        classwise, "iv" for top-label (module doc, "Targets").
    n_bins : B equal-width bins. n_boot : replicates on each side. alpha : test level; the interval has level
        1 − alpha. min_gap : refits whose smallest singular value is ≤ min_gap are unidentified.
    fitted : a `ConfusionFit` already estimated from these annotations, used as the point estimate and still
        re-estimated in every replicate (requires ``channels`` None).

    Returns the binary test's `CalibrationTest`: ``nc_ece`` equals `nc_ece_multiclass`; ``nc_ece_debiased``
    is `debiased_abs_sum` (Kumar, Liang & Ma 2019, "Verified uncertainty calibration", NeurIPS) of the moments
    m_gk/G with their bootstrap variances (the bias it leaves, largest in calibrated bins, is stated there);
    ``ci_low``/``ci_high`` the debiased normal interval (module doc); ``p_value``/``null_q95`` from the parametric
    bootstrap under H0 (Bröcker & Smith 2007, "Increasing the reliability of reliability diagrams", Weather Forecast.
    22, consistency resampling with noisy annotators). ``bins`` has a ``class`` column (−1 for top-label;
    moments per class unscaled); ``weights`` is (K, C); ``channels`` / ``prevalence`` hold the binary channels
    and P(Y = 1) for C = 2 and () / nan for C > 2 (the confusion matrices are the caller's ``fitted`` or
    ``channels``, or `estimate_confusion` of the annotations with this seed).
    """
    if kind not in NC_ECE_KINDS:
        raise ValueError(f"kind must be one of {NC_ECE_KINDS}, got {kind!r}")
    if weights is None:
        weights = MVU if kind == "classwise" else "iv"
    n_bins = _check_n_bins(n_bins)
    if not (isinstance(n_boot, (int, np.integer)) and not isinstance(n_boot, bool) and n_boot >= 1):
        raise ValueError(f"n_boot must be a positive integer, got {n_boot!r}")
    if not 0.0 < alpha < 1.0:
        raise ValueError(f"alpha must be in (0, 1), got {alpha!r}")
    p = check_probs(probs).astype(np.float64, copy=False)
    c = p.shape[1]
    a, _ = as_class_annotations(annotations, c)
    if a.shape[0] != p.shape[0]:
        raise ValueError(f"annotations has {a.shape[0]} rows but probs has {p.shape[0]}")
    k = a.shape[1]
    n_cells = c * n_bins * (c + 1) ** k
    if n_cells > MAX_CELLS_PER_REPLICATE:
        raise ValueError(
            f"{c} classes × {n_bins} bins × {k} annotators give {n_cells} answer-pattern cells per replicate "
            f"(limit {MAX_CELLS_PER_REPLICATE}); use fewer bins or split the annotators"
        )
    refit = channels is None
    if fitted is not None and not refit:
        raise ValueError("pass either channels (held fixed) or fitted (re-estimated in replicates), not both")
    if fitted is not None and not isinstance(fitted, ConfusionFit):
        raise TypeError(f"fitted must be a ConfusionFit (estimate_confusion), got {type(fitted).__name__}")
    if refit:
        fit = fitted if fitted is not None else estimate_confusion(a, n_classes=c, seed=seed, min_gap=min_gap)
        if fit.confusion.shape != (k, c, c):
            raise ValueError(f"fitted has confusion shape {fit.confusion.shape}, expected {(k, c, c)}")
        t0 = fit.confusion
        mvu = isinstance(weights, str) and weights == MVU
        w_point = np.full((k, c), np.nan) if mvu else class_weights(t0, fit.prevalence, weights)
        point = nc_ece_multiclass(p, a, t0, kind=kind, n_bins=n_bins, weights=MVU if mvu else w_point)
        prev0, method = np.asarray(fit.prevalence, float), fit.method
    else:
        t0 = as_confusion(channels, k, c)
        point = nc_ece_multiclass(p, a, t0, kind=kind, n_bins=n_bins, weights=weights)
        w_point, prev0, method = point.weights, point.prevalence, "known"
    lay = _Layout(p, class_codes(a, c), kind, n_bins)
    ev = _Evaluator(lay, weights, t0, prev0, w_point, refit, min_gap, p)
    boot_rng, null_rng = (np.random.default_rng(q) for q in np.random.SeedSequence(seed).spawn(2))
    b_val, b_mom, _, b_ok = _run_side(_bootstrap_draw(lay, boot_rng), ev, lay, n_boot)
    n_val, _, n_mean_y, n_ok = _run_side(_null_draw(lay, p, t0, null_rng), ev, lay, n_boot)

    g = lay.n_rows
    m_hat = (point.bin_sum_label - point.bin_sum_score) / point.bin_n.sum(axis=1, keepdims=True)  # (G, B)
    fields, var_m = _replicate_fields(point.value, m_hat.ravel() / g, (b_val, b_mom, b_ok), (n_val, n_ok), alpha)
    rows, cols = np.nonzero(point.bin_n)
    with np.errstate(invalid="ignore"):
        band = (
            nanquantile_columns(n_mean_y[n_ok][:, rows, cols], [0.025, 0.975])
            if n_ok.any()
            else np.full((2, rows.size), np.nan)
        )
    bins = point.bins.with_columns(
        pl.Series("moment", m_hat[rows, cols]),
        pl.Series("moment_se", np.sqrt(var_m.reshape(g, lay.n_bins)[rows, cols]) * g),
        pl.Series("null_low", band[0]),
        pl.Series("null_high", band[1]),
    )
    binary = c == 2
    return CalibrationTest(
        **fields,
        channels_refit=refit,
        alpha=float(alpha),
        n_boot=int(n_boot),
        n_items=point.n_items,
        n_bins=n_bins,
        bins=bins,
        channels=ConfusionFit(t0, prev0, method, True, float("nan"), 0).channels if binary else (),
        weights=np.asarray(w_point, float),
        prevalence=float(prev0[1]) if binary else float("nan"),
        method=method,
    )


def _replicate_fields(value: float, moments: np.ndarray, boot: tuple, null: tuple, alpha: float):
    """The `CalibrationTest` fields drawn from the replicates, for point moments (M,) whose absolute sum is
    ``value``; boot = (values (R,), moments (R, M), identified (R,)), null = (values (R,), identified (R,)).
    Returns them as a dict, and the bootstrap variance of each moment (M,)."""
    _, b_mom, b_ok = boot
    n_val, n_ok = null
    debiased, lo, hi, var = debiased_normal_interval(moments, b_mom[b_ok], 1 - alpha)
    at_null = n_val[n_ok]
    return {
        "nc_ece": value,
        "nc_ece_debiased": debiased,
        "ci_low": lo,
        "ci_high": hi,
        "p_value": bootstrap_p_value(value, at_null),
        "null_q95": float(np.quantile(at_null, 0.95)) if at_null.size else float("nan"),
        "n_unidentified_boot": int((~b_ok).sum()),
        "n_unidentified_null": int((~n_ok).sum()),
    }, var
