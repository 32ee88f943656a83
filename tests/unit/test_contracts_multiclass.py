"""Multi-class inputs: p_<class> predictions, class-name labels, items.csv. Every violation names file, 1-based
data row and column; the binary contract is unchanged when no class set is declared."""

import pytest

from noisycal_platform.contracts import annotation_contract, class_columns
from noisycal_platform.ingest import accepted_annotations, declared_classes, ingest_annotation_batches
from noisycal_platform.io import InputError, read_annotation_records, read_items, read_model_version, read_predictions
from noisycal_platform.paths import HomeLayout


def _write(tmp_path, name, text: str):
    p = tmp_path / name
    p.parent.mkdir(parents=True, exist_ok=True)
    p.write_text(text)
    return p


def _error(fn, *args) -> InputError:
    with pytest.raises(InputError) as info:
        fn(*args)
    return info.value


def test_probability_columns_are_read_in_declared_order_with_top_label_score(tmp_path):
    p = _write(tmp_path, "p.csv", "item_id,p_b,p_a,p_c\ni1,0.2,0.3,0.5\ni2,0.7,0.1,0.2\n")
    frame = read_predictions(p)
    assert frame.columns == ["item_id", "score", "p_b", "p_a", "p_c"]  # header order without settings
    assert frame["score"].to_list() == [0.5, 0.7]  # max_c p_c, exact by construction (a copied value)
    ordered = read_predictions(p, ("a", "b", "c"))
    assert ordered.columns == ["item_id", "score", "p_a", "p_b", "p_c"]
    stored = read_model_version(p, None, ("a", "b", "c"))
    assert stored["n_classes"].to_list() == [3, 3] and stored["classes"][0].to_list() == ["a", "b", "c"]
    assert stored["probabilities"][0].to_list() == [0.3, 0.2, 0.5]
    assert stored["subgroups"].list.len().to_list() == [0, 0]


def test_binary_score_file_is_stored_as_two_classes_without_probabilities(tmp_path):
    p = _write(tmp_path, "p.csv", "item_id,score\ni1,0.25\n")
    stored = read_model_version(p)
    assert stored.row(0, named=True) | {"subgroups": None} == {
        "item_id": "i1", "score": 0.25, "n_classes": 2, "classes": None, "probabilities": None, "subgroups": None,
    }


def test_row_not_summing_to_one_is_rejected_with_its_row(tmp_path):
    p = _write(tmp_path, "p.csv", "item_id,p_a,p_b\ni1,0.5,0.5\ni2,0.5,0.5000001\ni3,0.6,0.3\n")
    err = _error(read_predictions, p)
    assert err.file == str(p) and err.row == 3 and err.column == "p_a..p_b"
    assert "do not sum to 1" in str(err) and "row 3" in str(err) and "1 row(s)" in str(err)


def test_probability_outside_unit_interval_names_its_column(tmp_path):
    p = _write(tmp_path, "p.csv", "item_id,p_a,p_b\ni1,0.5,0.5\ni2,1.5,-0.5\n")
    err = _error(read_predictions, p)
    assert (err.row, err.column) == (2, "p_a") and "[0, 1]" in str(err)


def test_missing_probability_column_for_a_declared_class_is_named(tmp_path):
    p = _write(tmp_path, "p.csv", "item_id,p_a,p_b\ni1,0.5,0.5\n")
    err = _error(read_predictions, p, ("a", "b", "c"))
    assert err.file == str(p) and err.column == "p_c" and "declared class 'c'" in str(err)
    err = _error(read_predictions, p, ("a",))  # a column for a class settings.json does not declare
    assert err.column == "p_b"


def test_score_and_probability_columns_together_are_refused(tmp_path):
    p = _write(tmp_path, "p.csv", "item_id,score,p_a,p_b\ni1,0.5,0.5,0.5\n")
    assert _error(read_predictions, p).column == "score"


