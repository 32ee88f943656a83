"""Safe inbox and record-level quarantine: one bad record never blocks the good ones beside it; links and
special files are refused by name without being read; nothing quotes file content; settle time; names."""

from __future__ import annotations

import json
import os
import time

import numpy as np
import polars as pl
import pytest
from PIL import Image

from noisycal_platform.cleaning.protocol import answers_from_records, effective_answers
from noisycal_platform.ingest import (
    accepted_annotations,
    ingest_annotation_batches,
    ledger_entries,
    read_confirmation_records,
    write_record_quarantine,
)
from noisycal_platform.io import InputError, read_annotations, read_reference_label_records
from noisycal_platform.paths import InvalidName, validate_name

HEADER = "item_id,annotator_id,label\n"
SECRET = "root:$6$SECRETHASH$abcdef:19000:0:99999:7:::"


def _answer(aid, item, answer="yes", **kw):
    rec = {"answer_id": aid, "dataset": "derm", "issue_type": "irrelevant", "item_id": item, "item_id_2": None,
           "annotator_id": "e1", "role": "expert", "answer": answer, "undoes": None, "position": 0,
           "timestamp": "2026-02-01T10:00:00+00:00"}
    return rec | kw


def test_one_bad_confirmation_line_among_good_ones(layout):
    lines = [
        _answer("a1", "x.png"),
        _answer("a2", "y.png", role="intern"),  # unknown role
        _answer("a3", "z.png", issue_type="near_duplicate"),  # near_duplicate without item_id_2
        _answer("a4", "w.png", timestamp="2026-02-01T10:00:00"),  # no UTC offset
        _answer("a5", "v.png", answer="undo", undoes="nope"),  # undo of an unknown answer
        _answer("a6", "u.png"),
    ]
    text = "\n".join(json.dumps(r) for r in lines) + "\n{not json\n" + json.dumps(_answer("a7", "t.png")) + "\n"
    (layout.confirmation_inbox / "e1.jsonl").write_text(text)
    frame, rejected = read_confirmation_records(layout)
    assert frame["answer_id"].to_list() == ["a1", "a6", "a7"]  # the good lines land
    got = {(r["file"], r["line"], r["column"]) for r in rejected}
    assert got == {("e1.jsonl", 2, "role"), ("e1.jsonl", 3, "item_id_2"), ("e1.jsonl", 4, "timestamp"),
                   ("e1.jsonl", 5, "undoes"), ("e1.jsonl", 7, None)}
    # what lands always satisfies the protocol: the raw/confirmations asset can never fail on it
    eff = effective_answers(answers_from_records(frame.drop("line").to_dicts()))
    assert sorted(eff["item_id"].to_list()) == ["t.png", "u.png", "x.png"]
    path = write_record_quarantine(layout, "confirmations", rejected)
    quarantined = [json.loads(x) for x in path.read_text().splitlines()]
    assert [(q["file"], q["line"]) for q in quarantined] == [("e1.jsonl", n) for n in (2, 3, 4, 5, 7)]
    assert all("intern" not in q["reason"] for q in quarantined)  # reasons never quote content


def test_symlink_and_fifo_in_inbox_are_refused_by_name_unread(layout, tmp_path, capsys):
    secret = tmp_path / "shadow"
    secret.write_text(f"{SECRET}\n")
    (layout.annotation_inbox / "x.csv").symlink_to(secret)
    os.mkfifo(layout.annotation_inbox / "pipe.csv")  # opening it for reading would block forever
    (layout.annotation_inbox / "ok.csv").write_text(HEADER + "a,r1,1\n")
    (layout.confirmation_inbox / "e9.jsonl").symlink_to(secret)
    report = ingest_annotation_batches(layout)
    assert [e["file"] for e in report.accepted] == ["ok.csv"]
    assert sorted(e["file"] for e in report.quarantined) == ["pipe.csv", "x.csv"]
    assert (layout.quarantine / "x.csv").is_symlink()  # the link itself was moved, its target never opened
    _, rejected = read_confirmation_records(layout)
    assert [(r["file"], r["line"]) for r in rejected] == [("e9.jsonl", None)]
    everything = layout.ledger.read_text() + json.dumps(rejected) + capsys.readouterr().out
    everything += "".join(p.read_text() for p in layout.quarantine.glob("*.reason.txt"))
    assert "SECRETHASH" not in everything and "symbolic link" in everything
    with pytest.raises(InputError, match="symbolic link") as info:  # `noisycal validate` reads the same way
        read_annotations(layout.quarantine / "x.csv")
    assert "SECRETHASH" not in str(info.value)


