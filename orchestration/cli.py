"""The ``noisycal`` command.

    noisycal demo [--fresh]                 build the demo inputs and run the whole platform on them
    noisycal tick                           evaluate sensors + automation once and run what they request
    noisycal materialize [--select KEYS]    materialise every (or the selected) asset for every known partition
    noisycal ui [--port 3000]               dagster dev on 127.0.0.1 (UI + daemon) for this home
    noisycal serve [--port 3000]            the service: dagster-webserver + dagster-daemon, stopped by SIGTERM
    noisycal retention [--dry-run]          bounded storage: old runs, event logs, ticks, unused cache (pinned kept)
    noisycal validate KIND FILE             check one input file against its contract
    noisycal datasets add NAME PATH | list  register an image dataset by path (no copy)
    noisycal annotators add NAME --role R | revoke NAME | list
    noisycal serve-confirmations            the local confirmation web tool
    noisycal status                         where things are, what is pending, failed, recovered
    noisycal query "SQL"                    run SQL on the read-only warehouse snapshot
    noisycal audit sample [--per-stratum 25] [--seed 0]   draw the correctness audit sample (Rethinking Correctness
    2026 §2.4)
    noisycal audit collect --prompts FILE   generations from the local OpenAI-compatible server in settings.json

Every command works on ``--home`` (default ``$NOISYCAL_HOME`` or ``./.noisycal``).
"""

import argparse
import logging
import os
import sys
import warnings
from pathlib import Path

from noisycal_platform.paths import HOME_ENV, HomeLayout, default_home
from orchestration.signals import heed_interrupts


def _progress_bar(event: dict) -> None:
    """Draw a long step's progress (assets/progress.py events) on stderr: a bar on a terminal, lines otherwise."""
    from assets.progress import format_event

    total = max(int(event["total"]), 1)
    width = 24
    filled = min(width, int(width * int(event["done"]) / total))
    text = f"[{'#' * filled}{'-' * (width - filled)}] {format_event(event).removeprefix('progress ')}"
    if sys.stderr.isatty():
        end = "\n" if event["done"] >= event["total"] else ""
        print(f"\r{text[:150]:<150}", end=end, file=sys.stderr, flush=True)
    else:
        print(text, file=sys.stderr, flush=True)


def _with_progress(fn):
    """Run ``fn`` with the CLI progress bar attached to the in-process runs."""
    from assets.progress import add_sink, remove_sink

    add_sink(_progress_bar)
    try:
        return fn()
    finally:
        remove_sink(_progress_bar)


def _quiet_dagster() -> None:
    os.environ.setdefault("DAGSTER_DISABLE_TELEMETRY", "1")
    logging.getLogger("dagster").setLevel(logging.WARNING)


def _print_recovered(report) -> None:
    for entry in report.recovered:
        print(f"  recovered: run {entry['run_id']} {entry['action']}")


def _print_runs(report) -> int:
    _print_recovered(report)
    failed = 0
    for run in report.runs:
        mark = "skip" if run.get("skipped") else ("ok " if run["success"] else "FAIL")
        part = f" [{run['partition']}]" if run["partition"] else ""
        print(f"  {mark} {run['reason']}: {', '.join(run['assets'])}{part}")
        for err in run.get("errors", []):
            print(f"       {err}")
        failed += not run["success"]
    return failed


def cmd_tick(args) -> int:
    _quiet_dagster()
    from orchestration.runner import tick

    report = _with_progress(lambda: tick(args.home))
    if report.note:
        print(f"tick: {report.note}")
        return 0
    print(f"tick: {report.n_runs} run(s) in {report.rounds} round(s)")
    _one_process_note(args.home, "tick")
    for name, keys in report.partitions_added.items():
        print(f"  new {name} partition(s): {', '.join(keys)}")
    return 1 if _print_runs(report) else 0


