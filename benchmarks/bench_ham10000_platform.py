"""HAM10000 brought in as a user would, timed from ``noisycal datasets add`` to the last cleaning asset, beside
fastdup 2.54's default ``fd.run()`` on the same images in the same run (issue 22, item 1).

What runs: a folder with the images (hard links to ``../shared/data/ham10000_200x150/images``, a copy where
links cannot be made; never inside the repository) and ``labels.csv`` (``file_name``, ``label`` = the dx
column); a fresh ``NOISYCAL_HOME`` with the default settings; ``noisycal datasets add ham <folder>`` then
``noisycal tick`` (each a child process, as typed in a shell). The clock runs from the start of ``datasets add``
to the end of ``tick`` (the last cleaning asset, ``cleaning/confirmation_queue`` / ``ranking_vs_truth``, is
materialised inside it); CPU seconds are the children's user + system time (``getrusage(RUSAGE_CHILDREN)``).

Where the time goes, from two sources: each Dagster step's STEP_START → STEP_SUCCESS in the home's event log,
and inside the steps the parts the library reports when ``NOISYCAL_PROFILE`` names a file
(``noisycal_platform.cleaning.profiling``: ONNX export, the forward pass, the baseline, SIFT, k-NN candidates,
verification; wall and CPU seconds). "tick start-up and Dagster between steps" is the rest of the tick's wall
time. Quality: the verified near-duplicate ranking (``cleaning/rank_near_duplicates``, embedding kind dino) read
from the warehouse, recall@1000 and recall@3207 of the same-lesion pairs among the images run, and the audited
pairs (Abhishek et al. 2024) in its top 1,000; fastdup's pairs scored the same way.

    nice -n 10 .venv/bin/python benchmarks/bench_ham10000_platform.py \\
        --fastdup-python .venv-peers/fastdup/bin/python --out /tmp/ham_platform        # all 10,015 images
    nice -n 10 .venv/bin/python benchmarks/bench_ham10000_platform.py --limit 2000 --out /tmp/ham_p2k   # a subset
    nice -n 10 .venv/bin/python benchmarks/bench_ham10000_platform.py --noisycal /tmp/before/.venv/bin/noisycal \
        --out /tmp/ham_before     # the same path through another checkout (before/after on one machine)

Measured 2026-12-06 on all 10,015 images, the shared 2-core AMD EPYC box (other sessions running; nice 10),
the default settings of this commit (Lite0 160 px through ONNX Runtime, k = 5, 128 SIFT keypoints):

| part | wall s | CPU s |
|---|---|---|
| noisycal datasets add (hash + decode check) | 2.6 | 0.9 |
| step raw__reference_labels, raw__images, cleaning__ssl_encoder | 15.6 | |
| step cleaning__embeddings: ONNX export (first use) 3.3 s; forward pass + baseline, one decode | 159.8 | 73.7 |
| step cleaning__rank_irrelevant (single linkage, both kinds) | 13.8 | |
| step neighbour_rankings: SIFT | 179.9 | 76.7 |
| — exact k-NN candidates (k = 5) | 9.2 | 4.4 |
| — geometric verification | 41.2 | 21.0 |
| — the plain near-duplicate and label-error rankings (both kinds), I/O | 17.4 | |
| cleaning/confirmation_queue, ranking_vs_truth, asset checks | 3.3 | |
| tick start-up and Dagster between steps | 44.3 | |
| **total, datasets add → last cleaning asset** (load 5.8 before, 5.5 after) | **487.1** | **211.4** |

Recall@1000 0.296, recall@3207 0.323, audited pairs in the top 1,000: 15 of 20. The commit before (9264715:
eager PyTorch Lite0, k = 10, 256 keypoints), the same path on the same box an hour later (``--noisycal`` of its
checkout; load 8.7 before, 3.3 after): 1,293 s wall, 614 CPU s (the embedding step alone 957 s wall); recall@1000
0.295, recall@3207 0.362, 14 of 20 audited. fastdup 2.54 on the same
images in an earlier run of the same day (load about 12): ``fd.run()`` 261 s wall, its process 297 s wall and
94 CPU s; recall@1000 0.115, 10 of 20 audited. The box was loaded throughout, so the wall times are not the
issue's figure; the CPU seconds say the platform path needs about 2.2× fastdup's CPU time (211 against 94), so
on a quiet box it stays above fastdup's 58 s (at best 211 / 2 cores ≈ 106 s).

Before / after SIFT at half size with 64 keypoints (issue 22 item 1), measured 2026-12-06 21:17–22:07 as two
concurrent runs on the same box (this commit's checkout against ``--noisycal`` of b2f5633, an export of that
commit; load 15 at the start, 7–8 at the end; the box was shared with other sessions, so every figure carries
about twice the CPU seconds of the table above and many times its wall seconds):

| part | before wall s | before CPU s | after wall s | after CPU s |
|---|---|---|---|---|
| noisycal datasets add | 29.1 | 2.3 | 26.6 | 2.3 |
| step cleaning__embeddings (ONNX export + forward pass + baseline) | 1237.7 | 155.0 | 1248.2 | 153.2 |
| step neighbour_rankings: SIFT | 361.9 | 138.3 | 206.6 | 53.3 |
| — exact k-NN candidates (k = 5) | 7.6 | 5.8 | 12.0 | 5.6 |
| — geometric verification | 31.6 | 27.9 | 56.6 | 18.7 |
| — rest of the step (the plain rankings, both kinds; I/O) | 833.3 | | 841.7 | |
| the other steps (raw, ssl_encoder, rank_irrelevant, queue, checks) | 191.3 | | 198.3 | |
| tick start-up and Dagster between steps | 248.3 | | 250.7 | |
| **total** | **2940.9** | **614.3** | **2840.8** | **522.8** |

Quality: before recall@1000 0.296, recall@3207 0.323, 15 of 20 audited; after 0.296, 0.303, **14 of 20**, so the
half-size setting is not the default (``pipeline.rankings.VERIFY_SCALE`` stays 1; the issue keeps the count). The CPU
seconds not attributed to a part (about 285 in each run, against about 35 at load 5.5) and the rest of the
neighbour_rankings step (about 835 s wall in each, 17 s at load 5.5) grow far faster with load than the parts do.

Rerun on all 10,015 images 2026-12-07 03:28–03:32 at ecb3bec (ONNX Runtime's pool not spinning, the baseline's
integer cell sums; the same default settings), without fastdup (no ``.venv-peers/fastdup`` in that checkout), the
shared box less loaded (load 3.6 before, 5.5 after; nice 10):

| part | wall s | CPU s |
|---|---|---|
| noisycal datasets add (hash + decode check) | 1.4 | 1.5 |
| step raw__reference_labels, raw__images, cleaning__ssl_encoder | 10.4 | |
| step cleaning__embeddings: ONNX export (first use) 1.4 s; forward pass + baseline, one decode | 58.3 | 109.8 |
| step cleaning__rank_irrelevant | 5.0 | |
| step neighbour_rankings: SIFT | 60.2 | 105.1 |
| — exact k-NN candidates (k = 5) | 5.5 | 5.3 |
| — geometric verification | 38.2 | 37.2 |
| — the plain near-duplicate and label-error rankings (both kinds), I/O | 18.0 | |
| cleaning/confirmation_queue, ranking_vs_truth, asset checks | 2.7 | |
| tick start-up and Dagster between steps | 22.4 | |
| **total, datasets add → last cleaning asset** | **222.5** | **330.8** |

Recall@1000 0.296, recall@3207 0.323, 15 of 20 audited (the same as the table above: the embeddings and the SIFT
features are the same bit for bit). The wall time is 0.46× the run above, the CPU seconds 1.56×: here the parts ran on
about 1.9 of the 2 cores (forward pass 109.8 CPU s in 58.3 s), there on about half a core (73.7 CPU s in 159.8 s),
and on this virtual machine the same work costs more CPU seconds when it runs on both cores (the forward pass alone,
512 pre-decoded images, three interleaved rounds at load 4–6: median 4.1 CPU s on one intra-op thread, 4.6 on two,
and two were not faster in wall time at that load; the rest of the 1.56× was not traced). CPU seconds are
therefore not comparable between runs at different loads, and "211 against fastdup's 94" understates the gap; the
issue's figure is the quiet wall time: 222.5 s here against fastdup's ~58 s quiet, **not met** (3.8×).

ONNX Runtime's idle threads sleeping instead of spinning (``encoder.onnx_runtime.SPINNING``; the rows are the same
bit for bit), before / after on the first 2,000 images (``--limit 2000``), 2026-12-07 03:05–03:12, one run each
back to back on the shared box (``--noisycal`` of an export of 84b3e83, then this checkout at 1a53844; load 5.6 → 8.6
and 7.9 → 9.0): the embedding part (forward pass + baseline, one decode; less the ONNX export nested in it) 28.0 →
25.2 CPU s, 45.3 → 38.5 s wall; SIFT 30.4 / 29.3 CPU s (unchanged code); the whole path 113 / 112 CPU s, 205 / 205 s
wall; recall@1000 0.432 and 1 of 1 audited in both. The whole-set table above was not rerun (at this load a run
takes about 45 minutes); the lead's quiet rerun is the command at the top with ``--fastdup-python``.

Issue 22 item 1, 2026-12-07 (branch ham22e), four cuts; the first three give the same tables bit for bit:
(1) with rerank the DINO kind's plain top-k pairs, which the verified ranking replaces, are no longer computed
(7.7 CPU s on all images); (2) ``verify_pairs`` runs on one torch thread: torch's OpenMP pool spin-waited between
its many small ops (2,000 images at load 2.3: 15.0 → 3.2 CPU s; on a quieter box 4.3 → 2.6); (3) without int8
units the rankings screen with the float32 rows (``_lowp.ScreenRows``; on every CPU since that evening): the int8
margin on the 832-column baseline was 0.207, so 3.6 million pairs were re-evaluated in float64 (all 10,015
images: baseline near-duplicates 15.5 → 4.6 CPU s, label errors 6.5 → 2.1 and 7.1 → 2.9); (4) the
result-changing one, by the rule stated in
``bench_ham10000_tune.py`` before its grid: SIFT at half size with 96 keypoints (``VERIFY_SCALE``,
``verify.SIFT_FEATURES``; whole set recall@1000 0.296, 15 of 20 audited, recall@3207 0.307 against 0.323;
evaluation half recall@499 0.3019, 5 of 8). Tried and reverted: ONNX Runtime's ``session.set_denormal_as_zero``
(512 images 5.2–5.4 → 4.8–4.9 CPU s, all 10,015 rows identical bit for bit), because it leaves FTZ/DAZ set in the
calling thread, so numpy work later in the same process (the rankings, in the tick) flushes subnormals too.

All 10,015 images, after: at 2f8cda8 (with the subnormal flush, since reverted; load 3.9 before, 1.8 after) and at
caa662a (without it; load 5.2 → 4.8), beside the 03:28 run above at ecb3bec (before; load 3.6 → 5.5); nice 10, the
lead's tests on the other core part of the time, so CPU seconds of runs at different loads compare only roughly
(see above):

| part | before wall / CPU s | 2f8cda8 wall / CPU s | caa662a wall / CPU s |
|---|---|---|---|
| noisycal datasets add | 1.4 / 1.5 | 0.9 / 0.9 | 1.5 / 1.2 |
| steps raw__reference_labels, raw__images, cleaning__ssl_encoder | 10.4 | 9.0 | 12.3 |
| step cleaning__embeddings: forward pass + baseline, one decode | 58.3 / 109.8 | 89.5 / 137.7 | 142.5 / 133.6 |
| step cleaning__rank_irrelevant | 5.0 | 7.2 | 18.5 |
| step neighbour_rankings: SIFT (after: half size, 96 keypoints) | 60.2 / 105.1 | 41.7 / 76.9 | 75.0 / 64.4 |
| — exact k-NN candidates (k = 5) | 5.5 / 5.3 | 4.2 / 7.3 | 5.9 / 5.9 |
| — geometric verification | 38.2 / 37.2 | 13.1 / 12.9 | 10.4 / 10.2 |
| — the plain rankings (after: baseline near-duplicates, both label errors), I/O | 18.0 | 6.1 | 12.6 |
| cleaning/confirmation_queue, ranking_vs_truth, asset checks | 2.7 | 2.6 | 2.9 |
| tick start-up and Dagster between steps | 22.4 | 21.3 | 28.5 |
| **total** | **222.5 / 330.8** | **196.0 / 285.5** | **311.0 / 264.5** |

Recall@1000 0.296, recall@3207 0.307, 15 of 20 audited in both after-runs; the embeddings of caa662a equal those of
the runs with the flush bit for bit. The embedding step's CPU seconds moved with the load, not the code (127.0,
128.6, 137.7, 133.6 in the four whole-set runs of the morning): on this virtual machine the same forward pass costs
more CPU seconds when both cores are free to run it. The run at 36216fa (cuts 1, 2, 4 and the flush; load 6.4 →
3.6) had fastdup in the same run: ours 282.8 s wall, 285 CPU s; fastdup 2.54 ``fd.run()`` 277.5 s, its process
286.3 s wall and 268 CPU s, recall@1000 0.115, 10 of 20 audited (ours / ``fd.run()`` 1.02 at that load; fastdup's
CPU seconds grow with the load too: 205 on the quiet box).

Before / after on the first 2,000 images, back to back, twice (``--noisycal`` of /work/main at f7ce6ff, whose
cleaning code is that of d46ef27, then this checkout at 2f8cda8, with the since-reverted flush; 05:57–06:02 UTC,
load 1.4–1.7; wall / CPU s):

| part | before, 1st | after, 1st | before, 2nd | after, 2nd |
|---|---|---|---|---|
| embedding forward pass + baseline, one decode | 18.8 / 33.3 | 20.3 / 36.1 | 21.6 / 37.7 | 16.0 / 28.7 |
| SIFT | 17.1 / 33.2 | 8.4 / 15.8 | 18.5 / 36.0 | 6.4 / 12.1 |
| geometric verification | 2.4 / 4.7 | 2.6 / 2.6 | 2.0 / 3.9 | 2.5 / 2.5 |
| rest of the neighbour_rankings step | 2.6 | 1.3 | 3.2 | 1.2 |
| tick start-up and Dagster between steps | 20.8 | 21.4 | 21.0 | 18.3 |
| **total** | **73.8 / 106.9** | **66.8 / 89.8** | **79.8 / 115.7** | **55.4 / 74.5** |

On these 2,000 images the half-size SIFT lowers recall@1000 from 0.432 to 0.408 (1 of 1 audited in both); the
setting was chosen on the tuning half and checked on the whole set and the evaluation half, where it held. The
issue's goal (wall time at most fastdup's ``fd.run()``, quiet: 102 s) is **not met**: the forward pass (110–138 CPU
s) and SIFT (62–77 CPU s at half size) alone are about 170–215 CPU s, about 85–107 s on two fully used cores, and
tick start-up with Dagster between steps adds about 21 s on one core. No quiet whole-set run was possible this
morning; the quiet figure is the lead's command at the top (``--fastdup-python``). What is left: the Lite0 forward pass
(int8 lost tuning-half recall, ``bench_onnx_int8.py``; a smaller input would change every DINO ranking, not only
the near-duplicates), OpenCV's SIFT detection, and Dagster's fixed cost (automation evaluation, run creation,
event log: about 2 s per run, six runs).

Since 2026-12-07 the encoder's input is 112 px (``encoder.config.REAL_DATA_SIZE``, chosen on the tuning half:
``bench_ham10000_tune.py``, "Input size"). ``run_all.py --only ham10000_platform --merge`` at 0dff0e8, 18:27–18:32,
a quiet box (load 0.9 before, 1.9 after), fastdup in the same run:

| part | wall s | CPU s |
|---|---|---|
| noisycal datasets add (hash + decode check) | 1.1 | 1.2 |
| steps raw__reference_labels, raw__images, cleaning__ssl_encoder | 10.0 | |
| step cleaning__embeddings: ONNX export (first use) 1.2 s; forward pass (112 px) + baseline, one decode | 36.2 | 67.1 |
| step cleaning__rank_irrelevant | 6.1 | |
| step neighbour_rankings: SIFT (half size, 96 keypoints) | 35.2 | 66.6 |
| — exact k-NN candidates (k = 5) | 3.7 | 6.3 |
| — geometric verification | 6.5 | 12.0 |
| — the plain rankings (baseline near-duplicates, both label errors), I/O | 6.2 | |
| cleaning/confirmation_queue, ranking_vs_truth, asset checks | 2.0 | |
| tick start-up and Dagster between steps | 15.6 | |
| **total** | **122.6** | **197.6** |

fastdup 2.54 ``fd.run()`` 138.5 s (its process 143.9 s wall, 279 CPU s): ours / ``fd.run()`` 0.89, **met**. Quality:
recall@1000 0.291 (≥ 0.29), recall@3207 0.293, 16 of 20 audited pairs in the top 1,000 (15 at 160 px). A run at
the same settings 11 minutes earlier: 134.9 s against ``fd.run()`` 141.3 s (0.95). What remains: the forward pass
and SIFT (about 67 CPU s each, both on two cores), and Dagster's fixed cost (the tick's imports, instance and two
automation rounds: about 9 s of a tick that runs nothing, on one core; ``raw/images``' probe of each file, 4.7 s,
is mostly Pillow's Python-side header parsing, so threads did not shorten it: 5.0 s wall on 8 threads, tried and
dropped).

``--rows-json F`` writes the rows of ``make bench`` (``results_table``): the platform path's wall time against
fastdup's ``fd.run()`` (the issue's peer figure; goal: ours ≤ fastdup; the fastdup process with its imports and
the read-back of its pairs is in the note) and recall@1000 (goal ≥ 0.29). ``--quick`` is ``--limit 300``.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import polars as pl
from results_table import add_rows_arg, row, write_rows

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_ham10000 import DATA, load_truth, log, metrics, run_fastdup  # noqa: E402

DATASET = "ham"


def _children_cpu() -> float:
    r = resource.getrusage(resource.RUSAGE_CHILDREN)
    return r.ru_utime + r.ru_stime


def make_folder(ids: list[str], folder: Path) -> list[str]:
    """``folder/images/<id>.jpg`` (hard links, else copies) and ``folder/labels.csv``; the image paths in order."""
    meta = pl.read_csv(DATA / "metadata.csv").select("image_id", "file_name", "dx")
    meta = pl.DataFrame({"image_id": ids}).join(meta, on="image_id", how="left", maintain_order="left")
    (folder / "images").mkdir(parents=True, exist_ok=True)
    for name in meta["file_name"]:
        src, dst = DATA / name, folder / name
        if not dst.exists():
            try:
                os.link(src, dst)
            except OSError:
                shutil.copyfile(src, dst)
    meta.select("file_name", pl.col("dx").alias("label")).write_csv(folder / "labels.csv")
    return [str(folder / f) for f in meta["file_name"]]


def step_times(home: Path) -> list[dict]:
    """Each Dagster step's wall seconds (STEP_START → STEP_SUCCESS) from the home's event log, in start order."""
    import dagster as dg

    from orchestration.runner import instance_for

    kinds = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE}
    instance = instance_for(home)
    steps: list[dict] = []
    try:
        for run in instance.get_runs():
            seen: dict[str, dict] = {}
            for e in instance.all_logs(run.run_id, of_type=kinds):
                st = seen.setdefault(e.step_key, {"step": e.step_key, "run": run.run_id[:8]})
                if e.dagster_event.event_type == dg.DagsterEventType.STEP_START:
                    st["start"] = e.timestamp
                else:
                    st["end"] = e.timestamp
            steps.extend(s for s in seen.values() if "start" in s and "end" in s)
    finally:
        instance.dispose()
    for s in steps:
        s["seconds"] = s["end"] - s["start"]
    return sorted(steps, key=lambda s: s["start"])


def verified_pairs(home: Path, index: dict[str, int]) -> np.ndarray:
    """The stored verified near-duplicate ranking (dino kind) as rows of the benchmark's image order (i < j)."""
    import duckdb

    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    try:
        df = con.sql("select * from cleaning.rank_near_duplicates").pl()
    finally:
        con.close()
    if "partition" in df.columns:
        df = df.filter(pl.col("partition") == DATASET)
    df = df.filter(pl.col("embedding_kind") == "dino").sort("rank")
    a = np.array([index[Path(f).stem] for f in df["file_name_1"]], np.int64)
    b = np.array([index[Path(f).stem] for f in df["file_name_2"]], np.int64)
    return np.stack([np.minimum(a, b), np.maximum(a, b)], 1)


