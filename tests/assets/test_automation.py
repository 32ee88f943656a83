"""Sensors through their cases, and the full automation path through ``tick`` (sensor -> run -> eager)."""

import json
import os
import shutil

import dagster as dg
import pytest

from assets.automation import DOWNSTREAM_TAG, annotation_sensor, model_version_sensor
from assets.policy import EAGER, EAGER_PARTITIONED
from assets.raw import ANNOTATIONS
from definitions import build_definitions
from noisycal_platform.files import sha256_file
from noisycal_platform.paths import HomeLayout
from orchestration.runner import _dynamic_partitions_snapshot, instance_for, tick

HEADER = "item_id,annotator_id,label\n"


@pytest.fixture(scope="module")
def _opened_home(tmp_path_factory):
    """A fresh home whose instance was opened once (its SQLite files created and stamped: about 0.4 CPU s)."""
    home = HomeLayout.at(tmp_path_factory.mktemp("opened") / "home").ensure().home
    instance_for(home)
    return home


@pytest.fixture
def layout(_opened_home, tmp_path):
    """This module's fresh home: a copy of ``_opened_home`` (a moved home gets its dagster.yaml paths rewritten)."""
    shutil.copytree(_opened_home, tmp_path / "home")
    return HomeLayout.at(tmp_path / "home")


@pytest.fixture
def defs(layout):
    return build_definitions(layout.home)


@pytest.fixture
def instance(layout):
    """The platform's instance on the test's fresh home, one per test (opening one costs about 0.15 CPU s)."""
    return instance_for(layout.home)


def _ctx(defs, instance, cursor=None, name="annotation_sensor"):
    # only the resources the sensor declares, as the runner and the daemon give it (all of them: ~70 ms a context)
    (required,) = [s.required_resource_keys for s in defs.sensors if s.name == name]
    return dg.build_sensor_context(
        instance=instance,
        cursor=cursor,
        definitions=defs,
        sensor_name=name,
        resources={k: v for k, v in defs.resources.items() if k in required},
    )


def test_annotation_sensor_cases(defs, layout, instance):
    # empty inbox -> skip
    r0 = annotation_sensor(_ctx(defs, instance))
    assert r0.skip_reason is not None and not r0.run_requests
    # a new file -> exactly one RunRequest keyed by its content hash
    p = layout.annotation_inbox / "b1.csv"
    p.write_text(HEADER + "a,r1,1\n")
    r1 = annotation_sensor(_ctx(defs, instance))
    assert [rr.run_key for rr in r1.run_requests] == [f"annotations-{sha256_file(p)}"]
    # the same file again (cursor passed on) -> nothing
    r2 = annotation_sensor(_ctx(defs, instance, cursor=r1.cursor))
    assert not r2.run_requests
    # a renamed copy with the same bytes -> nothing
    shutil.copy(p, layout.annotation_inbox / "b1-renamed.csv")
    r3 = annotation_sensor(_ctx(defs, instance, cursor=r1.cursor))
    assert not r3.run_requests
    # a different file -> one new request
    (layout.annotation_inbox / "b2.csv").write_text(HEADER + "b,r1,0\n")
    r4 = annotation_sensor(_ctx(defs, instance, cursor=r1.cursor))
    assert len(r4.run_requests) == 1 and set(json.loads(r4.cursor)) >= set(json.loads(r1.cursor))


def test_model_version_sensor_adds_partition(defs, layout, instance):
    r0 = model_version_sensor(_ctx(defs, instance, name="model_version_sensor"))
    assert r0.skip_reason is not None
    (layout.models / "v7").mkdir()
    (layout.models / "v7" / "predictions.csv").write_text("item_id,score\na,0.5\n")
    (layout.models / "empty_folder").mkdir()  # no predictions file -> not a version
    r1 = model_version_sensor(_ctx(defs, instance, name="model_version_sensor"))
    assert [req.partition_keys for req in r1.dynamic_partitions_requests] == [["v7"]]
    assert [(rr.partition_key, rr.run_key) for rr in r1.run_requests] == [("v7", "model-v7")]


def _runs_of(report, asset):
    return [r for r in report.runs if asset in r["assets"]]