def cmd_materialize(args) -> int:
    _quiet_dagster()
    from orchestration.runner import materialize_everything

    select = [k.strip() for k in args.select.split(",") if k.strip()] if args.select else None
    report = _with_progress(lambda: materialize_everything(args.home, select=select))
    where = " through the daemon's run queue" if report.queued else ""
    print(f"materialize: {report.n_runs} run(s){where}")
    for stage, why in report.no_inputs.items():
        print(f"  no inputs for {stage}: {why}; its assets were skipped")
    if not report.queued:
        _one_process_note(args.home, "materialize")
    return 1 if _print_runs(report) else 0


def _one_process_note(home: Path, command: str) -> None:
    """Say so when settings.json names a cluster executor that this in-process command does not use."""
    from resources.settings import load_settings

    executor = load_settings(home).executor
    if executor == "in_process":
        return
    print(
        f"note: settings.json names the {executor!r} executor, but `noisycal {command}` runs every step in this "
        f"one process. To run steps on the {executor} executor, start the service (`noisycal serve`): its daemon "
        f"launches every run on it, and `noisycal materialize` then submits its runs to the service's run queue."
    )


def cmd_retention(args) -> int:
    _quiet_dagster()
    from orchestration.retention import run_retention

    report = run_retention(args.home, dry_run=args.dry_run)
    for line in report.lines():
        print(line)
    return 0


def cmd_demo(args) -> int:
    _quiet_dagster()
    from orchestration.demo import run_demo

    return _with_progress(lambda: run_demo(args.home, fresh=args.fresh, seed=args.seed))


def cmd_ui(args) -> int:
    from orchestration.instance import dagster_home
    from orchestration.service import DROPPED_ENV, REPO_ROOT, WORKSPACE

    env = {k: v for k, v in os.environ.items() if k not in DROPPED_ENV}
    env |= {HOME_ENV: str(args.home), "DAGSTER_HOME": str(dagster_home(args.home))}

    cmd = [str(Path(sys.executable).parent / "dagster"), "dev", "-h", "127.0.0.1", "-p", str(args.port)]
    cmd += ["-w", str(WORKSPACE)]
    print(f"Dagster UI for {args.home} on http://127.0.0.1:{args.port}  (DAGSTER_HOME={env['DAGSTER_HOME']})")
    from orchestration.run_queue import write_service_file

    write_service_file(args.home, "127.0.0.1", args.port)  # exec keeps this pid: `dagster dev` is the service
    os.chdir(REPO_ROOT)
    os.execvpe(cmd[0], cmd, env)
    return 0  # not reached


def cmd_query(args) -> int:
    import duckdb
    import polars as pl

    from resources.snapshot import query, snapshot_path

    try:
        frame = query(args.home, args.sql)
    except duckdb.Error as exc:
        print(f"noisycal query: {exc}", file=sys.stderr)
        return 2
    if args.parquet is not None:
        import io

        from noisycal_platform.files import atomic_write_bytes

        buf = io.BytesIO()
        frame.write_parquet(buf)  # exact values, for programs
        try:
            atomic_write_bytes(args.parquet, buf.getvalue())
        except OSError as exc:
            print(f"noisycal query: cannot write {args.parquet}: {exc.strerror or exc}", file=sys.stderr)
            return 2
    if args.csv:
        from noisycal_platform.spreadsheet import safe_frame

        sys.stdout.write(safe_frame(frame).write_csv())  # a person opens it: spreadsheet-safe cells
    elif args.parquet is None:
        with pl.Config(tbl_rows=args.limit, tbl_cols=-1, fmt_str_lengths=60):
            print(frame)
    print(f"({frame.height} row(s) from {snapshot_path(args.home)})", file=sys.stderr)
    return 0


def cmd_validate(args) -> int:
    from noisycal_platform.ingest import declared_classes
    from noisycal_platform.validate import validate_file
    from resources.settings import load_settings

    classes = declared_classes(HomeLayout.at(args.home), load_settings(args.home).classes)  # the home's classes
    check = validate_file(args.kind, args.file, classes)
    print(check.message, file=sys.stdout if check.ok else sys.stderr)
    return 0 if check.ok else 2