@pytest.mark.parametrize(
    "content, row, words",
    [
        (HEADER + "a,r1,1\nb,r1\nc,r1,0\n", 2, ["2 field(s)", "header has 3"]),  # ragged row
        (HEADER + 'a,r1,1\nb,"r1,0\nc,r1,0\n', 2, ["unbalanced quote"]),
        (HEADER + 'a,r1,1\nb,"r1"x,0\n', 2, ["quot"]),
    ],
)
def test_ragged_and_unbalanced_csv_name_the_row_and_quote_nothing(tmp_path, content, row, words):
    p = tmp_path / "a.csv"
    p.write_text(content.replace("r1", "SECRETHASH"))
    with pytest.raises(InputError) as info:
        read_annotations(p)
    assert info.value.row == row and f"row {row}" in str(info.value)
    assert "SECRETHASH" not in info.value.safe and "SECRETHASH" not in str(info.value)
    for w in words:
        assert w in str(info.value)


def test_ragged_row_is_quarantined_alone(layout):
    (layout.annotation_inbox / "b.csv").write_text(HEADER + "a,r1,1\nb,r1\nc,r1,0\n")
    report = ingest_annotation_batches(layout)
    assert report.accepted[0]["rows"] == 2 and report.accepted[0]["rejected"] == 1
    assert accepted_annotations(layout)["item_id"].to_list() == ["a", "c"]


def test_duplicate_column_names_are_an_error(tmp_path):
    p = tmp_path / "a.csv"
    p.write_text("item_id,annotator_id,label,label\na,r1,1,0\n")
    with pytest.raises(InputError, match="duplicate column name") as info:
        read_annotations(p)
    assert info.value.column == "label"


@pytest.mark.parametrize("bad_id, words", [("x" * 300, "longer than 256"), ("a\x07b", "control characters"),
                                           ("a\u202eb", "control characters")])
def test_ids_have_a_length_limit_and_no_control_characters(tmp_path, bad_id, words):
    p = tmp_path / "a.csv"
    p.write_text(HEADER + f"ok,r1,1\n{bad_id},r1,0\n")
    with pytest.raises(InputError, match=words) as info:
        read_annotations(p)
    assert info.value.row == 2 and info.value.column == "item_id"


def test_settle_time_waits_for_a_file_to_stop_changing(layout):
    p = layout.annotation_inbox / "half.csv"
    p.write_text(HEADER + "a,r1,1\n")  # just written: maybe still being copied
    report = ingest_annotation_batches(layout, settle_seconds=30)
    assert report.accepted == [] and report.waiting == ["half.csv"] and p.exists()
    with open(p, "a") as fh:  # the rest arrives
        fh.write("b,r1,0\n")
    old = time.time() - 31
    os.utime(p, (old, old))
    report = ingest_annotation_batches(layout, settle_seconds=30)
    assert [e["rows"] for e in report.accepted] == [2]  # both halves, once


def test_temp_and_hidden_files_are_ignored_until_renamed(layout):
    tmp = layout.annotation_inbox / "b.csv.tmp"
    tmp.write_text(HEADER + "a,r1,1\n")
    (layout.annotation_inbox / ".b.csv").write_text(HEADER + "a,r1,1\n")
    assert ingest_annotation_batches(layout).accepted == []
    tmp.rename(layout.annotation_inbox / "b.csv")  # the atomic-rename convention
    assert [e["file"] for e in ingest_annotation_batches(layout).accepted] == ["b.csv"]


