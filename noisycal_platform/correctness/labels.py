"""Answer parsing and label canonicalisation shared by exact match, Answer Entropy and the judge (Rethinking
Correctness 2026
§3.1).

EM normalisation: Unicode NFKC, casefold, punctuation -> space, whitespace collapsed; the complete extracted
answer must map onto canonical candidate names after splitting on list separators; literal "none" is the empty
set; no synonym expansion.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Sequence
from dataclasses import dataclass

__all__ = ["ParsedOutput", "canonical_labels", "normalise_text", "parse_model_output"]

# List separators. "or" is deliberately absent: "A or B" is an uncertain answer, not a label set.
_SEPARATOR_CHARS = ",;|/&+\n"
_SEP_RE = re.compile(r"\s*(?:[,;|/&+\n]|\band\b)\s*")
_NONE_WORDS = frozenset({"none"})


def _strip_punctuation(text: str, keep: str) -> str:
    """Replace every Unicode punctuation/symbol character not in `keep` with a space."""
    out = []
    for ch in text:
        cat = unicodedata.category(ch)
        if ch in keep:
            out.append(ch)
        elif cat[0] in "PS" or cat in ("Cc", "Cf"):
            out.append("\n" if ch == "\n" else " ")
        else:
            out.append(ch)
    return "".join(out)


def normalise_text(text: str, *, keep_separators: bool = False) -> str:
    """NFKC + casefold + punctuation -> space + collapsed whitespace (list separators kept if asked)."""
    t = unicodedata.normalize("NFKC", text).casefold()
    t = _strip_punctuation(t, _SEPARATOR_CHARS if keep_separators else "")
    if keep_separators:
        t = re.sub(r"[^\S\n]+", " ", t)
        return re.sub(r"\s*\n\s*", "\n", t).strip()
    return " ".join(t.split())


def _key(text: str) -> str:
    """Normalised text with list separators kept and the spaces around them removed."""
    return re.sub(r" ?([,;|/&+\n]) ?", r"\1", normalise_text(text, keep_separators=True))


def _label_index(candidate_labels: Sequence[str]) -> dict[str, str]:
    index: dict[str, str] = {}
    for label in candidate_labels:
        key = _key(label)
        if not key:
            raise ValueError(f"candidate_labels contains a label that normalises to nothing: {label!r}")
        if key in index and index[key] != label:
            raise ValueError(
                f"candidate_labels {index[key]!r} and {label!r} normalise to the same text {key!r}"
            )
        index[key] = label
    return index


def canonical_labels(answer: str | None, candidate_labels: Sequence[str]) -> frozenset[str] | None:
    """Map an extracted answer onto a frozenset of canonical candidate labels, or None if it does not map.

    Every piece of the answer, split on list separators (, ; | / & + newline, the word "and"), must equal a
    normalised candidate label; candidate labels that themselves contain a separator are matched whole first.
    Literal "none" (the whole answer) is the empty set. Duplicates collapse; order is irrelevant.
    """
    if answer is None:
        return None
    if not isinstance(answer, str):
        raise ValueError(f"answer must be a str or None, got {type(answer).__name__}")
    index = _label_index(candidate_labels)
    if normalise_text(answer) in _NONE_WORDS:
        return frozenset()
    text = _key(answer)
    if text in index:
        return frozenset({index[text]})
    if not text:
        return None
    # Protect candidate labels containing a separator ("fluid and electrolyte disorders"), longest first.
    placeholders: dict[str, str] = {}
    for i, key in enumerate(sorted((k for k in index if _SEP_RE.search(k)), key=len, reverse=True)):
        pattern = re.compile(r"(?<!\w)" + re.escape(key) + r"(?!\w)")
        if pattern.search(text):
            token = f"\x00{i}\x00"
            placeholders[token] = index[key]
            text = pattern.sub(token, text)
    found: set[str] = set()
    for piece in _SEP_RE.split(text):
        piece = piece.strip()
        if not piece:
            continue
        if piece in placeholders:
            found.add(placeholders[piece])
            continue
        key = " ".join(piece.split())
        if key not in index:
            return None
        found.add(index[key])
    if not found:
        return None
    return frozenset(found)


@dataclass(frozen=True)
class ParsedOutput:
    """The model's raw output parsed as JSON {"reasoning": str, "answer": str}; answer None when malformed."""

    answer: str | None
    reasoning: str | None
    error: str | None


_FENCE_RE = re.compile(r"^\s*```(?:json)?\s*(.*?)\s*```\s*$", re.DOTALL | re.IGNORECASE)


def parse_model_output(raw: str | None) -> ParsedOutput:
    """Parse the raw model output (a JSON object, optionally inside a ``` fence); never raises on bad JSON."""
    if raw is None:
        return ParsedOutput(None, None, "missing output")
    m = _FENCE_RE.match(raw)
    body = m.group(1) if m else raw.strip()
    try:
        obj = json.loads(body)
    except (json.JSONDecodeError, RecursionError) as exc:
        return ParsedOutput(None, None, f"malformed JSON: {exc.msg if hasattr(exc, 'msg') else exc}")
    if not isinstance(obj, dict):
        return ParsedOutput(None, None, f"JSON is a {type(obj).__name__}, not an object")
    answer = obj.get("answer")
    reasoning = obj.get("reasoning")
    if not isinstance(answer, str):
        return ParsedOutput(
            None, reasoning if isinstance(reasoning, str) else None, "JSON has no string 'answer' field"
        )
    return ParsedOutput(answer, reasoning if isinstance(reasoning, str) else None, None)