def cmd_datasets(args) -> int:
    layout = HomeLayout.at(args.home).ensure()
    if args.action == "list":
        for name, path in layout.registered_datasets().items():
            print(f"{name}\t{path}")
        return 0
    from noisycal_platform.dataset_scan import register_dataset
    from noisycal_platform.paths import InvalidName

    try:
        reg = register_dataset(layout, args.name, args.path)
    except InvalidName as exc:
        print(str(exc), file=sys.stderr)
        return 2
    if reg.problem is not None:
        print(reg.problem, file=sys.stderr)
        if reg.scan is not None and reg.scan.refused:
            print("  fix or remove these (a symlink must stay inside the folder), then add it again", file=sys.stderr)
        return 2
    assert reg.scan is not None
    print(f"registered dataset {args.name!r} -> {reg.path} ({reg.scan.images} images, not copied); "
          "the dataset sensor takes it")
    return 0


def cmd_annotators(args) -> int:
    from noisycal_platform import confirm_app

    home = HomeLayout.at(args.home).ensure().home
    if args.action == "add":
        _token, path = confirm_app.add_annotator(home, args.name, args.role)
        print(f"annotator {args.name!r} ({args.role}) added. Personal login link (shown once, keep it private):")
        print(f"  http://127.0.0.1:{args.port}{path}")
    elif args.action == "revoke":
        confirm_app.revoke_annotator(home, args.name)
        print(f"annotator {args.name!r} revoked")
    else:
        for a in confirm_app.list_annotators(home):
            print(f"{a['name']}\t{a['role']}\t{'revoked' if a['revoked'] else 'active'}\t{a['created']}")
    return 0


def cmd_service(args) -> int:
    from orchestration.service import serve

    return serve(args.home, host="127.0.0.1", port=args.port)


def cmd_serve(args) -> int:
    from noisycal_platform import confirm_app

    confirm_app.serve(HomeLayout.at(args.home).ensure().home, host=args.host, port=args.port)
    return 0


def cmd_status(args) -> int:
    layout = HomeLayout.at(args.home)
    from noisycal_platform.ingest import pending_annotation_files

    print(f"home:       {layout.home}")
    print(f"warehouse:  {layout.warehouse} ({'present' if layout.warehouse.exists() else 'not built yet'})")
    print(f"reports:    {layout.reports}")
    from resources.snapshot import snapshot_path

    snap = snapshot_path(layout.home)
    print(f"snapshot:   {snap} ({'present' if snap.is_file() else 'written after the first run'}; noisycal query)")
    print(f"models:     {', '.join(layout.model_versions()) or 'none'}")
    print(f"datasets:   {', '.join(layout.registered_datasets()) or 'none'}")
    print(f"pending annotation batches: {len(pending_annotation_files(layout))}")
    quarantined = sorted(p.name for p in layout.quarantine.glob("*.reason.txt")) if layout.quarantine.is_dir() else []
    print(f"quarantined batches: {len(quarantined)}")
    if (layout.home / "dagster" / "dagster.yaml").is_file():
        _quiet_dagster()
        from orchestration.instance import instance_for, latest_failures, recent_recoveries

        failures = latest_failures(instance_for(layout.home))
        print(f"failed (latest run): {len(failures)}")
        for f in failures:
            part = f" [{f['partition']}]" if f["partition"] else ""
            print(f"  {f['asset']}{part}: {f['reason']} (run {f['run_id'][:8]})")
        recovered = recent_recoveries(layout.home)
        if recovered:
            print("recovered after a crash (latest):")
            for r in recovered:
                print(f"  {r['at']} run {r['run_id'][:8]}: {r['action']}")
    return 0


