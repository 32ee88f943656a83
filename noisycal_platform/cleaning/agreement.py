"""Inter-annotator agreement on confirmation answers (Gröger et al. 2023 §4.2, Figure 2).

Krippendorff's α (nominal, missing answers allowed; ``krippendorff`` package) across all annotators and
Cohen's κ (scikit-learn) for every annotator pair on the items both answered, each with a 95% percentile
bootstrap CI over the annotated items (1,000 replicates, seeded) and the band of Regier et al. (2013):
good > 0.4, questionable 0.2–0.4, unacceptable < 0.2.

The bootstrap uses closed forms vectorised over multinomial replicate weights (checked against the
packages in the tests): for binary answers with m_u values and n_u1 "yes" in item u (m_u ≥ 2),
α = 1 − (n − 1)·Σ_u 2·n_u0·n_u1/(m_u − 1) / (2·n_0·n_1), n = Σ m_u, n_c = Σ n_uc;
κ = (p_o − p_e)/(1 − p_e) from the weighted 2×2 table.
"""

from __future__ import annotations

import warnings
import zlib
from itertools import combinations

import numpy as np
import polars as pl

from noisycal_platform.metrics import bootstrap_counts

__all__ = [
    "AGREEMENT_SCHEMA",
    "agreement_band",
    "agreement_stats",
    "alpha_bootstrap",
    "cohen_kappa",
    "kappa_bootstrap",
    "krippendorff_alpha",
    "percentile_ci",
    "reliability_matrix",
]

AGREEMENT_SCHEMA: dict[str, pl.DataType] = {
    "dataset": pl.String(),
    "issue_type": pl.String(),
    "statistic": pl.String(),  # "krippendorff_alpha" | "cohen_kappa"
    "annotator_a": pl.String(),  # null for alpha
    "annotator_b": pl.String(),
    "role_pair": pl.String(),  # κ: "expert-expert"|"expert-lay"|"lay-lay"; α: "all"|"expert"|"lay"
    "n_annotators": pl.Int64(),
    "n_items": pl.Int64(),
    "value": pl.Float64(),
    "ci_low": pl.Float64(),
    "ci_high": pl.Float64(),
    "band": pl.String(),
}


def agreement_band(value: float) -> str:
    """Regier et al. (2013): "good" > 0.4, "questionable" 0.2–0.4, "unacceptable" < 0.2; nan: "undefined"."""
    if value is None or not np.isfinite(value):
        return "undefined"
    if value > 0.4:
        return "good"
    if value >= 0.2:
        return "questionable"
    return "unacceptable"


def percentile_ci(reps: np.ndarray, level: float = 0.95) -> tuple[float, float]:
    """Percentile interval of the finite replicates (nan if none)."""
    r = np.asarray(reps, float)
    r = r[np.isfinite(r)]
    if r.size == 0:
        return float("nan"), float("nan")
    lo, hi = np.percentile(r, [50 * (1 - level), 50 * (1 + level)])
    return float(lo), float(hi)


def krippendorff_alpha(matrix: np.ndarray) -> float:
    """Nominal Krippendorff α of an annotators × items matrix of 0/1 with nan for missing (package value)."""
    m = np.asarray(matrix, float)
    vals = m[np.isfinite(m)]
    if np.unique(vals).size < 2 or (np.isfinite(m).sum(axis=0) >= 2).sum() == 0:
        return float("nan")
    import krippendorff  # lazy, like sklearn below (import cost for the Dagster code location)

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return float(krippendorff.alpha(reliability_data=m, level_of_measurement="nominal"))


def cohen_kappa(a, b) -> float:
    """Cohen's κ of two 0/1 answer vectors on the same items (scikit-learn; nan when undefined)."""
    a = np.asarray(a)
    b = np.asarray(b)
    if a.size == 0:
        return float("nan")
    from sklearn.metrics import cohen_kappa_score

    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return float(cohen_kappa_score(a, b, labels=[0, 1]))


def _alpha_from_weights(m_u: np.ndarray, n1_u: np.ndarray, w: np.ndarray) -> np.ndarray:
    pair = m_u >= 2
    m, n1, ww = m_u[pair], n1_u[pair], w[..., pair]
    if m.size == 0:
        return np.full(w.shape[:-1], np.nan)
    d = 2.0 * (m - n1) * n1 / (m - 1)
    n = ww @ m
    N1 = ww @ n1
    N0 = n - N1
    do = ww @ d
    with np.errstate(divide="ignore", invalid="ignore"):
        a = 1.0 - (n - 1) * do / (2.0 * N0 * N1)
    return np.where((N0 > 0) & (N1 > 0), a, np.nan)


