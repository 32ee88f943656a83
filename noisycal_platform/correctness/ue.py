"""Answer-only uncertainty scores, higher = more uncertain (Rethinking Correctness 2026 §3.1; each formula's paper is
named below).

- Self-Certainty (Kang et al. 2025): u = -mean_t KL(U_V || p_t), KL = logsumexp(z_t) - mean_j z_tj - log V,
  from per-token logsumexp, mean logit and vocabulary size V (exact, full vocabulary).
- LogTokU (Ma et al. 2025): per token alpha = ReLU(top-K raw logits), K = 2, alpha0 = sum alpha,
  EU = K/(alpha0 + K), AU = -sum_k (alpha_k/alpha0)(psi(alpha_k+1) - psi(alpha0+1)); u = mean of the 25
  largest
  AU*EU over answer tokens (all if fewer). NaN if a token has alpha0 = 0.
- Answer Entropy: -sum_a (n_a/N) log(n_a/N) over the N sampled answers keyed by their EM canonical label set
  (an answer that does not map is keyed by its normalised text).
- Semantic Entropy, discrete (Farquhar et al. 2024): -sum_c (n_c/N) log(n_c/N) over clusters;
likelihood-weighted:
  p_i = softmax_i(mean token log-lik of sample i), p_c = sum_{i in c} p_i, SE = -sum_c p_c log p_c.
  Clusters come
  from bidirectional entailment when an NLI model is given, else from the canonical label set.
Hand-written: no installed library implements these from stored logits (lm-polygraph has no LogTokU).
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Sequence
from functools import lru_cache

import numpy as np
from numpy.typing import ArrayLike
from scipy.special import digamma

from noisycal_platform.correctness.labels import canonical_labels, normalise_text

__all__ = [
    "answer_entropy",
    "answer_keys",
    "cluster_by_entailment",
    "logtoku",
    "logtoku_token_values",
    "self_certainty",
    "semantic_entropy_discrete",
    "semantic_entropy_weighted",
]


def _ragged(values: Sequence[ArrayLike], name: str) -> tuple[np.ndarray, np.ndarray]:
    arrs = [np.asarray(v, dtype=np.float64) for v in values]
    lengths = np.array([a.shape[0] for a in arrs], dtype=np.int64)
    if np.any(lengths == 0):
        raise ValueError(f"{name} has an empty entry at index {int(np.flatnonzero(lengths == 0)[0])}")
    return (np.concatenate(arrs) if arrs else np.zeros(0)), lengths


def _segment_ids(lengths: np.ndarray) -> np.ndarray:
    return np.repeat(np.arange(lengths.shape[0]), lengths)


def _segment_mean(flat: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    sums = np.bincount(_segment_ids(lengths), weights=flat, minlength=lengths.shape[0])
    return sums / lengths


def self_certainty(
    logsumexp: Sequence[ArrayLike], mean_logit: Sequence[ArrayLike], vocab_size: ArrayLike
) -> np.ndarray:
    """u_i = -(1/T_i) sum_t [logsumexp_t - mean_logit_t - log V_i]  (negated Self-Certainty; one row per
    answer)."""
    lse, lengths = _ragged(logsumexp, "logsumexp")
    mean, lengths2 = _ragged(mean_logit, "mean_logit")
    if not np.array_equal(lengths, lengths2):
        raise ValueError("logsumexp and mean_logit must have the same number of tokens per answer")
    return _self_certainty_flat(lse, mean, lengths, np.asarray(vocab_size, dtype=np.float64))


def _self_certainty_flat(
    lse: np.ndarray, mean: np.ndarray, lengths: np.ndarray, vocab: np.ndarray
) -> np.ndarray:
    if vocab.shape != lengths.shape or np.any(vocab < 2):
        raise ValueError(f"vocab_size must be >= 2 with one value per answer, got shape {vocab.shape}")
    kl = lse - mean - np.repeat(np.log(vocab), lengths)
    return -_segment_mean(kl, lengths)


def logtoku_token_values(top_logits: np.ndarray, k: int = 2) -> np.ndarray:
    """AU*EU per token from raw top logits (rows = tokens, columns >= k, any order)."""
    z = np.asarray(top_logits, dtype=np.float64)
    if z.ndim != 2 or z.shape[1] < k or k < 2:
        raise ValueError(f"top_logits must be (tokens, >= k) with k >= 2, got shape {z.shape} and k={k}")
    alpha = np.maximum(-np.sort(-z, axis=1)[:, :k], 0.0)
    a0 = alpha.sum(axis=1)
    eu = k / (a0 + k)
    with np.errstate(invalid="ignore", divide="ignore"):
        au = -np.sum((alpha / a0[:, None]) * (digamma(alpha + 1.0) - digamma(a0 + 1.0)[:, None]), axis=1)
    au[a0 == 0] = np.nan
    return au * eu


def logtoku(top_logits: Sequence[ArrayLike], *, k: int = 2, top_n: int = 25) -> np.ndarray:
    """u_i = mean of the top_n largest AU*EU token values of answer i (all tokens if fewer)."""
    arrs = [np.asarray(a, dtype=np.float64) for a in top_logits]
    lengths = np.array([a.shape[0] for a in arrs], dtype=np.int64)
    if np.any(lengths == 0):
        raise ValueError(f"top_logits has an empty answer at index {int(np.flatnonzero(lengths == 0)[0])}")
    return _logtoku_flat(np.concatenate(arrs, axis=0), lengths, k=k, top_n=top_n)


def _logtoku_flat(flat_logits: np.ndarray, lengths: np.ndarray, *, k: int, top_n: int) -> np.ndarray:
    if top_n < 1:
        raise ValueError(f"top_n must be >= 1, got {top_n}")
    vals = logtoku_token_values(flat_logits, k)
    seg = _segment_ids(lengths)
    n = lengths.shape[0]
    has_nan = np.bincount(seg, weights=np.isnan(vals).astype(float), minlength=n) > 0
    order = np.lexsort((-np.nan_to_num(vals, nan=-np.inf), seg))
    starts = np.concatenate([[0], np.cumsum(lengths)[:-1]])
    rank = np.arange(vals.shape[0]) - starts[seg[order]]
    keep = order[rank < top_n]
    sums = np.bincount(seg[keep], weights=np.nan_to_num(vals[keep]), minlength=n)
    out = sums / np.minimum(lengths, top_n)
    out[has_nan] = np.nan
    return out


@lru_cache(maxsize=65536)
def _answer_key(answer: str, candidates: tuple[str, ...]) -> Hashable:
    labels = canonical_labels(answer, candidates)
    return ("labels", tuple(sorted(labels))) if labels is not None else ("text", normalise_text(answer))


def answer_keys(
    samples: Sequence[Sequence[str]], candidate_labels: Sequence[Sequence[str]]
) -> list[list[Hashable]]:
    """EM-canonical key of every sampled answer: its sorted label set, or its normalised text if it does
    not map."""
    if len(samples) != len(candidate_labels):
        raise ValueError(
            f"samples and candidate_labels differ in length: {len(samples)} vs {len(candidate_labels)}"
        )
    return [[_answer_key(s, tuple(c)) for s in ss] for ss, c in zip(samples, candidate_labels, strict=True)]


def _codes(keys: Sequence[Sequence[Hashable]]) -> tuple[np.ndarray, np.ndarray]:
    table: dict[Hashable, int] = {}
    codes = np.fromiter((table.setdefault(key, len(table)) for ks in keys for key in ks), dtype=np.int64)
    lengths = np.array([len(ks) for ks in keys], dtype=np.int64)
    if np.any(lengths == 0):
        raise ValueError(f"no samples for answer at index {int(np.flatnonzero(lengths == 0)[0])}")
    return codes, lengths


def _cluster_mass_entropy(codes: np.ndarray, lengths: np.ndarray, weights: np.ndarray) -> np.ndarray:
    """-sum_c p_c log p_c per answer, p_c = sum of the (already normalised) weights of cluster c."""
    seg = _segment_ids(lengths)
    _, inv = np.unique(seg * (codes.max(initial=0) + 1) + codes, return_inverse=True)
    mass = np.bincount(inv, weights=weights)
    owner = np.zeros(mass.shape[0], dtype=np.int64)
    owner[inv] = seg
    with np.errstate(divide="ignore", invalid="ignore"):
        terms = np.where(mass > 0, -mass * np.log(mass), 0.0)
    return np.bincount(owner, weights=terms, minlength=lengths.shape[0])


def answer_entropy(keys: Sequence[Sequence[Hashable]]) -> np.ndarray:
    """-sum_a (n_a/N) log(n_a/N) over distinct sampled-answer keys, per answer."""
    codes, lengths = _codes(keys)
    return _cluster_mass_entropy(codes, lengths, 1.0 / np.repeat(lengths, lengths))


def semantic_entropy_discrete(clusters: Sequence[Sequence[Hashable]]) -> np.ndarray:
    """-sum_c (n_c/N) log(n_c/N) over semantic clusters (cluster ids per sample)."""
    return answer_entropy(clusters)


def semantic_entropy_weighted(
    clusters: Sequence[Sequence[Hashable]], sample_token_logliks: Sequence[Sequence[ArrayLike]]
) -> np.ndarray:
    """p_i = exp(l_i)/sum_j exp(l_j), l_i = mean token log-lik of sample i; SE = -sum_c p_c log p_c."""
    codes, lengths = _codes(clusters)
    per_sample = [np.asarray(t, dtype=np.float64) for ss in sample_token_logliks for t in ss]
    if len(per_sample) != codes.shape[0]:
        raise ValueError(f"sample_token_logliks has {len(per_sample)} samples, clusters has {codes.shape[0]}")
    tok_len = np.array([t.shape[0] for t in per_sample], dtype=np.int64)
    if np.any(tok_len == 0):
        raise ValueError("sample_token_logliks has a sample with no tokens")
    mean_ll = _segment_mean(np.concatenate(per_sample), tok_len)
    return _se_weighted_flat(codes, lengths, mean_ll)


def _se_weighted_flat(codes: np.ndarray, lengths: np.ndarray, mean_ll: np.ndarray) -> np.ndarray:
    seg = _segment_ids(lengths)
    seg_max = np.full(lengths.shape[0], -np.inf)
    np.maximum.at(seg_max, seg, mean_ll)
    w = np.exp(mean_ll - seg_max[seg])
    w = w / np.bincount(seg, weights=w, minlength=lengths.shape[0])[seg]
    return _cluster_mass_entropy(codes, lengths, w)


def cluster_by_entailment(texts: Sequence[str], entails: Callable[[str, str], bool]) -> list[int]:
    """Greedy bidirectional-entailment clustering (Farquhar et al. 2024): text j joins the cluster of the
    first
    earlier representative i with entails(i, j) and entails(j, i); identical texts share a cluster."""
    reps: list[str] = []
    ids: list[int] = []
    for t in texts:
        for c, r in enumerate(reps):
            if t == r or (entails(r, t) and entails(t, r)):
                ids.append(c)
                break
        else:
            reps.append(t)
            ids.append(len(reps) - 1)
    return ids
