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


# (case, reader, file name, contents, data row, column, words the message holds)
BAD_FILES = [
    ("label_not_binary", read_annotations, "a.csv", HEADER + "a,r1,1\nb,r1,0\nc,r2,2\n", 3, "label", ["0 or 1", "'2'"]),
    ("label_text", read_annotations, "a.csv", HEADER + "a,r1,yes\n", 1, "label", ["0 or 1"]),
    ("score_outside_unit_interval", read_predictions, "p.csv", "item_id,score\na,0.2\nb,1.2\n", 2, "score",
     ["[0, 1]", "1.2"]),
    ("score_negative", read_predictions, "p.csv", "item_id,score\na,-0.1\n", 1, "score", ["[0, 1]"]),
    ("score_nan", read_predictions, "p.csv", "item_id,score\na,0.2\nb,0.3\nc,NaN\n", 3, "score", ["NaN"]),
    ("score_not_a_number", read_predictions, "p.csv", "item_id,score\na,high\n", 1, "score", ["number"]),
    ("missing_column", read_annotations, "a.csv", "item_id,label\na,1\n", None, "annotator_id",
     ["missing required column"]),
    # the second occurrence (data row 3) is the offending row; the message names the first (row 1)
    ("duplicate_item_annotator", read_annotations, "a.csv", HEADER + "a,r1,1\nb,r1,0\na,r1,0\n", 3, "annotator_id",
     ["duplicate", "data row 1"]),
    ("duplicate_prediction_item", read_predictions, "p.csv", "item_id,score\na,0.1\na,0.2\n", 2, "item_id",
     ["duplicate"]),
    ("empty_file", read_annotations, "a.csv", "", None, None, ["empty"]),
    ("header_only_file", read_annotations, "a.csv", HEADER, None, None, ["empty"]),
    # Latin-1 'é' (0xE9) in the annotator id on data row 2
    ("unreadable_encoding", read_annotations, "a.csv", HEADER.encode() + b"a,r1,1\nb,Ren\xe9,0\n", 2, "annotator_id",
     ["UTF-8"]),
    ("empty_id", read_annotations, "a.csv", HEADER + "a,r1,1\n,r1,0\n", 2, "item_id", ["empty"]),
    ("bad_timestamp", read_annotations, "a.csv", "item_id,annotator_id,label,timestamp\na,r1,1,yesterday\n", 1,
     "timestamp", ["ISO-8601"]),
    ("unsupported_suffix", read_annotations, "a.xlsx", "x", None, None, ["unsupported"]),
]


@pytest.mark.parametrize(("reader", "name", "text", "row", "column", "words"), [c[1:] for c in BAD_FILES],
                         ids=[c[0] for c in BAD_FILES])
def test_bad_file(tmp_path, reader, name, text, row, column, words):
    _fails(reader, _write(tmp_path, name, text), row, column, words)


def test_parquet_input_checked_the_same_way(tmp_path):
    p = tmp_path / "p.parquet"
    pl.DataFrame({"item_id": ["a", "b"], "score": [0.5, float("nan")]}).write_parquet(p)
    _fails(read_predictions, p, 2, "score", ["NaN"])


def test_bom_is_accepted(tmp_path):
    p = _write(tmp_path, "r.csv", "\ufeffitem_id,label\na,1\n")
    assert read_reference_labels(p)["label"].to_list() == [1]

