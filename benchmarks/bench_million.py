"""Benchmark: N small images end to end through the cleaning assets on a Dask cluster with the Parquet warehouse
(run by hand; issue 25).

1. generate: N seeded 32×32 PNGs in ``--classes`` classes (a class is a coarse colour layout and a shape kind, each
   image its own variation of it), with planted near duplicates (a copy of an earlier image with faint noise or
   shifted by one pixel, re-encoded; it carries its source's label) and planted label flips (another class's label
   in ``labels.csv``), written by ``--gen-procs`` niced processes, 10,000 files per sub-folder; the planted truth goes
   to ``<out>/planted.json`` (outside the dataset folder).
2. ``noisycal datasets add bench <folder>`` (the CLI; the folder is scanned, nothing copied).
3. ``noisycal serve`` (webserver + daemon, the process tree under ``nice -n 15``) on a fresh home whose
   ``settings.json`` names ``"executor": "dask"``, ``"dask_workers": W`` and ``"warehouse": "parquet"``: the dataset
   sensor registers the partition and runs ``raw/images``, the automation sensor runs the cleaning assets
   downstream, each run's steps as Dask tasks on a LocalCluster of W single-threaded worker processes (what the
   README's "Running on a cluster" says runs on the cluster; ``noisycal materialize`` alone runs in one process).
   The benchmark waits until the ranking chain (``tests/asset_chains.CLEANING_RANKING_CHAIN``) is materialised and
   no run is active for ``--settle`` seconds.

Recorded: wall time per step (STEP_START → STEP_SUCCESS in Dagster's event log) and per run; peak memory of
every process of the service's tree (``VmHWM`` and the largest ``RssAnon`` seen in ``/proc/<pid>/status``, sampled
every second; VmHWM counts file pages mapped in, e.g. memory-mapped embeddings, which RssAnon leaves out),
grouped by role (webserver, daemon, code server, run process, Dask worker); and the planted issues found: recall of
the planted near-duplicate pairs in the top-k pairs of ``cleaning/rank_near_duplicates`` (k = the planted count and
the stored depth) and of the planted flips in the top of ``cleaning/rank_label_errors`` (top F and 2F, F = flips),
per embedding kind, read from the Parquet partition files. Everything goes to ``<out>/result.json`` and a
Markdown summary ``<out>/result.md``.

Run: nice -n 15 python benchmarks/bench_million.py --n 100000 --workers 2 --out /work/bench-100k-w2
     (``--images DIR`` reuses a folder generated before with the same --n/--seed.)
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))  # tests.asset_chains (the chain waited for), when run as a script from any folder
DATASET = "bench"
SIZE = 32
PER_FOLDER = 10_000
_G: dict = {}  # the generation plan, inherited by the forked generator processes


# ----------------------------------------------------------------------------------------------- 1. generate
def _plan(n: int, classes: int, dup_fraction: float, flip_fraction: float, seed: int) -> dict:
    """Which image is a copy of which, which labels are flipped (all seeded)."""
    rng = np.random.default_rng([seed, 1])
    true = rng.integers(0, classes, n)
    n_dup, n_flip = round(n * dup_fraction), round(n * flip_fraction)
    originals = n - n_dup
    source = np.full(n, -1, np.int64)
    source[originals:] = rng.choice(originals, size=n_dup, replace=False) if n_dup else []
    true[originals:] = true[source[originals:]]
    given = true.copy()
    eligible = np.setdiff1d(np.arange(originals), source[originals:])
    flipped = np.sort(rng.choice(eligible, size=n_flip, replace=False))
    given[flipped] = (true[flipped] + 1 + rng.integers(0, classes - 1, n_flip)) % classes
    templates = np.random.default_rng([seed, 2]).uniform(0, 255, size=(classes, 4, 4, 3))
    return {"n": n, "true": true, "given": given, "source": source, "flipped": flipped, "templates": templates,
            "seed": seed}


def _name(i: int) -> str:
    return f"{i // PER_FOLDER:03d}/img_{i:07d}.png"


def _render(i: int) -> np.ndarray:
    """Image i of class true[i]: its class's coarse layout + own variation, a class-specific shape, pixel noise."""
    from PIL import Image

    plan = _G
    c = int(plan["true"][i])
    rng = np.random.default_rng([plan["seed"], 3, i])
    coarse = np.clip(plan["templates"][c] + rng.normal(0, 30, (4, 4, 3)), 0, 255).astype(np.uint8)
    img = np.asarray(Image.fromarray(coarse).resize((SIZE, SIZE), Image.Resampling.BILINEAR), np.float32)
    yy, xx = np.mgrid[0:SIZE, 0:SIZE]
    (cy, cx), r = rng.uniform(0.25, 0.75, 2) * SIZE, rng.uniform(0.15, 0.3) * SIZE
    kind = c % 3
    mask = ((yy - cy) ** 2 + (xx - cx) ** 2 < r**2) if kind == 0 else (
        np.abs(yy - cy) < r / 3 if kind == 1 else np.abs(xx - cx) < r / 3)
    img[mask] = rng.uniform(0, 255, 3)
    img += rng.normal(0, 4, img.shape)
    return np.clip(img, 0, 255).astype(np.uint8)