def alpha_bootstrap(matrix: np.ndarray, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """α on ``n_boot`` resamples (with replacement) of the items (columns) that hold any answer."""
    m = np.asarray(matrix, float)
    m = m[:, np.isfinite(m).any(axis=0)]
    if m.shape[1] == 0:
        return np.full(n_boot, np.nan)
    fin = np.isfinite(m)
    m_u = fin.sum(axis=0).astype(float)
    n1_u = np.where(fin, m, 0).sum(axis=0)
    w = bootstrap_counts(m.shape[1], n_boot, rng)
    return _alpha_from_weights(m_u, n1_u, w)


def _kappa_from_weights(a: np.ndarray, b: np.ndarray, w: np.ndarray) -> np.ndarray:
    n = w.sum(axis=-1)
    p11 = w @ (a * b)
    p00 = w @ ((1 - a) * (1 - b))
    pa = w @ a
    pb = w @ b
    with np.errstate(divide="ignore", invalid="ignore"):
        po = (p11 + p00) / n
        pe = (pa * pb + (n - pa) * (n - pb)) / (n * n)
        k = (po - pe) / (1 - pe)
    return np.where(pe < 1, k, np.nan)


def kappa_bootstrap(a, b, n_boot: int, rng: np.random.Generator) -> np.ndarray:
    """κ on ``n_boot`` resamples of the items both annotators answered."""
    a = np.asarray(a, float)
    b = np.asarray(b, float)
    if a.size == 0:
        return np.full(n_boot, np.nan)
    return _kappa_from_weights(a, b, bootstrap_counts(a.size, n_boot, rng))


def reliability_matrix(effective: pl.DataFrame) -> tuple[np.ndarray, list[str], list[tuple[str, str]]]:
    """Annotators × candidates matrix (1 = yes, 0 = no, nan = not answered) of one (dataset, issue_type)."""
    df = effective.with_columns(pl.col("item_id_2").fill_null("").alias("_k2"))
    annotators = sorted(df["annotator_id"].unique().to_list())
    items = sorted(set(zip(df["item_id"].to_list(), df["_k2"].to_list(), strict=True)))
    ai = {a: i for i, a in enumerate(annotators)}
    ii = {k: j for j, k in enumerate(items)}
    mat = np.full((len(annotators), len(items)), np.nan)
    rows = np.array([ai[a] for a in df["annotator_id"].to_list()], dtype=np.int64)
    cols = np.array([ii[k] for k in zip(df["item_id"].to_list(), df["_k2"].to_list(), strict=True)], np.int64)
    if rows.size:
        mat[rows, cols] = df["yes"].cast(pl.Float64).to_numpy()
    return mat, annotators, items


def _rng(seed: int, *key: str) -> np.random.Generator:
    return np.random.default_rng([int(seed), zlib.crc32("\x1f".join(key).encode())])


def agreement_stats(
    effective: pl.DataFrame,
    *,
    n_boot: int = 1000,
    seed: int = 0,
    level: float = 0.95,
) -> pl.DataFrame:
    """α across all annotators and κ for every pair, per (dataset, issue_type), with bootstrap CIs.

    With experts and lay raters in one frame, α is also given within each role (``role_pair`` "expert",
    "lay"), the paper's Figure 2 being the experts' α.

    ``effective``: output of :func:`protocol.effective_answers` (filter roles beforehand if wanted).
    Each statistic draws from its own generator seeded by (seed, dataset, issue_type, statistic, pair),
    so adding an annotator does not change the other rows. Output schema: ``AGREEMENT_SCHEMA``.
    """
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    rows: list[dict] = []
    for (ds, it), part in sorted(effective.group_by(["dataset", "issue_type"]), key=lambda g: g[0]):
        mat, annotators, _ = reliability_matrix(part)
        role = dict(zip(part["annotator_id"].to_list(), part["role"].to_list(), strict=True))
        subsets = [("all", np.ones(len(annotators), bool))]
        roles_present = sorted({role[a] for a in annotators})
        if len(roles_present) > 1:  # mixed panel: also α within each role (seed Figure 2 = experts only)
            for rl in roles_present:
                m = np.array([role[a] == rl for a in annotators])
                if m.sum() >= 2:
                    subsets.append((rl, m))
        for name, sel in subsets:
            sub = mat[sel]
            alpha = krippendorff_alpha(sub)
            lo, hi = percentile_ci(alpha_bootstrap(sub, n_boot, _rng(seed, ds, it, "alpha", name)), level)
            rows.append(
                dict(dataset=ds, issue_type=it, statistic="krippendorff_alpha", annotator_a=None,
                     annotator_b=None, role_pair=name, n_annotators=int(sel.sum()),
                     n_items=int(np.isfinite(sub).any(axis=0).sum()), value=alpha, ci_low=lo, ci_high=hi,
                     band=agreement_band(alpha))
            )
        for i, j in combinations(range(len(annotators)), 2):
            both = np.isfinite(mat[i]) & np.isfinite(mat[j])
            a, b = mat[i, both], mat[j, both]
            k = cohen_kappa(a.astype(int), b.astype(int))
            reps = kappa_bootstrap(a, b, n_boot, _rng(seed, ds, it, "kappa", annotators[i], annotators[j]))
            lo, hi = percentile_ci(reps, level)
            rp = "-".join(sorted((role[annotators[i]], role[annotators[j]])))
            rows.append(
                dict(dataset=ds, issue_type=it, statistic="cohen_kappa", annotator_a=annotators[i],
                     annotator_b=annotators[j], role_pair=rp, n_annotators=2, n_items=int(both.sum()),
                     value=k, ci_low=lo, ci_high=hi, band=agreement_band(k))
            )
    return pl.DataFrame(rows, schema=AGREEMENT_SCHEMA)
