"""End to end: the demo inputs are reproducible bit for bit, and ``noisycal demo`` runs the whole platform."""

import hashlib
import json
import subprocess
import sys
from pathlib import Path

import duckdb
import pytest

from noisycal_platform.demo import write_demo_inputs


def _digest_tree(root: Path) -> dict[str, str]:
    """sha256 of every file; truth.json records its own absolute folder, which differs between homes."""
    out = {}
    for p in sorted(root.rglob("*")):
        if not p.is_file():
            continue
        data = p.read_bytes()
        if p.name == "truth.json":
            data = data.replace(str(root).encode(), b"<home>")
        out[str(p.relative_to(root))] = hashlib.sha256(data).hexdigest()
    return out


def test_demo_inputs_are_bit_for_bit_reproducible(tmp_path):
    write_demo_inputs(tmp_path / "a", seed=0)
    write_demo_inputs(tmp_path / "b", seed=0)
    a, b = _digest_tree(tmp_path / "a"), _digest_tree(tmp_path / "b")
    assert a == b
    assert any(k.startswith("datasets/digits_demo/") for k in a)
    assert any(k.startswith("inbox/annotations/") for k in a)
    assert any(k.startswith("correctness/generations/") for k in a)


def test_demo_refuses_a_home_it_did_not_create(tmp_path):
    home = tmp_path / "clinic"
    home.mkdir()
    (home / "precious.csv").write_text("item_id,score\n")
    res = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "--home", str(home), "demo", "--fresh"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert res.returncode == 2 and "refusing" in res.stdout
    assert (home / "precious.csv").exists()


def test_demo_accepts_a_home_holding_only_empty_folders(tmp_path):
    """Loading the code location creates the empty folder layout; the demo must still treat the home as new."""
    from noisycal_platform.paths import HomeLayout
    from orchestration.demo import _prepare_home

    layout = HomeLayout.at(tmp_path / "home").ensure()
    assert _prepare_home(layout, fresh=False) is None
    assert (layout.home / ".noisycal-demo").is_file()


@pytest.mark.slow
def test_noisycal_demo_runs_everything(tmp_path):
    home = tmp_path / "demo"
    res = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "--home", str(home), "demo"],
        capture_output=True,
        text=True,
        timeout=3600,
    )
    assert res.returncode == 0, res.stdout[-3000:] + res.stderr[-3000:]
    assert "warehouse:" in res.stdout and "reports:" in res.stdout
    for report in (
        "index.html",
        "calibration/v1.html",
        "calibration/v2.html",
        "calibration/digits.html",
        "cleaning.html",
        "correctness.html",
    ):
        assert (home / "reports" / report).is_file(), report
    for rule in ("unanimous", "majority"):
        assert (home / "exports" / "cleaned_file_lists" / f"digits_demo_{rule}.csv").is_file()
    assert list((home / "exports" / "recalibrators" / "v2").glob("*.json"))
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        versions = [
            r[0]
            for r in con.execute("select distinct model_version from calibration.nc_ece_report order by 1").fetchall()
        ]
        assert versions == ["digits", "v1", "v2"]
        # the demo's miscalibrated site is flagged after Holm's correction (top-label NC-ECE)
        flagged = con.execute(
            "select subgroup_value from calibration.nc_ece_report where model_version = 'digits' and flagged "
            "and kind = 'top_label'"
        ).fetchall()
        assert flagged == [("south",)]
        n_answers = con.execute("select count(*) from raw.confirmations").fetchone()[0]
        files = list((home / "inbox" / "confirmations").glob("*.jsonl"))
        assert n_answers == sum(len(f.read_text().splitlines()) for f in files)
        auroc = dict(
            con.execute(
                "select ranking, auroc from cleaning.ranking_vs_truth where issue_type = 'near_duplicate'"
            ).fetchall()
        )
    # Gröger et al. 2023 §3.2: the self-supervised embedding beats the non-learned baseline on the injected near
    # duplicates
    assert auroc["dino"] > auroc["baseline"], auroc
    # the last batch arrived through the sensor: the ledger accepted it exactly once
    ledger = [json.loads(line) for line in (home / "ledger" / "annotations.jsonl").read_text().splitlines()]
    assert [e["file"] for e in ledger if e["status"] == "accepted"].count("batch_003.csv") == 1