# --- correctness audit (additive block) -------------------------------------------------------------------
def cmd_audit(args) -> int:
    if args.action == "collect":
        return _audit_collect(args)
    from noisycal_platform.correctness.audit_workflow import write_audit_sample
    from noisycal_platform.correctness.io import read_generations

    layout = HomeLayout.at(args.home)
    sample, path = write_audit_sample(layout.home, read_generations(layout.generations), per_stratum=args.per_stratum,
                                      seed=args.seed, force=args.force)
    n_groups = sample.select("dataset", "model").n_unique()
    print(f"audit sample: {sample.height} predictions ({n_groups} groups x 2 EM strata x {args.per_stratum}) -> {path}")
    print("annotators answer at /correctness in `noisycal serve-confirmations`,")
    print("or by CSV in correctness/audit_annotations/ (dataset, model, case_id, annotator_id, human_correct,")
    print("error_category)")
    return 0


def _audit_collect(args) -> int:
    from noisycal_platform.correctness.collect import (
        OpenAIServerError,
        Sampling,
        collect_generations_openai,
        read_prompts_jsonl,
        write_generations_jsonl,
    )
    from resources.settings import load_settings

    if args.prompts is None:
        raise ValueError("audit collect needs --prompts FILE (JSONL of case_id, dataset, task_question, "
                         "candidate_labels, reference_labels, multi_label, context)")
    layout = HomeLayout.at(args.home)
    settings = load_settings(layout.home)
    if not settings.generation_model:
        raise ValueError("set generation_model (and generation_base_url) in settings.json")
    prompts = read_prompts_jsonl(args.prompts)
    try:
        records = collect_generations_openai(
            prompts, model=settings.generation_model, base_url=settings.generation_base_url,
            endpoint=settings.generation_endpoint,
            sampling=Sampling(n_samples=args.samples, top_k=args.top_logprobs, seed=args.seed),
        )
    except OpenAIServerError as exc:  # nothing was written
        print(f"noisycal audit collect: {exc}", file=sys.stderr)
        return 2
    out = write_generations_jsonl(records, layout.generations / f"{args.prompts.stem}.jsonl")
    print(f"audit collect: {len(records)} generations from {settings.generation_base_url} -> {out}")
    return 0


def _add_audit_parser(sub) -> None:
    p = sub.add_parser("audit", help="correctness audit: draw the stratified sample; collect generations")
    p.add_argument("action", choices=["sample", "collect"])
    p.add_argument("--prompts", type=Path, default=None, help="collect: JSONL of prompts")
    p.add_argument("--samples", type=int, default=10, help="collect: sampled answers per prompt")
    p.add_argument("--top-logprobs", type=int, default=20, help="collect: top-K log-probabilities per token")
    p.add_argument("--per-stratum", type=int, default=25, help="predictions per EM stratum and group (seed: 25)")
    p.add_argument("--seed", type=int, default=0)
    p.add_argument("--force", action="store_true", help="replace an existing, different sample")
    p.set_defaults(func=cmd_audit)


# --- end of the correctness audit block --------------------------------------------------------------------


def cmd_export(args) -> int:
    """Write the home's DuckDB warehouse as the Parquet warehouse layout (resources/parquet_warehouse.py)."""
    from definitions import build_definitions
    from resources.parquet_warehouse import export_parquet, partition_columns

    layout = HomeLayout.at(args.home)
    if not layout.warehouse.exists():
        raise FileNotFoundError(f"{layout.warehouse} does not exist: nothing to export")
    from resources.settings import load_settings

    root = args.root or load_settings(layout.home).parquet_root(layout.home)
    written = export_parquet(layout.warehouse, root, partition_columns(build_definitions(layout.home)), args.switch)
    for table, n in sorted(written.items()):
        print(f"{table}\t{n} file(s)")
    print(f"{len(written)} table(s) written under {root}")
    if args.switch:
        print('tables replaced by views; set "warehouse": "parquet" and this "warehouse_root" in settings.json')
    return 0



# --- backup / restore (additive block; the logic is noisycal_platform.backup) -----------------------------
def cmd_backup(args) -> int:
    from noisycal_platform.backup import backup_home, verify_snapshot
    from noisycal_platform.home_version import package_version
    from orchestration.instance import home_lock

    if args.verify:
        manifest = verify_snapshot(args.dest)
        print(f"backup {args.dest}: complete, {len(manifest['files'])} files and {len(manifest['tables'])} "
              "tables match the manifest")
        return 0
    r = backup_home(args.home, args.dest, lock=lambda: home_lock(args.home, "noisycal backup"),
                    package_version=package_version())
    print(f"backup of {args.home} -> {r.dest}: {r.n_files} files, {r.n_bytes} bytes, {r.n_tables} tables, "
          f"{r.seconds:.1f} s")
    return 0


