"""DINO training throughput on CPU (images/s per epoch) for the DEMO and PAPER presets (Gröger et al. 2023 §3.6, App.
E).

* DEMO: trains the full preset on the digits demo dataset (1,480 images, 32 px) and reports the
  measured images/s per epoch and the total time.
* PAPER (ViT-tiny/16, 224 px, 2 global + 12 local 96-px crops, 500 epochs): a full run is out of reach
  on 2 cores, so we time 1 and 3 optimisation steps at a small batch and take the difference
  (removes the fixed start-up cost), then EXTRAPOLATE to images/s and to the time of one epoch and of
  500 epochs for N images. The batch is smaller than the paper's 64 (memory/time); per-image cost of a
  ViT step is close to linear in the batch on CPU, which is the assumption of the extrapolation.
* Peer: no DINO implementation can be installed here (lightly/timm/torchvision are unavailable
  on this machine), so the reference printed beside each figure is our own forward-only embedding throughput
  with the same network, measured in the same run (training/embedding ratio).

Run by hand:  nice -n 10 .venv/bin/python benchmarks/bench_dino_throughput.py [--paper-batch 8] [--threads 1]
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from noisycal_platform.cleaning.demo_data import write_demo_cleaning_dataset  # noqa: E402
from noisycal_platform.cleaning.encoder import DEMO, PAPER, embed, train_encoder  # noqa: E402
from noisycal_platform.cleaning.images import load_images, read_image_dataset  # noqa: E402


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads for both presets")
    ap.add_argument("--paper-batch", type=int, default=8)
    ap.add_argument("--paper-n", type=int, default=10_015, help="dataset size for the PAPER extrapolation")
    ap.add_argument("--skip-demo", action="store_true")
    ap.add_argument("--skip-paper", action="store_true")
    args = ap.parse_args()
    import torch

    log(f"load average {os.getloadavg()}, cpus {os.cpu_count()}, threads {args.threads}, "
        f"torch {torch.__version__}")

    if not args.skip_demo:
        with tempfile.TemporaryDirectory() as home:
            truth = write_demo_cleaning_dataset(home)
            ds = read_image_dataset(truth.root)
            imgs = load_images(ds.frame["path"].to_list(), DEMO.image_size)
        cfg = DEMO.replace(num_threads=args.threads)
        epoch_t: list[float] = []
        last = [0.0]

        def progress(p: dict) -> None:
            epoch_t.append(p["seconds"] - last[0])
            last[0] = p["seconds"]
            log(f"DEMO epoch {p['epoch']}/{p['epochs']}: {epoch_t[-1]:.1f}s "
                f"({p['images'] / epoch_t[-1]:.1f} images/s), loss {p['loss']:.4f}")

        enc = train_encoder(imgs, cfg, progress=progress)
        t = time.perf_counter()
        embed(enc, imgs)
        t_emb = time.perf_counter() - t
        n = imgs.shape[0]
        rate = n * cfg.epochs / enc.seconds
        log(f"DEMO: {n} images x {cfg.epochs} epochs in {enc.seconds:.1f}s -> {rate:.1f} images/s per epoch "
            f"(median epoch {np.median(epoch_t):.1f}s); forward-only embedding {n / t_emb:.1f} images/s; "
            f"ratio train/embed time per image {(enc.seconds / (n * cfg.epochs)) / (t_emb / n):.1f}x")

    if not args.skip_paper:
        b = args.paper_batch
        cfg = PAPER.replace(epochs=1, batch_size=b, warmup_epochs=0, num_threads=args.threads)
        rng = np.random.default_rng(0)
        x = torch.from_numpy(rng.integers(0, 256, (3 * b, 3, 224, 224), dtype=np.uint8))
        t = time.perf_counter()
        train_encoder(x[:b], cfg)
        t1 = time.perf_counter() - t
        t = time.perf_counter()
        enc = train_encoder(x, cfg)
        t3 = time.perf_counter() - t
        step = (t3 - t1) / 2
        rate = b / step
        t = time.perf_counter()
        embed(enc, x)
        t_emb = time.perf_counter() - t
        n = args.paper_n
        log(f"PAPER (extrapolated from 1 vs 3 steps at batch {b}, not a full epoch): {step:.1f}s per step -> "
            f"{rate:.2f} images/s per epoch; one epoch of {n} images ~{n / rate / 3600:.2f} h, "
            f"500 epochs ~{500 * n / rate / 86400:.1f} days on this CPU; forward-only embedding "
            f"{3 * b / t_emb:.1f} images/s; "
            f"ratio train/embed time per image {(1 / rate) / (t_emb / (3 * b)):.1f}x")
    log(f"load average {os.getloadavg()}")


if __name__ == "__main__":
    main()