def test_tick_ingests_once_and_reruns_downstream(defs, layout):
    (layout.annotation_inbox / "b1.csv").write_text(HEADER + "a,r1,1\nb,r1,0\n")
    first = tick(layout.home, defs=defs)
    assert all(r["success"] for r in first.runs), first.runs
    assert len(_runs_of(first, "raw/annotations")) == 1
    assert len(_runs_of(first, "staging/stg_annotations")) == 1  # downstream followed by itself
    # nothing new -> nothing runs
    assert tick(layout.home, defs=defs).n_runs == 0
    # the same file dropped again -> nothing runs, nothing is added
    (layout.annotation_inbox / "b1-again.csv").write_text(HEADER + "a,r1,1\nb,r1,0\n")
    assert _runs_of(tick(layout.home, defs=defs), "raw/annotations") == []
    # a new batch -> exactly one ingestion and one downstream rerun
    (layout.annotation_inbox / "b2.csv").write_text(HEADER + "c,r2,1\n")
    third = tick(layout.home, defs=defs)
    assert len(_runs_of(third, "raw/annotations")) == 1
    assert len(_runs_of(third, "staging/stg_annotations")) == 1
    import duckdb

    with duckdb.connect(str(layout.warehouse), read_only=True) as con:
        assert con.execute("select count(*) from raw.annotations").fetchone()[0] == 3
        assert con.execute("select count(*) from staging.stg_annotations").fetchone()[0] == 3


BAD_BATCHES = {
    "label_not_binary": (HEADER + "b,r1,1\nc,r1,maybe\n", "row 2", "column 'label'"),
    "missing_column": ("item_id,label\nb,1\n", None, "column 'annotator_id'"),
    "duplicate_pair": (HEADER + "b,r1,1\nb,r1,0\n", "row 2", "column 'annotator_id'"),
    "repeats_accepted_batch": (HEADER + "b,r2,1\na,r1,0\n", "row 2", "column 'annotator_id'"),
    "empty_file": ("", None, "empty"),
    "not_utf8": (HEADER.encode() + b"b,r\xe91,1\n", "row 1", "column 'annotator_id'"),
}
# Record-level quarantine: the good rows of a batch land, only its bad rows are quarantined (as a file of
# those rows, ready to correct). Cases with a good row: (rows that land, the rejected rows file's text).
PARTLY_GOOD = {
    "label_not_binary": ([("b", "r1", 1)], HEADER + "c,r1,maybe\n"),
    "repeats_accepted_batch": ([("b", "r2", 1)], HEADER + "a,r1,0\n"),
}


@pytest.fixture(scope="module")
def _one_batch_home(_opened_home, tmp_path_factory):
    """A fresh home after its first batch (b1.csv: a,r1,1) went through ``tick``: the same for every case."""
    home = tmp_path_factory.mktemp("one_batch") / "home"
    shutil.copytree(_opened_home, home)
    (HomeLayout.at(home).annotation_inbox / "b1.csv").write_text(HEADER + "a,r1,1\n")
    tick(home, defs=build_definitions(home), automation=False)
    return home


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_bad_batch_is_quarantined_and_leaves_warehouse_unchanged(_one_batch_home, tmp_path, case):
    # each case on its own copy of the home its good first batch was ticked into (built once per module)
    layout = HomeLayout.at(shutil.copytree(_one_batch_home, tmp_path / "home"))
    defs = build_definitions(layout.home)
    import duckdb

    def stored():
        with duckdb.connect(str(layout.warehouse), read_only=True) as con:
            return con.execute("select item_id, annotator_id, label from raw.annotations order by 1, 2").fetchall()

    before = stored()
    content, row, column = BAD_BATCHES[case]
    bad = layout.annotation_inbox / "b2.csv"
    bad.write_bytes(content if isinstance(content, bytes) else content.encode())
    digest = sha256_file(bad)
    report = tick(layout.home, defs=defs, automation=False)
    assert all(r["success"] for r in report.runs)
    landed, rejected_text = PARTLY_GOOD.get(case, ([], None))
    kept = layout.quarantine / ("b2.csv" if rejected_text is None else f"b2.rejected-{digest[:8]}.csv")
    reason = (layout.quarantine / f"{kept.name}.reason.txt").read_text()
    assert "b2.csv" in reason and column in reason and (row is None or row in reason)
    if rejected_text is None:  # no usable row: the batch is quarantined whole, byte for byte
        assert kept.read_bytes() == (content if isinstance(content, bytes) else content.encode())
    else:
        assert kept.read_text() == rejected_text
    assert not bad.exists()
    assert before == [("a", "r1", 1)]
    assert stored() == sorted(before + landed)  # earlier rows untouched; only the batch's good rows added


