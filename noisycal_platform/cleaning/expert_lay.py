"""Expert vs lay confirmation (Gröger et al. 2023 §4.5, Figure 3).

For every reference expert r, every other expert e and every lay rater l, the paired difference
d = κ(r, e) − κ(r, l) (Cohen's κ on the items both members of a pair answered). H1: experts agree
better with experts (d > 0).

``p_value``: the seed's "one-sided paired permutation test, which solely relies on the sign of the
differences" (§4.5), i.e. the paired sign test. Under H0 each d is symmetric about 0, so flipping signs
leaves the data's distribution unchanged; the statistic that uses only the signs is n₊ = #{d > 0}, whose
permutation distribution over the sign flips of the n₊ + n₋ non-zero differences is Binomial(n₊ + n₋, 1/2)
(zeros carry no sign and are dropped; Dixon & Mood 1946). p = P(B ≥ n₊), exact (scipy ``binomtest``).

``p_value_mean_flip``: the sign-flip permutation test of mean(d) (Fisher's paired randomisation test), over
all 2^n sign flips (exact for n ≤ ``exact_max``, ``mean_flip_exact``), else ``n_perm`` seeded random flips,
p = (1 + #{T* ≥ T}) / (1 + n_perm). It also weighs the sizes of the differences.
"""

from __future__ import annotations

import numpy as np
import polars as pl

from noisycal_platform.cleaning.agreement import cohen_kappa, reliability_matrix

__all__ = ["DIFF_SCHEMA", "TEST_SCHEMA", "expert_lay_differences", "expert_lay_tests", "sign_flip_test", "sign_test"]

DIFF_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "issue_type": pl.String(),
    "reference": pl.String(),
    "expert": pl.String(),
    "lay": pl.String(),
    "kappa_expert": pl.Float64(),  # κ(reference, expert)
    "kappa_lay": pl.Float64(),  # κ(reference, lay)
    "difference": pl.Float64(),
}
TEST_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "issue_type": pl.String(),
    "n_differences": pl.Int64(),
    "mean_difference": pl.Float64(),
    "n_positive": pl.Int64(),
    "n_negative": pl.Int64(),
    "p_value": pl.Float64(),  # sign test (Gröger et al. 2023 §4.5)
    "p_value_mean_flip": pl.Float64(),  # sign-flip permutation test of the mean difference
    "mean_flip_exact": pl.Boolean(),
}


def sign_test(d) -> float:
    """One-sided (greater) paired sign test: p = P(B ≥ n₊), B ~ Binomial(n₊ + n₋, 1/2); zeros and non-finite
    differences dropped; NaN when no difference has a sign."""
    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d)]
    pos, neg = int((d > 0).sum()), int((d < 0).sum())
    if pos + neg == 0:
        return float("nan")
    from scipy.stats import binomtest  # lazy: scipy.stats is slow to import

    return float(binomtest(pos, pos + neg, 0.5, alternative="greater").pvalue)


def sign_flip_test(
    d,
    *,
    n_perm: int = 10_000,
    seed: int | np.random.Generator = 0,
    exact_max: int = 20,
) -> tuple[float, bool]:
    """One-sided (greater) paired sign-flip permutation p-value of mean(d); returns (p, exact)."""
    d = np.asarray(d, dtype=float)
    d = d[np.isfinite(d)]
    if d.size == 0:
        return float("nan"), True
    t_obs = d.mean()
    tol = 1e-12 * max(1.0, np.abs(d).max())
    if d.size <= exact_max:
        total = 2**d.size
        hits = 0
        for start in range(0, total, 1 << 15):  # enumerate all sign vectors in chunks
            codes = np.arange(start, min(start + (1 << 15), total))
            bits = (codes[:, None] >> np.arange(d.size)) & 1
            hits += int((((1 - 2 * bits) * d).mean(axis=1) >= t_obs - tol).sum())
        return hits / total, True
    if n_perm < 1:
        raise ValueError(f"n_perm must be >= 1, got {n_perm}")
    rng = seed if isinstance(seed, np.random.Generator) else np.random.default_rng(seed)
    signs = rng.choice(np.array([-1.0, 1.0]), size=(n_perm, d.size))
    stats = (signs * d).mean(axis=1)
    return float((1 + (stats >= t_obs - tol).sum()) / (1 + n_perm)), False


def _pair_kappa(x: np.ndarray, y: np.ndarray) -> float:
    both = np.isfinite(x) & np.isfinite(y)
    return cohen_kappa(x[both].astype(int), y[both].astype(int))


def expert_lay_differences(effective: pl.DataFrame) -> pl.DataFrame:
    """All paired differences κ(ref, expert) − κ(ref, lay) per (dataset, issue_type)."""
    rows = []
    for (ds, it), part in sorted(effective.group_by(["dataset", "issue_type"]), key=lambda g: g[0]):
        mat, ann, _ = reliability_matrix(part)
        role = dict(zip(part["annotator_id"].to_list(), part["role"].to_list(), strict=True))
        idx = {a: i for i, a in enumerate(ann)}
        experts = [a for a in ann if role[a] == "expert"]
        lays = [a for a in ann if role[a] == "lay"]

        for r in experts:
            for e in experts:
                if e == r:
                    continue
                ke = _pair_kappa(mat[idx[r]], mat[idx[e]])
                for lay in lays:
                    kl = _pair_kappa(mat[idx[r]], mat[idx[lay]])
                    rows.append((ds, it, r, e, lay, ke, kl, ke - kl))  # the columns of DIFF_SCHEMA, in order
    return pl.DataFrame(rows, schema=DIFF_SCHEMA, orient="row")


def expert_lay_tests(
    diffs: pl.DataFrame, *, n_perm: int = 10_000, seed: int = 0, by_reference: bool = False
) -> pl.DataFrame:
    """Sign test and mean sign-flip test per (dataset, issue_type) over :func:`expert_lay_differences`.

    ``by_reference=True`` tests each reference expert's differences separately (column ``reference``).
    """
    keys = ["dataset", "issue_type", "reference"] if by_reference else ["dataset", "issue_type"]
    schema = {**TEST_SCHEMA, "reference": pl.String()} if by_reference else TEST_SCHEMA
    rows = []
    for key, part in sorted(diffs.group_by(keys), key=lambda g: g[0]):
        d = part["difference"].to_numpy()
        d = d[np.isfinite(d)]
        p, exact = sign_flip_test(d, n_perm=n_perm, seed=seed)
        row = dict(zip(keys, key, strict=True))
        row.update(
            n_differences=d.size,
            mean_difference=float(d.mean()) if d.size else float("nan"),
            n_positive=int((d > 0).sum()),
            n_negative=int((d < 0).sum()),
            p_value=sign_test(d),
            p_value_mean_flip=p,
            mean_flip_exact=exact,
        )
        rows.append(row)
    return pl.DataFrame(rows, schema=schema)
