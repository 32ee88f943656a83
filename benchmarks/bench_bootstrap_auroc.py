"""Benchmark: the full paired stratified bootstrap of the correctness audit vs a loop of sklearn
roc_auc_score.

Workload (Rethinking Correctness 2026 §3.1: 10,000 paired replicates that keep each group's EM quotas): every active
criterion plus
the human labels; four UE methods; nine dataset-model groups; 450 audited items (the seeded synthetic demo). The
demo has no NLI model, so semantic entropy is not computed; to keep the seed's four-method cost, its column is
filled with the answer-entropy values (a timing stand-in only, printed as such). Ours: `paired_bootstrap`
(weighted Mann-Whitney on bootstrap count vectors, one float32 GEMM per task) and the whole `criterion_audit`
asset function.
Peer: `sklearn.metrics.roc_auc_score` on every materialised resample, run on a SUBSET of replicates and
extrapolated linearly to 10,000 (the full loop would take many minutes); the subset also checks exactness.

Run: OMP_NUM_THREADS=2 OPENBLAS_NUM_THREADS=2 nice -n 10 .venv/bin/python benchmarks/bench_bootstrap_auroc.py

``bench_rows`` returns the row of ``make bench`` (results_table): the extrapolated sklearn loop / ours
``paired_bootstrap`` (goal ≥ 3,000×); ``--quick`` is 1,000 replicates with 5 through the sklearn loop.
"""

from __future__ import annotations

import argparse
import os

os.environ.setdefault("OMP_NUM_THREADS", "2")
os.environ.setdefault("OPENBLAS_NUM_THREADS", "2")
os.environ.setdefault("MKL_NUM_THREADS", "2")

import resource
import tempfile
import time
from pathlib import Path

import numpy as np
import polars as pl
from results_table import add_rows_arg, row, write_rows
from sklearn.metrics import roc_auc_score

from noisycal_platform.correctness import pipeline as cp
from noisycal_platform.correctness.audit_stage import _audit_items
from noisycal_platform.correctness.bootstrap import paired_bootstrap, stratified_counts
from noisycal_platform.correctness.demo_data import write_demo_correctness_inputs


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--n-boot", type=int, default=None, help="replicates (default 10,000; --quick 1,000)")
    ap.add_argument("--peer-replicates", type=int, default=None,
                    help="replicates run through the sklearn loop (default 20; --quick 5)")
    ap.add_argument("--no-embedding", action="store_true", help="skip the MiniLM cosine criterion")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run; rows labelled quick)")
    add_rows_arg(ap)
    return ap