def test_new_model_folder_creates_partition_and_loads_predictions(defs, layout):
    (layout.models / "v1").mkdir()
    (layout.models / "v1" / "predictions.csv").write_text("item_id,score\na,0.25\nb,0.75\n")
    report = tick(layout.home, defs=defs)
    assert report.partitions_added == {"model_versions": ["v1"]}
    assert instance_for(layout.home).get_dynamic_partitions("model_versions") == ["v1"]
    assert [r["partition"] for r in _runs_of(report, "raw/predictions")] == ["v1"]


def test_predictions_replaced_in_place_are_requested_again_by_content(defs, layout, instance):
    (layout.models / "v7").mkdir()
    pred = layout.models / "v7" / "predictions.csv"
    pred.write_text("item_id,score\na,0.5\n")
    r1 = model_version_sensor(_ctx(defs, instance, name="model_version_sensor"))
    assert [rr.run_key for rr in r1.run_requests] == ["model-v7"]
    instance.add_dynamic_partitions("model_versions", ["v7"])
    # same bytes, new mtime: nothing
    os.utime(pred, ns=(pred.stat().st_atime_ns, pred.stat().st_mtime_ns + 10**9))
    r2 = model_version_sensor(_ctx(defs, instance, cursor=r1.cursor, name="model_version_sensor"))
    assert not r2.run_requests
    # a fixed file written over the old one: one run for v7, keyed by the new content hash (never a spent key)
    pred.write_text("item_id,score\na,0.25\n")
    r3 = model_version_sensor(_ctx(defs, instance, cursor=r2.cursor, name="model_version_sensor"))
    assert [(rr.partition_key, rr.run_key) for rr in r3.run_requests] == [("v7", f"model-v7-{sha256_file(pred)[:16]}")]
    assert not r3.dynamic_partitions_requests
    r4 = model_version_sensor(_ctx(defs, instance, cursor=r3.cursor, name="model_version_sensor"))
    assert not r4.run_requests


# ------------------------------------------------------------ a single batch and its downstream in one run
#: what lies downstream of raw/annotations reads these too (the fold waits until each is built and succeeded)
FOLD_INPUTS = [
    dg.AssetKey(["raw", "predictions"]),
    dg.AssetKey(["raw", "reference_labels"]),
    dg.AssetKey(["staging", "stg_model_versions"]),
]


def _add_version(layout, instance, version: str) -> None:
    (layout.models / version).mkdir()
    (layout.models / version / "predictions.csv").write_text("item_id,score\na,0.25\nb,0.75\n")
    instance.add_dynamic_partitions("model_versions", [version])


def _build(defs, instance, keys, partition):
    result = dg.materialize(
        [*defs.assets, *defs.asset_checks],
        selection=keys,
        partition_key=partition,
        instance=instance,
        resources=defs.resources,
    )
    assert result.success


def test_a_single_batch_is_ingested_with_its_downstream_in_one_run(defs, layout, instance):
    downstream = (
        dg.AssetSelection.assets(ANNOTATIONS).downstream(include_self=False).resolve(defs.resolve_asset_graph())
    )
    assert {k.to_user_string() for k in downstream} >= {"calibration/nc_ece_report", "reports/calibration"}
    _add_version(layout, instance, "v1")
    (layout.annotation_inbox / "b1.csv").write_text(HEADER + "a,r1,1\n")
    # the version's predictions are not loaded yet: the ingestion alone (the automation waits for them)
    (rr,) = annotation_sensor(_ctx(defs, instance)).run_requests
    assert (rr.asset_selection, rr.partition_key, DOWNSTREAM_TAG in rr.tags) == ([ANNOTATIONS], None, False)
    _build(defs, instance, FOLD_INPUTS, "v1")
    (rr,) = annotation_sensor(_ctx(defs, instance)).run_requests
    assert set(rr.asset_selection) == {ANNOTATIONS, *downstream} and rr.partition_key == "v1"
    assert rr.tags[DOWNSTREAM_TAG] == "true"
    assert rr.run_key == f"annotations-{sha256_file(layout.annotation_inbox / 'b1.csv')}"
    # two new batches in one evaluation: each ingestion alone (one of them takes both; the automation follows)
    (layout.annotation_inbox / "b2.csv").write_text(HEADER + "b,r1,0\n")
    assert [r.asset_selection for r in annotation_sensor(_ctx(defs, instance)).run_requests] == [[ANNOTATIONS]] * 2
    (layout.annotation_inbox / "b2.csv").unlink()
    # a second model version: one run holds one partition, so the ingestion alone
    _add_version(layout, instance, "v2")
    _build(defs, instance, FOLD_INPUTS[:1], "v2")
    (rr,) = annotation_sensor(_ctx(defs, instance)).run_requests
    assert (rr.asset_selection, rr.partition_key) == ([ANNOTATIONS], None)


