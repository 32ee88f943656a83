"""Benchmark: the streaming image source, end to end from files to the embedding cache (run by hand).

Workload: N seeded small images (default 64×64, three in four PNG and one in four JPEG) drawn as smooth random
colour fields with a few shapes, with planted exact duplicates (byte copies) and near duplicates (the source with
faint noise, re-encoded, or shifted by one pixel). Phases:

1. generate: the files and ``labels.csv`` (one image in memory at a time);
2. raw/images: :func:`read_image_dataset` (each file decoded once to validate it, hashed; the table is the file
   list: path, width, height, sha256, file_bytes, never the pixels);
3. embeddings: :func:`embedding_matrices` on a cache miss: the DINO ViT of the ``demo`` preset (random
   initialisation: the embedding step, not training; its cost per image is the trained encoder's) and the
   non-learned baseline, the images decoded ``--batch`` at a time into memory-mapped cache entries; with
   ``--dask W`` the DINO shards go to a LocalCluster of W worker processes that decode their own files.

Printed: wall time and images/s per phase, the peak RSS of this process after each phase
(``resource.getrusage(RUSAGE_SELF).ru_maxrss``; with ``--dask`` the workers' memory is not in it), the size the
decoded pixels would have had in one array (what the step held before it streamed), and how many planted copies
have their source as nearest neighbour (cosine) under each embedding (computed for the planted rows only).

Run: nice -n 10 .venv/bin/python benchmarks/bench_streaming_images.py --n 20000
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")
os.environ.setdefault("MKL_NUM_THREADS", "1")

import json
import resource
import shutil
import tempfile
import time
from pathlib import Path

import numpy as np
from PIL import Image


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0  # Linux: kilobytes


def _field(rng: np.random.Generator, size: int) -> np.ndarray:
    """A smooth random colour field (bilinear upsampling of a 4×4 grid) with a bright disc or bar."""
    coarse = rng.uniform(0, 255, size=(4, 4, 3)).astype(np.float32)
    img = np.asarray(Image.fromarray(coarse.astype(np.uint8)).resize((size, size), Image.Resampling.BILINEAR),
                     dtype=np.float32)
    yy, xx = np.mgrid[0:size, 0:size]
    (cy, cx), r = rng.uniform(0.2, 0.8, 2) * size, rng.uniform(0.1, 0.3) * size
    if rng.random() < 0.5:
        mask = (yy - cy) ** 2 + (xx - cx) ** 2 < r ** 2
    else:
        mask = np.abs(yy - cy) < r / 3
    img[mask] = rng.uniform(0, 255, size=3)
    return np.clip(img, 0, 255).astype(np.uint8)


def generate(root: Path, n: int, size: int, seed: int, dup_fraction: float) -> dict[str, list[list[str]]]:
    """Write ``n`` images and ``labels.csv`` under ``root``; return the planted pairs (copy, source) by kind."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    names: list[str] = []
    planted: dict[str, list[list[str]]] = {"exact": [], "near": []}
    n_planted = int(n * dup_fraction)
    n_sources = n - n_planted
    for i in range(n_sources):
        ext = "jpg" if i % 4 == 3 else "png"
        name = f"img_{i:07d}.{ext}"
        Image.fromarray(_field(rng, size)).save(root / name, quality=90)
        names.append(name)
    for j in range(n_planted):
        src = names[int(rng.integers(0, n_sources))]
        if j % 2 == 0:  # exact: the same bytes
            name = f"dup_{j:07d}{Path(src).suffix}"
            shutil.copyfile(root / src, root / name)
            planted["exact"].append([name, src])
        else:  # near: faint noise, or a one-pixel shift, re-encoded as PNG
            with Image.open(root / src) as im:
                a = np.asarray(im.convert("RGB"), dtype=np.int16)
            if j % 4 == 1:
                a = a + rng.integers(-6, 7, size=a.shape)
            else:
                a = np.roll(a, 1, axis=1)
            name = f"near_{j:07d}.png"
            Image.fromarray(np.clip(a, 0, 255).astype(np.uint8)).save(root / name)
            planted["near"].append([name, src])
        names.append(name)
    labels = rng.integers(0, 10, size=len(names))
    with open(root / "labels.csv", "w", encoding="utf-8") as fh:
        fh.write("file_name,label\n")
        fh.writelines(f"{nm},{lab}\n" for nm, lab in zip(names, labels, strict=True))
    return planted