def test_settle_setting_is_bounded():
    from resources.settings import SettingsResource

    assert SettingsResource().inbox_settle_seconds == 30
    with pytest.raises(Exception, match="60"):
        SettingsResource(inbox_settle_seconds=61)


def test_reference_labels_are_record_level(tmp_path):
    p = tmp_path / "labels.csv"
    p.write_text("item_id,label\na,1\nb,2\nc,0\n")
    frame, problems = read_reference_label_records(p)
    assert frame.rows() == [("a", 1), ("c", 0)]
    assert [(q.row, q.column) for q in problems] == [(2, "label")]


@pytest.mark.parametrize("name", ["../../../../outside/PWNED_ds", "/abs/x", "a/b", "a\\b", "..", ".hidden",
                                  "x\ny", "x" * 129, "", " padded "])
def test_bad_names_are_refused(name):
    with pytest.raises(InvalidName):
        validate_name(name, "dataset")


@pytest.mark.parametrize("name", ["derm'; DROP TABLE x; --", 'quo"te', "Hautläsionen-2026", "v1.2_rc"])
def test_harmless_names_stay_allowed(name):
    assert validate_name(name, "dataset") == name


def test_datasets_add_refuses_a_name_that_leaves_the_home(layout, tmp_path, capsys):
    from orchestration.cli import main

    images = tmp_path / "imgs"
    images.mkdir()
    for bad in ("../../../../outside/PWNED_ds", str(tmp_path / "abs")):
        assert main(["--home", str(layout.home), "datasets", "add", bad, str(images)]) == 2
        assert "refused" in capsys.readouterr().err
    assert not layout.dataset_registry.exists()
    # a registry edited by hand: the bad name is never a dataset (so never a partition or a path)
    layout.dataset_registry.write_text(json.dumps({"../../x": str(images), "ok": str(images)}))
    assert list(layout.registered_datasets()) == ["ok"]
    (layout.models / ".hidden").mkdir()
    (layout.models / ".hidden" / "predictions.csv").write_text("item_id,score\na,0.5\n")
    assert layout.model_versions() == []


def test_16_bit_png_is_scaled_not_clipped(tmp_path):
    from noisycal_platform.cleaning.images import load_images

    ramp = np.linspace(0, 65535, 64 * 64).reshape(64, 64).astype(np.uint16)
    p = tmp_path / "xray.png"
    Image.fromarray(ramp).save(p)
    assert Image.open(p).mode == "I;16"
    got = load_images([p], 64)[0, 0].numpy().astype(np.float64)
    expect = np.rint(ramp * (255 / 65535))  # linear scaling by the 16-bit range
    assert np.abs(got - expect).max() <= 1  # bicubic resize is the identity at the same size (±1 rounding)
    assert (got == 255).mean() < 0.01  # clipping would have made ~99.6 % of the pixels white


def test_32_bit_and_float_images_are_stretched(tmp_path):
    from noisycal_platform.cleaning.images import to_rgb8

    f = np.linspace(-1.0, 1.0, 100, dtype=np.float32).reshape(10, 10)
    out = np.asarray(to_rgb8(Image.fromarray(f, mode="F")))[..., 0]
    assert out.min() == 0 and out.max() == 255
    assert np.all(np.diff(out.ravel().astype(int)) >= 0)  # monotone
    small = Image.fromarray(np.full((4, 4), 200, dtype=np.int32))
    assert np.asarray(to_rgb8(small))[0, 0, 0] == 200


def test_ledger_never_quotes_batch_content(layout):
    (layout.annotation_inbox / "q.csv").write_text(HEADER + "a,SECRETHASH,maybe\n")
    ingest_annotation_batches(layout)
    assert "SECRETHASH" not in layout.ledger.read_text()
    assert "maybe" not in layout.ledger.read_text()
    assert ledger_entries(layout)
    assert pl.read_csv(layout.quarantine / "q.csv")["annotator_id"].to_list() == ["SECRETHASH"]  # kept as is