@pytest.mark.slow  # about a minute on an idle 2-core box: the demo's calibration home is built first
def test_a_dropped_batch_reaches_its_report_in_one_run_and_nothing_reruns(tmp_path):
    from noisycal_platform.calibration.demo_data import _annotations, write_demo_calibration_inputs

    home = tmp_path / "home"
    write_demo_calibration_inputs(home, seed=0)
    defs = build_definitions(home)
    assert all(r["success"] for r in tick(home, defs=defs).runs)
    instance = instance_for(home)
    report_key = dg.AssetKey(["reports", "calibration"])
    published = len(instance.fetch_materializations(report_key, limit=100).records)
    ann, held = _annotations(0)
    ann.filter(held)[::3].write_csv(home / "inbox" / "annotations" / "drop_1.csv")
    report = tick(home, defs=defs)
    downstream = dg.AssetSelection.assets(ANNOTATIONS).downstream().resolve(defs.resolve_asset_graph())
    assert [(set(r["assets"]), r["partition"], r["success"]) for r in report.runs] == [
        ({k.to_user_string() for k in downstream}, "v1", True)
    ]
    assert len(instance.fetch_materializations(report_key, limit=100).records) == published + 1
    assert tick(home, defs=defs).n_runs == 0  # the eager conditions see everything built after its inputs


# ------------------------------------------------------------------ automation conditions on a toy graph
PARTS = dg.DynamicPartitionsDefinition(name="toy_versions")


def _toy_defs(fail_partition: str | None = None) -> dg.Definitions:
    @dg.asset(partitions_def=PARTS)
    def scores(context: dg.AssetExecutionContext) -> None:
        if context.partition_key == fail_partition:
            raise dg.Failure("bad predictions file", allow_retries=False)

    @dg.asset(partitions_def=PARTS, deps=[scores], automation_condition=EAGER_PARTITIONED)
    def per_version() -> None:
        return None

    @dg.asset(deps=[scores], automation_condition=EAGER)
    def fan_in_report() -> None:
        return None

    @dg.asset
    def root() -> None:
        return None

    # a partitioned stage (per version): under the daemon it runs apart from the unpartitioned report
    @dg.asset(partitions_def=PARTS, deps=[root], automation_condition=EAGER_PARTITIONED, group_name="calibration")
    def middle() -> None:
        return None

    @dg.asset(
        partitions_def=PARTS, deps=[middle, root], automation_condition=EAGER_PARTITIONED, group_name="calibration"
    )
    def middle_2() -> None:
        return None

    @dg.asset(deps=[root, middle, middle_2], automation_condition=EAGER)
    def reads_both() -> None:
        return None

    return dg.Definitions(assets=[scores, per_version, fan_in_report, root, middle, middle_2, reads_both])


def _evaluate(defs, instance, cursor=None):
    # as the runner evaluates (_run_automation): each dynamic partitions definition read once per evaluation
    with _dynamic_partitions_snapshot(instance):
        return dg.evaluate_automation_conditions(defs=defs, instance=instance, cursor=cursor)


def _asked(result, name: str) -> list:
    key = dg.AssetKey(name)
    if result.get_num_requested(key) == 0:
        return []
    return sorted(result.get_requested_partitions(key) or [None], key=str)


