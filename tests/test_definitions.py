"""The code location loads, and its asset keys are a literal list: renaming an asset is a reviewed diff."""

import dagster as dg

from assets.service_checks import CHECK_NAME as RUN_CHECK
from definitions import build_definitions

ASSET_KEYS = [
    "calibration/channel_estimates",
    "calibration/nc_ece_by_bin",
    "calibration/nc_ece_report",
    "calibration/recalibration_report",
    "calibration/recalibrators",
    "cleaning/agreement",
    "cleaning/annotation_sessions",
    "cleaning/annotation_speedup",
    "cleaning/cleaned_file_list",
    "cleaning/cleaning_impact",
    "cleaning/confirmation_queue",
    "cleaning/confirmed_issues",
    "cleaning/embeddings",
    "cleaning/expert_lay_differences",
    "cleaning/expert_lay_tests",
    "cleaning/label_error_prevalence",
    "cleaning/rank_irrelevant",
    "cleaning/rank_label_errors",
    "cleaning/rank_near_duplicates",
    "cleaning/ranking_quality",
    "cleaning/ranking_vs_truth",
    "cleaning/ssl_encoder",
    "cleaning/stopping_sensitivity",
    "correctness/audit_agreement",
    "correctness/criterion_audit",
    "correctness/criterion_decisions",
    "correctness/false_acceptance",
    "correctness/ue_scores",
    "correctness/ue_sensitivity",
    "raw/annotations",
    "raw/audit_labels",
    "raw/confirmations",
    "raw/generations",
    "raw/images",
    "raw/predictions",
    "raw/reference_labels",
    "reports/calibration",
    "reports/cleaning",
    "reports/correctness",
    "staging/stg_annotations",
    "staging/stg_annotator_index",
    "staging/stg_model_versions",
    "staging/stg_scored_items",
]
CHECKS = [
    "annotations_contract",
    "annotators_conditionally_independent",
    "calibration_test_not_rejected",
    "channel_gap_not_zero",
    "channels_score_invariant",
    "em_converged",
    "enough_items_per_bin",
    "nc_ece_within_limit",
    "predictions_contract",
]
SENSORS = [
    "annotation_sensor",
    "audit_answers_sensor",
    "automation",
    "confirmation_sensor",
    "dataset_sensor",
    "failed_run_sensor",
    "generations_sensor",
    "model_version_sensor",
    "queue_refill_sensor",
    "reference_sensor",
    "settings_sensor",
    "snapshot_sensor",
]


def test_definitions_load_with_the_expected_graph(tmp_path):
    defs = build_definitions(tmp_path)
    dg.Definitions.validate_loadable(defs)
    graph = defs.resolve_asset_graph()
    assert sorted(k.to_user_string() for k in graph.get_all_asset_keys()) == ASSET_KEYS
    assert sorted(c.name for c in graph.asset_check_keys if c.name != RUN_CHECK) == CHECKS
    # every asset has the check that fails while the latest run of one of its partitions failed
    assert {c.asset_key for c in graph.asset_check_keys if c.name == RUN_CHECK} == graph.materializable_asset_keys
    assert sorted(s.name for s in defs.sensors) == SENSORS
    assert [s.name for s in defs.schedules] == ["quality_monitor"]


def test_every_sensor_and_schedule_starts_running(tmp_path):
    defs = build_definitions(tmp_path)
    assert all(s.default_status == dg.DefaultSensorStatus.RUNNING for s in defs.sensors)
    assert all(s.default_status == dg.DefaultScheduleStatus.RUNNING for s in defs.schedules)


def test_every_warehouse_asset_is_in_the_duckdb_pool_and_the_encoder_steps_in_the_compute_pool(tmp_path):
    graph = build_definitions(tmp_path).resolve_asset_graph()
    pools = {k.to_user_string(): graph.get(k).pools for k in graph.materializable_asset_keys}
    compute = {"cleaning/ssl_encoder", "cleaning/embeddings"}  # long compute, short warehouse reads/writes
    assert {k for k, p in pools.items() if p != {"duckdb"}} == compute
    assert all(pools[k] == {"compute"} for k in compute)


def test_lineage_of_the_calibration_chain(tmp_path):
    graph = build_definitions(tmp_path).resolve_asset_graph()

    def parents(key: str) -> set[str]:
        return {p.to_user_string() for p in graph.get(dg.AssetKey(key.split("/"))).parent_keys}

    assert parents("calibration/channel_estimates") == {"raw/annotations", "raw/predictions"}
    assert parents("calibration/nc_ece_by_bin") == {
        "calibration/channel_estimates",
        "staging/stg_annotator_index",
        "staging/stg_model_versions",
        "staging/stg_scored_items",
    }
    assert parents("staging/stg_scored_items") == {
        "raw/annotations",
        "raw/predictions",
        "staging/stg_annotator_index",
        "staging/stg_model_versions",
    }
    assert "calibration/recalibration_report" in parents("reports/calibration")


def test_quality_monitor_schedule_requests_a_run(tmp_path):
    defs = build_definitions(tmp_path)
    schedule = defs.get_schedule_def("quality_monitor")
    assert schedule.cron_schedule == "0 6 * * *"
    result = schedule.evaluate_tick(dg.build_schedule_context(scheduled_execution_time=None))
    assert len(result.run_requests) == 1


def test_the_shell_uses_only_public_dagster_modules():
    """assets/, resources/, orchestration/ and definitions.py import no private module (``dagster._core`` & co.),
    so a Dagster upgrade cannot break them silently through an internal API; the one exception is named here."""
    import ast
    from pathlib import Path

    repo = Path(__file__).resolve().parents[1]
    dirs = ("assets", "resources", "orchestration")
    files = [p for d in dirs for p in (repo / d).rglob("*.py")] + [repo / "definitions.py"]
    private = {}
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            names = [a.name for a in node.names] if isinstance(node, ast.Import) else []
            if isinstance(node, ast.ImportFrom) and node.module:
                names = [node.module, *(f"{node.module}.{a.name}" for a in node.names)]
            parts = [n.split(".") for n in names]
            bad = [".".join(p) for p in parts if p[0].startswith("dagster") and any(q.startswith("_") for q in p[1:])]
            if bad:
                private.setdefault(str(path.relative_to(repo)), []).extend(bad)
    # the one exception: the SQLite storage classes dagster.yaml names subclass Dagster's own (its documented
    # module/class configuration); tests/service/test_sqlite_storage.py guards what they rely on
    assert set(private) == {"orchestration/sqlite_storage.py"}, private


def test_run_status_split_matches_dagster():
    """orchestration.instance spells Dagster's finished / not-finished run statuses with the public enum; this
    fails loudly if a Dagster upgrade changes its own split (the one place a private name is read)."""
    from dagster._core.storage.dagster_run import FINISHED_STATUSES, NOT_FINISHED_STATUSES

    from orchestration import instance

    assert set(instance.FINISHED_STATUSES) == set(FINISHED_STATUSES)
    assert set(instance.NOT_FINISHED_STATUSES) == set(NOT_FINISHED_STATUSES)