def measure(args: argparse.Namespace) -> dict:
    if args.quick:
        args.limit = args.limit or 300
    out = args.out.resolve()
    if out.exists() and not args.keep:
        shutil.rmtree(out)
    out.mkdir(parents=True, exist_ok=True)
    ids, pos, audited, _ = load_truth(args.limit, args.half)
    n = len(ids)
    files = make_folder(ids, out / "dataset")
    home, profile = out / "home", out / "profile.jsonl"
    env = {**os.environ, "NOISYCAL_HOME": str(home), "NOISYCAL_PROFILE": str(profile)}
    env.pop("PYTHONPATH", None)
    # the console script of the venv, as a user types it (--noisycal: another checkout's, e.g. the commit before)
    noisycal = [str(args.noisycal or Path(sys.executable).parent / "noisycal")]
    load0 = os.getloadavg()
    log(f"N={n} images ({args.half}), {len(pos)} same-lesion pairs; load average {load0[0]:.2f} {load0[1]:.2f} "
        f"{load0[2]:.2f}; {os.cpu_count()} CPUs")
    t0, c0 = time.perf_counter(), _children_cpu()
    subprocess.run([*noisycal, "--home", str(home), "datasets", "add", DATASET, str(out / "dataset")], env=env,
                   check=True, cwd=out)
    t_add, c_add = time.perf_counter(), _children_cpu()
    res = subprocess.run([*noisycal, "--home", str(home), "tick"], env=env, check=False, cwd=out,
                         capture_output=True, text=True)
    t1, c1 = time.perf_counter(), _children_cpu()
    load1 = os.getloadavg()
    (out / "tick.log").write_text(res.stdout + "\n" + res.stderr)
    if res.returncode != 0:
        raise SystemExit(f"noisycal tick failed (rc {res.returncode}); see {out / 'tick.log'}")
    total, cpu = t1 - t0, c1 - c0
    log(f"platform path {total:.1f} s wall ({cpu:.0f} CPU s); datasets add {t_add - t0:.1f} s; tick {t1 - t_add:.1f} s")
    steps = step_times(home)
    parts = [json.loads(line) for line in profile.read_text().splitlines()] if profile.is_file() else []
    table: list[tuple[str, float, float | None]] = [("noisycal datasets add (hash + decode check)", t_add - t0,
                                                      c_add - c0)]
    in_steps = 0.0
    for s in steps:
        if s["step"] == "latest_run_succeeded":
            continue
        table.append((f"step {s['step']}", s["seconds"], None))
        in_steps += s["seconds"]
        inner = [p for p in parts if s["start"] - 1e-3 <= p["end"] <= s["end"] + 1e-3]
        top = []
        for p in inner:  # a part inside another part (the ONNX export inside the forward pass) is not summed
            nested = any(q is not p and q["end"] - q["wall_s"] <= p["end"] - p["wall_s"] and p["end"] <= q["end"]
                         for q in inner)
            table.append((f"{'        ' if nested else '    '}{p['part']}", p["wall_s"], p["cpu_s"]))
            if not nested:
                top.append(p)
        if inner:
            rest = s["seconds"] - sum(p["wall_s"] for p in top)
            table.append(("    rest of the step (other kernels, I/O, Dagster)", rest, None))
    checks = sum(s["seconds"] for s in steps if s["step"] == "latest_run_succeeded")
    table.append(("asset checks (latest_run_succeeded)", checks, None))
    table.append(("tick start-up and Dagster between steps", (t1 - t_add) - in_steps - checks, None))
    index = {iid: i for i, iid in enumerate(ids)}
    ours = metrics(verified_pairs(home, index), n, pos, audited)
    results: dict = {"n": n, "n_pos": len(pos), "half": args.half, "platform_seconds": total,
                     "platform_cpu_seconds": cpu, "datasets_add_seconds": t_add - t0, "tick_seconds": t1 - t_add,
                     "load_before": load0, "load_after": load1, "parts": table, "steps": steps,
                     "profile": parts, "ours": ours}
    if args.fastdup_python is not None:
        args.threads = args.threads or 2
        c = _children_cpu()
        fd_pairs, info = run_fastdup(args, files)
        info["cpu_seconds"] = _children_cpu() - c
        results["fastdup"] = info
        if fd_pairs is not None:
            results["fastdup_metrics"] = metrics(fd_pairs, n, pos, audited)
    (out / "results.json").write_text(json.dumps(results, indent=1, default=float))
    print(f"\nplatform path, N = {n} ({args.half}): load {load0[0]:.1f} before, {load1[0]:.1f} after")
    print("| part | wall s | CPU s |\n|---|---|---|")
    for name, w, c in table:
        print(f"| {name} | {w:.1f} | {'' if c is None else f'{c:.1f}'} |")
    print(f"| **total, datasets add → last cleaning asset** | **{total:.1f}** | {cpu:.1f} |")
    print(f"\nverified ranking: recall@1000 {ours['recall@1000']:.3f}, recall@3207 {ours['recall@3207']:.3f}, "
          f"audited pairs in top 1000: {ours['audited_in_top1000']} of {ours['n_audited']}")
    fd = results.get("fastdup")
    if fd and "error" not in fd:
        fm = results.get("fastdup_metrics", {})
        print(f"fastdup {fd['fastdup']}: fd.run() {fd['run_seconds']:.1f} s, process {fd['wall_seconds']:.1f} s wall, "
              f"{fd['cpu_seconds']:.0f} CPU s; recall@1000 {fm.get('recall@1000', float('nan')):.3f}, audited "
              f"{fm.get('audited_in_top1000')} of {fm.get('n_audited')}; ours / fastdup's fd.run() "
              f"{total / fd['run_seconds']:.2f}, ours / its process {total / fd['wall_seconds']:.2f}")
    return results