def test_a_failed_input_partition_stops_its_partition_but_not_the_fan_in_report(instance):
    defs = _toy_defs(fail_partition="v2")
    instance.add_dynamic_partitions("toy_versions", ["v1", "v2"])
    r0 = _evaluate(defs, instance)
    for pk in ("v1", "v2"):
        dg.materialize(defs.assets, selection=["scores"], partition_key=pk, instance=instance, raise_on_error=False)
    r1 = _evaluate(defs, instance, r0.cursor)
    assert _asked(r1, "per_version") == ["v1"]  # v2's input failed: no misleading downstream error
    assert _asked(r1, "fan_in_report") == [None]  # rebuilt from the good partition, not frozen


def test_an_asset_reading_two_stages_of_a_chain_runs_once_after_both(instance):
    defs = _toy_defs()
    instance.add_dynamic_partitions("toy_versions", ["v1"])
    dg.materialize(defs.assets, selection=["root"], instance=instance)
    dg.materialize(defs.assets, selection=["middle", "middle_2"], partition_key="v1", instance=instance)
    dg.materialize(defs.assets, selection=["reads_both"], instance=instance)
    r0 = _evaluate(defs, instance)
    r0 = _evaluate(defs, instance, r0.cursor)
    assert r0.total_requested == 0
    dg.materialize(defs.assets, selection=["root"], instance=instance)
    r1 = _evaluate(defs, instance, r0.cursor)
    # stock eager() (and a will_be_requested gate, which ignores inputs that run in another run) requests
    # reads_both now, beside the per-version chain, and publishes it with stale inputs
    assert _asked(r1, "middle") == ["v1"] and _asked(r1, "middle_2") == ["v1"]
    assert _asked(r1, "reads_both") == []
    dg.materialize(defs.assets, selection=["middle", "middle_2"], partition_key="v1", instance=instance)
    r2 = _evaluate(defs, instance, r1.cursor)
    assert _asked(r2, "reads_both") == [None]
    dg.materialize(defs.assets, selection=["reads_both"], instance=instance)
    r3 = _evaluate(defs, instance, r2.cursor)
    assert r3.total_requested == 0  # once per upstream change


def test_runner_does_not_run_what_depends_on_a_failure_in_the_same_tick(layout):
    from orchestration.runner import materialize_everything

    home = layout.home
    defs = _toy_defs(fail_partition="v2")
    instance_for(home).add_dynamic_partitions("toy_versions", ["v1", "v2"])
    report = materialize_everything(home, defs=defs)
    by = {(a, r["partition"]): r for r in report.runs for a in r["assets"]}
    assert not by[("scores", "v2")]["success"]
    assert (
        by[("per_version", "v2")].get("skipped") and "upstream asset failed" in by[("per_version", "v2")]["errors"][0]
    )
    assert by[("per_version", "v1")]["success"] and not by[("per_version", "v1")].get("skipped")
    assert by[("fan_in_report", None)]["success"] and not by[("fan_in_report", None)].get("skipped")


def test_a_changed_settings_file_requests_the_calibration_rerun_per_version(defs, layout, instance):
    from assets.automation import settings_sensor

    instance.add_dynamic_partitions("model_versions", ["v1", "v2"])
    r0 = settings_sensor(_ctx(defs, instance, name="settings_sensor"))
    assert not r0.run_requests and r0.cursor == "absent"  # the first evaluation is the baseline
    (layout.home / "settings.json").write_text('{"nc_ece_limit": 0.05}')
    r1 = settings_sensor(_ctx(defs, instance, cursor=r0.cursor, name="settings_sensor"))
    assert sorted(rr.partition_key for rr in r1.run_requests) == ["v1", "v2"]
    assert {k.to_user_string() for k in r1.run_requests[0].asset_selection} >= {"calibration/nc_ece_report"}
    r2 = settings_sensor(_ctx(defs, instance, cursor=r1.cursor, name="settings_sensor"))
    assert not r2.run_requests