def test_items_duplicate_item_id_names_file_row_and_column(tmp_path):
    p = _write(tmp_path, "items.csv", "item_id,site,sex\ni1,A,F\ni2,B,M\ni1,A,M\n")
    err = _error(read_items, p)
    assert err.file == str(p) and err.row == 3 and err.column == "item_id"
    assert "duplicate" in str(err) and "data row 1" in str(err)
    # read_model_version fails on it too: nothing is returned for the version
    pred = _write(tmp_path, "p.csv", "item_id,score\ni1,0.1\ni2,0.2\n")
    assert _error(read_model_version, pred, p).row == 3


def test_items_become_long_subgroups_and_join_the_predictions(tmp_path):
    items = _write(tmp_path, "items.csv", "item_id,site,age_band\ni1,A,60+\ni2,B,\ni9,A,18-40\n")
    long = read_items(items)
    assert long.columns == ["item_id", "subgroup_column", "subgroup_value"]
    assert sorted(long.rows()) == [("i1", "age_band", "60+"), ("i1", "site", "A"), ("i2", "site", "B"),
                                   ("i9", "age_band", "18-40"), ("i9", "site", "A")]  # the empty value: no subgroup
    pred = _write(tmp_path, "p.csv", "item_id,score\ni1,0.1\ni2,0.2\ni3,0.3\n")
    stored = read_model_version(pred, items)
    groups = {r["item_id"]: sorted((g["column"], g["value"]) for g in r["subgroups"]) for r in stored.to_dicts()}
    assert groups == {"i1": [("age_band", "60+"), ("site", "A")], "i2": [("site", "B")], "i3": []}


def test_class_labels_outside_the_declared_set_are_rejected_rows(tmp_path):
    p = _write(tmp_path, "a.csv", "item_id,annotator_id,label\ni1,r1,mel\ni1,r2,nv\ni2,r1,melanoma\ni2,r2,1\n")
    good, _, problems = read_annotation_records(p, classes=("mel", "nv"))
    assert good["label_text"].to_list() == ["mel", "nv", "1"]  # 0/1 stay valid beside the classes
    assert good["label"].to_list() == [None, None, 1]
    assert [(q.row, q.column) for q in problems] == [(3, "label")]
    assert "declared classes" in problems[0].reason
    # without a class set the binary contract is the one applied, message unchanged
    _, _, binary = read_annotation_records(p)
    assert [q.row for q in binary] == [1, 2, 3] and all("0 or 1" in q.reason for q in binary)
    assert annotation_contract(None).column("label").kind == "binary"


def test_ingest_quarantines_an_unknown_class_label_and_keeps_the_good_rows(tmp_path):
    layout = HomeLayout.at(tmp_path / "home").ensure()
    _write(layout.models / "m1", "predictions.csv", "item_id,p_mel,p_nv\ni1,0.5,0.5\n")
    classes = declared_classes(layout, ["bcc"])
    assert classes == ("bcc", "mel", "nv")
    _write(layout.annotation_inbox, "b1.csv", "item_id,annotator_id,label\ni1,r1,mel\ni1,r2,akiec\ni1,r3,bcc\n")
    report = ingest_annotation_batches(layout, 0.0, classes)
    assert len(report.accepted) == 1 and report.accepted[0]["rejected"] == 1
    (row,) = report.accepted[0]["rejected_rows"]
    assert (row["file"], row["row"], row["column"]) == ("b1.csv", 2, "label")
    stored = accepted_annotations(layout)
    assert stored["label_text"].to_list() == ["mel", "bcc"] and stored["source_row"].to_list() == [1, 3]


def test_class_columns_of_a_header():
    assert class_columns(["item_id", "p_a", "p_", "score", "p_b c"]) == ("a", "b c")


def test_read_annotations_with_declared_classes_keeps_the_text(tmp_path):
    from noisycal_platform.io import read_annotations

    p = _write(tmp_path, "a.csv", "item_id,annotator_id,label\ni1,r1,mel\ni1,r2,0\n")
    frame = read_annotations(p, ("mel", "nv"))
    assert frame["label_text"].to_list() == ["mel", "0"] and frame["label"].to_list() == [None, 0]
    err = _error(read_annotations, p)  # no class set: the binary contract
    assert (err.row, err.column) == (1, "label") and "0 or 1" in str(err)