def cmd_restore(args) -> int:
    from noisycal_platform.backup import restore_home

    manifest = restore_home(args.src, args.home)
    print(f"restored {args.src} -> {args.home}: {len(manifest['files'])} files and {len(manifest['tables'])} "
          "tables verified against the manifest")
    return 0


def _add_backup_parsers(sub) -> None:
    p = sub.add_parser("backup", help="consistent snapshot of the home into a new folder (safe while serving)")
    p.add_argument("dest", type=Path)
    p.add_argument("--verify", action="store_true", help="only check the snapshot DEST against its manifest")
    p.set_defaults(func=cmd_backup)
    p = sub.add_parser("verify-backup", help="check a snapshot's files and tables against its manifest")
    p.add_argument("dest", type=Path)
    p.set_defaults(func=cmd_backup, verify=True)
    p = sub.add_parser("restore", help="restore a snapshot into an empty or new home (--home), then verify it")
    p.add_argument("src", type=Path)
    p.set_defaults(func=cmd_restore)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="noisycal", description=__doc__.split("\n")[0])
    parser.add_argument(
        "--home",
        type=lambda p: Path(p).expanduser().resolve(),
        default=None,
        help=f"platform home (default ${HOME_ENV} or ./.noisycal)",
    )
    sub = parser.add_subparsers(dest="command", required=True)

    p = sub.add_parser("demo", help="build demo inputs into the home and run every asset on them")
    p.add_argument("--fresh", action="store_true", help="wipe a previous demo home first (only a demo home)")
    p.add_argument("--seed", type=int, default=0)
    p.set_defaults(func=cmd_demo)
    sub.add_parser("tick", help="evaluate sensors and automation once; run what they request").set_defaults(
        func=cmd_tick
    )
    p = sub.add_parser(
        "materialize",
        help="materialise every asset for every partition (through the run queue while a daemon serves the home)",
    )
    p.add_argument("--select", default=None, help='only these assets, comma-separated keys ("raw/annotations,...")')
    p.set_defaults(func=cmd_materialize)
    p = sub.add_parser("retention", help="delete run history, event logs and ticks older than retention_days "
                       "(pinned runs kept), unused embedding-cache entries and stale temporary files")
    p.add_argument("--dry-run", action="store_true", help="only say what would be deleted")
    p.set_defaults(func=cmd_retention)
    p = sub.add_parser("ui", help="Dagster UI + daemon on 127.0.0.1")
    p.add_argument("--port", type=int, default=3000)
    p.set_defaults(func=cmd_ui)
    p = sub.add_parser("serve", help="the service: Dagster webserver + daemon for this home (SIGTERM stops both)")
    p.add_argument("--port", type=int, default=3000)
    p.set_defaults(func=cmd_service)
    p = sub.add_parser("query", help="SQL on the read-only warehouse snapshot (never blocks the pipeline)")
    p.add_argument("sql")
    p.add_argument("--csv", action="store_true",
                   help="write CSV to stdout, spreadsheet-safe (a cell starting with = + - @ tab CR gets a leading ')")
    p.add_argument("--parquet", type=Path, metavar="FILE", help="write the exact values to FILE (for programs)")
    p.add_argument("--limit", type=int, default=50, help="rows to print (table output)")
    p.set_defaults(func=cmd_query)
    p = sub.add_parser("validate", help="check one input file against its contract")
    p.add_argument("kind", choices=["annotations", "predictions", "references"])
    p.add_argument("file", type=Path)
    p.set_defaults(func=cmd_validate)
    p = sub.add_parser("datasets", help="register or list image datasets")
    p.add_argument("action", choices=["add", "list"])
    p.add_argument("name", nargs="?")
    p.add_argument("path", nargs="?")
    p.set_defaults(func=cmd_datasets)
    p = sub.add_parser("annotators", help="manage confirmation-tool annotators")
    p.add_argument("action", choices=["add", "revoke", "list"])
    p.add_argument("name", nargs="?")
    p.add_argument("--role", choices=["expert", "lay", "admin"], default="expert")
    p.add_argument("--port", type=int, default=8765, help="port printed in the login link")
    p.set_defaults(func=cmd_annotators)
    p = sub.add_parser("serve-confirmations", help="start the local confirmation web tool")
    p.add_argument(
        "--host",
        default="127.0.0.1",
        help="interface to bind (default 127.0.0.1: this machine only; 0.0.0.0 exposes the tool and "
        "its images to the whole network)",
    )
    p.add_argument("--port", type=int, default=8765)
    p.set_defaults(func=cmd_serve)
    sub.add_parser("status", help="where things are and what is pending").set_defaults(func=cmd_status)
    _add_audit_parser(sub)
    _add_backup_parsers(sub)
    p = sub.add_parser("export", help="write the DuckDB warehouse as one Parquet file per asset partition")
    p.add_argument("format", choices=["parquet"])
    p.add_argument("--root", default=None,
                   help="local path or fsspec URL (default: settings' warehouse_root, else $NOISYCAL_HOME/warehouse)")
    p.add_argument("--switch", action="store_true", help="then replace the DuckDB tables by views over the files")
    p.set_defaults(func=cmd_export)
    return parser


