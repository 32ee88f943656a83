"""Scale-out benchmark (by hand): row-block rankings on a Dask LocalCluster, single linkage in one process.

1. The exact top-k near-duplicate pairs and the label-error scores of N × D synthetic embeddings (seeded;
   planted near duplicates, 7 labels, a ``.npy`` file memory-mapped by the tasks) in ONE pass of row-block tasks
   (``row_blocks.blocked_rankings``: task (a, b), a <= b, computes B_a × B_b only), on a
   ``distributed.LocalCluster`` with 1 and then 2 single-threaded worker processes in the same run, for each
   ``--n``: wall time, throughput (pairs/s = N(N-1)/2 / wall time), the CPU seconds each worker got, peak RSS
   per worker (``VmHWM`` of each worker process, a fresh cluster per measurement), speed-up = t(1) / t(2).
   The arithmetic is counted: inner products of the new tasks (N(N-1)/2) against the former union tasks (each
   task (a < b) ran both single-process kernels on B_a ∪ B_b: 2 · sum C(|B_a| + |B_b|, 2)). Then an
   EXTRAPOLATION to ``--extrapolate`` rows: wall time from the largest measured N by the pair count N(N-1)/2
   (the arithmetic; the fitted exponent between the measured sizes is printed too), peak RSS per worker linear
   in the block size N / blocks. With ``--check`` the single-process kernels run at the smallest N and the
   results are compared (exact equality). With ``--task-cpu B`` first one task's CPU seconds here, against the
   former union task on the same rows.
2. Single linkage (``rank_irrelevant``) in one process at each ``--linkage-n``, each in a fresh child process
   (peak RSS of that child); growth exponent = least-squares slope of log(time) on log(N).

Example: ``nice -n 10 python benchmarks/bench_scale.py --n 100000 200000 --check --task-cpu 12500 --linkage-n``
"""

from __future__ import annotations

