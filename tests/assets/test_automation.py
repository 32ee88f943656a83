"""Sensors through their cases, and the full automation path through ``tick`` (sensor -> run -> eager)."""

import json
import shutil

import dagster as dg
import pytest

from assets.automation import annotation_sensor, model_version_sensor
from definitions import build_definitions
from noisycal_platform.io import sha256_file
from orchestration.runner import instance_for, tick

HEADER = "item_id,annotator_id,label\n"


@pytest.fixture
def defs(layout):
    return build_definitions(layout.home)


def _ctx(defs, layout, cursor=None, name="annotation_sensor"):
    return dg.build_sensor_context(
        instance=instance_for(layout.home),
        cursor=cursor,
        definitions=defs,
        sensor_name=name,
        resources=defs.resources,
    )


def test_annotation_sensor_cases(defs, layout):
    # empty inbox -> skip
    r0 = annotation_sensor(_ctx(defs, layout))
    assert r0.skip_reason is not None and not r0.run_requests
    # a new file -> exactly one RunRequest keyed by its content hash
    p = layout.annotation_inbox / "b1.csv"
    p.write_text(HEADER + "a,r1,1\n")
    r1 = annotation_sensor(_ctx(defs, layout))
    assert [rr.run_key for rr in r1.run_requests] == [f"annotations-{sha256_file(p)}"]
    # the same file again (cursor passed on) -> nothing
    r2 = annotation_sensor(_ctx(defs, layout, cursor=r1.cursor))
    assert not r2.run_requests
    # a renamed copy with the same bytes -> nothing
    shutil.copy(p, layout.annotation_inbox / "b1-renamed.csv")
    r3 = annotation_sensor(_ctx(defs, layout, cursor=r1.cursor))
    assert not r3.run_requests
    # a different file -> one new request
    (layout.annotation_inbox / "b2.csv").write_text(HEADER + "b,r1,0\n")
    r4 = annotation_sensor(_ctx(defs, layout, cursor=r1.cursor))
    assert len(r4.run_requests) == 1 and set(json.loads(r4.cursor)) >= set(json.loads(r1.cursor))


def test_model_version_sensor_adds_partition(defs, layout):
    r0 = model_version_sensor(_ctx(defs, layout, name="model_version_sensor"))
    assert r0.skip_reason is not None
    (layout.models / "v7").mkdir()
    (layout.models / "v7" / "predictions.csv").write_text("item_id,score\na,0.5\n")
    (layout.models / "empty_folder").mkdir()  # no predictions file -> not a version
    r1 = model_version_sensor(_ctx(defs, layout, name="model_version_sensor"))
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


@pytest.mark.parametrize("case", sorted(BAD_BATCHES))
def test_bad_batch_is_quarantined_and_leaves_warehouse_unchanged(defs, layout, case):
    (layout.annotation_inbox / "b1.csv").write_text(HEADER + "a,r1,1\n")
    tick(layout.home, defs=defs, automation=False)
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
