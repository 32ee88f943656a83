"""Multi-class Dawid–Skene EM on answer-pattern counts: per-annotator C×C confusion matrices and prevalences.

Model (Dawid & Skene 1979): Y ~ Categorical(π); given Y = y annotator j answers a with probability
T_j[y, a] = P(A_j = a | Y = y), independently across annotators. The marginal likelihood of an answer
pattern p (codes c_pj, missing skipped) is Σ_y π_y Π_j T_j[y, c_pj]. With O_p ∈ {0,1}^{K·C} the one-hot
answers of pattern p and w_p its item count:

    E-step   log L_py = log π_y + Σ_{j,a} O_p[j,a] log T_j[y, a];   γ_py = L_py / Σ_y' L_py'
    M-step   π_y = Σ_p w_p γ_py / Σ_p w_p;   T_j[y, a] = Σ_p w_p γ_py O_p[j,a] / Σ_p w_p γ_py Σ_a' O_p[j,a']

Both are sums over the P ≤ (C+1)^K patterns, so an iteration does not depend on n. Each run (start or
replicate) is one compiled loop (numba, `_em_kernel`): a step over the 287 patterns of the 1,000,000 × 3 × 7
benchmark takes about 20 µs of CPU, where the numpy/scipy-sparse step it replaced spent about 0.85 ms in call
overhead. First call in a process (2-core AVX2 AMD EPYC, 2026-12-07, load 8-9): importing numba 0.27-0.40 s
and loading the cached kernel 0.5-0.6 s of CPU (numba's target set-up, shared with the NC-ECE kernel), about
0.9-1.1 s in all; without a cache (first use after install or an edit) the compile takes about 8 s of CPU.
Multiple starts (soft vote + seeded random starts), best log-likelihood kept. The likelihood is invariant
under a relabelling of the latent class; the orientation is fixed by the permutation σ maximising the
summed diagonal Σ_j Σ_y T_j[y, σ(y)] (linear sum assignment), which for C = 2 is the binary rule
Σ_j δ_j > 0 (Hanada and Futami 2026 §4.3, §F.2). Three informative annotators identify the model up to that relabelling
(Hanada and Futami 2026 §D.5 for C = 2; Kruskal 1977 for C > 2).

Reference: A. P. Dawid and A. M. Skene (1979), "Maximum likelihood estimation of observer error-rates
using the EM algorithm", J. R. Stat. Soc. C 28(1):20–28, doi:10.2307/2346806.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
from scipy import sparse

from ..channels._base import Channel, ChannelFit, NotIdentifiableError
from ._patterns import as_class_annotations, class_codes, pattern_counts

__all__ = [
    "ConfusionFit",
    "batched_confusion_em",
    "estimate_class_channels",
    "estimate_confusion",
    "known_confusion",
    "validate_confusion",
]

EPS = 1e-10  # probabilities are clipped at EPS (as the binary EM and crowd-kit do)
MIN_PREVALENCE = 1e-6  # a latent class with smaller estimated prevalence is not identified
ASSOCIATION_P = 2.3e-4  # pairwise χ² p-value below which two annotators are associated (≈ one-sided z 3.5)


@dataclass(frozen=True, eq=False)
class ConfusionFit:
    """Result of `estimate_confusion` / `known_confusion`.

    confusion : (K, C, C), confusion[j, y, a] = P(A_j = a | Y = y); rows sum to 1.
    prevalence : (C,), P(Y = y) over the fitted items (nan for `known_confusion` without data).
    method : "dawid_skene" or "known". converged : the selected run converged.
    log_likelihood : marginal log-likelihood of the fitted items (nan without data). n_iter : EM iterations.
    diagnostics : n_items, n_patterns, n_starts, starts_accepted, start_log_likelihoods,
        min_singular_value (per annotator), diagonally_dominant (per annotator: T_j[y, y] is the largest
        entry of every row y), permutation (latent relabelling applied).
    """

    confusion: np.ndarray
    prevalence: np.ndarray
    method: str
    converged: bool
    log_likelihood: float
    n_iter: int
    diagnostics: dict[str, Any] = field(default_factory=dict)

    @property
    def n_classes(self) -> int:
        return int(self.confusion.shape[1])

    @property
    def n_annotators(self) -> int:
        return int(self.confusion.shape[0])

    @property
    def singular_values(self) -> np.ndarray:
        """(K, C) singular values of each T_j, descending; the smallest is the multi-class channel gap."""
        return np.linalg.svd(self.confusion, compute_uv=False)

    @property
    def gaps(self) -> np.ndarray:
        """(K,) channel gaps: δ_j = 1 − a_j − b_j for C = 2, else the smallest singular value of T_j."""
        if self.n_classes == 2:
            return 1.0 - self.confusion[:, 0, 1] - self.confusion[:, 1, 0]
        return self.singular_values[:, -1]

    @property
    def channels(self) -> tuple[Channel, ...]:
        """C = 2 only: binary channels, fpr a_j = T_j[0, 1], fnr b_j = T_j[1, 0]."""
        if self.n_classes != 2:
            raise ValueError(f"binary channels exist only for 2 classes, this fit has {self.n_classes}")
        return tuple(Channel(float(t[0, 1]), float(t[1, 0])) for t in self.confusion)

    def to_channel_fit(self) -> ChannelFit:
        """C = 2 only: the binary `ChannelFit` (prevalence P(Y = 1)) the binary code consumes."""
        chans = self.channels
        gaps = [c.gap for c in chans]
        diag = {
            "log_likelihood": self.log_likelihood,
            "n_iter": self.n_iter,
            "n_starts": self.diagnostics.get("n_starts", 0),
            "starts_accepted": self.diagnostics.get("starts_accepted", 0),
            "min_gap": float(min(gaps)),
            "n_items": self.diagnostics.get("n_items", 0),
        }
        return ChannelFit(chans, float(self.prevalence[1]), self.method, self.converged, diag)


def validate_confusion(confusion: Any, n_annotators: int | None = None, n_classes: int | None = None) -> np.ndarray:
    """Check a (K, C, C) stack of row-stochastic, invertible confusion matrices; returns it as float64."""
    t = np.asarray(confusion, dtype=np.float64)
    if t.ndim == 2:
        t = t[None]
    if t.ndim != 3 or t.shape[1] != t.shape[2] or t.shape[1] < 2:
        raise ValueError(f"confusion must have shape (K, C, C) with C >= 2, got {t.shape}")
    if n_annotators is not None and t.shape[0] != n_annotators:
        raise ValueError(f"confusion has {t.shape[0]} matrices but annotations has {n_annotators} columns")
    if n_classes is not None and t.shape[1] != n_classes:
        raise ValueError(f"confusion is {t.shape[1]}×{t.shape[2]} but there are {n_classes} classes")
    if not np.all(np.isfinite(t)) or t.min() < 0 or t.max() > 1:
        raise ValueError("confusion entries must be probabilities in [0, 1]")
    rows = t.sum(axis=2)
    if np.abs(rows - 1).max() > 1e-6:
        j, y = np.unravel_index(np.argmax(np.abs(rows - 1)), rows.shape)
        raise ValueError(f"confusion[{j}] row {y} sums to {rows[j, y]!r}, not 1 (rows are P(A = · | Y = y))")
    sv = np.linalg.svd(t, compute_uv=False)[:, -1]
    if np.any(sv <= 1e-12):
        j = int(np.argmin(sv))
        raise ValueError(f"confusion[{j}] is singular (smallest singular value {sv[j]:.3g}); it cannot be inverted")
    return t


def _answers(pats: np.ndarray, n_classes: int) -> tuple[np.ndarray, np.ndarray]:
    """The one-hot answers O (P, K·C) of the patterns as CSR structure (ptr (P+1,), col): pattern p's observed
    answers are the columns ``col[ptr[p]:ptr[p+1]]``, column j·C + a for annotator j answering a (int64)."""
    obs = pats < n_classes
    col = (np.arange(pats.shape[1])[None, :] * n_classes + pats.astype(np.int64))[obs]
    ptr = np.zeros(len(pats) + 1, np.int64)
    np.cumsum(obs.sum(axis=1), out=ptr[1:])
    return ptr, col


def _class_totals(ptr: np.ndarray, col: np.ndarray, counts: np.ndarray, k: int, c: int) -> np.ndarray:
    """(K, C) items per (annotator, answered class): Σ_p w_p O_p[j, a]."""
    return np.bincount(col, weights=np.repeat(counts, np.diff(ptr)), minlength=k * c).reshape(k, c)


@dataclass(frozen=True)
class _Run:
    prior: np.ndarray
    t: np.ndarray
    log_likelihood: float
    n_iter: int
    converged: bool


def _run_em(
    ptr: np.ndarray,
    col: np.ndarray,
    counts: np.ndarray,
    prior: np.ndarray,
    t: np.ndarray,
    max_iter: int,
    tol: float,
    fixed_t: bool = False,
) -> _Run:
    """One EM run (`_em_runs` with a single run)."""
    p, tt, ll, it, conv = _em_runs(ptr, col, counts[None], prior[None], t[None], max_iter, tol, fixed_t)
    return _Run(p[0], tt[0], float(ll[0]), int(it[0]), bool(conv[0]))


def _em_runs(
    ptr: np.ndarray,
    col: np.ndarray,
    counts: np.ndarray,
    prior: np.ndarray,
    t: np.ndarray,
    max_iter: int,
    tol: float,
    fixed_t: bool = False,
    accelerate: bool = True,
):
    """EM from (π, T) for R independent runs (counts (R, P), π (R, C), T (R, K, C, C)) until one EM step changes a
    run's (π, T) by less than ``tol`` (max-abs); ``fixed_t`` updates π only (known T). Returns (π, T,
    log-likelihood (R,), EM steps (R,), converged (R,)). The answers are the CSR structure of `_answers`; each
    run is the compiled loop of `_em_kernel` (no per-step numpy calls).

    ``accelerate``: SQUAREM (Varadhan & Roland 2008, "Simple and globally convergent methods for
    accelerating the convergence of any EM algorithm", Scand. J. Stat. 35:335–353, scheme S3): from θ0,
    θ1 = F(θ0), θ2 = F(θ1), r = θ1 − θ0, v = θ2 − θ1 − r, α = min(−1, −‖r‖/‖v‖), θ' = θ0 − 2αr + α²v projected
    onto the simplices, then one stabilising step F(θ'); θ2 replaces it if the log-likelihood fell. The
    fixed points are those of plain EM; the stopping rule is always a plain EM step's change.
    """
    from ._em_kernel import em_runs  # numba: imported on the first EM call, not with the package

    prior, t = np.asarray(prior, np.float64), np.asarray(t, np.float64)
    r, c = prior.shape
    theta = np.concatenate([prior, t.reshape(r, -1)], axis=1)  # one flat (π, T) per run, updated in place
    counts = np.ascontiguousarray(counts, np.float64)
    ll, n_iter, converged = np.empty(r), np.empty(r, np.int64), np.empty(r, np.bool_)
    em_runs(
        ptr, col, counts, c, theta, int(max_iter), float(tol), bool(fixed_t), bool(accelerate), ll, n_iter, converged
    )
    prior, t = theta[:, :c], theta[:, c:].reshape(t.shape)
    return prior, t, ll, n_iter, converged


def _assignment(summed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """σ maximising Σ_y summed[y, σ(y)] and the index map inv (new latent class σ(y) takes old class y)."""
    from scipy.optimize import linear_sum_assignment  # lazy: scipy.optimize is slow to import

    rows, sigma = linear_sum_assignment(summed, maximize=True)
    inv = np.empty_like(sigma)
    inv[sigma] = rows
    return sigma, inv


def _orient(r: _Run) -> tuple[_Run, np.ndarray]:
    """Relabel the latent class by σ maximising Σ_y (Σ_j T_j)[y, σ(y)]; returns the run and σ."""
    sigma, inv = _assignment(r.t.sum(axis=0))
    if np.array_equal(sigma, np.arange(len(sigma))):
        return r, sigma
    return _Run(r.prior[inv], r.t[:, inv, :], r.log_likelihood, r.n_iter, r.converged), sigma


def batched_confusion_em(
    counts: np.ndarray,
    pats: np.ndarray,
    prior: np.ndarray,
    confusion: np.ndarray,
    max_iter: int = 500,
    tol: float = 1e-8,
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Multi-class Dawid–Skene EM on R pattern-count tables at once, from one start (see module doc).

    counts : (R, P) items per (replicate, pattern); pats : (P, K) codes 0..C (C = missing).
    prior : (C,) or (R, C) start π; confusion : (K, C, C) or (R, K, C, C) start T. The E/M updates and the SQUAREM
    acceleration are those of `estimate_confusion` (`_em_runs`, the compiled kernel run by run), then each
    replicate's latent classes are relabelled by the summed-diagonal assignment (as `_orient`).
    Returns (prior (R, C), confusion (R, K, C, C), converged (R,) bool: largest change of (π, T) < ``tol``).
    """
    r, _ = counts.shape
    k = pats.shape[1]
    c = np.asarray(confusion).shape[-1]
    used = counts.sum(axis=0) > 0  # patterns no replicate shows carry nothing
    ptr, col = _answers(pats[used], c)
    counts = counts[:, used]
    prior = np.broadcast_to(prior, (r, c))
    t = np.broadcast_to(confusion, (r, k, c, c))
    prior, t, _, _, done = _em_runs(ptr, col, counts, prior, t, max_iter, tol)
    summed = t.sum(axis=1)  # (R, C, C)
    for i in np.flatnonzero(~np.all(summed.argmax(axis=2) == np.arange(c), axis=1)):  # rare: relabel
        inv = _assignment(summed[i])[1]
        prior[i], t[i] = prior[i][inv], t[i][:, inv, :]
    return prior, t, done


def _soft_vote_start(ptr: np.ndarray, col: np.ndarray, pats: np.ndarray, counts: np.ndarray, k: int, c: int):
    """Soft-vote posterior (vote shares of the annotators present), then one M-step (crowd-kit's start)."""
    from ._em_kernel import m_step

    votes = np.stack([(pats == y).sum(axis=1) for y in range(c)], axis=1).astype(float)
    gamma = votes / np.maximum(votes.sum(axis=1, keepdims=True), 1.0)
    theta = np.empty(c + k * c * c)
    m_step(ptr, col, np.ascontiguousarray(counts, np.float64), gamma, theta)
    return theta[:c], theta[c:].reshape(k, c, c)


def _random_start(rng: np.random.Generator, k: int, c: int) -> tuple[np.ndarray, np.ndarray]:
    """π ~ Dirichlet(1); T_j[y, y] ~ U(0.5, 0.95), the rest of row y spread by Dirichlet(1)."""
    prior = rng.dirichlet(np.ones(c))
    diag = rng.uniform(0.5, 0.95, size=(k, c))
    off = rng.dirichlet(np.ones(c - 1), size=(k, c))  # (K, C, C−1)
    t = np.empty((k, c, c))
    for y in range(c):  # loop over classes
        others = [a for a in range(c) if a != y]
        t[:, y, y] = diag[:, y]
        t[:, y, others] = (1 - diag[:, y])[:, None] * off[:, y, :]
    return prior, t


def _association_pvalues(ptr: np.ndarray, col: np.ndarray, counts: np.ndarray, k: int, c: int) -> np.ndarray | None:
    """(K, K) p-values of the χ² test of independence of each annotator pair on items both labelled."""
    from scipy.stats import chi2  # lazy: scipy.stats is slow to import

    if k * c > 1000:
        return None
    o = sparse.csr_matrix((np.ones(len(col)), col, ptr), shape=(len(ptr) - 1, k * c))
    n = (o.T @ o.multiply(counts[:, None]).tocsr()).toarray().reshape(k, c, k, c).transpose(0, 2, 1, 3)  # [j, k, a, b]
    tot = n.sum(axis=(2, 3))
    r = n.sum(axis=3)
    col_tot = n.sum(axis=2)
    with np.errstate(invalid="ignore", divide="ignore"):
        exp = r[..., :, None] * col_tot[..., None, :] / tot[..., None, None]
        stat = np.where(exp > 0, (n - exp) ** 2 / exp, 0.0).sum(axis=(2, 3))
    dof = ((r > 0).sum(axis=2) - 1) * ((col_tot > 0).sum(axis=2) - 1)
    p = np.where(dof > 0, chi2.sf(stat, np.maximum(dof, 1)), 1.0)
    np.fill_diagonal(p, 1.0)
    return p


def _diag_dominant(t: np.ndarray) -> np.ndarray:
    c = t.shape[1]
    return np.all(t[:, np.arange(c), np.arange(c)] >= t.max(axis=2), axis=1)


def known_confusion(confusion: Any, prevalence: Any = None) -> ConfusionFit:
    """Wrap supplied confusion matrices (K, C, C) as a `ConfusionFit` (method "known", no data)."""
    t = validate_confusion(confusion)
    c = t.shape[1]
    prior = np.full(c, np.nan) if prevalence is None else np.asarray(prevalence, float)
    if prior.shape != (c,):
        raise ValueError(f"prevalence must have shape ({c},), got {prior.shape}")
    return ConfusionFit(t, prior, "known", True, float("nan"), 0, _fit_diagnostics(t, 0, 0, 0, []))


def _fit_diagnostics(t: np.ndarray, n_items: int, n_patterns: int, accepted: int, lls: list[float]) -> dict:
    sv = np.linalg.svd(t, compute_uv=False)[:, -1]
    return {
        "n_items": n_items,
        "n_patterns": n_patterns,
        "n_starts": len(lls),
        "starts_accepted": accepted,
        "start_log_likelihoods": lls,
        "min_singular_value": sv.tolist(),
        "diagonally_dominant": _diag_dominant(t).tolist(),
    }


def estimate_confusion(
    annotations: Any,
    n_classes: int | None = None,
    known: Any = None,
    n_starts: int = 10,
    seed: int = 0,
    min_gap: float = 0.05,
    max_iter: int = 5000,
    tol: float = 1e-11,
    init: tuple[Any, Any] | None = None,
    orient: bool = True,
) -> ConfusionFit:
    """Per-annotator confusion matrices and class prevalences by multi-class Dawid–Skene EM (see module doc).

    Parameters
    ----------
    annotations : (n, K) class indices 0..C−1; float with NaN = missing, or integer with −1 = missing.
    n_classes : C; None → 1 + the largest label.
    known : optional (K, C, C) known confusion matrices; then only π is fitted (EM with T fixed), which
        needs neither three annotators nor every class observed.
    n_starts, seed : EM starts (start 0: soft vote then one M-step; others random from ``seed``).
    min_gap : runs in which some T_j has smallest singular value ≤ min_gap are screened out (for C = 2 the
        smallest singular value is ≤ δ_j = 1 − a_j − b_j).
    max_iter, tol : EM stops when the largest change of (π, T) is below ``tol``.
    init : optional start (π (C,), T (K, C, C)) replacing start 0. orient : apply the relabelling.

    Raises
    ------
    NotIdentifiableError
        Fewer than three annotators, a class no annotator ever used, fewer than three annotators
        associated with another one, or no start giving invertible matrices and non-empty classes.
    """
    a, c = as_class_annotations(annotations, n_classes)
    k = a.shape[1]
    pats, counts = pattern_counts(class_codes(a, c), c)
    keep = (pats < c).any(axis=1)  # items nobody labelled carry no information
    pats, counts = pats[keep], counts[keep]
    n_items = int(counts.sum())
    if n_items == 0:
        raise ValueError("annotations has no labelled item")
    ptr, col = _answers(pats, c)
    if known is not None:
        t = validate_confusion(known, k, c)
        prior0 = np.full(c, 1.0 / c)
        r = _run_em(ptr, col, counts, prior0, t, max_iter, tol, fixed_t=True)
        diag = _fit_diagnostics(t, n_items, len(counts), 1, [r.log_likelihood])
        return ConfusionFit(t, r.prior, "known", r.converged, r.log_likelihood, r.n_iter, diag)
    if k < 3:
        raise NotIdentifiableError(
            f"multi-class Dawid–Skene needs at least 3 annotators, got {k}: with fewer the confusion matrices "
            "are not identified (a continuum of matrices fits the joint answer table, Hanada and Futami 2026 §D.1). "
            "Add "
            "annotators or supply known confusion matrices"
        )
    if n_starts < 1:
        raise ValueError(f"n_starts must be >= 1, got {n_starts}")
    per_annot = ((pats < c) * counts[:, None]).sum(axis=0)
    if np.any(per_annot == 0):
        raise ValueError(f"annotations column {int(np.flatnonzero(per_annot == 0)[0])} has no label")
    used = _class_totals(ptr, col, counts, k, c).sum(axis=0)
    if np.any(used == 0):
        missing = np.flatnonzero(used == 0).tolist()
        raise NotIdentifiableError(
            f"class(es) {missing} never appear in any annotation (n_classes={c}): their prevalence and their "
            "rows of the confusion matrices cannot be estimated. Declare only the classes in use, add items of "
            "those classes, or supply known confusion matrices"
        )
    pv = _association_pvalues(ptr, col, counts, k, c)
    if pv is not None:
        informative = (pv < ASSOCIATION_P).sum(axis=1) >= 1
        if informative.sum() < 3:
            raise NotIdentifiableError(
                f"fewer than three informative annotators: only columns {np.flatnonzero(informative).tolist()} "
                f"are associated with another annotator (χ² test of independence p < {ASSOCIATION_P}). "
                "Dawid–Skene needs three informative annotators: add annotators, drop uninformative ones, or "
                "supply known confusion matrices"
            )
    rng = np.random.default_rng(seed)
    if init is not None:
        start0 = (np.asarray(init[0], float), validate_confusion(init[1], k, c))
    else:
        start0 = _soft_vote_start(ptr, col, pats, counts, k, c)
    starts = [start0] + [_random_start(rng, k, c) for _ in range(n_starts - 1)]
    priors, confusions = (np.stack([np.asarray(st[i], float) for st in starts]) for i in (0, 1))
    # all starts at once, each run as if alone
    fits = _em_runs(ptr, col, np.broadcast_to(counts, (n_starts, counts.size)), priors, confusions, max_iter, tol)
    runs = []
    for i in range(n_starts):  # loop over starts: orientation and screening
        r = _Run(fits[0][i], fits[1][i], float(fits[2][i]), int(fits[3][i]), bool(fits[4][i]))
        sigma = np.arange(c)
        if orient:
            r, sigma = _orient(r)
        runs.append((r, sigma))

    def _screen(r: _Run) -> tuple[float, float]:
        sv = np.linalg.svd(r.t, compute_uv=False)[:, -1]
        return float(sv.min()), float(r.prior.min())

    ok = [
        (r, s)
        for r, s in runs
        if np.isfinite(r.log_likelihood) and _screen(r)[0] > min_gap and _screen(r)[1] > MIN_PREVALENCE
    ]
    lls = [float(r.log_likelihood) for r, _ in runs]
    if not ok:
        best = max(runs, key=lambda rs: rs[0].log_likelihood if np.isfinite(rs[0].log_likelihood) else -np.inf)[0]
        sv = np.linalg.svd(best.t, compute_uv=False)[:, -1]
        j = int(np.argmin(sv))
        raise NotIdentifiableError(
            f"no EM start gave invertible confusion matrices with every class present: annotator column {j} "
            f"has smallest singular value {sv[j]:.4f} (min_gap={min_gap}; per column "
            f"{np.round(sv, 4).tolist()}), smallest class prevalence {best.prior.min():.2e}. An annotator whose "
            "answers carry (almost) no information about some class cannot be inverted: drop it, supply its "
            "confusion matrix as known, add informative annotators, or merge classes no one tells apart"
        )
    best, sigma = max(ok, key=lambda rs: rs[0].log_likelihood)
    diag = _fit_diagnostics(best.t, n_items, len(counts), len(ok), lls)
    diag["permutation"] = sigma.tolist()
    return ConfusionFit(best.t, best.prior, "dawid_skene", best.converged, best.log_likelihood, best.n_iter, diag)


def estimate_class_channels(
    annotations: Any,
    method: str = "auto",
    groups: Any = None,
    n_starts: int = 10,
    seed: int = 0,
    min_gap: float = 0.05,
) -> ConfusionFit:
    """The multi-class counterpart of `channels.estimate_channels`: C×C confusion matrices per annotator by
    multi-class Dawid–Skene (`estimate_confusion`), the one estimator for more than two classes, so ``method``
    must be "auto" or "dawid_skene" and ``groups`` None."""
    if method not in ("auto", "dawid_skene") or groups is not None:
        raise ValueError(
            "more than two classes: only multi-class Dawid–Skene (method 'auto' or 'dawid_skene', "
            "no groups) estimates confusion matrices"
        )
    return estimate_confusion(annotations, n_starts=n_starts, seed=seed, min_gap=min_gap)
