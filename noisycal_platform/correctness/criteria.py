"""Correctness criteria (Rethinking Correctness 2026 §3.1): each returns accept/reject, an invalid flag and a reason.

Exact match, ROUGE-L (rouge-score, text ASCII-folded first), BEM answer equivalence (Bulian et al. 2022,
a local cross-encoder), embedding similarity (cosine of sentence embeddings; not BEM), per-label NLI
entailment and an LLM judge behind the `Judge` protocol. Models load from local paths only; a criterion whose
model or endpoint is not configured is skipped by the pipeline with a visible note, never simulated.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from typing import Protocol, runtime_checkable

import numpy as np

from noisycal_platform.correctness.labels import canonical_labels

__all__ = [
    "Decision",
    "FoldingTokenizer",
    "Judge",
    "OpenAICompatibleJudge",
    "ascii_fold",
    "bem_decision",
    "exact_match",
    "judge_decision",
    "judge_messages",
    "nli_decision",
    "reference_text",
    "rouge_l",
    "rouge_l_decision",
    "similarity_decision",
]


@dataclass(frozen=True)
class Decision:
    """One criterion's verdict on one prediction."""

    accepted: bool
    invalid: bool
    reason: str


def _check_labels(candidate_labels: Sequence[str], reference_labels: Sequence[str]) -> None:
    if len(candidate_labels) == 0:
        raise ValueError("candidate_labels must not be empty")
    unknown = set(reference_labels) - set(candidate_labels)
    if unknown:
        raise ValueError(
            f"reference_labels {sorted(unknown)} are not in candidate_labels {list(candidate_labels)}"
        )


@dataclass(frozen=True)
class _SetNotes:
    """How one criterion words its three set verdicts; templates take n, got, ref, missing, extra."""

    not_one: str
    same: str
    differ: str


_EM_NOTES = _SetNotes("single-label task needs one label, got {n}", "label sets equal",
                      "label sets differ (missing {missing}, extra {extra})")
_NLI_NOTES = _SetNotes("single-label task needs one entailed label, got {n}", "entailed label set equals reference",
                       "entailed {got} != reference {ref}")
_JUDGE_NOTES = _SetNotes("single-label task needs one label, judge gave {n}", "judge label set equals reference",
                         "judge labels {got} != reference {ref}")


def _set_verdict(got: frozenset[str] | set[str], reference_labels: Sequence[str], multi_label: bool,
                 notes: _SetNotes) -> Decision:
    """Accept iff the predicted label set equals the reference set (Rethinking Correctness 2026 §2.1); a single-label
    task
    needs exactly one predicted label."""
    if not multi_label and len(got) != 1:
        return Decision(False, False, notes.not_one.format(n=len(got)))
    ref = frozenset(reference_labels)
    if got == ref:
        return Decision(True, False, notes.same)
    note = notes.differ.format(got=sorted(got), ref=sorted(ref), missing=sorted(ref - got), extra=sorted(got - ref))
    return Decision(False, False, note)


def exact_match(
    answer: str | None,
    candidate_labels: Sequence[str],
    reference_labels: Sequence[str],
    *,
    multi_label: bool = True,
) -> Decision:
    """EM: canonical_labels(answer) == set(reference_labels); single-label tasks need exactly one label."""
    _check_labels(candidate_labels, reference_labels)
    if answer is None:
        return Decision(False, True, "no parseable answer")
    got = canonical_labels(answer, candidate_labels)
    if got is None:
        return Decision(False, True, "answer does not map onto the candidate labels")
    return _set_verdict(got, reference_labels, multi_label, _EM_NOTES)


# ---------------------------------------------------------------------------------------------- ROUGE-L


def ascii_fold(text: str) -> str:
    """NFKD-decompose and drop combining marks ("Œdème" -> "Oedeme" only where Unicode decomposes)."""
    decomposed = unicodedata.normalize("NFKD", text)
    return "".join(ch for ch in decomposed if not unicodedata.combining(ch))