def _found(matrix: np.ndarray, index: dict[str, int], pairs: list[list[str]]) -> int:
    """How many copies have their source (or a byte-identical twin of it) as nearest neighbour by cosine."""
    if not pairs:
        return 0
    rows = np.array([index[c] for c, _ in pairs])
    sims = np.asarray(matrix[rows], np.float64) @ np.asarray(matrix, np.float64).T
    sims[np.arange(len(rows)), rows] = -np.inf
    best = sims.max(1)
    src_sim = sims[np.arange(len(rows)), np.array([index[s] for _, s in pairs])]
    return int((src_sim >= best - 1e-6).sum())


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=20_000)
    ap.add_argument("--size", type=int, default=64, help="side of the generated images (pixels)")
    ap.add_argument("--batch", type=int, default=256, help="images decoded and embedded at once")
    ap.add_argument("--dup-fraction", type=float, default=0.02, help="share of planted exact/near duplicates")
    ap.add_argument("--dask", type=int, default=0, help="worker processes of a LocalCluster for the DINO shards")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--dir", default=None, help="work folder (default: a temporary one, removed)")
    args = ap.parse_args()

    work = Path(args.dir) if args.dir else Path(tempfile.mkdtemp(prefix="bench-stream-"))
    try:
        root = work / "images"
        print(f"N={args.n} images of {args.size}x{args.size}, batch {args.batch}, dask workers {args.dask}, "
              f"work folder {work}")
        print(f"{'phase':<12} {'wall s':>8} {'images/s':>9} {'peak RSS MB':>12}")

        t = time.perf_counter()
        planted = generate(root, args.n, args.size, args.seed, args.dup_fraction)
        dt = time.perf_counter() - t
        print(f"{'generate':<12} {dt:8.1f} {args.n / dt:9.0f} {_rss_mb():12.0f}")

        from noisycal_platform.cleaning.images import read_image_dataset

        t = time.perf_counter()
        ds = read_image_dataset(root)
        table = ds.table("bench")
        dt = time.perf_counter() - t
        print(f"{'raw/images':<12} {dt:8.1f} {table.height / dt:9.0f} {_rss_mb():12.0f}")

        import torch

        from noisycal_platform.cleaning.encoder import DEMO, save_encoder
        from noisycal_platform.cleaning.encoder._dino import Encoder
        from noisycal_platform.cleaning.encoder._vit import build_backbone
        from noisycal_platform.cleaning.pipeline.embeddings import embedding_matrices

        torch.manual_seed(args.seed)
        config = DEMO.replace(device="cpu")
        sha, path = save_encoder(Encoder(config=config, backbone=build_backbone(config).eval()), work / "art")
        row = {"artifact": str(path), "sha256": sha, "config_json": json.dumps(config.to_dict(), sort_keys=True)}
        before = _rss_mb()
        client = cluster = None
        if args.dask:
            import distributed

            cluster = distributed.LocalCluster(n_workers=args.dask, threads_per_worker=1, processes=True,
                                               dashboard_address=None)
            client = distributed.Client(cluster)
        try:
            t = time.perf_counter()
            emb, base, _ = embedding_matrices(table, row, work / "cache", device="cpu", client=client,
                                              batch_size=args.batch)
            dt = time.perf_counter() - t
        finally:
            if client is not None:
                client.close()
                cluster.close()
        print(f"{'embeddings':<12} {dt:8.1f} {table.height / dt:9.0f} {_rss_mb():12.0f}"
              f"   (RSS before the step: {before:.0f} MB)")

        pixels_mb = table.height * 3 * config.image_size ** 2 / 2 ** 20
        cache_mb = sum(p.stat().st_size for p in (work / "cache").glob("*.npy")) / 2 ** 20
        print(f"decoded pixels in one array (the step before streaming): {pixels_mb:.0f} MB at "
              f"{config.image_size} px; cache entries written: {cache_mb:.0f} MB (dino {emb.shape}, "
              f"baseline {base.shape})")
        index = {nm: i for i, nm in enumerate(table.sort("idx")["file_name"].to_list())}
        for kind, pairs in planted.items():
            found = {k: _found(m, index, pairs) for k, m in (("dino", emb), ("baseline", base))}
            print(f"planted {kind} duplicates: {len(pairs)}; source is the nearest neighbour: "
                  f"dino {found['dino']}, baseline {found['baseline']}")
    finally:
        if not args.dir:
            shutil.rmtree(work, ignore_errors=True)


if __name__ == "__main__":
    main()
