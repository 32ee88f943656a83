"""Benchmark the SelfClean candidate rankings against their peers (Gröger et al. 2023 §3.2).

Run by hand, once, on the shared 2-core box:

    nice -n 10 .venv/bin/python benchmarks/bench_rankings.py > /work/team/bench_rankings.log 2>&1 &

Cases (each in a fresh subprocess; peak memory = ``resource.getrusage(RUSAGE_SELF).ru_maxrss``,
"base" = the same value right after the inputs were loaded, i.e. interpreter + libraries + data):

- N = 100,000 × 192 clustered embeddings with planted near duplicates:
  exact top-10,000 near-duplicate pairs, the label-error ranking, and faiss ``IndexFlatIP`` with
  k = 11 plus a global top-10,000 selection as the peer (approximate by construction; compared
  with our exact pairs).
- Single linkage (100 clusters, Dirichlet(2) sizes, 5% background) at
  N = 20,000, 50,000, 100,000: ``rank_irrelevant`` (exact MST + linkage + walk) against
  ``fastcluster.linkage_vector(X, 'single')`` (float64, Euclidean; heights compared as e²/4).
  fastcluster at 100,000 is skipped by default (~10 min) and extrapolated from 50,000 (marked [X]).

Options: ``--sizes 20000,50000,100000``, ``--fastcluster-max 50000``, ``--skip-pairs``, ``--skip-sl``,
``--pairs-n 100000`` (the pairs data: 1% near-duplicate copies, N/100 clusters), ``--quick`` (pairs at 20,000,
single linkage at 5,000; rows labelled quick), ``--rows-json F``. ``bench_rows`` returns the rows of
``make bench`` (results_table): faiss / ours for the exact pairs and for the label-error ranking (goal ≥ 5×),
their peak memory (VmHWM, goal < 1 GB), and fastcluster / ours for single linkage (goal ≥ 30×).
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
from results_table import add_rows_arg, row, write_rows

DIM = 192


def _unit32(x: np.ndarray) -> np.ndarray:
    x = x / np.linalg.norm(x, axis=1, keepdims=True)
    return x.astype(np.float32)


def make_pairs_data(seed: int = 0, n: int = 100_000) -> tuple[np.ndarray, np.ndarray]:
    """0.99·n points (n/100 clusters, sigma 0.5, 2% background) + n/100 near-duplicate copies (noise 0.05);
    n = 100,000: 99k points, 1000 clusters, 1000 copies.

    Labels: cluster id mod 2, 2% flipped; background points get random labels.
    """
    rng = np.random.default_rng(seed)
    n_dup = n // 100
    n_base, n_clusters = n - n_dup, max(n_dup, 2)
    c = rng.standard_normal((n_clusters, DIM))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    n_bg = int(0.02 * n_base)
    lab = rng.integers(0, n_clusters, n_base - n_bg)
    x = np.concatenate(
        [c[lab] + 0.5 * rng.standard_normal((lab.size, DIM)) / np.sqrt(DIM), rng.standard_normal((n_bg, DIM))]
    )
    y = np.concatenate([lab % 2, rng.integers(0, 2, n_bg)])
    x = _unit32(x)
    src = rng.choice(n_base, n_dup, replace=False)
    dup = _unit32(x[src] + 0.05 * rng.standard_normal((n_dup, DIM)) / np.sqrt(DIM))
    x = np.concatenate([x, dup])
    y = np.concatenate([y, y[src]])
    flip = rng.random(y.size) < 0.02
    y = np.where(flip, 1 - y, y)
    perm = rng.permutation(x.shape[0])
    return x[perm], y[perm]


def make_sl_data(n: int, seed: int = 0) -> np.ndarray:
    """100 centres, Dirichlet(2) cluster sizes, sigma 0.5, 5% uniform background; prefixes nest."""
    rng = np.random.default_rng(seed)
    n_max = 100_000
    c = rng.standard_normal((100, DIM))
    c /= np.linalg.norm(c, axis=1, keepdims=True)
    w = rng.dirichlet(np.full(100, 2.0))
    n_bg = int(0.05 * n_max)
    lab = rng.choice(100, n_max - n_bg, p=w)
    x = np.concatenate(
        [c[lab] + 0.5 * rng.standard_normal((lab.size, DIM)) / np.sqrt(DIM), rng.standard_normal((n_bg, DIM))]
    )
    x = _unit32(x[rng.permutation(n_max)])
    return x[:n]


def _rss_mb() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024.0


def _hwm_mb() -> float:
    """VmHWM of this process image (Linux; excludes anything inherited across fork/exec)."""
    with open("/proc/self/status") as f:
        for line in f:
            if line.startswith("VmHWM:"):
                return int(line.split()[1]) / 1024.0
    return float("nan")


# ----------------------------------------------------------------------------- worker side
def _worker(case: str, data: Path, out: Path) -> None:
    if case.startswith("gen_"):  # data generation also runs in a subprocess: the driver stays small
        data.mkdir(parents=True, exist_ok=True)
        if case.startswith("gen_pairs"):
            x, y = make_pairs_data(n=int(case.split("_")[-1]))
            np.save(data / "y.npy", y)
        else:
            x = make_sl_data(int(case.split("_")[-1]))
        np.save(data / "x.npy", x)
        print(json.dumps({"case": case}))
        return
    x = np.load(data / "x.npy")
    res: dict = {"case": case, "n": int(x.shape[0])}
    if case in ("nd_ours", "le_ours") or case.startswith("sl_ours"):
        import torch  # noqa: F401  (warm-up: the rankings import it on first use, ~1 s; faiss' import is untimed too)
    if case == "nd_ours":
        from noisycal_platform.cleaning.rankings import rank_near_duplicates

        res["base_mb"] = _rss_mb()
        t, c = time.perf_counter(), time.process_time()
        r = rank_near_duplicates(x, 10_000)
        res["time_s"] = time.perf_counter() - t
        res["cpu_s"] = time.process_time() - c
        np.save(out / "nd_pairs.npy", r.pairs)
        np.save(out / "nd_scores.npy", r.scores)
    elif case == "le_ours":
        from noisycal_platform.cleaning.rankings import rank_label_errors

        y = np.load(data / "y.npy")
        res["base_mb"] = _rss_mb()
        t, c = time.perf_counter(), time.process_time()
        r = rank_label_errors(x, y)
        res["time_s"] = time.perf_counter() - t
        res["cpu_s"] = time.process_time() - c
        res["top20"] = r.order[:20].tolist()
    elif case == "faiss":
        import faiss

        res["base_mb"] = _rss_mb()
        t, c = time.perf_counter(), time.process_time()
        index = faiss.IndexFlatIP(x.shape[1])
        index.add(x)
        sims, nbrs = index.search(x, 11)
        t_search = time.perf_counter() - t
        i = np.repeat(np.arange(x.shape[0]), 11)
        j = nbrs.ravel()
        s = sims.ravel()
        keep = (j >= 0) & (i != j)
        lo = np.minimum(i[keep], j[keep])
        hi = np.maximum(i[keep], j[keep])
        key, first = np.unique(lo * x.shape[0] + hi, return_index=True)
        ss = s[keep][first]
        top = np.argsort(-ss, kind="stable")[:10_000]
        res["time_s"] = time.perf_counter() - t
        res["cpu_s"] = time.process_time() - c
        res["search_s"] = t_search
        tau = ss[top[-1]]
        # certificate: rows whose 11th returned neighbour still reaches the 10,000th similarity
        res["uncertified_rows"] = int((sims[:, -1] >= tau).sum())
        np.save(out / "faiss_keys.npy", key[top])
    elif case.startswith("sl_ours"):
        from noisycal_platform.cleaning.rankings import lad_walk
        from noisycal_platform.cleaning.rankings._kernels import as_unit_embeddings
        from noisycal_platform.cleaning.rankings._mst import exact_mst
        from noisycal_platform.cleaning.rankings.irrelevant import _label_mst

        # warm-up outside the timer, like the peer's import: the first call imports scikit-learn (~2 s), and the
        # MST's first call imports numba and loads its compiled kernels from the disk cache (recorded as first_call_s)
        _label_mst(np.array([0]), np.array([1]), np.array([0.5]), 2)
        t = time.perf_counter()
        exact_mst(as_unit_embeddings(np.random.default_rng(0).standard_normal((3000, x.shape[1])).astype(np.float32)))
        res["first_call_s"] = time.perf_counter() - t
        res["base_mb"] = _rss_mb()
        t, c = time.perf_counter(), time.process_time()
        xx = as_unit_embeddings(x)
        i, j, d, stats = exact_mst(xx, in_place=True)  # as rank_irrelevant calls it
        t_mst = time.perf_counter() - t
        o = np.lexsort((j, i, d))
        z = _label_mst(i[o], j[o], d[o], xx.shape[0])
        t_link = time.perf_counter() - t
        lad_walk(z, xx.shape[0])
        res["time_s"] = time.perf_counter() - t
        res["cpu_s"] = time.process_time() - c
        res["mst_s"] = t_mst
        res["label_s"] = t_link - t_mst
        res["walk_s"] = res["time_s"] - t_link
        res["rounds"] = stats["rounds"]
        res["rescanned"] = stats["rescanned"]
        np.save(out / f"heights_ours_{x.shape[0]}.npy", z[:, 2])
    elif case.startswith("sl_fastcluster"):
        import fastcluster

        x64 = x.astype(np.float64)
        res["base_mb"] = _rss_mb()
        t, c = time.perf_counter(), time.process_time()
        z = fastcluster.linkage_vector(x64, method="single", metric="euclidean")
        res["time_s"] = time.perf_counter() - t
        res["cpu_s"] = time.process_time() - c
        np.save(out / f"heights_fc_{x.shape[0]}.npy", z[:, 2] ** 2 / 4.0)
    else:  # pragma: no cover
        raise SystemExit(f"unknown case {case}")
    res["peak_mb"] = _rss_mb()
    res["hwm_mb"] = _hwm_mb()
    print(json.dumps(res))


# ----------------------------------------------------------------------------- driver side
def _run(case: str, data: Path, out: Path) -> dict:
    cmd = [sys.executable, __file__, "--worker", case, "--data", str(data), "--out", str(out)]
    p = subprocess.run(cmd, capture_output=True, text=True, check=False)
    if p.returncode != 0:
        print(p.stdout, p.stderr, file=sys.stderr)
        raise SystemExit(f"case {case} failed")
    res = json.loads(p.stdout.strip().splitlines()[-1])
    if case.startswith("gen_"):
        return res
    extra = {k: v for k, v in res.items() if k not in ("case", "n", "time_s", "peak_mb", "base_mb", "hwm_mb")}
    print(
        f"  {case:<16} N={res['n']:>7,}  time {res['time_s']:8.2f} s   peak {res['peak_mb']:7.0f} MB"
        f" (VmHWM {res['hwm_mb']:.0f}; base {res['base_mb']:.0f} MB)  {json.dumps(extra) if extra else ''}",
        flush=True,
    )
    return res


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--worker")
    ap.add_argument("--data")
    ap.add_argument("--out")
    ap.add_argument("--sizes", default=None, help="single-linkage sizes (default 20000,50000,100000; --quick 5000)")
    ap.add_argument("--fastcluster-max", type=int, default=50_000)
    ap.add_argument("--skip-pairs", action="store_true")
    ap.add_argument("--skip-sl", action="store_true")
    ap.add_argument("--pairs-n", type=int, default=None, help="pairs data size (default 100,000; --quick 20,000)")
    ap.add_argument("--quick", action="store_true", help="smaller sizes (a smoke run; rows labelled quick)")
    add_rows_arg(ap)
    return ap


def measure(a: argparse.Namespace) -> dict:
    """Runs the cases (each in its own subprocess); prints as it goes, returns their results."""
    import platform

    if a.sizes is None:
        a.sizes = "5000" if a.quick else "20000,50000,100000"
    if a.pairs_n is None:
        a.pairs_n = 20_000 if a.quick else 100_000
    found: dict = {"sl": []}

    print(
        f"bench_rankings  {time.strftime('%Y-%m-%d %H:%M:%S %Z')}  host {platform.node()}  "
        f"nproc {os.cpu_count()}  loadavg {os.getloadavg()}  nice {os.nice(0)}",
        flush=True,
    )
    with tempfile.TemporaryDirectory(prefix="bench_rankings_") as tmp:
        root = Path(tmp)
        if not a.skip_pairs:
            print(f"\n[pairs + label errors] N = {a.pairs_n:,} x 192, top-10,000 pairs", flush=True)
            dpath = root / "pairs"
            _run(f"gen_pairs_{a.pairs_n}", dpath, root)
            ours = _run("nd_ours", dpath, root)
            le = _run("le_ours", dpath, root)
            fs = _run("faiss", dpath, root)
            pairs = np.load(root / "nd_pairs.npy")
            keys_ours = pairs[:, 0] * a.pairs_n + pairs[:, 1]
            keys_faiss = np.load(root / "faiss_keys.npy")
            same = np.intersect1d(keys_ours, keys_faiss).size
            print(
                f"  faiss k=11 top-10,000 agrees with the exact pairs on {same:,} / 10,000 pairs; "
                f"{fs['uncertified_rows']} rows fail faiss' exactness certificate"
            )
            print(
                f"  ratio ours/faiss: near duplicates {ours['time_s'] / fs['time_s']:.2f}, "
                f"label errors {le['time_s'] / fs['time_s']:.2f}"
            )
            found.update(pairs_n=a.pairs_n, nd=ours, le=le, faiss=fs, agree=same)
        if not a.skip_sl:
            print("\n[single linkage] D = 192", flush=True)
            t50 = None
            for n in [int(s) for s in a.sizes.split(",")]:
                dpath = root / f"sl{n}"
                _run(f"gen_sl_{n}", dpath, root)
                ours = _run("sl_ours", dpath, root)
                if n <= a.fastcluster_max:
                    fc = _run("sl_fastcluster", dpath, root)
                    h_ours = np.load(root / f"heights_ours_{n}.npy")
                    h_fc = np.load(root / f"heights_fc_{n}.npy")
                    diff = float(np.abs(h_ours - h_fc).max())
                    print(
                        f"  N={n:,}: fastcluster/ours = {fc['time_s'] / ours['time_s']:.2f}x; "
                        f"merge heights max |diff| = {diff:.2e} (identical: {np.array_equal(h_ours, h_fc)})"
                    )
                    t50 = (n, fc["time_s"])
                    found["sl"].append({"n": n, "ours_s": ours["time_s"], "peer_s": fc["time_s"], "diff": diff,
                                        "identical": bool(np.array_equal(h_ours, h_fc)),
                                        "ours_cpu_s": ours.get("cpu_s"), "peer_cpu_s": fc.get("cpu_s")})
                elif t50 is not None:
                    n0, t0 = t50
                    est = t0 * (n / n0) ** 2.14
                    print(
                        f"  N={n:,}: fastcluster NOT RUN; [X] extrapolated from N={n0:,} with exponent 2.14 "
                        f"(fitted to fastcluster's timings at smaller N): ~{est:.0f} s "
                        f"-> ratio ~{est / ours['time_s']:.1f}x"
                    )
    return found


def _mb(mib: float) -> float:
    return mib * 1024 * 1024 / 1e6


def rows(m: dict, quick: bool = False) -> list[dict]:
    out = []
    if "nd" in m:
        n, fs = m["pairs_n"], m["faiss"]
        peer = "faiss IndexFlatIP k = 11 + global top-10,000"
        note = f"faiss agrees on {m['agree']:,} / 10,000 exact pairs; {fs['uncertified_rows']} rows uncertified"
        for key, what in (("nd", f"exact top-10,000 near-duplicate pairs, N = {n:,} × {DIM}"),
                          ("le", f"label-error ranking, N = {n:,} × {DIM}")):
            r = m[key]
            cpu = (f"CPU seconds ours {r['cpu_s']:.2f}, faiss {fs['cpu_s']:.2f} ({fs['cpu_s'] / r['cpu_s']:.1f}×)"
                   if "cpu_s" in r and "cpu_s" in fs else "")
            out.append(row("rankings", what, r["time_s"], "s", peer=peer, peer_value=fs["time_s"],
                           goal=("ratio", ">=", 5.0), quick=quick,
                           note="; ".join(t for t in (note if key == "nd" else "", cpu) if t)))
            out.append(row("rankings", f"{what}: peak memory (VmHWM)", _mb(r["hwm_mb"]), "MB", peer="faiss",
                           peer_value=_mb(fs["hwm_mb"]), ratio_of="ours/peer", goal=("ours", "<", 1000.0),
                           quick=quick, note=f"interpreter + data: {_mb(r['base_mb']):.0f} MB"))
    for s in m.get("sl", []):
        out.append(row("rankings", f"single linkage (irrelevant samples), N = {s['n']:,} × {DIM}", s["ours_s"], "s",
                       peer="fastcluster.linkage_vector(single)", peer_value=s["peer_s"], goal=("ratio", ">=", 30.0),
                       quick=quick, note=f"merge heights max |diff| {s['diff']:.1e} (identical: {s['identical']})"
                       + (f"; CPU seconds ours {s['ours_cpu_s']:.2f}, fastcluster {s['peer_cpu_s']:.2f} "
                          f"({s['peer_cpu_s'] / s['ours_cpu_s']:.1f}×)" if s.get("ours_cpu_s") else "")))
    return out


def bench_rows(argv: list[str] | None = None) -> list[dict]:
    """The comparison rows of ``make bench`` (runs the benchmark; ``argv`` as on the command line)."""
    args = _parser().parse_args(argv)
    return rows(measure(args), args.quick)


def main() -> None:
    a = _parser().parse_args()
    if a.worker:
        _worker(a.worker, Path(a.data), Path(a.out))
        return
    write_rows(a.rows_json, rows(measure(a), a.quick))


if __name__ == "__main__":
    main()