class FoldingTokenizer:
    """rouge-score's tokenizer after ASCII folding; letters with no ASCII form are kept, not dropped.

    On ASCII text it equals rouge-score's DefaultTokenizer (lowercase, split on [^a-z0-9], Porter-stem
    tokens longer than 3 characters). rouge-score's own tokenizer drops every non-ASCII character, so
    identical non-ASCII strings would score 0 (rouge-score ``tokenizers.DefaultTokenizer``).
    """

    def __init__(self, use_stemmer: bool) -> None:
        self.use_stemmer = use_stemmer
        if use_stemmer:
            from nltk.stem import porter  # rouge-score's stemmer; imported lazily (nltk import is slow)

            self._stemmer = porter.PorterStemmer()
        else:
            self._stemmer = None

    def tokenize(self, text: str) -> list[str]:
        folded = ascii_fold(text).lower()
        tokens = [t for t in re.split(r"[\W_]+", folded) if t]
        if self._stemmer is not None:
            tokens = [self._stemmer.stem(t) if len(t) > 3 and t.isascii() else t for t in tokens]
        return tokens


def reference_text(reference_labels: Sequence[str]) -> str:
    """Reference string for text criteria: labels joined by ", " (sorted), or "none" for the empty set."""
    return ", ".join(sorted(reference_labels)) if reference_labels else "none"


@lru_cache(maxsize=4)
def _scorer(use_stemmer: bool):
    from rouge_score import rouge_scorer

    return rouge_scorer.RougeScorer(["rougeL"], tokenizer=FoldingTokenizer(use_stemmer))


def rouge_l(prediction: str, target: str, *, use_stemmer: bool = True) -> float:
    """ROUGE-L F-measure (LCS-based) from rouge-score with the ASCII-folding tokenizer."""
    return float(_scorer(use_stemmer).score(target, prediction)["rougeL"].fmeasure)


def rouge_l_decision(score: float, threshold: float, answer: str | None) -> Decision:
    """Accept when ROUGE-L(answer, reference text) >= threshold."""
    if answer is None:
        return Decision(False, True, "no parseable answer")
    if not np.isfinite(score):
        return Decision(False, True, "ROUGE-L undefined")
    if score >= threshold:
        return Decision(True, False, f"ROUGE-L {score:.3f} >= {threshold:.2f}")
    return Decision(False, False, f"ROUGE-L {score:.3f} < {threshold:.2f}")


def similarity_decision(cosine: float, threshold: float, answer: str | None, model_name: str) -> Decision:
    """Embedding similarity: accept when cosine(embed(answer), embed(reference text)) >= threshold."""
    if answer is None:
        return Decision(False, True, "no parseable answer")
    verb = ">=" if cosine >= threshold else "<"
    return Decision(
        bool(cosine >= threshold), False, f"{model_name} cosine {cosine:.3f} {verb} {threshold:.2f}"
    )


def bem_decision(score: float, threshold: float, answer: str | None) -> Decision:
    """BEM: accept when P(candidate equivalent to reference | question) >= threshold (Rethinking Correctness
    2026 §3.1: 0.5)."""
    if answer is None:
        return Decision(False, True, "no parseable answer")
    if not np.isfinite(score):
        return Decision(False, True, "BEM score undefined")
    verb = ">=" if score >= threshold else "<"
    return Decision(bool(score >= threshold), False, f"BEM {score:.3f} {verb} {threshold:.2f}")


# ---------------------------------------------------------------------------------------------- NLI


def nli_decision(
    entail_probs: Sequence[float],
    candidate_labels: Sequence[str],
    reference_labels: Sequence[str],
    *,
    answer: str | None,
    multi_label: bool,
    threshold: float = 0.5,
) -> Decision:
    """Per-label entailment: label in set iff P(entailment | answer, label hypothesis) >= threshold; then
    EM."""
    _check_labels(candidate_labels, reference_labels)
    if answer is None:
        return Decision(False, True, "no parseable answer")
    probs = np.asarray(entail_probs, dtype=float)
    if probs.shape != (len(candidate_labels),):
        raise ValueError(f"entail_probs must have shape ({len(candidate_labels)},), got {probs.shape}")
    got = frozenset(lab for lab, p in zip(candidate_labels, probs, strict=True) if p >= threshold)
    return _set_verdict(got, reference_labels, multi_label, _NLI_NOTES)