def test_new_audit_answers_request_the_agreement_once(defs, layout, instance):
    from assets.automation import audit_answers_sensor
    from noisycal_platform.correctness.audit_sample import AuditPaths

    paths = AuditPaths(layout.home)
    r0 = audit_answers_sensor(_ctx(defs, instance, name="audit_answers_sensor"))
    assert not r0.run_requests  # nothing to agree on yet
    paths.annotation_csvs.mkdir(parents=True)
    (paths.annotation_csvs / "ann_a.csv").write_text(
        "dataset,model,case_id,annotator_id,human_correct,error_category\nd,m,c0,ann_a,1,\n"
    )
    r1 = audit_answers_sensor(_ctx(defs, instance, name="audit_answers_sensor"))
    assert [k.to_user_string() for k in r1.run_requests[0].asset_selection] == ["correctness/audit_agreement"]
    r2 = audit_answers_sensor(_ctx(defs, instance, cursor=r1.cursor, name="audit_answers_sensor"))
    assert not r2.run_requests  # unchanged: no second run
    paths.adjudications.mkdir(parents=True)
    (paths.adjudications / "joint.csv").write_text("dataset,model,case_id,human_correct,error_category\n")
    r3 = audit_answers_sensor(_ctx(defs, instance, cursor=r1.cursor, name="audit_answers_sensor"))
    assert len(r3.run_requests) == 1 and r3.run_requests[0].run_key != r1.run_requests[0].run_key


def test_queue_refill_sensor_reruns_a_ranking_the_answers_reach_past(layout):
    from assets.automation import queue_refill_sensor
    from assets.cleaning import RANK_NEAR_DUPLICATES
    from assets.policy import DATASETS
    from tests.unit.cleaning._answers import answer_record, stamp

    # n_stop = stopping_count(0.5, 0.5) = 1: the queue must hold two pairs beyond the deepest answer
    (layout.home / "settings.json").write_text(json.dumps({"near_duplicate_top_k": 10, "p_chance": 0.5,
                                                           "p_plus": 0.5}))
    defs = build_definitions(layout.home)
    instance = instance_for(layout.home)
    instance.add_dynamic_partitions(DATASETS.name, ["d", "never_ranked"])

    def ranked(depth: int) -> None:
        instance.report_runless_asset_event(
            dg.AssetMaterialization(asset_key=RANK_NEAR_DUPLICATES, partition="d", metadata={"pairs_per_kind": depth})
        )

    def evaluate(cursor=None):
        ctx = dg.build_sensor_context(instance=instance, definitions=defs, sensor_name="queue_refill_sensor",
                                      resources=defs.resources, cursor=cursor)
        return queue_refill_sensor(ctx)

    ranked(10)
    assert not evaluate().run_requests  # no answers yet: the initial depth (near_duplicate_top_k) holds
    answers = [answer_record(f"a{i}", "r1", f"x{i}", "no", i, stamp(i), issue_type="near_duplicate",
                             item_id_2=f"y{i}") for i in range(9)]  # positions 0..8: deepest rank 9
    (layout.confirmation_inbox / "r1.jsonl").write_text("".join(json.dumps(a) + "\n" for a in answers))
    result = evaluate()
    assert [(r.partition_key, r.run_key) for r in result.run_requests] == [("d", "queue-d-11")]  # 9 + 2 × 1
    assert result.cursor is None  # asked again until the rerun lands
    ranked(11)
    done = evaluate()
    assert not done.run_requests and done.cursor  # the ranking now reaches past the answers
    ranked(5)  # not re-read while the answer files are unchanged
    assert not evaluate(done.cursor).run_requests and evaluate(done.cursor).skip_reason


def test_an_automation_evaluation_reads_each_dynamic_partitions_definition_once():
    from orchestration.runner import _dynamic_partitions_snapshot

    instance = dg.DagsterInstance.ephemeral()
    instance.add_dynamic_partitions("model_versions", ["v1"])
    reads = []
    read = instance.get_dynamic_partitions

    def counted(name):
        reads.append(name)
        return read(name)

    instance.get_dynamic_partitions = counted
    with _dynamic_partitions_snapshot(instance):
        assert [instance.get_dynamic_partitions("model_versions") for _ in range(3)] == [["v1"]] * 3
        instance.add_dynamic_partitions("model_versions", ["v2"])  # nothing adds partitions while it evaluates
        assert instance.get_dynamic_partitions("model_versions") == ["v1"]  # a snapshot, taken on first read
    assert reads == ["model_versions"]
    assert instance.get_dynamic_partitions is counted  # what was there before is back
    assert instance.get_dynamic_partitions("model_versions") == ["v1", "v2"]