def _write_chunk(bounds: tuple[int, int]) -> int:
    from PIL import Image

    root, source = Path(_G["root"]), _G["source"]
    for i in range(*bounds):
        s = int(source[i])
        if s < 0:
            img = _render(i)
        else:  # a planted near duplicate of image s
            a = _render(s).astype(np.int16)
            rng = np.random.default_rng([_G["seed"], 4, i])
            a = a + rng.integers(-5, 6, a.shape) if i % 2 == 0 else np.roll(a, 1, axis=1)
            img = np.clip(a, 0, 255).astype(np.uint8)
        path = root / _name(i)
        path.parent.mkdir(parents=True, exist_ok=True)
        Image.fromarray(img).save(path, compress_level=1)
    return bounds[1] - bounds[0]


def _niced() -> None:
    os.nice(15)


def generate(root: Path, out: Path, n: int, classes: int, dup_fraction: float, flip_fraction: float, seed: int,
             procs: int) -> dict:
    plan = _plan(n, classes, dup_fraction, flip_fraction, seed)
    _G.update(plan, root=str(root))
    chunks = [(a, min(a + 2000, n)) for a in range(0, n, 2000)]
    with multiprocessing.get_context("fork").Pool(procs, initializer=_niced) as pool:
        for _ in pool.imap_unordered(_write_chunk, chunks):
            pass
    with open(root / "labels.csv", "w", encoding="utf-8") as fh:
        fh.write("file_name,label\n")
        fh.writelines(f"{_name(i)},c{int(g)}\n" for i, g in enumerate(plan["given"]))
    copies = np.flatnonzero(plan["source"] >= 0)
    truth = {"n": n, "seed": seed, "classes": classes,
             "near_duplicates": [[_name(int(i)), _name(int(plan["source"][i]))] for i in copies],
             "flipped": [_name(int(i)) for i in plan["flipped"]]}
    (out / "planted.json").write_text(json.dumps(truth))
    return truth


# ------------------------------------------------------------------------------------------ process memory
def _status(pid: int) -> dict[str, int]:
    out = {}
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            key, _, val = line.partition(":")
            if key in ("VmHWM", "VmRSS", "RssAnon", "PPid"):
                out[key] = int(val.split()[0])
    except (OSError, ValueError):
        return {}
    return out


