"""``noisycal demo``: the whole platform on the bundled demo data, through the real automation path.

1. Demo inputs are written into a fresh ``$NOISYCAL_HOME`` (``noisycal_platform.demo``).
2. The sensors see them (annotation batches, model version v1, the image dataset, generations): new
   partitions are added and the raw assets load; then every asset is materialised for every partition.
3. Simulated expert and lay raters answer the exported confirmation queue in the web tool's format; the
   confirmation sensor ingests the answers and the eager automation reruns what lies downstream.
4. Model version v2, a further annotation batch and the ten-class digits version (its readers' batch and
   items.csv with two sites) arrive; the sensors and automation run the calibration assets for v2 and digits and
   rerun v1 on the new annotations.
5. A summary names the warehouse, the reports and the headline numbers; the exit code is 0 only if every run
   succeeded and every asset exists for every partition.
"""

import shutil
import time
from pathlib import Path

import duckdb

from noisycal_platform import demo as demo_inputs
from noisycal_platform.home_version import record_home
from noisycal_platform.paths import HomeLayout
from orchestration.runner import TickReport, instance_for, materialize_everything, tick

MARKER = ".noisycal-demo"


def _prepare_home(layout: HomeLayout, fresh: bool) -> str | None:
    home = layout.home
    # a tree of empty folders (what loading the code location creates) holds no data
    if home.exists() and any(p.is_file() for p in home.rglob("*")):
        if not (home / MARKER).exists():
            return (
                f"{home} already holds data that the demo did not create; refusing to touch it. Point "
                "NOISYCAL_HOME (or --home) at an empty folder."
            )
        if not fresh:
            return f"{home} holds an earlier demo; run `noisycal demo --fresh` to rebuild it."
        shutil.rmtree(home)
    layout.ensure()
    record_home(home)  # which release wrote this home (noisycal_platform.home_version)
    (home / MARKER).write_text("created by `noisycal demo`; `noisycal demo --fresh` may delete this folder\n")
    # the demo drops its batches and ticks at once: no settle time (files are complete when ticked)
    (home / "settings.json").write_text('{"inbox_settle_seconds": 0}\n')
    return None


def _report(step: str, report: TickReport, started: float) -> int:
    failed = [r for r in report.runs if not r["success"]]
    print(
        f"[{time.perf_counter() - started:6.1f}s] {step}: {report.n_runs} run(s)"
        + (f", {len(failed)} FAILED" if failed else "")
    )
    for run in failed:
        print(f"    FAILED {', '.join(run['assets'])} [{run['partition']}]: {'; '.join(run.get('errors', []))}")
    return len(failed)


def _missing_materializations(home: Path) -> list[str]:
    from definitions import build_definitions

    defs = build_definitions(home)
    instance = instance_for(home)
    graph = defs.resolve_asset_graph()
    missing = []
    for key in graph.materializable_asset_keys:
        pdef = graph.get(key).partitions_def
        if pdef is None:
            if instance.get_latest_materialization_event(key) is None:
                missing.append(key.to_user_string())
            continue
        done = instance.get_materialized_partitions(key)
        for pk in instance.get_dynamic_partitions(pdef.name):
            if pk not in done:
                missing.append(f"{key.to_user_string()}[{pk}]")
    return sorted(missing)


