"""Does DINO fine-tuning from the ImageNet EfficientNet-Lite0 weights help near-duplicate search on HAM10000?

The first ``--limit`` images in lesion order (whole lesions) and their same-lesion pairs. The frozen Lite0 and the
teacher after each fine-tuning epoch (``train_encoder(..., init=pretrained_init())``, a small CPU configuration:
2 global + 2 local crops, no warm-up) are compared at the same input size by recall at K = #pairs and K = #pairs/3
of the exact pair ranking, and by the recall of the k = 10 nearest-neighbour candidate set the verification uses.

    nice -n 10 .venv/bin/python benchmarks/bench_ham10000_finetune.py --limit 500 --epochs 2 --size 96

Measured 2026-12-01 (2 shared cores, load 4-9): 500 images, 162 pairs, 96 px, 2 epochs in 670 s: recall@162 0.204
frozen, 0.204 after epochs 1 and 2; candidate recall 0.611 frozen, 0.605 fine-tuned.
Measured 2026-12-02 (2 cores, idle): ``--limit 1500 --epochs 3 --size 160 --lr 2e-4``, 600 s of training:
recall@488 0.176 frozen, 0.182 / 0.195 / 0.195 after epochs 1-3; candidate recall 0.502 frozen, 0.502 / 0.506 / 0.506.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(REPO / "benchmarks"))

from bench_ham10000 import DATA, codes, load_truth, log  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=500)
    ap.add_argument("--epochs", type=int, default=2)
    ap.add_argument("--size", type=int, default=96)
    ap.add_argument("--lr", type=float, default=5e-5)
    ap.add_argument("--threads", type=int, default=2)
    args = ap.parse_args()
    import torch

    from noisycal_platform.cleaning.encoder import (
        HAM_CPU,
        embed,
        embed_frozen,
        load_pretrained,
        pretrained_init,
        train_encoder,
    )
    from noisycal_platform.cleaning.images import load_images
    from noisycal_platform.cleaning.rankings import rank_near_duplicates
    from noisycal_platform.cleaning.rankings.verify import candidate_pairs, exact_knn

    torch.set_num_threads(args.threads)
    ids, pos, _, _ = load_truth(args.limit)
    n = len(ids)

    def scores(e: np.ndarray) -> dict:
        ranked = np.asarray(rank_near_duplicates(e, top_k=len(pos)).pairs)
        hits = np.isin(codes(ranked, n), codes(pos, n))
        cand = candidate_pairs(exact_knn(e, 10)[0])
        return {f"recall@{len(pos)}": float(hits.sum() / len(pos)),
                f"recall@{len(pos) // 3}": float(hits[:len(pos) // 3].sum() / len(pos)),
                "k10_candidate_recall": float(np.isin(codes(pos, n), codes(cand, n)).mean())}

    images = load_images([str(DATA / "images" / f"{i}.jpg") for i in ids], args.size)
    log(f"N={n}, {len(pos)} pairs, {args.size} px")
    frozen = embed_frozen(load_pretrained("efficientnet-lite0", image_size=args.size, device="cpu"), images)
    log(json.dumps({"model": "frozen Lite0", **scores(frozen)}))
    cfg = HAM_CPU.replace(image_size=args.size, epochs=args.epochs, batch_size=32, lr=args.lr, warmup_epochs=0,
                          n_local_crops=2, local_crop_size=args.size // 2, freeze_last_layer_epochs=0,
                          warmup_teacher_temp_epochs=0, out_dim=4096, device="cpu", num_threads=args.threads, seed=0)

    def progress(p: dict) -> None:
        log(json.dumps({"model": f"fine-tuned, epoch {p['epoch']}", "loss": p["loss"], "train_seconds": p["seconds"],
                        **scores(embed(p["teacher"], images))}))

    train_encoder(images, cfg, progress=progress, init=pretrained_init("efficientnet-lite0"))


if __name__ == "__main__":
    main()
