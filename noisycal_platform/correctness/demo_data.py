"""Seeded SYNTHETIC demo inputs for the correctness audit, shaped like Rethinking Correctness 2026 §2.4/§3.1.

Three tasks x three models: first diagnoses (6 labels, multi-label or none), ED disposition (4 outcomes,
single-label) and ICU phenotyping (5 labels, multi-label or none). Every prediction has a latent outcome
(correct as stated, correct but non-canonical wording, missing/partial, extra/wrong, invalid/uncertain,
malformed
JSON); uncertainty signals (top logits, sample agreement, sample log-likelihoods) depend on the outcome so UE
methods have AUROC well above 0.5. The audit holds 50 predictions per group, 25 EM-accepted and 25
EM-rejected.
Nothing here is real patient data or real model output.
"""

from __future__ import annotations

import csv
import json
from pathlib import Path

import numpy as np

from noisycal_platform.correctness.criteria import exact_match

__all__ = ["DEMO_MODELS", "DEMO_TASKS", "write_demo_correctness_inputs"]

DEMO_TASKS: dict[str, dict] = {
    "ehrshot": {
        "question": "Which of these conditions will be newly diagnosed within the next year? Answer with the "
        "matching labels, or none.",
        "labels": [
            "Acute myocardial infarction",
            "Celiac disease",
            "Hyperlipidemia",
            "Hypertension",
            "Lupus",
            "Pancreatic cancer",
        ],
        "multi_label": True,
        "prevalence": 0.18,
        "aliases": {
            "Hypertension": "HTN",
            "Hyperlipidemia": "high cholesterol",
            "Acute myocardial infarction": "heart attack",
        },
    },
    "mcmed": {
        "question": "What is the emergency-department disposition for this visit? "
        "Answer with exactly one label.",
        "labels": ["Discharge", "Observation", "Admit", "ICU"],
        "multi_label": False,
        "prior": [0.55, 0.15, 0.22, 0.08],
        "aliases": {"Admit": "Admit to ward", "Discharge": "Discharged home", "ICU": "Intensive care unit"},
    },
    "mimic_iv": {
        "question": "Which phenotypes will this ICU stay have at discharge? "
        "Answer with the matching labels, or none.",
        "labels": [
            "Acute kidney failure",
            "Sepsis",
            "Acute respiratory failure",
            "Congestive heart failure",
            "Fluid and electrolyte disorders",
        ],
        "multi_label": True,
        "prevalence": 0.3,
        "aliases": {"Acute kidney failure": "AKI", "Congestive heart failure": "CHF"},
    },
}
DEMO_MODELS = {"gemma-4-e4b": 0.0, "gemma-4-26b-a4b": 0.6, "medgemma-1.5-4b": 0.3}  # model skill offsets
OUTCOMES = ("correct", "correct_alias", "missing/partial", "extra/wrong", "invalid/uncertain", "malformed")
VOCAB = 262_144
TOP_K = 5
N_SAMPLES = 10


def _fmt(labels: list[str], rng: np.random.Generator) -> str:
    """Render a label set the way a model might: shuffled, case and punctuation variants, Unicode variants."""
    if not labels:
        return str(rng.choice(["none", "None", "NONE", "None."]))
    labels = list(rng.permutation(labels))
    style = rng.integers(0, 6)
    if style == 1:
        labels = [x.lower() for x in labels]
    elif style == 2:
        labels = [x.upper() for x in labels]
    elif style == 3:
        labels = [x.replace(" ", "\u00a0") for x in labels]  # no-break spaces
    elif style == 4:
        labels = [x.replace("a", "\uff41", 1) for x in labels]  # a fullwidth letter (NFKC folds it)
    sep = str(rng.choice([", ", "; ", " and ", ",", "\n"]))
    end = str(rng.choice(["", ".", "", ""]))
    return sep.join(labels) + end


