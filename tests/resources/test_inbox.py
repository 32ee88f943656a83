"""Drop-folder ingestion: exactly once per content hash; bad batches quarantined with a reason; nothing lost."""

from noisycal_platform.files import sha256_file
from noisycal_platform.ingest import accepted_annotations, ingest_annotation_batches, ledger_entries

HEADER = "item_id,annotator_id,label\n"


def _drop(layout, name, text):
    p = layout.annotation_inbox / name
    p.write_text(text)
    return p


def test_accepts_then_ignores_identical_copy(layout):
    p = _drop(layout, "b1.csv", HEADER + "a,r1,1\nb,r1,0\n")
    digest = sha256_file(p)
    r1 = ingest_annotation_batches(layout)
    assert [e["file"] for e in r1.accepted] == ["b1.csv"]
    assert not p.exists()  # moved out of the inbox
    assert (layout.archive / f"{digest}.parquet").is_file()
    # the same bytes under another name: recorded as duplicate, adds no rows
    _drop(layout, "b1-copy.csv", HEADER + "a,r1,1\nb,r1,0\n")
    r2 = ingest_annotation_batches(layout)
    assert r2.accepted == [] and [e["file"] for e in r2.duplicates] == ["b1-copy.csv"]
    assert accepted_annotations(layout).height == 2
    assert ledger_entries(layout)[digest]["status"] == "accepted"


def test_bad_batch_quarantined_with_reason_and_earlier_data_untouched(layout):
    # record-level (the batch's good row lands, the bad row is quarantined with file, row and column)
    _drop(layout, "good.csv", HEADER + "a,r1,1\n")
    ingest_annotation_batches(layout)
    before = accepted_annotations(layout)
    p = _drop(layout, "bad.csv", HEADER + "b,r1,1\nc,r1,7\n")
    digest = sha256_file(p)
    report = ingest_annotation_batches(layout)
    assert [q["file"] for q in report.quarantined] == ["bad.csv"]
    rejected = layout.quarantine / f"bad.rejected-{digest[:8]}.csv"
    reason = (rejected.parent / (rejected.name + ".reason.txt")).read_text()
    assert "row 2" in reason and "column 'label'" in reason and "bad.csv" in reason
    assert rejected.read_text() == HEADER + "c,r1,7\n"  # the bad row, as written, ready to be corrected
    after = accepted_annotations(layout)
    assert after.head(before.height).equals(before)  # earlier data untouched
    assert after.select("item_id", "label").rows()[before.height:] == [("b", 1)]
    assert ledger_entries(layout)[digest]["rows"] == 1 and ledger_entries(layout)[digest]["rejected"] == 1


def test_batch_without_a_usable_row_is_quarantined_whole(layout):
    _drop(layout, "good.csv", HEADER + "a,r1,1\n")
    ingest_annotation_batches(layout)
    before = accepted_annotations(layout)
    _drop(layout, "bad.csv", HEADER + "b,r1,5\nc,r1,7\n")
    report = ingest_annotation_batches(layout)
    assert [q["file"] for q in report.quarantined] == ["bad.csv"]
    reason = (layout.quarantine / "bad.csv.reason.txt").read_text()
    assert "row 1" in reason and "row 2" in reason and "column 'label'" in reason and "bad.csv" in reason
    assert "'7'" not in reason and "'5'" not in reason  # a quarantine reason never quotes file content
    assert (layout.quarantine / "bad.csv").read_text() == HEADER + "b,r1,5\nc,r1,7\n"  # kept byte for byte
    assert accepted_annotations(layout).equals(before)


def test_repeated_annotation_across_batches_is_quarantined_not_merged(layout):
    _drop(layout, "b1.csv", HEADER + "a,r1,1\n")
    ingest_annotation_batches(layout)
    _drop(layout, "b2.csv", HEADER + "z,r2,0\na,r1,0\n")
    report = ingest_annotation_batches(layout)
    assert [q["file"] for q in report.quarantined] == ["b2.csv"]
    assert "row 2" in report.quarantined[0]["reason"] and "b1.csv" in report.quarantined[0]["reason"]
    # the repeated pair keeps its first label (not merged); the new row of the batch lands (record-level)
    got = accepted_annotations(layout).select("item_id", "annotator_id", "label").rows()
    assert got == [("a", "r1", 1), ("z", "r2", 0)]


def test_two_quarantined_batches_with_same_name_both_kept(layout):
    _drop(layout, "x.csv", HEADER + "a,r1,9\n")
    ingest_annotation_batches(layout)
    _drop(layout, "x.csv", HEADER + "a,r1,8\n")
    ingest_annotation_batches(layout)
    kept = sorted(p.name for p in layout.quarantine.iterdir() if not p.name.endswith(".reason.txt"))
    assert kept == ["x.1.csv", "x.csv"]


def test_ingestion_is_idempotent_after_crash_between_archive_and_ledger(layout):
    p = _drop(layout, "b1.csv", HEADER + "a,r1,1\n")
    digest = sha256_file(p)
    ingest_annotation_batches(layout)
    # simulate a crash before the ledger line was written: drop the ledger, put the file back
    layout.ledger.unlink()
    _drop(layout, "b1.csv", HEADER + "a,r1,1\n")
    ingest_annotation_batches(layout)
    assert ledger_entries(layout)[digest]["status"] == "accepted"
    assert accepted_annotations(layout).height == 1