def _chain_defs(flag) -> dg.Definitions:
    """start -> one -> two -> three, one partition per version; ``two`` fails while ``flag`` exists."""

    @dg.asset(partitions_def=PARTS)
    def start() -> None:
        return None

    @dg.asset(partitions_def=PARTS, deps=[start], automation_condition=EAGER_PARTITIONED)
    def one() -> None:
        return None

    @dg.asset(partitions_def=PARTS, deps=[one], automation_condition=EAGER_PARTITIONED)
    def two() -> None:
        if flag.exists():
            raise dg.Failure("two's input is broken", allow_retries=False)

    @dg.asset(partitions_def=PARTS, deps=[two], automation_condition=EAGER_PARTITIONED)
    def three() -> None:
        return None

    return dg.Definitions(assets=[start, one, two, three])


def test_a_partitions_chain_runs_as_one_run_and_stops_below_a_failed_step(layout, tmp_path):
    """The automation requests one, two and three of v1 (three levels, one partition): one run, not three. When
    two fails, three is not executed (Dagster skips it inside the run) and the tick reports it not run."""
    home, flag = layout.home, tmp_path / "broken"
    defs = _chain_defs(flag)
    instance = instance_for(home)
    instance.add_dynamic_partitions("toy_versions", ["v1"])
    tick(home, defs=defs)  # the baseline
    automation = lambda report: [r for r in report.runs if r["reason"] == "automation (eager)"]  # noqa: E731

    def materialized(name: str):
        return instance.get_latest_materialization_event(dg.AssetKey(name))

    dg.materialize(defs.assets, selection=["start"], partition_key="v1", instance=instance)
    (run,) = automation(tick(home, defs=defs))
    assert run["assets"] == ["one", "three", "two"] and run["partition"] == "v1" and run["success"]
    first = materialized("three").run_id
    flag.touch()
    dg.materialize(defs.assets, selection=["start"], partition_key="v1", instance=instance)
    report = tick(home, defs=defs)
    run, skipped = automation(report)  # the run, then what it did not execute, listed as a later run's would be
    assert run["assets"] == ["one", "two"] and not run["success"] and any("two" in e for e in run["errors"])
    assert skipped["assets"] == ["three"] and skipped["skipped"] and skipped["run_id"] == run["run_id"]
    assert skipped["errors"] == ["not run: an upstream asset failed in this tick"]
    assert materialized("one").run_id == run["run_id"] and materialized("three").run_id == first
    assert {(k.to_user_string(), pk) for k, pk in report.failed} >= {("two", "v1"), ("three", "v1")}


def test_a_partitions_chain_joins_its_last_run_unless_another_partitions_step_must_come_between():
    from orchestration.runner import _plan_runs

    graph = _toy_defs().resolve_asset_graph()
    root, middle, middle_2, reads_both = (dg.AssetKey(x) for x in ("root", "middle", "middle_2", "reads_both"))
    groups = {(0, "", ""): [root], (1, "toy_versions", "v1"): [middle], (1, "toy_versions", "v2"): [middle],
              (2, "toy_versions", "v1"): [middle_2], (2, "toy_versions", "v2"): [middle_2], (3, "", ""): [reads_both]}
    # middle_2 of v1 needs middle of v1 (its run) and root (before it): it joins v1's run; reads_both (every
    # version's middle and middle_2) runs after both versions, not in root's run
    assert _plan_runs(graph, groups) == [("", [root]), ("v1", [middle, middle_2]), ("v2", [middle, middle_2]),
                                         ("", [reads_both])]
    # reads_both of a plan without v2's middle_2 still waits for v2's middle
    del groups[(2, "toy_versions", "v2")]
    assert _plan_runs(graph, groups)[-1] == ("", [reads_both])
    # an unpartitioned step that only root feeds joins root's run
    one = _chain_defs(flag=None).resolve_asset_graph()
    start, one_, two = (dg.AssetKey(x) for x in ("start", "one", "two"))
    assert _plan_runs(one, {(0, "toy_versions", "v1"): [start], (1, "toy_versions", "v1"): [one_],
                            (2, "toy_versions", "v1"): [two]}) == [("v1", [start, one_, two])]


def test_a_failure_blocks_the_whole_chain_below_it_in_one_selection():
    from orchestration.runner import _blocked_by_failure

    defs = _chain_defs(flag=None)
    graph = defs.resolve_asset_graph()
    one, two, three = (dg.AssetKey(x) for x in ("one", "two", "three"))
    failed = {(one, "v1")}
    assert _blocked_by_failure(graph, [two, three], "v1", failed) == {two, three}
    assert _blocked_by_failure(graph, [two, three], "v2", failed) == set()  # another partition: not blocked