def measure(args: argparse.Namespace) -> dict:
    """Times ours and a subset of the sklearn loop; prints as it goes."""
    if args.n_boot is None:
        args.n_boot = 1_000 if args.quick else 10_000
    if args.peer_replicates is None:
        args.peer_replicates = 5 if args.quick else 20

    home = Path(tempfile.mkdtemp(prefix="bench_corr_"))
    write_demo_correctness_inputs(home, seed=args.seed)
    gen = cp.raw_generations(home / "correctness" / "generations")
    audit = cp.raw_audit_labels(home / "correctness" / "audit", gen)
    cfg = cp.CriteriaConfig(embedding_model_path=None if args.no_embedding else "default")
    decisions = cp.criterion_decisions(gen, cfg)
    scores = cp.ue_scores(gen)
    if scores["semantic_entropy"].is_nan().all():
        scores = scores.with_columns(pl.col("answer_entropy").alias("semantic_entropy"))
        print("semantic_entropy: no NLI model in the demo; column filled with answer_entropy (timing stand-in)")
    items, crits, methods, _ = _audit_items(decisions, scores, audit, cp.UE_METHODS)
    acc = items.select(crits).to_numpy().astype(bool)
    hc = items["human_correct"].to_numpy().astype(bool)
    u = items.select(methods).to_numpy().astype(np.float64)
    group = (items["dataset"] + "/" + items["model"]).to_numpy()
    em = (items["em_stratum"] == "EM-accepted").to_numpy()
    n_groups = len(np.unique(group))
    n_tasks = (len(crits) + 1) * len(methods) * n_groups
    print(
        f"workload: {hc.size} items, {n_groups} groups, {len(crits)} criteria + human labels, "
        f"{len(methods)} UE methods -> {n_tasks} AUROC tasks per replicate, {args.n_boot:,} replicates"
    )
    print(f"criteria: {crits}")
    print(
        f"threads: OMP_NUM_THREADS={os.environ['OMP_NUM_THREADS']} "
        f"OPENBLAS_NUM_THREADS={os.environ['OPENBLAS_NUM_THREADS']}"
    )

    ginv = np.unique(group, return_inverse=True)[1]
    kw = {"criteria": tuple(crits), "ue_methods": tuple(methods)}
    paired_bootstrap(acc, hc, u, group, em, **kw, n_boot=50, seed=1)  # warm-up
    t0 = time.perf_counter()
    w = stratified_counts(ginv * 2 + em, args.n_boot, args.seed)
    t1 = time.perf_counter()
    rep = paired_bootstrap(acc, hc, u, group, em, **kw, counts=w)
    t2 = time.perf_counter()
    ours_core = t2 - t0
    print(
        f"ours  paired_bootstrap: draw counts {t1 - t0:.2f} s + H_f/AUROC over all tasks {t2 - t1:.2f} s "
        f"= {ours_core:.2f} s"
    )
    t3 = time.perf_counter()
    pairs = [(c, "exact_match") for c in crits if c != "exact_match"][:2]  # two comparisons, as the seed
    cp.criterion_audit(decisions, scores, audit, n_boot=args.n_boot, seed=args.seed, comparisons=pairs)
    ours_asset = time.perf_counter() - t3
    print(f"ours  criterion_audit (bootstrap + point estimates + CIs for every scope): {ours_asset:.2f} s")

    # Peer: sklearn roc_auc_score on each materialised resample, for a subset of the same replicates.
    labels = np.concatenate([acc, hc[:, None]], axis=1)
    k = min(args.peer_replicates, args.n_boot)
    max_diff, calls = 0.0, 0
    t4 = time.perf_counter()
    for b in range(k):
        idx_all = np.repeat(np.arange(hc.size), w[b].astype(np.int64))
        g_all = ginv[idx_all]
        for gi in range(n_groups):
            idx = idx_all[g_all == gi]
            for mi in range(len(methods)):
                for li in range(labels.shape[1]):
                    y = ~labels[idx, li]
                    if y.all() or not y.any():
                        continue
                    a = roc_auc_score(y, u[idx, mi])
                    calls += 1
                    max_diff = max(max_diff, abs(a - rep.auroc[b, li, mi, gi]))
    peer_k = time.perf_counter() - t4
    peer_full = peer_k * args.n_boot / k
    print(
        f"peer  sklearn roc_auc_score loop: {k} replicates x {n_tasks} tasks ({calls} calls) took "
        f"{peer_k:.2f} s ({1e3 * peer_k / max(calls, 1):.2f} ms/call); EXTRAPOLATED linearly to "
        f"{args.n_boot:,} replicates: {peer_full:.0f} s (the full loop was not run)"
    )
    print(f"exactness: max |ours - sklearn| over the {calls} checked AUROCs = {max_diff:.2e}")
    print(
        f"ratio (extrapolated sklearn loop / ours paired_bootstrap): {peer_full / ours_core:.0f}x; "
        f"vs whole criterion_audit: {peer_full / ours_asset:.0f}x"
    )
    print(f"peak RSS: {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    return {"n_boot": args.n_boot, "n_tasks": n_tasks, "n_items": int(hc.size), "ours_s": ours_core,
            "asset_s": ours_asset, "peer_s": peer_full, "peer_k": k, "max_diff": max_diff, "calls": calls}


def rows(m: dict, quick: bool = False) -> list[dict]:
    what = (f"paired stratified bootstrap, {m['n_boot']:,} replicates × {m['n_tasks']} AUROC tasks "
            f"({m['n_items']} items)")
    return [row("bootstrap", what, m["ours_s"], "s",
                peer=f"sklearn roc_auc_score loop (extrapolated from {m['peer_k']} replicates)",
                peer_value=m["peer_s"], goal=("ratio", ">=", 3000.0), quick=quick,
                note=f"max |ours - sklearn| {m['max_diff']:.1e} over {m['calls']} AUROCs; "
                     f"whole criterion_audit {m['asset_s']:.2f} s")]


def bench_rows(argv: list[str] | None = None) -> list[dict]:
    """The comparison rows of ``make bench`` (runs the benchmark; ``argv`` as on the command line)."""
    args = _parser().parse_args(argv)
    return rows(measure(args), args.quick)


def main() -> None:
    args = _parser().parse_args()
    write_rows(args.rows_json, rows(measure(args), args.quick))


if __name__ == "__main__":
    main()
