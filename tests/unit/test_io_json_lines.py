"""``io.json_lines``: the one reader of the append-only JSONL logs (answers, ledger)."""

import json

from noisycal_platform.files import append_line_durably, json_lines


def test_skips_blank_torn_and_non_object_lines(tmp_path):
    log = tmp_path / "log.jsonl"
    append_line_durably(log, json.dumps({"a": 1}))
    with open(log, "ab") as fh:  # a blank line, a JSON array, bytes that are not UTF-8, then a torn last line
        fh.write(b"\n[1, 2]\n\xff\xfe\n{\"b\": ")
    append_line_durably(log, json.dumps({"c": 3}))  # ends the torn line first, so this record stands alone
    assert json_lines(log.read_bytes()) == [{"a": 1}, {"c": 3}]


def test_empty_input_has_no_records():
    assert json_lines(b"") == []