def _answer(outcome: str, ref: list[str], task: dict, rng: np.random.Generator) -> tuple[str, str]:
    """(answer text, human error category or '') for a latent outcome."""
    labels, multi = task["labels"], task["multi_label"]
    others = [x for x in labels if x not in ref]
    if outcome == "correct":
        return _fmt(ref, rng), ""
    if outcome == "correct_alias":
        alias = [task["aliases"].get(x, x) for x in ref]
        return ", ".join(alias), ""
    if outcome == "missing/partial":
        return (
            _fmt(list(rng.choice(ref, size=len(ref) - 1, replace=False)), rng) if len(ref) >= 2 else "none"
        ), "missing/partial"
    if outcome == "extra/wrong":
        if not multi:
            wrong = [str(rng.choice(others))]
            return _fmt(wrong + (ref if rng.random() < 0.3 else []), rng), "extra/wrong"
        extra = list(rng.choice(others, size=min(len(others), 1 + int(rng.random() < 0.3)), replace=False))
        keep = ref if rng.random() < 0.7 else ref[:-1]
        return _fmt(keep + extra, rng), "extra/wrong"
    if outcome == "invalid/uncertain":
        pick = (
            ref + list(rng.choice(others, size=1)) if ref else list(rng.choice(labels, size=2, replace=False))
        )
        forms = [
            f"Possibly {' or '.join(pick).lower()}",
            "Cannot determine from the available record",
            f"{pick[0]}? Further workup needed",
            f"Likely {pick[0].lower()}, but {pick[-1].lower()} cannot be excluded",
            f"{', '.join(pick)} (uncertain)",
        ]
        return str(rng.choice(forms)), "invalid/uncertain"
    raise ValueError(f"unknown outcome {outcome!r}")


def _outcome(task: dict, ref: list[str], skill: float, rng: np.random.Generator) -> str:
    p_correct = 1.0 / (1.0 + np.exp(-(0.2 + skill)))
    if rng.random() < p_correct:
        return (
            "correct_alias" if rng.random() < 0.03 and any(x in task["aliases"] for x in ref) else "correct"
        )
    probs = np.array([0.30 if len(ref) >= 2 or (task["multi_label"] and ref) else 0.0, 0.40, 0.24, 0.06])
    return str(
        rng.choice(
            ["missing/partial", "extra/wrong", "invalid/uncertain", "malformed"], p=probs / probs.sum()
        )
    )


def _tokens(conf: float, n_tok: int, rng: np.random.Generator) -> dict:
    """Per-token top-K raw logits, logsumexp and mean logit, more peaked when conf is high."""
    top1 = 18.0 + 3.0 * conf + rng.normal(0, 1.5, n_tok)
    gaps = np.cumsum(rng.gamma(1.0 + 2.0 * max(conf, 0.1), 1.0, (n_tok, TOP_K - 1)), axis=1)
    top = np.column_stack([top1, top1[:, None] - gaps])
    mean = rng.normal(-2.0, 0.5, n_tok) - 0.5 * conf
    tail = np.log(VOCAB) + mean + 0.5  # log of the summed mass of the rest of the vocabulary (approx.)
    lse = np.logaddexp(np.logaddexp.reduce(top, axis=1), tail)
    return {
        "answer_top_logits": np.round(top, 4).tolist(),
        "answer_logsumexp": np.round(lse + 1e-4, 4).tolist(),
        "answer_mean_logit": np.round(mean, 4).tolist(),
        "vocab_size": VOCAB,
    }


def _samples(
    answer: str, ref: list[str], task: dict, conf: float, rng: np.random.Generator
) -> tuple[list, list]:
    p_same = 1.0 / (1.0 + np.exp(-(conf - 0.2) * 2.0))
    answers, lls = [], []
    for _ in range(N_SAMPLES):
        if rng.random() < p_same:
            s = answer
        else:
            alt = str(
                rng.choice(
                    ["correct", "missing/partial", "extra/wrong", "invalid/uncertain"],
                    p=[0.3, 0.2, 0.35, 0.15],
                )
            )
            if alt == "missing/partial" and len(ref) < 2:
                alt = "extra/wrong"
            s = _answer(alt, ref, task, rng)[0]
        answers.append(s)
        n_tok = 2 + int(rng.integers(0, 6))
        lls.append(np.round(-rng.exponential(0.15 + 0.6 / (1.0 + np.exp(2.0 * conf)), n_tok), 5).tolist())
    return answers, lls


