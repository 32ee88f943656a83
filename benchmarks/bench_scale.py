"""Scale-out benchmark (by hand): row-block rankings on a Dask LocalCluster, single linkage in one process.

1. Exact top-k near-duplicate pairs and the label-error scores of N × D synthetic embeddings (seeded; planted
   near duplicates, 7 labels, ``.npy`` file memory-mapped by the tasks), on a ``distributed.LocalCluster``
   with 1 and then 2 single-threaded worker processes in the same run: wall time, peak RSS per worker
   (``getrusage`` max RSS in each worker process, a fresh cluster per measurement), speed-up = t(1) / t(2).
   With ``--check`` the single-process kernels run too and the results are compared (exact equality).
2. Single linkage (``rank_irrelevant``) in one process at each ``--linkage-n``, each in a fresh child process
   (peak RSS of that child); growth exponent = least-squares slope of log(time) on log(N).

Example: ``nice -n 10 python benchmarks/bench_scale.py --n 100000 --linkage-n 50000 100000 200000``
"""

from __future__ import annotations

import argparse
import json
import multiprocessing as mp
import resource
import tempfile
import time
from pathlib import Path

import numpy as np


def synthetic(n: int, dim: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """Gaussian embeddings with 1 % planted near duplicates (a row plus 1e-3 noise) and 7 labels."""
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((n, dim), dtype=np.float32)
    m = max(1, n // 100)
    src, dst = rng.choice(n, size=m, replace=False), rng.choice(n, size=m, replace=False)
    x[dst] = x[src] + np.float32(1e-3) * rng.standard_normal((m, dim), dtype=np.float32)
    return x, rng.integers(0, 7, size=n)


def _max_rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def on_cluster(path: Path, labels: np.ndarray, top_k: int, workers: int, n_blocks: int) -> dict:
    import distributed

    from noisycal_platform.cleaning.rankings.row_blocks import blocked_label_error_scores, blocked_near_duplicates

    out: dict = {"workers": workers}
    with distributed.LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit=0
    ) as cluster, distributed.Client(cluster) as client:
        t = time.perf_counter()
        pairs = blocked_near_duplicates(str(path), top_k, client=client, n_blocks=n_blocks)
        out["near_duplicates_s"] = time.perf_counter() - t
        t = time.perf_counter()
        scores = blocked_label_error_scores(str(path), labels, client=client, n_blocks=n_blocks)
        out["label_errors_s"] = time.perf_counter() - t
        out["peak_rss_mb_per_worker"] = sorted(client.run(_max_rss_mb).values())
    return out, pairs, scores


def _linkage_child(n: int, dim: int, q) -> None:
    from noisycal_platform.cleaning.rankings import rank_irrelevant

    x, _ = synthetic(n, dim, seed=1)
    t = time.perf_counter()
    rank_irrelevant(x)
    q.put({"n": n, "seconds": time.perf_counter() - t, "peak_rss_mb": _max_rss_mb()})


def linkage(sizes: list[int], dim: int) -> dict:
    ctx = mp.get_context("spawn")
    rows = []
    for n in sizes:
        q = ctx.Queue()
        p = ctx.Process(target=_linkage_child, args=(n, dim, q))
        p.start()
        rows.append(q.get())
        p.join()
        print(json.dumps(rows[-1]), flush=True)
    if len(rows) >= 2:
        slope = np.polyfit(np.log([r["n"] for r in rows]), np.log([r["seconds"] for r in rows]), 1)[0]
    else:
        slope = float("nan")
    return {"runs": rows, "growth_exponent": float(slope)}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, default=1_000_000)
    ap.add_argument("--dim", type=int, default=192)
    ap.add_argument("--top-k", type=int, default=10_000)
    ap.add_argument("--blocks", type=int, default=8, help="row blocks (tasks = blocks·(blocks-1)/2)")
    ap.add_argument("--check", action="store_true", help="also run the single-process kernels and compare")
    ap.add_argument("--linkage-n", type=int, nargs="*", default=[50_000, 100_000, 200_000])
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()

    report: dict = {"n": args.n, "dim": args.dim, "top_k": args.top_k, "blocks": args.blocks}
    with tempfile.TemporaryDirectory() as tmp:
        x, labels = synthetic(args.n, args.dim)
        path = Path(tmp) / "emb.npy"
        np.save(path, x)
        del x
        runs = {}
        for workers in (1, 2):
            runs[workers], pairs, scores = on_cluster(path, labels, args.top_k, workers, args.blocks)
            print(json.dumps(runs[workers]), flush=True)
        report["cluster"] = runs
        report["speedup_2_over_1"] = {
            k: runs[1][k] / runs[2][k] for k in ("near_duplicates_s", "label_errors_s")
        }
        if args.check:
            from noisycal_platform.cleaning.rankings import label_error_scores, rank_near_duplicates

            x = np.load(path)
            t = time.perf_counter()
            want = rank_near_duplicates(x, args.top_k)
            report["single_process_near_duplicates_s"] = time.perf_counter() - t
            t = time.perf_counter()
            want_le = label_error_scores(x, labels)
            report["single_process_label_errors_s"] = time.perf_counter() - t
            report["exact_match"] = bool(
                np.array_equal(want.pairs, pairs.pairs)
                and np.array_equal(want.scores, pairs.scores)
                and all(np.array_equal(a, b) for a, b in zip(want_le, scores, strict=True))
            )
    if args.linkage_n:
        report["single_linkage"] = linkage(args.linkage_n, args.dim)
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
