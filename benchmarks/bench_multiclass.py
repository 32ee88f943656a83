"""Benchmark: multi-class Dawid–Skene (ours vs crowd-kit `DawidSkene`) and classwise / top-label NC-ECE.

Run by hand (once, niced):  nice -n 10 .venv/bin/python benchmarks/bench_multiclass.py
Part 1: 1,000,000 items × 3 annotators × 7 classes, asymmetric confusion matrices (seed 3). Ours takes the
wide n×K array, crowd-kit the long task/worker/label frame (building either is not timed). crowd-kit runs a
fixed number of EM iterations (tol = −inf; its ELBO stopping rule can stop early on a rounding-level
decrease) so that both reach the same estimates; the largest differences are printed next to the speed-up.
``--peer-n`` runs crowd-kit (and ours again) on the first items only when the full size is too slow here.
Ours is the median of ``--repeats`` calls in one process; the first call of a process also imports numba and
loads the cached compiled EM kernel (about 1 s of CPU here, about 8 s when the cache must first be compiled),
printed apart and kept in the row's note.
Part 2: classwise and top-label NC-ECE on 10,000,000 items × 7 classes × 3 annotators (10 % missing).
Prints wall and CPU seconds and the peak RSS. ``bench_rows`` returns the rows of ``make bench`` (results_table):
crowd-kit / ours at the peer's size (goal ≥ 300×) and the largest estimate difference (goal ≤ 1e-4); ``--quick``
is 200,000 items and 1,000,000 for part 2.
"""

from __future__ import annotations

import argparse
import resource
import time
import warnings

import numpy as np
from results_table import add_rows_arg, row, write_rows

from noisycal_platform.calibration.multiclass import estimate_confusion, nc_ece_multiclass

C = 7
K = 3


def confusions(c: int = C) -> np.ndarray:
    """(3, C, C) asymmetric matrices: errors drift to the next class, to the previous one, towards class 0."""
    acc = np.linspace(0.78, 0.92, c)
    t = np.zeros((3, c, c))
    for y in range(c):
        t[0, y, y] = acc[y]
        t[0, y, (y + 1) % c] += 0.7 * (1 - acc[y])
        t[0, y, (y - 1) % c] += 0.3 * (1 - acc[y])
        t[1, y, y] = acc[::-1][y]
        t[1, y, (y - 1) % c] += 0.8 * (1 - acc[::-1][y])
        t[1, y, (y + 2) % c] += 0.2 * (1 - acc[::-1][y])
        others = [a for a in range(c) if a != y]
        share = np.array([3.0 if a == 0 else 1.0 for a in others])
        t[2, y, y] = 0.85
        t[2, y, others] = 0.15 * share / share.sum()
    return t


def draw(rng: np.random.Generator, n: int, t: np.ndarray, missing: float = 0.0) -> tuple[np.ndarray, np.ndarray]:
    prior = np.linspace(1.5, 0.5, t.shape[1])
    prior /= prior.sum()
    y = rng.choice(t.shape[1], size=n, p=prior)
    a = np.empty((n, t.shape[0]))
    for j in range(t.shape[0]):  # loop over annotators
        cum = np.cumsum(t[j], axis=1)[y]
        a[:, j] = np.minimum((rng.random((n, 1)) > cum).sum(axis=1), t.shape[1] - 1)
    if missing:
        a[rng.random(a.shape) < missing] = np.nan
    return a, y


def _timed(fn):
    w0, c0 = time.perf_counter(), time.process_time()
    out = fn()
    return out, time.perf_counter() - w0, time.process_time() - c0


def _peer(a: np.ndarray, n_iter: int):
    import pandas as pd
    from crowdkit.aggregation import DawidSkene

    n = len(a)
    long = pd.DataFrame(
        {"task": np.repeat(np.arange(n), K), "worker": np.tile(np.arange(K), n), "label": a.ravel().astype(np.int64)}
    )
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        peer, wall, cpu = _timed(lambda: DawidSkene(n_iter=n_iter, tol=-np.inf).fit(long))
    e = peer.errors_
    t = np.zeros((K, C, C))
    for (j, obs), entry in e.iterrows():
        t[int(j), :, int(obs)] = entry.reindex(range(C)).to_numpy()
    return t, peer.priors_.reindex(range(C)).to_numpy(), wall, cpu


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser()
    ap.add_argument("--n", type=int, default=None, help="items (default 1,000,000; --quick 200,000)")
    ap.add_argument("--peer-n", type=int, default=None, help="crowd-kit on the first PEER_N items only")
    ap.add_argument("--peer-iter", type=int, default=80)
    ap.add_argument("--ece-n", type=int, default=None, help="part 2 items (default 10,000,000; --quick 1,000,000)")
    ap.add_argument("--repeats", type=int, default=3)
    ap.add_argument("--skip-peer", action="store_true")
    ap.add_argument("--skip-ece", action="store_true")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run; rows labelled quick)")
    add_rows_arg(ap)
    return ap


