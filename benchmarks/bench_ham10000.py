"""HAM10000 near-duplicate benchmark: DINO (HAM_CPU preset) vs the non-learned baseline, same run.

Ground truth: the 3,207 same-lesion pairs of ../shared/data/ham10000_200x150/pairs_same_lesion.csv
(the dataset's lesion_id metadata). For each embedding the pairs are ranked by d = (1 − cos)/2 ascending; we report
AP over the full ranking of all N(N−1)/2 pairs, AP@K (the same sum truncated at K), recall@K and
precision@K for K = 1,000 and 3,207. An untrained (random-init) ViT is reported as a third reference.

Run by hand (slow):  nice -n 10 .venv/bin/python benchmarks/bench_ham10000.py --out /tmp/ham_bench
Smoke run:           .venv/bin/python benchmarks/bench_ham10000.py --limit 800 --epochs 1 --out /tmp/ham_smoke
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from noisycal_platform.cleaning.baseline import baseline_embedding  # noqa: E402
from noisycal_platform.cleaning.encoder import HAM_CPU, embed, save_encoder, train_encoder  # noqa: E402
from noisycal_platform.cleaning.images import load_images  # noqa: E402

DATA = Path(os.environ.get("HAM10000_DIR", REPO.parent / "shared" / "data" / "ham10000_200x150"))
KS = (1000, 3207)


def log(msg: str) -> None:
    print(f"[{time.strftime('%H:%M:%S')}] {msg}", flush=True)


def brute_force_top_pairs(emb: np.ndarray, k: int, block: int = 1024) -> tuple[np.ndarray, np.ndarray]:
    """Exact top-k closest pairs i<j by block-wise inner products (reference; O(block·N) memory)."""
    n = emb.shape[0]
    best_s = np.empty(0, dtype=np.float32)
    best_p = np.empty((0, 2), dtype=np.int64)
    for s in range(0, n, block):
        sims = emb[s:s + block] @ emb.T
        rows = np.arange(s, min(s + block, n))
        sims[np.arange(n)[None, :] <= rows[:, None]] = -np.inf  # keep j > i
        flat = sims.ravel()
        kk = min(k, flat.size)
        top = np.argpartition(-flat, kk - 1)[:kk]
        top = top[np.isfinite(flat[top])]
        cand_s = flat[top]
        cand_p = np.stack([rows[top // n], top % n], axis=1)
        best_s = np.concatenate([best_s, cand_s])
        best_p = np.concatenate([best_p, cand_p])
        if best_s.size > k:
            keep = np.lexsort((best_p[:, 1], best_p[:, 0], -best_s))[:k]
            best_s, best_p = best_s[keep], best_p[keep]
    order = np.lexsort((best_p[:, 1], best_p[:, 0], -best_s))
    best_s, best_p = best_s[order], best_p[order]
    return best_p, (1.0 - best_s.astype(np.float64)) / 2.0


def full_ranking_ap(emb: np.ndarray, pos: np.ndarray, block: int = 1024) -> float:
    """AP over all N(N−1)/2 pairs ranked by similarity (sklearn's definition, ties grouped).

    AP = mean over positives p of TP(s ≥ s_p) / #pairs(s ≥ s_p); counted block-wise in two passes
    (pass 1 reads the positives' similarities from the same matmul blocks so values match exactly).
    """
    e = np.ascontiguousarray(emb, dtype=np.float32)
    n = e.shape[0]
    pos_s = np.empty(len(pos), dtype=np.float32)
    for s in range(0, n, block):
        sel = np.nonzero((pos[:, 0] >= s) & (pos[:, 0] < s + block))[0]
        if sel.size:
            sims = e[s:s + block] @ e.T
            pos_s[sel] = sims[pos[sel, 0] - s, pos[sel, 1]]
    neg_thr = np.sort(-pos_s)  # ascending −s  ==  descending s
    ge = np.zeros(len(neg_thr) + 1, dtype=np.int64)
    for s in range(0, n, block):
        sims = e[s:s + block] @ e.T
        r = np.arange(s, min(s + block, n))
        vals = -sims[np.arange(n)[None, :] > r[:, None]]
        # a pair with −sim = v counts for every m with neg_thr[m] >= v
        ge += np.bincount(np.searchsorted(neg_thr, vals, side="left"), minlength=len(neg_thr) + 1)
    n_ge = np.cumsum(ge)[: len(neg_thr)]
    tp_ge = np.searchsorted(neg_thr, neg_thr, side="right")
    return float(np.mean(tp_ge / n_ge))


def evaluate(name: str, emb: np.ndarray, pos_set: set[tuple[int, int]], pos: np.ndarray,
             byte_identical: set[tuple[int, int]], k_max: int, full_ap: bool = True) -> dict:
    t = time.perf_counter()
    pairs, dist = brute_force_top_pairs(emb, k_max)
    t_bf = time.perf_counter() - t
    source = "brute_force"
    try:
        from noisycal_platform.cleaning.rankings.near_duplicates import rank_near_duplicates

        t = time.perf_counter()
        theirs = rank_near_duplicates(emb, top_k=k_max)
        t_theirs = time.perf_counter() - t
        tp = np.asarray(theirs.pairs)
        n_diff = len({tuple(p) for p in tp.tolist()} ^ {tuple(p) for p in pairs.tolist()}) // 2
        same = n_diff == 0
        log(f"{name}: rank_near_duplicates {t_theirs:.1f}s vs brute force {t_bf:.1f}s; "
            f"pairs differing: {n_diff} of {k_max}")
        if same or np.allclose(np.sort(np.asarray(theirs.scores)), np.sort(dist), atol=1e-6):
            pairs, dist, source = tp, np.asarray(theirs.scores), "rank_near_duplicates"
    except ImportError:
        log(f"{name}: rankings.near_duplicates not available; using brute-force top-k ({t_bf:.1f}s)")
    except Exception as exc:  # a peer module being edited must not kill an hour-long run
        log(f"{name}: rank_near_duplicates failed ({exc!r}); using brute-force top-k ({t_bf:.1f}s)")
    hits = np.array([(int(a), int(b)) in pos_set for a, b in pairs])
    res: dict = {"name": name, "ranking": source, "n_pos": len(pos_set)}
    if full_ap:
        t = time.perf_counter()
        res["ap_full"] = full_ranking_ap(emb, pos)
        res["ap_full_seconds"] = time.perf_counter() - t
    prec_at = np.cumsum(hits) / np.arange(1, len(hits) + 1)
    for k in KS:
        kk = min(k, len(hits))
        res[f"recall@{k}"] = float(hits[:kk].sum() / len(pos_set))
        res[f"precision@{k}"] = float(hits[:kk].mean())
        res[f"ap@{k}"] = float((prec_at[:kk] * hits[:kk]).sum() / len(pos_set))
    res["byte_identical_in_top1000"] = sum((int(a), int(b)) in byte_identical for a, b in pairs[:1000])
    return res


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--limit", type=int, default=None, help="use the first N images in lesion order (smoke)")
    ap.add_argument("--epochs", type=int, default=None, help="override HAM_CPU.epochs")
    ap.add_argument("--lr", type=float, default=None, help="override HAM_CPU.lr")
    ap.add_argument("--skip-init", action="store_true", help="skip the untrained-ViT reference")
    ap.add_argument("--eval-every", type=int, default=1, help="evaluate the teacher every N epochs (0: off)")
    ap.add_argument("--out", type=Path, default=Path("/tmp/ham_bench"))
    args = ap.parse_args()
    args.out.mkdir(parents=True, exist_ok=True)

    meta = pl.read_csv(DATA / "metadata.csv").sort("image_id")
    if args.limit:
        meta = meta.sort(["lesion_id", "image_id"]).head(args.limit).sort("image_id")
    ids = meta["image_id"].to_list()
    index = {iid: i for i, iid in enumerate(ids)}
    pairs_df = pl.read_csv(DATA / "pairs_same_lesion.csv")
    pos_list, byte_identical = [], set()
    for a, b, ident in pairs_df.select("image_id_a", "image_id_b", "source_byte_identical").iter_rows():
        if a in index and b in index:
            p = (min(index[a], index[b]), max(index[a], index[b]))
            pos_list.append(p)
            if ident:
                byte_identical.add(p)
    pos = np.array(pos_list, dtype=np.int64)
    pos_set = set(pos_list)
    cfg = HAM_CPU
    if args.epochs is not None:
        cfg = cfg.replace(epochs=args.epochs)
    if args.lr is not None:
        cfg = cfg.replace(lr=args.lr)
    log(f"N={len(ids)} images, {len(pos_set)} same-lesion pairs; config {cfg.to_dict()}")
    log(f"torch threads: {os.environ.get('OMP_NUM_THREADS', 'default')}; pid {os.getpid()}")

    t = time.perf_counter()
    # decoded at 64 px: the baseline uses these pixels; DINO resizes to cfg.image_size per batch
    images = load_images([str(DATA / f) for f in meta["file_name"].to_list()], max(64, cfg.image_size))
    log(f"decoded {images.shape} in {time.perf_counter() - t:.1f}s")
    k_max = max(KS)
    results = []

    t = time.perf_counter()
    base = baseline_embedding(images)
    log(f"baseline embedding {base.shape} in {time.perf_counter() - t:.1f}s")
    results.append(evaluate("baseline(thumb16+hist4)", base, pos_set, pos, byte_identical, k_max))
    log(json.dumps(results[-1]))

    import torch

    from noisycal_platform.cleaning.encoder._dino import Encoder
    from noisycal_platform.cleaning.encoder._vit import build_backbone

    if not args.skip_init:
        with torch.random.fork_rng():
            torch.manual_seed(cfg.seed)
            untrained = Encoder(cfg, build_backbone(cfg).eval())
        results.append(evaluate("vit_random_init", embed(untrained, images), pos_set, pos, byte_identical,
                                k_max))
        log(json.dumps(results[-1]))

    per_epoch: list[dict] = []

    def progress(p: dict) -> None:
        rate = p["images"] * p["epoch"] / p["seconds"]
        log(f"epoch {p['epoch']}/{p['epochs']} loss {p['loss']:.4f} elapsed {p['seconds']:.0f}s "
            f"({rate:.1f} images/s per epoch, training only)")
        if args.eval_every and (p["epoch"] % args.eval_every == 0) and p["epoch"] < p["epochs"]:
            t_e = time.perf_counter()
            r = evaluate(f"dino_epoch{p['epoch']}", embed(p["teacher"], images), pos_set, pos,
                         byte_identical, k_max, full_ap=False)  # top-k metrics only (AP(full) ~1-2 min)
            r["train_seconds"] = p["seconds"]
            per_epoch.append(r)
            log(f"(eval {time.perf_counter() - t_e:.0f}s) " + json.dumps(r))
            (args.out / "per_epoch.json").write_text(json.dumps(per_epoch, indent=1))

    enc = train_encoder(images, cfg, progress=progress)
    log(f"trained in {enc.seconds:.0f}s ({len(ids) * cfg.epochs / enc.seconds:.1f} images/s per epoch)")
    sha, path = save_encoder(enc, args.out / "artifacts")
    log(f"saved encoder {sha} -> {path}")
    t = time.perf_counter()
    e = embed(enc, images)
    log(f"embedded {e.shape} in {time.perf_counter() - t:.1f}s")
    np.save(args.out / "dino_embeddings.npy", e)
    np.save(args.out / "baseline_embeddings.npy", base)
    results.append(evaluate(f"dino_{cfg.epochs}ep", e, pos_set, pos, byte_identical, k_max))
    log(json.dumps(results[-1]))

    summary = {"n_images": len(ids), "n_pos": len(pos_set), "config": cfg.to_dict(),
               "train_seconds": enc.seconds, "loss_history": enc.history, "results": results,
               "per_epoch": per_epoch}
    (args.out / "results.json").write_text(json.dumps(summary, indent=2))
    log("| embedding | AP(full) | AP@1000 | R@1000 | AP@3207 | R@3207 |")
    for r in results:
        log(f"| {r['name']} | {r['ap_full']:.4f} | {r['ap@1000']:.4f} | {r['recall@1000']:.4f} | "
            f"{r['ap@3207']:.4f} | {r['recall@3207']:.4f} |")
    log("done")


if __name__ == "__main__":
    main()