# ---------------------------------------------------------------------------------------------- LLM judge


@runtime_checkable
class Judge(Protocol):
    """An LLM judge: takes chat messages, returns the raw reply text (an OpenAI-compatible endpoint or a
    stand-in)."""

    name: str

    def complete(self, messages: list[dict[str, str]]) -> str: ...


_JUDGE_SYSTEM = (
    "You map a clinical model's answer onto a fixed set of candidate labels. Reply with one JSON object and "
    'nothing else: {"labels": [...], "invalid": true|false, "contradiction": true|false}. "labels" lists the '
    "candidate labels the answer asserts, spelled exactly as given (an empty list if the answer asserts "
    "none). "
    'Set "invalid" to true when the answer is uncertain, hedged, a refusal, or names anything outside the '
    'candidate labels. Set "contradiction" to true when the answer both asserts and denies a label.'
)


def judge_messages(task_question: str, candidate_labels: Sequence[str], answer: str) -> list[dict[str, str]]:
    """Judge prompt: the question, the candidate labels and the answer only (no reference, record or
    reasoning)."""
    user = (
        f"Task question: {task_question}\n"
        f"Candidate labels: {json.dumps(list(candidate_labels), ensure_ascii=False)}\n"
        f"Model answer: {answer}"
    )
    return [{"role": "system", "content": _JUDGE_SYSTEM}, {"role": "user", "content": user}]


_FENCE_RE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL | re.IGNORECASE)


def judge_decision(
    reply: str | None,
    candidate_labels: Sequence[str],
    reference_labels: Sequence[str],
    *,
    multi_label: bool,
) -> Decision:
    """Deterministic step: accept only a well-formed reply whose labels are in the candidate space, with no
    invalid or contradiction flag, and whose label set equals the reference. Malformed replies are
    rejected."""
    _check_labels(candidate_labels, reference_labels)
    if reply is None:
        return Decision(False, True, "judge gave no reply")
    m = _FENCE_RE.match(reply)
    try:
        obj = json.loads(m.group(1) if m else reply.strip())
    except (json.JSONDecodeError, RecursionError):
        return Decision(False, True, "malformed judge reply (not JSON)")
    if not isinstance(obj, dict):
        return Decision(False, True, "malformed judge reply (not a JSON object)")
    labels, invalid, contra = obj.get("labels"), obj.get("invalid"), obj.get("contradiction")
    if not isinstance(labels, list) or not all(isinstance(x, str) for x in labels):
        return Decision(False, True, "malformed judge reply ('labels' is not a list of strings)")
    if not isinstance(invalid, bool) or not isinstance(contra, bool):
        return Decision(False, True, "malformed judge reply ('invalid'/'contradiction' not booleans)")
    if invalid:
        return Decision(False, True, "judge flagged the answer invalid")
    if contra:
        return Decision(False, True, "judge flagged a contradiction")
    got: set[str] = set()
    for lab in labels:
        mapped = canonical_labels(lab, candidate_labels)
        if mapped is None or len(mapped) != 1:
            return Decision(False, True, f"judge named an out-of-space label {lab!r}")
        got |= mapped
    return _set_verdict(got, reference_labels, multi_label, _JUDGE_NOTES)


@dataclass
class OpenAICompatibleJudge:
    """Judge served by a local OpenAI-compatible endpoint (POST {base_url}/chat/completions, temperature
    0)."""

    base_url: str
    model: str
    timeout_s: float = 60.0
    name: str = "llm_judge"

    def complete(self, messages: list[dict[str, str]]) -> str:
        import httpx

        url = self.base_url.rstrip("/") + "/chat/completions"
        body = {"model": self.model, "messages": messages, "temperature": 0}
        resp = httpx.post(url, json=body, timeout=self.timeout_s)
        resp.raise_for_status()
        data = resp.json()
        try:
            content = data["choices"][0]["message"]["content"]
        except (KeyError, IndexError, TypeError) as exc:
            raise ValueError(f"judge endpoint {url} returned no choices[0].message.content") from exc
        if not isinstance(content, str):
            raise ValueError(f"judge endpoint {url} returned non-text content")
        return content