def _cmd(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")[:300]
    except OSError:
        return ""


def role(cmd: str, parent_role: str) -> str:
    """What a process of the service's tree is, from its command line and its parent's role: the code server
    (``dagster api grpc``) starts each run in a spawned process (the run process: the Dask scheduler, the
    nannies and the executor), which spawns the Dask worker processes (where every step and kernel task runs)."""
    if "dagster-webserver" in cmd:
        return "webserver"
    if "dagster-daemon" in cmd:
        return "daemon"
    if "api grpc" in cmd or "code-server" in cmd or "code_server" in cmd:
        return "code server"
    if "resource_tracker" in cmd:
        return "resource tracker"
    if "spawn_main" in cmd or "forkserver" in cmd:
        if parent_role == "code server":
            return "run process"
        if parent_role == "run process":
            return "dask worker"
        return f"spawned by {parent_role or '?'}"
    if "watch_orphans" in cmd or "/dagster/_core/execution/scripts/" in cmd:
        return "dagster log watcher"
    return cmd.split(" ")[0].rsplit("/", 1)[-1] or "?"


class MemorySampler(threading.Thread):
    """Every second: every descendant of ``root_pid``, its VmHWM / RssAnon peaks (kB) and role."""

    def __init__(self, root_pid: int) -> None:
        super().__init__(daemon=True)
        self.root_pid, self.procs, self.stop_flag = root_pid, {}, threading.Event()

    def _tree(self) -> dict[int, int]:
        parent = {}
        for entry in os.listdir("/proc"):
            if entry.isdigit():
                st = _status(int(entry))
                if st:
                    parent[int(entry)] = st.get("PPid", 0)
        tree, frontier = {}, [self.root_pid]
        children: dict[int, list[int]] = {}
        for pid, pp in parent.items():
            children.setdefault(pp, []).append(pid)
        while frontier:
            pid = frontier.pop()
            for ch in children.get(pid, []):
                tree[ch] = pid
                frontier.append(ch)
        return tree

    def _role(self, pid: int, parent: int) -> str:
        return role(_cmd(pid), self.procs.get(parent, {}).get("role", ""))

    def run(self) -> None:
        while not self.stop_flag.is_set():
            self.sample()
            self.stop_flag.wait(1.0)

    def sample(self) -> None:
        for pid, parent in self._tree().items():
            st = _status(pid)
            if not st:
                continue
            rec = self.procs.get(pid)
            if rec is None:
                rec = self.procs[pid] = {"pid": pid, "parent": parent, "role": self._role(pid, parent),
                                         "cmd": _cmd(pid)[:160], "first": time.time(), "hwm_kb": 0, "anon_kb": 0}
            rec["hwm_kb"] = max(rec["hwm_kb"], st.get("VmHWM", 0))
            rec["anon_kb"] = max(rec["anon_kb"], st.get("RssAnon", 0))
            rec["last"] = time.time()


# ------------------------------------------------------------------------------------------------ the run
def _cli(home: Path, *args: str, env: dict) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "orchestration.cli", "--home", str(home), *args], env=env,
                          cwd=REPO, capture_output=True, text=True, check=False)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _wait_for_chain(home: Path, targets: list[str], timeout: float, settle: float, log) -> dict:
    import dagster as dg

    from orchestration.runner import instance_for

    keys = [dg.AssetKey(t.split("/")) for t in targets]
    active = {dg.DagsterRunStatus.QUEUED, dg.DagsterRunStatus.NOT_STARTED, dg.DagsterRunStatus.STARTING,
              dg.DagsterRunStatus.STARTED, dg.DagsterRunStatus.CANCELING}
    start, done_at, state, seen = time.time(), None, {}, ""
    while time.time() - start < timeout:
        instance = instance_for(home)
        try:
            done = [k for k in keys if instance.fetch_materializations(
                dg.AssetRecordsFilter(asset_key=k, asset_partitions=[DATASET]), limit=1).records]
            runs = instance.get_runs()
        finally:
            instance.dispose()
        failed = [r.run_id for r in runs if r.status == dg.DagsterRunStatus.FAILURE]
        running = [r for r in runs if r.status in active]
        line = f"{len(done)}/{len(keys)} targets, {len(runs)} runs, {len(running)} active, {len(failed)} failed"
        if line != seen:
            log(f"[{time.time() - start:7.0f} s] {line}: "
                f"{', '.join(k.to_user_string() for k in keys if k in done) or '-'}")
            seen = line
        state = {"targets_done": [k.to_user_string() for k in done], "failed_runs": failed}
        if failed and not running:
            state["ended"] = "a run failed"
            return state
        if len(done) == len(keys) and not running:
            done_at = done_at or time.time()
            if time.time() - done_at >= settle:
                state["ended"] = "chain done, no active run"
                return state
        else:
            done_at = None
        time.sleep(5)
    state["ended"] = f"timeout after {timeout:.0f} s"
    return state