def table_rows(res: dict, quick: bool = False) -> list[dict]:
    fd = res.get("fastdup")
    ok = bool(fd) and "error" not in fd
    peer = f"fastdup {fd['fastdup']} default fd.run()" if ok else "fastdup (not run)"
    ours = res["ours"]
    return [
        row("ham10000_platform", f"HAM10000 via datasets add + tick, {res['n']:,} images (wall)",
            res["platform_seconds"], "s", peer=peer, peer_value=fd["run_seconds"] if ok else None,
            goal=("ratio", ">=", 1.0), quick=quick,
            note=f"{res['platform_cpu_seconds']:.0f} CPU s; fastdup process {fd['wall_seconds']:.0f} s wall, "
                 f"{fd['cpu_seconds']:.0f} CPU s; load {res['load_before'][0]:.1f} before" if ok else
                 f"{res['platform_cpu_seconds']:.0f} CPU s; load {res['load_before'][0]:.1f} before"),
        row("ham10000_platform", f"HAM10000 via the platform: recall@1000 of {res['n_pos']:,} same-lesion pairs",
            ours["recall@1000"], "", peer=peer,
            peer_value=res["fastdup_metrics"]["recall@1000"] if "fastdup_metrics" in res else None,
            ratio_of="ours/peer", goal=("ours", ">=", 0.29), quick=quick,
            note=f"audited pairs in top 1000: {ours['audited_in_top1000']} of {ours['n_audited']}"),
    ]


def _parser() -> argparse.ArgumentParser:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--half", default="all", choices=["all", "tuning", "evaluation"])
    ap.add_argument("--limit", type=int, default=None, help="first N images in lesion order")
    ap.add_argument("--fastdup-python", type=Path, default=None, help="python of a venv with fastdup installed")
    ap.add_argument("--threads", type=int, default=2, help="fastdup's num_threads")
    ap.add_argument("--out", type=Path, default=Path("/tmp/ham_platform"))
    ap.add_argument("--noisycal", type=Path, default=None,
                    help="the noisycal command to time (default: this venv's; another checkout's for a before/after)")
    ap.add_argument("--keep", action="store_true", help="reuse --out (a warm home: cache hits, not a user's first run)")
    ap.add_argument("--quick", action="store_true", help="--limit 300 (a smoke run; rows labelled quick)")
    add_rows_arg(ap)
    return ap


def main() -> None:
    args = _parser().parse_args()
    write_rows(args.rows_json, table_rows(measure(args), args.quick))


if __name__ == "__main__":
    main()
