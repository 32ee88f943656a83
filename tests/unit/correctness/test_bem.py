"""BEM criterion against a tiny randomly initialised BERT cross-encoder built and saved in the test.

The expected probabilities are computed independently: the input ``[CLS] candidate [SEP] reference [SEP]
question [SEP]`` is assembled token by token here (segment ids 0 / 1 / 2, the published BEM layout) and fed
to the saved model through plain transformers, then softmax(logits)[:, 1]. In the default run (about 7 s with
the transformers import on a quiet 2-core machine): the BEM criterion is the seed's §3.1 comparison.
"""

import hashlib
import importlib.util
import json

import numpy as np
import polars as pl
import pytest

from noisycal_platform.correctness import pipeline as cp

pytestmark = [
    pytest.mark.skipif(
        any(importlib.util.find_spec(m) is None for m in ("torch", "transformers")),
        reason="torch/transformers not installed (`llm` extra)",
    ),
]

WORDS = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "which", "diagnosis", "sepsis", "admit", "discharge",
         "acute", "kidney", "failure", "none", "heart", ",", "?"]


def _tiny_bem(path, id2label=None, seed=0):
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    path.mkdir(parents=True, exist_ok=True)
    (path / "vocab.txt").write_text("\n".join(WORDS) + "\n", encoding="utf-8")
    BertTokenizerFast(vocab=str(path / "vocab.txt"), do_lower_case=True).save_pretrained(path)
    cfg = BertConfig(vocab_size=len(WORDS), hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
                     intermediate_size=32, max_position_embeddings=64, type_vocab_size=3, num_labels=2,
                     initializer_range=0.3)
    if id2label is not None:
        cfg.id2label, cfg.label2id = id2label, {v: k for k, v in id2label.items()}
    torch.manual_seed(seed)
    model = BertForSequenceClassification(cfg)
    with torch.no_grad():  # spread the random logits so the threshold splits the items
        model.classifier.weight.mul_(3.0)
    model.save_pretrained(path)
    return path


def _reference_scores(path, triples, eq_id):
    import torch
    from transformers import BertForSequenceClassification, BertTokenizerFast

    tok = BertTokenizerFast.from_pretrained(path, local_files_only=True)
    model = BertForSequenceClassification.from_pretrained(path, local_files_only=True).eval()
    out = []
    for q, r, c in triples:
        tq, tr, tc = tok.tokenize(q), tok.tokenize(r), tok.tokenize(c)
        tokens = ["[CLS]", *tc, "[SEP]", *tr, "[SEP]", *tq, "[SEP]"]
        ids = torch.tensor([tok.convert_tokens_to_ids(tokens)])
        seg = torch.tensor([[0] * (len(tc) + 2) + [1] * (len(tr) + 1) + [2] * (len(tq) + 1)])
        with torch.no_grad():
            logits = model(input_ids=ids, token_type_ids=seg, attention_mask=torch.ones_like(ids)).logits
        out.append(float(torch.softmax(logits.double(), -1)[0, eq_id]))
    return np.array(out)


def _gen(n=8):
    answers = ["sepsis", "admit", "acute kidney failure", "none", "heart failure, sepsis", "discharge",
               "sepsis, admit", None]
    refs = [["Sepsis"], ["Admit"], ["Sepsis"], [], ["Sepsis"], ["Admit"], ["Admit", "Sepsis"], ["Sepsis"]]
    return pl.DataFrame([
        {"dataset": "d", "model": "m", "case_id": f"c{i}", "task_question": "which diagnosis ?",
         "candidate_labels": ["Sepsis", "Admit"], "reference_labels": refs[i], "multi_label": True,
         "answer": answers[i]}
        for i in range(n)
    ])


def _dir_sha256(path):
    outer = hashlib.sha256()
    for f in sorted(p for p in path.rglob("*") if p.is_file()):
        inner = hashlib.sha256(f.read_bytes()).hexdigest()
        outer.update(f"{f.relative_to(path).as_posix()}\0{inner}\n".encode())
    return outer.hexdigest()


def test_bem_loads_scores_thresholds_and_reloads_identically(tmp_path):
    from noisycal_platform.correctness.criteria import reference_text
    from noisycal_platform.correctness.models import load_bem_model

    path = _tiny_bem(tmp_path / "bem")
    bem = load_bem_model(path)
    assert bem.equivalent_id == 1  # generic LABEL_0/LABEL_1: class 1 is "equivalent" (published BEM)
    gen = _gen()
    rows = gen.to_dicts()
    triples = [(r["task_question"], reference_text(r["reference_labels"]), r["answer"] or "") for r in rows]
    want = _reference_scores(path, triples, 1)
    got = bem.scores(*map(list, zip(*triples, strict=True)))
    assert got == pytest.approx(want, rel=1e-5)  # batched/padded vs one-by-one: float32 kernels differ
    parseable = np.array([r["answer"] is not None for r in rows])
    srt = np.sort(want[parseable])
    threshold = float(srt[3] + srt[4]) / 2  # midway between two scores: no decision rests on float rounding
    assert (want[parseable] >= threshold).any() and (want[parseable] < threshold).any()

    cfg = cp.CriteriaConfig(embedding_model_path=None, bem_model_path=str(path), bem_threshold=threshold)
    d1 = cp.criterion_decisions(gen, cfg).filter(pl.col("criterion") == "bem").sort("case_id")
    expected = [bool(p >= threshold) and ok for p, ok in zip(want, parseable, strict=True)]
    assert d1["accepted"].to_list() == expected
    assert d1["invalid"].to_list() == (~parseable).tolist()
    assert not d1["skipped"].any()
    assert d1["criterion_model"].unique().to_list() == [str(path)]
    assert d1["criterion_model_sha256"].unique().to_list() == [_dir_sha256(path)]
    # a second load of the same files gives the same decisions (exact: same weights, same inputs)
    d2 = cp.criterion_decisions(gen, cfg).filter(pl.col("criterion") == "bem").sort("case_id")
    assert d2["accepted"].to_list() == d1["accepted"].to_list()
    assert d2["reason"].to_list() == d1["reason"].to_list()


def test_bem_equivalent_label_read_from_config_and_bad_configs_refused(tmp_path):
    from noisycal_platform.correctness.models import load_bem_model

    named = _tiny_bem(tmp_path / "named", id2label={0: "equivalent", 1: "not_equivalent"})
    assert load_bem_model(named).equivalent_id == 0
    odd = _tiny_bem(tmp_path / "odd", id2label={0: "yes", 1: "no"})
    with pytest.raises(ValueError, match="equivalent"):
        load_bem_model(odd)
    three = _tiny_bem(tmp_path / "three", id2label={0: "equivalent", 1: "b", 2: "c"})
    assert json.loads((three / "config.json").read_text())["id2label"]["2"] == "c"
    with pytest.raises(ValueError, match="2 classes"):
        load_bem_model(three)
    with pytest.raises(FileNotFoundError, match="no config"):
        load_bem_model(tmp_path / "missing")


def test_bem_skipped_without_a_path_and_never_substituted():
    d = cp.criterion_decisions(_gen(), cp.CriteriaConfig(embedding_model_path=None))
    bem = d.filter(pl.col("criterion") == "bem")
    assert bem["skipped"].all() and bem["accepted"].null_count() == bem.height
    assert bem["reason"].str.contains("bem_model_path").all()