def _steps(home: Path) -> list[dict]:
    import dagster as dg

    from orchestration.runner import instance_for

    kinds = {dg.DagsterEventType.STEP_START, dg.DagsterEventType.STEP_SUCCESS, dg.DagsterEventType.STEP_FAILURE,
             dg.DagsterEventType.RUN_START, dg.DagsterEventType.RUN_SUCCESS, dg.DagsterEventType.RUN_FAILURE}
    instance = instance_for(home)
    rows = []
    try:
        for run in instance.get_runs():
            steps: dict[str, dict] = {}
            run_start = run_end = None
            for entry in instance.all_logs(run.run_id, of_type=kinds):
                kind = entry.dagster_event.event_type
                if kind == dg.DagsterEventType.RUN_START:
                    run_start = entry.timestamp
                elif kind in (dg.DagsterEventType.RUN_SUCCESS, dg.DagsterEventType.RUN_FAILURE):
                    run_end = entry.timestamp
                elif kind == dg.DagsterEventType.STEP_START:
                    steps.setdefault(entry.step_key, {})["start"] = entry.timestamp
                else:
                    steps.setdefault(entry.step_key, {}).update(
                        end=entry.timestamp, ok=kind == dg.DagsterEventType.STEP_SUCCESS)
            for key, st in steps.items():
                rows.append({"run_id": run.run_id[:8], "step": key, "start": st.get("start"), "end": st.get("end"),
                             "seconds": (st["end"] - st["start"]) if "end" in st and "start" in st else None,
                             "ok": st.get("ok"), "run_seconds": (run_end - run_start) if run_start and run_end
                             else None, "status": run.status.value})
    finally:
        instance.dispose()
    return sorted(rows, key=lambda r: r["start"] or 0)


