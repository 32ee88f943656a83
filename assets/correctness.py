"""Correctness stage (Rethinking Correctness 2026): criteria decisions, UE scores, the audit against human labels, the
AUROC
sensitivity of UE methods to the criterion, and false acceptance by error category.

raw/generations, raw/audit_labels -> criterion_decisions, ue_scores -> criterion_audit, ue_sensitivity,
false_acceptance. Criteria whose model or endpoint is not configured are skipped with a visible note.
"""

import dagster as dg
import polars as pl

from assets.policy import CORRECTNESS
from assets.raw import AUDIT_LABELS, GENERATIONS
from noisycal_platform.correctness import pipeline as cp
from noisycal_platform.correctness.sensitivity import SENSITIVITY_SCHEMA
from resources.inbox import InboxResource
from resources.judge import JudgeResource
from resources.settings import SettingsResource

CRITERION_DECISIONS, UE_SCORES, CRITERION_AUDIT, UE_SENSITIVITY, FALSE_ACCEPTANCE, AUDIT_AGREEMENT = (
    CORRECTNESS.key(n)
    for n in ("criterion_decisions", "ue_scores", "criterion_audit", "ue_sensitivity", "false_acceptance",
              "audit_agreement")
)


@CORRECTNESS.asset(
    ins={"generations": dg.AssetIn(GENERATIONS)},
    schema=cp.DECISIONS_SCHEMA,
    description="Accept/reject, invalid flag and reason per prediction and criterion: exact match, ROUGE-L "
    "(0.20/0.30/0.40), BEM (local model), embedding similarity, NLI, LLM judge; unconfigured criteria appear "
    "as skipped.",
)
def criterion_decisions(
    generations: pl.DataFrame, judge: JudgeResource, settings: SettingsResource
) -> dg.Output[pl.DataFrame]:
    config = cp.CriteriaConfig(
        embedding_model_path=settings.embedding_model_path or None,
        bem_model_path=settings.bem_model_path or None,
        nli_model_paths=dict(settings.nli_model_paths),
        judge=judge.get_judge(),
    )
    frame = cp.criterion_decisions(generations, config)
    md = "\n".join(
        f"- `{r['criterion']}`: "
        + (f"skipped — {r['note']}" if r["skipped"] else f"accepts {r['acceptance_rate']:.3f}")
        for r in cp.criteria_summary(frame).iter_rows(named=True)
    )
    return dg.Output(frame, metadata={"criteria": dg.MetadataValue.md(md)})


@CORRECTNESS.asset(
    ins={"generations": dg.AssetIn(GENERATIONS)},
    schema=cp.UE_SCORES_SCHEMA,
    description="Uncertainty scores per prediction (higher = more uncertain): Self-Certainty, LogTokU, "
    "Answer Entropy, Semantic Entropy (discrete and likelihood-weighted).",
)
def ue_scores(generations: pl.DataFrame, settings: SettingsResource) -> dg.Output[pl.DataFrame]:
    frame = cp.ue_scores(generations, nli_model=cp.entropy_nli_model(settings.nli_model_paths))
    return dg.Output(frame, metadata={"clustering": str(frame["se_clustering"][0]) if frame.height else "none"})


@CORRECTNESS.asset(
    ins={
        "criterion_decisions": dg.AssetIn(CRITERION_DECISIONS),
        "ue_scores": dg.AssetIn(UE_SCORES),
        "audit_labels": dg.AssetIn(AUDIT_LABELS),
    },
    schema=cp.AUDIT_RESULT_SCHEMA,
    description="Per criterion: H_f (balanced accuracy vs humans), D_f and F_f = 1 − D_f (AUROC distortion of "
    "UE methods), directional errors, paired stratified bootstrap CIs; Bonferroni over the configured "
    "comparison pairs (default: the seed's BEM vs EM and judge vs EM).",
)
def criterion_audit(
    criterion_decisions: pl.DataFrame,
    ue_scores: pl.DataFrame,
    audit_labels: pl.DataFrame,
    settings: SettingsResource,
) -> dg.Output[pl.DataFrame]:
    frame = cp.criterion_audit(
        criterion_decisions,
        ue_scores,
        audit_labels,
        comparisons=[tuple(p) for p in settings.correctness_comparisons],
        n_boot=settings.n_bootstrap_correctness,
        seed=settings.seed,
    )
    overall = frame.filter((pl.col("scope_kind") == "all") & (pl.col("status") == "ok")).sort("criterion")
    md = "\n".join(
        f"- `{r['criterion']}`: H_f {r['h_f']:.3f} [{r['h_f_lo']:.3f}, {r['h_f_hi']:.3f}], F_f {r['f_f']:.3f}"
        for r in overall.iter_rows(named=True)
    )
    return dg.Output(frame, metadata={"overall": dg.MetadataValue.md(md or "no audited criterion")})


@CORRECTNESS.asset(
    ins={"criterion_decisions": dg.AssetIn(CRITERION_DECISIONS), "ue_scores": dg.AssetIn(UE_SCORES)},
    schema=SENSITIVITY_SCHEMA,
    description="AUROC per dataset × UE method × criterion on the full prediction set (models equally "
    "weighted), the spread across criteria and the UE-method ranking reversals.",
)
def ue_sensitivity(criterion_decisions: pl.DataFrame, ue_scores: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    frame = cp.ue_sensitivity(criterion_decisions, ue_scores)
    return dg.Output(
        frame,
        metadata={
            "max_spread": float(frame["spread"].max()) if frame.height else 0.0,
            "cells_in_a_reversal": int(frame["in_reversal"].sum()) if frame.height else 0,
        },
    )


@CORRECTNESS.asset(
    ins={"criterion_decisions": dg.AssetIn(CRITERION_DECISIONS), "audit_labels": dg.AssetIn(AUDIT_LABELS)},
    schema=cp.FALSE_ACCEPTANCE_SCHEMA,
    description="False-acceptance rate per criterion and human error category (equal-weight mean over the "
    "dataset–model groups that contain the category).",
)
def false_acceptance(criterion_decisions: pl.DataFrame, audit_labels: pl.DataFrame) -> dg.Output[pl.DataFrame]:
    return dg.Output(cp.false_acceptance(criterion_decisions, audit_labels))


@CORRECTNESS.asset(
    ins={"generations": dg.AssetIn(GENERATIONS)},
    schema=cp.AUDIT_AGREEMENT_SCHEMA,
    description="The two annotators of the audit sample (exports/audit_sample.csv): Cohen's κ and raw agreement "
    "per group with bootstrap CIs; disagreements exported for the joint decision "
    "(exports/audit_disagreements.csv); agreements plus joint decisions written as correctness/audit/"
    "consensus.csv (undecided items left out and counted); each CSV spreadsheet-safe with an exact .parquet twin.",
)
def audit_agreement(
    generations: pl.DataFrame, inbox: InboxResource, settings: SettingsResource
) -> dg.Output[pl.DataFrame]:
    res = cp.audit_agreement(inbox.layout.home, generations, seed=settings.seed)
    if res is None:
        return dg.Output(pl.DataFrame(schema=cp.AUDIT_AGREEMENT_SCHEMA), metadata={"note": "no audit sample yet"})
    overall = res.agreement.filter(pl.col("scope_kind") == "all").row(0, named=True)
    return dg.Output(
        res.agreement,
        metadata={
            "kappa": overall["kappa"],
            "raw_agreement": overall["raw_agreement"],
            "items_both_annotated": overall["n_items"],
            "disagreements_undecided": overall["n_undecided"],
            "consensus_labels": res.consensus.height,
        },
    )