def main(argv: list[str] | None = None) -> int:
    heed_interrupts()  # before Dagster or Dask start any process (orchestration.signals)
    args = build_parser().parse_args(argv)
    if args.home is None:
        args.home = default_home()
    if args.command == "datasets" and args.action == "add" and not (args.name and args.path):
        print("usage: noisycal datasets add NAME PATH", file=sys.stderr)
        return 2
    if args.command == "annotators" and args.action in ("add", "revoke") and not args.name:
        print(f"usage: noisycal annotators {args.action} NAME", file=sys.stderr)
        return 2
    from orchestration.errors import HomeBusy

    # Dagster's own evaluator passes a beta parameter internally; the warning says nothing to a clinic's operator
    warnings.filterwarnings("ignore", message=r"Parameter `include_sources`", module=r"dagster\..*")
    try:
        if args.command not in ("backup", "verify-backup", "restore"):
            from noisycal_platform.home_version import open_home

            _, before = open_home(args.home)  # refuses a newer or unreadable home; migrates an older one
            if before is not None:
                print(f"migrated {args.home} to this release's layout; the home as it was is in {before}")
        return int(args.func(args) or 0)
    except HomeBusy as exc:
        print(f"noisycal {args.command}: {exc}", file=sys.stderr)
        return 3
    except (ValueError, FileNotFoundError, PermissionError) as exc:  # user errors: a message, not a traceback
        print(f"noisycal {args.command}: {exc}", file=sys.stderr)
        return 2


def console() -> None:
    """The ``noisycal`` console script (and ``python -m orchestration.cli``): :func:`main`, then exit without the
    interpreter's last full garbage collection. That pass walks the whole heap (Dagster, and torch after a cleaning
    step) only for the operating system to release it anyway. 2-core AMD EPYC, 2026-12-07: a ``noisycal tick``
    that ran nothing, two pairs, 8.8 / 9.4 s wall before, 7.4 / 7.6 s after; the exit of a tick that had run a small
    dataset's cleaning chain (torch loaded) 3.95 s before, 0.78 s after.
    ``gc.freeze`` moves every tracked object to the permanent generation, which the final collection skips;
    ``atexit`` handlers and ``weakref.finalize`` callbacks (temporary folders) still run. Callers of :func:`main`
    in a long-lived process (tests, notebooks) keep the collector as it was."""
    import gc

    code = main()
    sys.stdout.flush()
    sys.stderr.flush()
    gc.freeze()
    sys.exit(code)


if __name__ == "__main__":
    console()
