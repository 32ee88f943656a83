"""One test per contract violation: the error names the file, the 1-based data row and the column."""

import polars as pl
import pytest

from noisycal_platform.io import InputError, read_annotations, read_predictions, read_reference_labels

HEADER = "item_id,annotator_id,label\n"


def _write(tmp_path, name, text: str | bytes):
    p = tmp_path / name
    p.write_bytes(text if isinstance(text, bytes) else text.encode())
    return p


def _fails(reader, path, row, column, words):
    with pytest.raises(InputError) as info:
        reader(path)
    err = info.value
    assert err.file == str(path) and str(path) in str(err)
    assert err.row == row
    assert err.column == column
    if row is not None:
        assert f"row {row}" in str(err)
    if column is not None:
        assert f"column '{column}'" in str(err)
    for w in words:
        assert w in str(err)


def test_valid_annotations_roundtrip(tmp_path):
    p = _write(tmp_path, "ok.csv", "item_id,annotator_id,label,timestamp\na,r1,1,2026-01-02T03:04:05Z\nb,r1,0,\n")
    df = read_annotations(p)
    assert df.columns == ["item_id", "annotator_id", "label", "timestamp"]
    assert df["label"].to_list() == [1, 0] and df["label"].dtype == pl.Int8
    assert df["timestamp"][1] is None and df["timestamp"][0].year == 2026


def test_label_not_binary(tmp_path):
    p = _write(tmp_path, "a.csv", HEADER + "a,r1,1\nb,r1,0\nc,r2,2\n")
    _fails(read_annotations, p, 3, "label", ["0 or 1", "'2'"])


def test_label_text(tmp_path):
    p = _write(tmp_path, "a.csv", HEADER + "a,r1,yes\n")
    _fails(read_annotations, p, 1, "label", ["0 or 1"])


def test_score_outside_unit_interval(tmp_path):
    p = _write(tmp_path, "p.csv", "item_id,score\na,0.2\nb,1.2\n")
    _fails(read_predictions, p, 2, "score", ["[0, 1]", "1.2"])


def test_score_negative(tmp_path):
    p = _write(tmp_path, "p.csv", "item_id,score\na,-0.1\n")
    _fails(read_predictions, p, 1, "score", ["[0, 1]"])


def test_score_nan(tmp_path):
    p = _write(tmp_path, "p.csv", "item_id,score\na,0.2\nb,0.3\nc,NaN\n")
    _fails(read_predictions, p, 3, "score", ["NaN"])


def test_score_not_a_number(tmp_path):
    p = _write(tmp_path, "p.csv", "item_id,score\na,high\n")
    _fails(read_predictions, p, 1, "score", ["number"])


def test_missing_column(tmp_path):
    p = _write(tmp_path, "a.csv", "item_id,label\na,1\n")
    _fails(read_annotations, p, None, "annotator_id", ["missing required column"])


def test_duplicate_item_annotator(tmp_path):
    p = _write(tmp_path, "a.csv", HEADER + "a,r1,1\nb,r1,0\na,r1,0\n")
    # the second occurrence (data row 3) is the offending row; the message names the first (row 1)
    _fails(read_annotations, p, 3, "annotator_id", ["duplicate", "data row 1"])


def test_duplicate_prediction_item(tmp_path):
    p = _write(tmp_path, "p.csv", "item_id,score\na,0.1\na,0.2\n")
    _fails(read_predictions, p, 2, "item_id", ["duplicate"])


def test_empty_file(tmp_path):
    p = _write(tmp_path, "a.csv", "")
    _fails(read_annotations, p, None, None, ["empty"])


def test_header_only_file(tmp_path):
    p = _write(tmp_path, "a.csv", HEADER)
    _fails(read_annotations, p, None, None, ["empty"])


def test_unreadable_encoding(tmp_path):
    # Latin-1 'é' (0xE9) in the annotator id on data row 2
    p = _write(tmp_path, "a.csv", HEADER.encode() + b"a,r1,1\nb,Ren\xe9,0\n")
    _fails(read_annotations, p, 2, "annotator_id", ["UTF-8"])


def test_empty_id(tmp_path):
    p = _write(tmp_path, "a.csv", HEADER + "a,r1,1\n,r1,0\n")
    _fails(read_annotations, p, 2, "item_id", ["empty"])


def test_bad_timestamp(tmp_path):
    p = _write(tmp_path, "a.csv", "item_id,annotator_id,label,timestamp\na,r1,1,yesterday\n")
    _fails(read_annotations, p, 1, "timestamp", ["ISO-8601"])


def test_parquet_input_checked_the_same_way(tmp_path):
    p = tmp_path / "p.parquet"
    pl.DataFrame({"item_id": ["a", "b"], "score": [0.5, float("nan")]}).write_parquet(p)
    _fails(read_predictions, p, 2, "score", ["NaN"])


def test_bom_is_accepted(tmp_path):
    p = _write(tmp_path, "r.csv", "\ufeffitem_id,label\na,1\n")
    assert read_reference_labels(p)["label"].to_list() == [1]


def test_unsupported_suffix(tmp_path):
    p = _write(tmp_path, "a.xlsx", "x")
    _fails(read_annotations, p, None, None, ["unsupported"])