def _found(home: Path, truth: dict, depth: int) -> dict:
    import polars as pl

    root = home / "warehouse" / "cleaning"
    out: dict = {}
    nd, le = root / "rank_near_duplicates" / f"p-{DATASET}.parquet", root / "rank_label_errors" / f"p-{DATASET}.parquet"
    planted = {frozenset(p) for p in truth["near_duplicates"]}
    flipped = set(truth["flipped"])
    if nd.is_file():
        pairs = pl.read_parquet(nd)
        for kind in sorted(pairs["embedding_kind"].unique().to_list()):
            sub = pairs.filter(pl.col("embedding_kind") == kind).sort("rank")
            got = [frozenset(p) for p in zip(sub["file_name_1"], sub["file_name_2"], strict=True)]
            for k in sorted({len(planted), depth, len(got)}):
                hit = sum(p in planted for p in got[:k])
                out[f"near_duplicates {kind} recall@{k}"] = hit / max(len(planted), 1)
    if le.is_file():
        ranks = pl.read_parquet(le)
        for kind in sorted(ranks["embedding_kind"].unique().to_list()):
            names = ranks.filter(pl.col("embedding_kind") == kind).sort("rank")["file_name"].to_list()
            for k in (len(flipped), 2 * len(flipped)):
                out[f"label_errors {kind} recall@{k}"] = sum(f in flipped for f in names[:k]) / max(len(flipped), 1)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--n", type=int, required=True)
    ap.add_argument("--workers", type=int, default=2, help="Dask worker processes (settings dask_workers)")
    ap.add_argument("--out", type=Path, default=None, help="work folder (default /tmp/bench-million-N-wW)")
    ap.add_argument("--images", type=Path, default=None, help="reuse this generated folder (same --n, --seed)")
    ap.add_argument("--classes", type=int, default=10)
    ap.add_argument("--dup-fraction", type=float, default=0.005)
    ap.add_argument("--flip-fraction", type=float, default=0.01)
    ap.add_argument("--train-sample", type=int, default=2000, help="settings encoder_train_sample")
    ap.add_argument("--gen-procs", type=int, default=2)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--timeout", type=float, default=6 * 3600)
    ap.add_argument("--settle", type=float, default=60.0, help="seconds without an active run after the chain")
    ap.add_argument("--reuse-encoder", type=Path, default=None, metavar="HOME",
                    help="copy HOME/artifacts (the trained encoder of an earlier run on the same images) into the "
                    "fresh home, so ssl_encoder reuses it instead of training (it says so: reused_cached_weights)")
    args = ap.parse_args()
    out = (args.out or Path(f"/tmp/bench-million-{args.n}-w{args.workers}")).resolve()
    out.mkdir(parents=True, exist_ok=True)
    result: dict = {"n": args.n, "workers": args.workers, "argv": sys.argv, "started": time.strftime("%FT%TZ",
                                                                                                      time.gmtime())}
    result_path = out / "result.json"

    def log(msg: str) -> None:
        print(f"{time.strftime('%H:%M:%S', time.gmtime())} {msg}", flush=True)

    def save() -> None:
        result_path.write_text(json.dumps(result, indent=1, default=str))

    phases: dict[str, float] = {}
    result["phases"] = phases
    images = args.images.resolve() if args.images else out / "images"
    t = time.time()
    if args.images and (images / "labels.csv").is_file() and (images.parent / "planted.json").is_file():
        truth = json.loads((images.parent / "planted.json").read_text())
        if truth["n"] != args.n or truth["seed"] != args.seed:
            raise SystemExit(f"{images}: generated for n={truth['n']} seed={truth['seed']}")
        log(f"reusing {images}")
    else:
        log(f"generating {args.n} images under {images}")
        images.mkdir(parents=True, exist_ok=True)
        truth = generate(images, images.parent, args.n, args.classes, args.dup_fraction, args.flip_fraction,
                         args.seed, args.gen_procs)
        phases["generate"] = time.time() - t
        log(f"generated in {phases['generate']:.0f} s")
    result["planted"] = {"near_duplicates": len(truth["near_duplicates"]), "flipped": len(truth["flipped"])}
    save()

    home = out / "home"
    if home.exists():
        raise SystemExit(f"{home} exists: use a fresh --out")
    home.mkdir()
    depth = max(2000, 2 * len(truth["near_duplicates"]))
    settings = {"executor": "dask", "dask_workers": args.workers, "warehouse": "parquet",
                "encoder_train_sample": args.train_sample, "near_duplicate_top_k": depth,
                "retention_every_hours": 0, "torch_threads": 1}
    (home / "settings.json").write_text(json.dumps(settings))
    if args.reuse_encoder is not None:
        import shutil

        shutil.copytree(args.reuse_encoder / "artifacts", home / "artifacts")
        result["encoder_reused_from"] = str(args.reuse_encoder)
    result["settings"] = settings
    env = dict(os.environ, PYTHONPATH=str(REPO), NOISYCAL_HOME=str(home), OMP_NUM_THREADS="1",
               OPENBLAS_NUM_THREADS="1", MKL_NUM_THREADS="1")
    t = time.time()
    reg = _cli(home, "datasets", "add", DATASET, str(images), env=env)
    phases["datasets add"] = time.time() - t
    log(f"datasets add: {reg.stdout.strip() or reg.stderr.strip()} ({phases['datasets add']:.0f} s)")
    if reg.returncode != 0:
        result["error"] = reg.stderr
        save()
        return 1

    from orchestration.instance import instance_for

    # the home's Dagster storage is created here, before the service and this poller open it at the same moment
    # (two processes creating a fresh SQLite schema together can stamp it with two heads; `serve` guards only its
    # own children)
    instance_for(home).dispose()
    port = _free_port()
    logf = open(out / "serve.log", "w")
    serve = subprocess.Popen(["nice", "-n", "15", sys.executable, "-m", "orchestration.cli", "--home", str(home),
                              "serve", "--port", str(port)], env=env, cwd=REPO, stdout=logf, stderr=subprocess.STDOUT,
                             start_new_session=True)
    sampler = MemorySampler(serve.pid)
    sampler.start()
    t = time.time()
    try:
        from tests.asset_chains import CLEANING_RANKING_CHAIN

        state = _wait_for_chain(home, list(CLEANING_RANKING_CHAIN), args.timeout, args.settle, log)
    finally:
        phases["service (sensor to last step)"] = time.time() - t
        sampler.sample()
        result["steps"] = _steps(home)
        os.killpg(serve.pid, signal.SIGTERM)
        try:
            serve.wait(timeout=90)
        except subprocess.TimeoutExpired:
            os.killpg(serve.pid, signal.SIGKILL)
            serve.wait()
        sampler.stop_flag.set()
        sampler.join(5)
        logf.close()
        result["processes"] = sorted(sampler.procs.values(), key=lambda r: -r["hwm_kb"])
        save()
    result.update(state)
    result["found"] = _found(home, truth, depth)
    result["finished"] = time.strftime("%FT%TZ", time.gmtime())
    save()
    (out / "result.md").write_text(summary(result))
    print(summary(result))
    return 0 if state.get("ended", "").startswith("chain done") else 1


