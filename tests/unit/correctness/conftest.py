"""Shared small demo set for the correctness pipeline tests (synthetic, seeded)."""

import pytest

from noisycal_platform.correctness import pipeline as cp
from noisycal_platform.correctness.demo_data import write_demo_correctness_inputs


@pytest.fixture(scope="session")
def demo_frames(tmp_path_factory):
    home = tmp_path_factory.mktemp("corr_home")
    write_demo_correctness_inputs(home, seed=0, n_per_group=100)
    gen = cp.raw_generations(home / "correctness" / "generations")
    audit = cp.raw_audit_labels(home / "correctness" / "audit", gen)
    decisions = cp.criterion_decisions(gen, cp.CriteriaConfig(embedding_model_path=None))
    scores = cp.ue_scores(gen)
    return {"home": home, "gen": gen, "audit": audit, "decisions": decisions, "scores": scores}