def _headlines(layout: HomeLayout) -> list[str]:
    lines = []
    with duckdb.connect(str(layout.warehouse), read_only=True) as con:
        for version, kind, value, debiased, lo, hi in con.execute(
            "SELECT model_version, kind, value, value_debiased, ci_low, ci_high FROM calibration.nc_ece_report "
            "WHERE estimator = 'nc_ece' ORDER BY model_version, kind DESC"
        ).fetchall():
            ci = (f"debiased {debiased:.4f}, 95% CI {lo:.4f}–{hi:.4f}" if lo is not None and debiased is not None
                  else "no interval")
            lines.append(f"NC-ECE {version}{'' if kind == 'binary' else ' ' + kind}: {value:.4f} ({ci})")
        for version, kind, col, val, value, p_holm, flagged in con.execute(
            "SELECT model_version, kind, subgroup_column, subgroup_value, value, p_value_holm, flagged "
            "FROM calibration.nc_ece_report WHERE estimator = 'nc_ece_subgroup' AND status = 'ok' "
            "ORDER BY model_version, subgroup_column, subgroup_value, kind DESC"
        ).fetchall():
            verdict = "FLAGGED" if flagged else "not flagged"
            p_text = f"Holm p {p_holm:.3g}" if p_holm is not None else "no test"
            lines.append(f"subgroup {version} {col}={val} {kind}: NC-ECE {value:.4f}, {p_text}, {verdict}")
        for version, kind, value in con.execute(
            "SELECT model_version, kind, value FROM calibration.nc_ece_report WHERE estimator = 'naive_majority_vote' "
            "ORDER BY model_version, kind DESC"
        ).fetchall():
            shown = version if kind == "binary" else f"{version} {kind}"
            lines.append(f"naive ECE under majority vote {shown}: {value:.4f}")
        for ranking, issue, auroc in con.execute(
            "SELECT ranking, issue_type, auroc FROM cleaning.ranking_vs_truth ORDER BY issue_type, ranking"
        ).fetchall():
            lines.append(f"cleaning ranking vs injected truth, {issue:<15} {ranking:<9} AUROC {auroc:.3f}")
        for rule, issue, n in con.execute(
            "SELECT rule, issue_type, n_issues FROM (SELECT 'unanimous' AS rule, issue_type, "
            "count(*) FILTER (WHERE unanimous) AS n_issues FROM cleaning.confirmed_issues GROUP BY issue_type) "
            "ORDER BY issue_type"
        ).fetchall():
            lines.append(f"confirmed ({rule}) {issue}: {n}")
        for criterion, h, f in con.execute(
            "SELECT criterion, h_f, f_f FROM correctness.criterion_audit WHERE scope_kind = 'all' AND status = 'ok' "
            "ORDER BY criterion"
        ).fetchall():
            lines.append(f"correctness criterion {criterion:<28} H_f {h:.3f}  F_f {f:.3f}")
    return lines


def run_demo(home: Path, fresh: bool = False, seed: int = 0) -> int:
    started = time.perf_counter()
    layout = HomeLayout.at(home)
    problem = _prepare_home(layout, fresh)
    if problem:
        print(problem)
        return 2
    print(f"noisycal demo in {layout.home}")
    demo_inputs.write_demo_inputs(layout.home, seed=seed)
    print(f"[{time.perf_counter() - started:6.1f}s] demo inputs written (calibration, cleaning, correctness)")

    failures = 0
    failures += _report("sensors: new inputs registered and loaded", tick(layout.home, automation=False), started)
    failures += _report("every asset materialised for every partition", materialize_everything(layout.home), started)
    failures += _report("automation baseline", tick(layout.home, sensors=False), started)

    demo_inputs.write_demo_confirmations(layout.home, seed=seed)
    print(f"[{time.perf_counter() - started:6.1f}s] simulated raters answered the confirmation queue")
    failures += _report("confirmations ingested, downstream rerun", tick(layout.home), started)

    demo_inputs.write_demo_second_arrival(layout.home, seed=seed)
    print(f"[{time.perf_counter() - started:6.1f}s] model versions v2 and digits (10 classes), batch_003 arrived")
    failures += _report("new model version and batch processed", tick(layout.home), started)

    missing = _missing_materializations(layout.home)
    if missing:
        print(f"not materialised: {', '.join(missing)}")
    print()
    for line in _headlines(layout):
        print("  " + line)
    print()
    print(f"warehouse: {layout.warehouse}")
    print(f"reports:   {layout.reports / 'index.html'}")
    print(f"exports:   {layout.exports}")
    print("UI:        make ui   (Dagster on http://127.0.0.1:3000)")
    print(f"done in {time.perf_counter() - started:.0f}s" + (f" with {failures} failed run(s)" if failures else ""))
    return 1 if failures or missing else 0