def summary(result: dict) -> str:
    lines = [f"## N = {result['n']:,}, {result['workers']} Dask worker(s)", "",
             f"planted: {result['planted']['near_duplicates']} near-duplicate pairs, {result['planted']['flipped']} "
             f"label flips; ended: {result.get('ended', '?')}", "", "| phase | wall s |", "|---|---|"]
    lines += [f"| {k} | {v:.1f} |" for k, v in result["phases"].items()]
    lines += ["", "| run | step | wall s | ok |", "|---|---|---|---|"]
    lines += [f"| {s['run_id']} | {s['step']} | {s['seconds']:.1f} | {s['ok']} |" if s["seconds"] is not None
              else f"| {s['run_id']} | {s['step']} | (running) | |" for s in result.get("steps", [])]
    roles: dict[str, list] = {}
    procs = {p["pid"]: p for p in result.get("processes", [])}
    for p in sorted(procs.values(), key=lambda q: q["first"]):  # parents first: roles follow the tree
        p["role"] = role(p["cmd"], procs.get(p["parent"], {}).get("role", ""))
        roles.setdefault(p["role"], []).append(p)
    lines += ["", "| process role | processes | peak VmHWM MB (max) | peak RssAnon MB (max) |", "|---|---|---|---|"]
    for name, ps in sorted(roles.items(), key=lambda kv: -max(p["hwm_kb"] for p in kv[1])):
        lines.append(f"| {name} | {len(ps)} | {max(p['hwm_kb'] for p in ps) / 1024:.0f} | "
                     f"{max(p['anon_kb'] for p in ps) / 1024:.0f} |")
    lines += ["", "| planted issues found | value |", "|---|---|"]
    lines += [f"| {k} | {v:.3f} |" for k, v in result.get("found", {}).items()]
    return "\n".join(lines) + "\n"


if __name__ == "__main__":
    if sys.argv[1:2] == ["--summary"]:  # re-render <out>/result.md from <out>/result.json
        res = json.loads((Path(sys.argv[2]) / "result.json").read_text())
        (Path(sys.argv[2]) / "result.md").write_text(summary(res))
        print(summary(res))
        raise SystemExit(0)
    raise SystemExit(main())