def write_demo_correctness_inputs(
    home: str | Path, seed: int = 0, *, n_per_group: int = 300, n_audit_per_stratum: int = 25
) -> dict[str, list[Path]]:
    """Write $home/correctness/generations/<task>.jsonl and correctness/audit/<task>.csv (synthetic, seeded).

    Returns {"generations": [...], "audit": [...]} paths. Same seed -> byte-identical files.
    """
    if n_per_group < 4 * n_audit_per_stratum:
        raise ValueError(f"n_per_group must be >= 4 * n_audit_per_stratum, got {n_per_group}")
    rng = np.random.default_rng(seed)
    home = Path(home)
    gen_dir, audit_dir = home / "correctness" / "generations", home / "correctness" / "audit"
    gen_dir.mkdir(parents=True, exist_ok=True)
    audit_dir.mkdir(parents=True, exist_ok=True)
    written: dict[str, list[Path]] = {"generations": [], "audit": []}
    for dataset, task in DEMO_TASKS.items():
        labels = task["labels"]
        refs = []
        difficulty = rng.normal(0, 1, n_per_group)
        for _ in range(n_per_group):  # the same cases are shown to every model
            if task["multi_label"]:
                refs.append([x for x in labels if rng.random() < task["prevalence"]])
            else:
                refs.append([str(rng.choice(labels, p=task["prior"]))])
        records, audit_rows = [], []
        for model, offset in DEMO_MODELS.items():
            em_ok, em_no = [], []
            for i in range(n_per_group):
                ref = refs[i]
                outcome = _outcome(task, ref, offset - 0.8 * difficulty[i] + rng.normal(0, 0.5), rng)
                correct = outcome in ("correct", "correct_alias")
                conf = float(rng.normal(0.9 if correct else 0.1, 0.7))
                case_id = f"{dataset}-{i:05d}"
                reasoning = f"Synthetic reasoning for {case_id}."
                if outcome == "malformed":
                    answer, category = _answer("correct", ref, task, rng)[0], "invalid/uncertain"
                    raw = json.dumps({"reasoning": reasoning, "answer": answer}, ensure_ascii=False)
                    raw = raw[: max(10, len(raw) - int(rng.integers(3, 12)))]  # truncated mid-JSON
                else:
                    answer, category = _answer(outcome, ref, task, rng)
                    raw = json.dumps({"reasoning": reasoning, "answer": answer}, ensure_ascii=False)
                n_tok = max(2, len(answer.split()) + int(rng.integers(1, 4)))
                # Error-type-specific signals: hedged answers have low token evidence but varied samples;
                # confidently wrong (extra/wrong) answers are stable across samples. This is what makes the
                # ranking of UE methods depend on which errors a criterion counts.
                tok_conf = conf + {"invalid/uncertain": -0.9, "missing/partial": 0.6}.get(outcome, 0.0)
                samp_conf = conf + {"extra/wrong": 0.9, "invalid/uncertain": 0.3}.get(outcome, 0.0)
                samples, lls = _samples(answer, ref, task, samp_conf, rng)
                records.append(
                    {
                        "case_id": case_id,
                        "dataset": dataset,
                        "model": model,
                        "task_question": task["question"],
                        "candidate_labels": labels,
                        "reference_labels": sorted(ref),
                        "multi_label": task["multi_label"],
                        "raw_output": raw,
                        **_tokens(tok_conf, n_tok, rng),
                        "sample_answers": samples,
                        "sample_token_logliks": lls,
                    }
                )
                parsed_answer = None if outcome == "malformed" else answer
                em = exact_match(parsed_answer, labels, ref, multi_label=task["multi_label"]).accepted
                (em_ok if em else em_no).append((case_id, correct, category))
            for stratum, pool in (("EM-accepted", em_ok), ("EM-rejected", em_no)):
                if len(pool) < n_audit_per_stratum:
                    raise RuntimeError(f"demo: only {len(pool)} {stratum} predictions for {dataset}/{model}")
                for j in sorted(rng.choice(len(pool), size=n_audit_per_stratum, replace=False)):
                    case_id, correct, category = pool[j]
                    audit_rows.append(
                        {
                            "dataset": dataset,
                            "model": model,
                            "case_id": case_id,
                            "human_correct": int(correct),
                            "error_category": category,
                            "em_stratum": stratum,
                            "decision": "joint" if rng.random() < 15 / 450 else "independent",
                        }
                    )
        gpath = gen_dir / f"{dataset}.jsonl"
        with gpath.open("w", encoding="utf-8") as fh:
            for r in records:
                fh.write(json.dumps(r, ensure_ascii=False) + "\n")
        apath = audit_dir / f"{dataset}.csv"
        with apath.open("w", encoding="utf-8", newline="") as fh:
            w = csv.DictWriter(fh, fieldnames=list(audit_rows[0]))
            w.writeheader()
            w.writerows(audit_rows)
        written["generations"].append(gpath)
        written["audit"].append(apath)
    return written