def measure(args: argparse.Namespace) -> dict:
    """Part 1 (and part 2 unless skipped); prints as it goes, returns part 1's figures."""
    if args.n is None:
        args.n = 200_000 if args.quick else 1_000_000
    if args.ece_n is None:
        args.ece_n = 1_000_000 if args.quick else 10_000_000
    out: dict = {"n": args.n}
    rng = np.random.default_rng(3)
    t_true = confusions()
    a, _ = draw(rng, args.n, t_true)
    print(f"Dawid–Skene data: {args.n:,} items x {K} annotators x {C} classes, dense")
    runs = [_timed(lambda: estimate_confusion(a)) for _ in range(args.repeats)]
    fit = runs[-1][0]
    wall = float(np.median([r[1] for r in runs]))
    cpu = float(np.median([r[2] for r in runs]))
    print(
        f"ours (10 starts) n={args.n:,}: wall median {wall:.4f} s, cpu median {cpu:.4f} s; EM steps {fit.n_iter}, "
        f"patterns {fit.diagnostics['n_patterns']}, converged {fit.converged}, "
        f"max |T - truth| {np.abs(fit.confusion - t_true).max():.4f}"
    )
    w0, c0 = runs[0][1], runs[0][2]
    print(f"ours, first call in this process (numba import + kernel load): wall {w0:.3f} s, cpu {c0:.3f} s")
    out.update(first_s=w0, first_cpu_s=c0)
    if not args.skip_peer:
        pn = args.peer_n or args.n
        sub = a[:pn]
        sruns = [_timed(lambda: estimate_confusion(sub)) for _ in range(args.repeats)]
        sfit = sruns[-1][0]
        swall = float(np.median([r[1] for r in sruns]))
        scpu = float(np.median([r[2] for r in sruns]))
        pt, pprior, pwall, pcpu = _peer(sub, args.peer_iter)
        print(f"ours      n={pn:,}: wall {swall:.4f} s, cpu {scpu:.4f} s")
        print(f"crowd-kit n={pn:,} ({args.peer_iter} EM iterations): wall {pwall:.2f} s, cpu {pcpu:.2f} s")
        print(
            f"equal estimates: max |T_ours - T_crowdkit| {np.abs(sfit.confusion - pt).max():.2e}, "
            f"max |prior diff| {np.abs(sfit.prevalence - pprior).max():.2e}"
        )
        print(f"speed-up at n={pn:,}: wall {pwall / swall:.1f}x, cpu {pcpu / scpu:.1f}x")
        diff = max(np.abs(sfit.confusion - pt).max(), np.abs(sfit.prevalence - pprior).max())
        out.update(
            peer_n=pn,
            ours_s=swall,
            peer_s=pwall,
            peer_iter=args.peer_iter,
            max_diff=float(diff),
            ours_cpu_s=scpu,
            peer_cpu_s=pcpu,
        )
    if not args.skip_ece:
        del a
        rng = np.random.default_rng(5)
        a, y = draw(rng, args.ece_n, t_true, missing=0.1)
        g = rng.normal(0, 1.3, size=(args.ece_n, C))
        g[np.arange(args.ece_n), y] += 1.0
        p = np.exp(1.5 * g - (1.5 * g).max(axis=1, keepdims=True))
        p /= p.sum(axis=1, keepdims=True)
        print(f"NC-ECE data: {args.ece_n:,} items x {C} classes x {K} annotators (10% missing)")
        for kind in ("classwise", "top_label"):
            rr = [_timed(lambda kind=kind: nc_ece_multiclass(p, a, t_true, kind=kind)) for _ in range(args.repeats)]
            print(
                f"nc_ece_multiclass {kind}: wall median {np.median([r[1] for r in rr]):.3f} s "
                f"(min {min(r[1] for r in rr):.3f}), cpu median {np.median([r[2] for r in rr]):.3f} s, "
                f"value {rr[-1][0].value:.5f}"
            )
    print(f"peak RSS {resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024:.0f} MiB")
    out.setdefault("ours_s", wall)
    return out


def rows(m: dict, quick: bool = False) -> list[dict]:
    n = m.get("peer_n", m["n"])
    what = f"Dawid–Skene multi-class {n:,} × {K} × {C} classes, 10 starts (wall)"
    if "peer_s" not in m:
        return [row("multiclass", what, m["ours_s"], "s", quick=quick, note="peer skipped")]
    return [
        row(
            "multiclass",
            what,
            m["ours_s"],
            "s",
            peer=f"crowd-kit DawidSkene ({m['peer_iter']} EM iterations)",
            peer_value=m["peer_s"],
            goal=("ratio", ">=", 300.0),
            quick=quick,
            note=f"CPU seconds ours {m['ours_cpu_s']:.3f}, crowd-kit {m['peer_cpu_s']:.1f} "
            f"({m['peer_cpu_s'] / m['ours_cpu_s']:.0f}×); ours is the median of repeated calls, the first "
            f"call of a process (numba import + kernel load) took {m['first_s']:.2f} s",
        ),
        row(
            "multiclass",
            f"Dawid–Skene multi-class {n:,} × {K} × {C}: max |estimate difference| vs crowd-kit",
            m["max_diff"],
            "",
            peer="crowd-kit DawidSkene",
            goal=("ours", "<=", 1e-4),
            quick=quick,
            note="confusion matrices and class prior",
        ),
    ]


def bench_rows(argv: list[str] | None = None) -> list[dict]:
    """The comparison rows of ``make bench`` (runs the benchmark; ``argv`` as on the command line)."""
    args = _parser().parse_args(argv)
    return rows(measure(args), args.quick)


def main() -> None:
    args = _parser().parse_args()
    write_rows(args.rows_json, rows(measure(args), args.quick))


if __name__ == "__main__":
    main()
