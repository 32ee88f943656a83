"""``make bench``: every comparison against its named peer, one table, one results file (issue 22).

    python benchmarks/run_all.py [--only NAME[,NAME]] [--skip NAME] [--quick] [--setup] [--merge]

Each benchmark runs in its own process, niced (``nice -n 10``), with ``--rows-json`` (its rows, built with
``results_table.row``); the runner stamps every row with the machine (``lscpu`` model name, cores), the time and
the commit, prints the table and writes ``benchmarks/results/<YYYY-MM-DD>.json`` (UTC date). A comparison not
run in this invocation is a "not run" row, one that failed a "failed" row: no figure is ever carried in by hand.
``--merge`` keeps, from today's file, the rows of the benchmarks this invocation does not run (each keeps its
own time and commit), so benchmarks run one at a time add up to one day's table.

Peers whose licence or dependencies keep them out of the platform's environment run in their own virtual
environments, built on first use under ``.venv-peers/<name>`` (``uv`` when it is on PATH or beside this python,
else ``python -m venv`` + pip; from the package index): fastdup (non-commercial licence: a benchmark peer,
never a dependency). crowd-kit, faiss-cpu and fastcluster are in the ``dev`` extra.

``--setup`` also measures the newcomer's path: a fresh ``git clone`` of HEAD, ``make demo`` there (the
environment build included) and then ``make test`` (long: without the flag those rows say "not run").
``--quick`` runs every selected benchmark at its smaller ``--quick`` sizes (a smoke run; rows labelled quick).
``render_readme.py`` turns the newest results file into README.md's table.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))
import results_table as rt

REPO = Path(__file__).resolve().parents[1]
RESULTS = REPO / "benchmarks" / "results"
PEERS = REPO / ".venv-peers"
#: peer virtual environments: name -> (requirements, a module that must import)
PEER_VENVS: dict[str, tuple[list[str], str]] = {"fastdup": (["fastdup==2.54"], "fastdup")}


@dataclass(frozen=True)
class Bench:
    """One benchmark of ``make bench``: its script (``--rows-json`` aware), what its rows are about, its goals."""

    name: str
    script: str
    title: str
    goal: str
    args: tuple[str, ...] = ()
    peer_venv: str | None = None
    env: dict[str, str] = field(default_factory=dict)


BENCHES: tuple[Bench, ...] = (
    Bench("ham10000", "bench_ham10000.py", "HAM10000 cleaning stage, 10,015 images, vs fastdup 2.54 fd.run()",
          "stage < 20 min; recall@1000 ≥ 0.29", ("--threads", "2", "--sift-threads", "2", "--no-full-ap"),
          peer_venv="fastdup", env={"SENTRY_OPT_OUT": "1"}),
    Bench("ham10000_platform", "bench_ham10000_platform.py",
          "HAM10000 as a user brings it in (datasets add → last cleaning asset) vs fastdup 2.54 fd.run()",
          "ours ≤ fastdup (wall); recall@1000 ≥ 0.29", ("--threads", "2"), peer_venv="fastdup",
          env={"SENTRY_OPT_OUT": "1"}),
    Bench("nc_ece", "bench_nc_ece.py", "NC-ECE 10M × 3 (int8, known channels) vs DuckDB and the bandwidth floor",
          "DuckDB/ours ≥ 10×; ours/floor ≤ 4×"),
    Bench("nc_ece_sql", "bench_nc_ece_sql.py", "NC-ECE per-bin table 10M × 3: library vs the SQL mart", "—"),
    Bench("dawid_skene", "bench_dawid_skene.py", "Dawid–Skene binary 1M × 5 vs crowd-kit",
          "crowd-kit/ours ≥ 200×; estimates within 1e-4"),
    Bench("multiclass", "bench_multiclass.py", "Dawid–Skene multi-class 1M × 3 × 7 vs crowd-kit",
          "crowd-kit/ours ≥ 300×; estimates within 1e-4", ("--skip-ece",)),
    Bench("rankings", "bench_rankings.py", "rankings N = 100,000 × 192 vs faiss; single linkage 20,000 vs fastcluster",
          "faiss/ours ≥ 5×, peak < 1 GB; fastcluster/ours ≥ 30×", ("--sizes", "20000", "--fastcluster-max", "20000")),
    Bench("bootstrap", "bench_bootstrap_auroc.py", "paired stratified bootstrap 10,000 replicates vs sklearn loop",
          "sklearn/ours ≥ 3,000×"),
    Bench("service_latency", "bench_service_latency.py", "service: dropped batch → final calibration report",
          "median of 3 drops < 30 s"),
    Bench("executor", "bench_executor.py", "demo home through `noisycal serve`: dask executor vs in process",
          "dask / in process ≤ 1.5×"),
)
SETUP_ROWS = (  # (what, goal in seconds) of --setup
    ("newcomer: fresh clone, `make demo` (environment build included)", 6 * 60.0),
    ("newcomer: `make test` in that clone", 8 * 60.0),
)


def log(msg: str) -> None:
    print(f"[run_all {time.strftime('%H:%M:%S')}] {msg}", flush=True)


# --------------------------------------------------------------------------- peer environments
def _uv() -> str | None:
    here = Path(sys.executable).parent / "uv"
    return str(here) if here.is_file() else shutil.which("uv")


def peer_python(name: str, root: Path = PEERS) -> Path:
    """The python of the peer venv ``name``, built (and its requirements installed) when it cannot import yet."""
    reqs, module = PEER_VENVS[name]
    venv = root / name
    py = venv / "bin" / "python"
    check = [str(py), "-c", f"import {module}"]
    env = {**os.environ, "SENTRY_OPT_OUT": "1"}
    if py.is_file() and subprocess.run(check, capture_output=True, env=env, check=False).returncode == 0:
        return py
    log(f"building the peer venv {venv} ({', '.join(reqs)})")
    uv = _uv()
    if uv:
        subprocess.run([uv, "venv", "--quiet", "--python", sys.executable, str(venv)], check=True)
        subprocess.run([uv, "pip", "install", "--quiet", "--python", str(py), *reqs], check=True)
    else:
        subprocess.run([sys.executable, "-m", "venv", "--clear", str(venv)], check=True)
        subprocess.run([str(py), "-m", "pip", "install", "--quiet", *reqs], check=True)
    subprocess.run(check, env=env, check=True)
    return py


# --------------------------------------------------------------------------- running
def run_bench(b: Bench, quick: bool, work: Path, timeout: float | None = None) -> list[dict[str, Any]]:
    """Run one benchmark in its own niced process; its rows, or one "failed" row."""
    out = work / f"{b.name}.rows.json"
    args = list(b.args)
    try:
        if b.peer_venv:
            args += [f"--{b.peer_venv}-python", str(peer_python(b.peer_venv))]
    except (subprocess.CalledProcessError, OSError) as e:
        return [rt.placeholder(b.name, b.title, "failed", b.goal, note=f"peer venv {b.peer_venv}: {e}")]
    if b.name.startswith("ham10000"):
        args += ["--out", str(work / b.name)]
    cmd = ["nice", "-n", "10", sys.executable, str(REPO / "benchmarks" / b.script), *args,
           *(["--quick"] if quick else []), "--rows-json", str(out)]
    env = {**os.environ, **b.env, "PYTHONPATH": os.pathsep.join(
        [str(REPO), *([os.environ["PYTHONPATH"]] if os.environ.get("PYTHONPATH") else [])])}
    log(f"== {b.name}: {' '.join(cmd[3:])}")
    load = os.getloadavg()[0]
    t = time.perf_counter()
    try:
        rc = subprocess.run(cmd, env=env, cwd=REPO, check=False, timeout=timeout).returncode
    except subprocess.TimeoutExpired:
        return [rt.placeholder(b.name, b.title, "failed", b.goal, note=f"timed out after {timeout:.0f} s")]
    log(f"== {b.name}: rc {rc}, {time.perf_counter() - t:.0f} s")
    if rc != 0 or not out.is_file():
        return [rt.placeholder(b.name, b.title, "failed", b.goal, note=f"exit status {rc}")]
    rows = json.loads(out.read_text())
    for r in rows:
        r["bench"] = b.name  # the rows belong to the benchmark that ran (the key of --merge)
        r["load_before"] = load  # 1-minute load average when it started (a shared box: times are under load)
    return rows or [rt.placeholder(b.name, b.title, "failed", b.goal, note="no rows written")]


def measure_setup(work: Path) -> list[dict[str, Any]]:
    """A fresh clone of HEAD; ``make demo`` there, timed with its environment build; then ``make test``."""
    clone = work / "clone"
    subprocess.run(["git", "clone", "--quiet", "--no-hardlinks", str(REPO), str(clone)], check=True)
    env = {k: v for k, v in os.environ.items() if k not in ("VIRTUAL_ENV", "PYTHONPATH", "NOISYCAL_HOME")}
    rows = []
    for (what, goal), target in zip(SETUP_ROWS, ("demo", "test"), strict=True):
        log(f"== setup: make {target} in {clone}")
        t = time.perf_counter()
        rc = subprocess.run(["make", target], cwd=clone, env=env, check=False).returncode
        secs = time.perf_counter() - t
        if rc != 0:
            rows.append(rt.placeholder("setup", what, "failed", f"< {goal:.0f} s", note=f"make {target}: rc {rc}"))
        else:
            rows.append(rt.row("setup", what, secs, "s", goal=("ours", "<", goal), note=f"clone of {clone.name}"))
    return rows


def stamp(rows: list[dict[str, Any]], info: dict[str, Any]) -> list[dict[str, Any]]:
    for r in rows:
        if r["status"] != "not run":
            r.update(machine=info["machine"], measured_at=info["written_at"], commit=info["commit"])
        r["met"] = rt.goal_met(r)
    return rows


def assemble(ran: dict[str, list[dict[str, Any]]], info: dict[str, Any], previous: dict[str, Any] | None,
             benches: tuple[Bench, ...] = BENCHES) -> list[dict[str, Any]]:
    """The day's rows in the registry's order: those run now (stamped), else the previous file's (``--merge``),
    else a "not run" row."""
    kept: dict[str, list[dict[str, Any]]] = {}
    for r in (previous or {}).get("rows", []):
        if r["status"] != "not run":
            kept.setdefault(r["bench"], []).append(r)
    titles = {b.name: (b.title, b.goal) for b in benches}
    titles["setup"] = (SETUP_ROWS[0][0], "< 360 s; make test < 480 s")
    out: list[dict[str, Any]] = []
    for name in [*titles]:
        if name in ran:
            out += stamp(ran[name], info)
        elif name in kept:
            out += kept[name]
        elif name == "setup":
            out += [rt.placeholder("setup", w, "not run", f"< {g:.0f} s") for w, g in SETUP_ROWS]
        else:
            title, goal = titles[name]
            out.append(rt.placeholder(name, title, "not run", goal))
    return out


def results_path(results_dir: Path, date: str) -> Path:
    return results_dir / f"{date}.json"


def write_results(path: Path, doc: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".json.tmp")
    tmp.write_text(json.dumps(doc, indent=1, ensure_ascii=False) + "\n")
    os.replace(tmp, path)


def main(argv: list[str] | None = None, benches: tuple[Bench, ...] = BENCHES) -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--only", action="append", default=[], help="benchmark name(s), comma-separated or repeated")
    ap.add_argument("--skip", action="append", default=[], help="benchmark name(s) not to run")
    ap.add_argument("--quick", action="store_true", help="every selected benchmark at its --quick sizes")
    ap.add_argument("--setup", action="store_true", help="also time a fresh clone's make demo and make test")
    ap.add_argument("--merge", action="store_true", help="keep today's rows of the benchmarks not run now")
    ap.add_argument("--timeout", type=float, default=None, help="seconds per benchmark (default: none)")
    ap.add_argument("--results-dir", type=Path, default=RESULTS)
    ap.add_argument("--list", action="store_true", help="print the benchmarks and exit")
    args = ap.parse_args(argv)
    names = [b.name for b in benches]
    if args.list:
        for b in benches:
            print(f"{b.name:<16} {b.title}  (goal: {b.goal})")
        return 0
    only = [n for o in args.only for n in o.split(",") if n]
    skip = [n for o in args.skip for n in o.split(",") if n]
    unknown = sorted(set(only + skip) - set(names) - {"setup"})
    if unknown:
        ap.error(f"unknown benchmark(s) {unknown}; known: {names}")
    selected = [n for n in (only or names) if n not in skip and n != "setup"]
    setup = args.setup or "setup" in only
    now = datetime.now(UTC)
    info = {"date": now.strftime("%Y-%m-%d"), "written_at": now.strftime("%Y-%m-%dT%H:%M:%SZ"),
            "machine": rt.machine(), "commit": rt.commit(REPO)}
    path = results_path(args.results_dir, info["date"])
    previous = json.loads(path.read_text()) if args.merge and path.is_file() else None
    log(f"machine {info['machine']['model']}, {info['machine']['cores']} cores; commit {info['commit']}; "
        f"running {selected}{' + setup' if setup else ''}{' (quick)' if args.quick else ''}")
    ran: dict[str, list[dict[str, Any]]] = {}
    with tempfile.TemporaryDirectory(prefix="noisycal-bench-") as tmp:
        for b in benches:
            if b.name in selected:
                ran[b.name] = run_bench(b, args.quick, Path(tmp), args.timeout)
        if setup:
            ran["setup"] = measure_setup(Path(tmp))
    rows = assemble(ran, info, previous, benches)
    doc = {"schema": 1, **info, "command": ["run_all.py", *(argv if argv is not None else sys.argv[1:])],
           "quick": args.quick, "rows": rows}
    write_results(path, doc)
    print()
    print(rt.text_table(rows))
    print(f"\nwritten: {path}  (README block: python benchmarks/render_readme.py)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