import argparse
import json
import math
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
    """Peak resident memory of this process (MB): ``VmHWM`` of its own address space on Linux (``ru_maxrss``
    also counts the parent's memory before the exec of a spawned worker), else ``ru_maxrss``."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def union_products(n: int, blocks: int) -> int:
    """Inner products of the former union tasks: both kernels on B_a ∪ B_b for every a < b."""
    from noisycal_platform.cleaning.rankings.row_blocks import row_blocks

    sizes = [hi - lo for lo, hi in row_blocks(n, blocks)]
    if len(sizes) == 1:
        return 2 * math.comb(n, 2)
    return 2 * sum(math.comb(sizes[a] + sizes[b], 2) for a in range(len(sizes)) for b in range(a + 1, len(sizes)))


def on_cluster(path: Path, labels: np.ndarray, top_k: int, workers: int, n_blocks: int) -> tuple[dict, object, object]:
    import distributed

    from noisycal_platform.cleaning.rankings.row_blocks import blocked_rankings

    n = labels.size
    out: dict = {"workers": workers}
    with distributed.LocalCluster(
        n_workers=workers, threads_per_worker=1, processes=True, dashboard_address=None, memory_limit=0
    ) as cluster, distributed.Client(cluster) as client:
        base = sorted(client.run(_max_rss_mb).values())
        cpu0 = client.run(_cpu_s)
        t = time.perf_counter()
        pairs, scores = blocked_rankings(str(path), top_k, labels, client=client, n_blocks=n_blocks)
        out["both_rankings_s"] = time.perf_counter() - t
        out["pairs_per_s"] = math.comb(n, 2) / out["both_rankings_s"]
        # CPU seconds each worker got: wall time far above them means the workers waited for a core (other load)
        out["cpu_s_per_worker"] = sorted(v - cpu0[k] for k, v in client.run(_cpu_s).items())
        out["pairs_per_cpu_s"] = math.comb(n, 2) / sum(out["cpu_s_per_worker"])
        out["peak_rss_mb_per_worker"] = sorted(client.run(_max_rss_mb).values())
        out["idle_rss_mb_per_worker"] = base
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


def task_cpu(rows: int, dim: int, top_k: int) -> dict:
    """CPU seconds (``time.process_time``, so less sensitive to other load than wall time) in this process with
    a single-threaded BLAS of one cross task B_a × B_b (|B_a| = |B_b| = ``rows``, both rankings in one pass)
    against the former union task on the same rows (both single-process kernels on B_a ∪ B_b)."""
    from threadpoolctl import threadpool_limits

    from noisycal_platform.cleaning.rankings import label_error_scores, rank_near_duplicates
    from noisycal_platform.cleaning.rankings.row_blocks import _block_task

    x, labels = synthetic(2 * rows, dim, seed=2)
    codes, alone = labels.astype(np.int64), np.zeros(2 * rows, bool)
    t = time.process_time()
    _block_task(x, (0, rows), (rows, 2 * rows), top_k, codes, alone)
    new = time.process_time() - t
    with threadpool_limits(1, user_api="blas"):
        t = time.process_time()
        rank_near_duplicates(x, top_k)
        label_error_scores(x, labels)
        union = time.process_time() - t
    return {"rows_per_block": rows, "new_task_cpu_s": new, "new_pairs_per_cpu_s": rows * rows / new,
            "union_task_cpu_s": union, "union_over_new_cpu": union / new}


def _fit_exponent(ns: list[int], ts: list[float]) -> float:
    return float(np.polyfit(np.log(ns), np.log(ts), 1)[0]) if len(ns) >= 2 else 2.0


def extrapolate(runs: dict, n_to: int, blocks: int, workers: list[int]) -> dict:
    """EXTRAPOLATION (not a measurement) of wall time and peak RSS per worker to ``n_to`` rows."""
    ns = sorted(runs)
    out: dict = {"n": n_to, "label": "extrapolated from the measured sizes, not measured"}
    for w in workers:
        ts = [runs[n]["cluster"][w]["both_rankings_s"] for n in ns]
        alpha = _fit_exponent(ns, ts)
        rss = [max(runs[n]["cluster"][w]["peak_rss_mb_per_worker"]) for n in ns]
        slope = (rss[-1] - rss[0]) / (ns[-1] - ns[0]) if len(ns) >= 2 else rss[0] / ns[0]
        out[f"{w}_workers"] = {  # the exponent between two sizes is swayed by other load: shown, not used
            "measured_growth_exponent": alpha,
            "wall_s_by_pairs": ts[-1] * math.comb(n_to, 2) / math.comb(ns[-1], 2),
            "peak_rss_mb_per_worker_linear_in_block_rows": rss[-1] + slope * (n_to - ns[-1]),
            "block_rows": n_to // blocks,
        }
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, nargs="*", default=[1_000_000])
    ap.add_argument("--dim", type=int, default=192)
    ap.add_argument("--top-k", type=int, default=10_000)
    ap.add_argument("--blocks", type=int, default=8, help="row blocks (tasks = blocks·(blocks+1)/2)")
    ap.add_argument("--workers", type=int, nargs="+", default=[1, 2])
    ap.add_argument("--check", action="store_true", help="at the smallest N run the single-process kernels too")
    ap.add_argument("--extrapolate", type=int, default=1_000_000, help="extrapolate to this N (0: none)")
    ap.add_argument("--linkage-n", type=int, nargs="*", default=[50_000, 100_000, 200_000])
    ap.add_argument("--task-cpu", type=int, default=0, help="rows per block of the one-task CPU comparison (0: none)")
    ap.add_argument("--out", type=Path, default=None, help="write the figures as JSON here")
    args = ap.parse_args()

    report: dict = {"dim": args.dim, "top_k": args.top_k, "blocks": args.blocks, "sizes": {}}
    if args.task_cpu:
        report["one_task_cpu"] = task_cpu(args.task_cpu, args.dim, args.top_k)
        print(json.dumps(report["one_task_cpu"]), flush=True)
    for n in sorted(args.n):
        row: dict = {"pairs": math.comb(n, 2), "union_task_products": union_products(n, args.blocks)}
        row["union_over_new_arithmetic"] = row["union_task_products"] / row["pairs"]
        with tempfile.TemporaryDirectory() as tmp:
            x, labels = synthetic(n, args.dim)
            path = Path(tmp) / "emb.npy"
            np.save(path, x)
            del x
            runs = {}
            for workers in args.workers:
                runs[workers], pairs, scores = on_cluster(path, labels, args.top_k, workers, args.blocks)
                print(json.dumps({"n": n, **runs[workers]}), flush=True)
            row["cluster"] = runs
            if 1 in runs and 2 in runs:
                row["speedup_2_over_1"] = runs[1]["both_rankings_s"] / runs[2]["both_rankings_s"]
            if args.check and n == min(args.n):
                from noisycal_platform.cleaning.rankings import label_error_scores, rank_near_duplicates

                x = np.load(path)
                t = time.perf_counter()
                want = rank_near_duplicates(x, args.top_k)
                row["single_process_near_duplicates_s"] = time.perf_counter() - t
                t = time.perf_counter()
                want_le = label_error_scores(x, labels)
                row["single_process_label_errors_s"] = time.perf_counter() - t
                row["exact_match"] = bool(
                    np.array_equal(want.pairs, pairs.pairs)
                    and np.array_equal(want.scores, pairs.scores)
                    and all(np.array_equal(a, b) for a, b in zip(want_le, scores, strict=True))
                )
                del x
        report["sizes"][n] = row
        print(json.dumps({"n": n, **{k: v for k, v in row.items() if k != "cluster"}}), flush=True)
    if args.n and args.extrapolate and max(args.n) < args.extrapolate:
        report["EXTRAPOLATION"] = extrapolate(report["sizes"], args.extrapolate, args.blocks, args.workers)
    if args.linkage_n:
        report["single_linkage"] = linkage(args.linkage_n, args.dim)
    print(json.dumps(report, indent=1))
    if args.out:
        args.out.write_text(json.dumps(report, indent=1))


if __name__ == "__main__":
    main()
