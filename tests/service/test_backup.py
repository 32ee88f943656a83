"""`noisycal backup` / `restore` / `verify-backup`: a snapshot taken while ingestions, confirmation answers and
locked warehouse+report writes stream in is consistent (the invariants below are kept by the writer, not read
from the backup code), restores into an empty home and verifies; a backup SIGKILLed midway is refused."""

import json
import os
import subprocess
import sys
import threading
from pathlib import Path

import duckdb
import pytest

from noisycal_platform.backup import MANIFEST, BackupError, restore_home, verify_snapshot
from noisycal_platform.files import append_line_durably, atomic_write_text
from noisycal_platform.ingest import ingest_annotation_batches
from noisycal_platform.paths import HomeLayout
from orchestration.cli import main
from orchestration.instance import home_lock

REPO = Path(__file__).resolve().parents[2]


def _home(tmp_path) -> HomeLayout:
    layout = HomeLayout.at(tmp_path / "home").ensure()
    con = duckdb.connect(str(layout.warehouse))
    con.execute("create schema reports")
    con.execute("create table reports.ticks (i bigint, note varchar)")
    con.close()
    atomic_write_text(layout.reports / "ticks.html", "0")
    return layout


def _writer(layout: HomeLayout, n: int, started: threading.Event) -> None:
    """The service's three writers: a batch dropped and ingested, a web answer appended, and a runner step
    (warehouse row + report saying how many rows there are) under the home lock."""
    answers = layout.confirmation_inbox / "answers.jsonl"
    for i in range(n):
        batch = layout.annotation_inbox / f"b{i:03d}.csv"
        atomic_write_text(batch, f"item_id,annotator_id,label\nit{i},r1,{i % 2}\nit{i},r2,1\n")
        ingest_annotation_batches(layout)
        append_line_durably(answers, json.dumps({"answer_id": i, "answer": "yes", "pad": "x" * 200}))
        with home_lock(layout.home, "test writer"):
            con = duckdb.connect(str(layout.warehouse))
            con.execute("insert into reports.ticks values (?, ?)", [i, f"tick {i}"])
            con.close()
            atomic_write_text(layout.reports / "ticks.html", str(i + 1))
        started.set()


def _consistent(home: Path) -> int:
    """Assert the writer's invariants in a home (or snapshot); returns its number of warehouse rows."""
    con = duckdb.connect(str(home / "warehouse.duckdb"), read_only=True)
    (n,) = con.execute("select count(*) from reports.ticks").fetchone()
    con.close()
    assert int((home / "reports" / "ticks.html").read_text()) == n  # warehouse and report from one step
    ledger = [json.loads(x) for x in (home / "ledger" / "annotations.jsonl").read_text().splitlines()]
    archived = {p.name.split(".")[0] for p in (home / "archive" / "annotations").rglob("*") if p.is_file()}
    assert ledger and all(e["status"] == "accepted" for e in ledger)
    assert {e["sha256"] for e in ledger} <= archived  # every batch in the ledger has its archived copy
    answers = (home / "inbox" / "confirmations" / "answers.jsonl").read_text()
    assert answers == "" or answers.endswith("\n")
    assert [json.loads(x)["answer_id"] for x in answers.splitlines()] == list(range(len(answers.splitlines())))
    return n


def test_backup_while_writing_restore_verify(tmp_path, capsys):
    layout = _home(tmp_path)
    started = threading.Event()
    t = threading.Thread(target=_writer, args=(layout, 20, started), daemon=True)
    t.start()
    assert started.wait(60)
    dests = []
    for k in range(3):
        dest = tmp_path / f"backup{k}"
        assert main(["--home", str(layout.home), "backup", str(dest)]) == 0
        dests.append(dest)
    t.join(120)
    assert not t.is_alive()
    final = _consistent(layout.home)
    assert final == 20
    for k, dest in enumerate(dests):
        assert 0 < _consistent(dest) <= final
        assert main(["--home", str(layout.home), "verify-backup", str(dest)]) == 0
        restored = tmp_path / f"restored{k}"
        assert main(["--home", str(restored), "restore", str(dest)]) == 0
        assert _consistent(restored) == _consistent(dest)
    # restore only into an empty home; a tampered snapshot is refused naming the file
    assert main(["--home", str(layout.home), "restore", str(dests[0])]) == 2
    assert "not empty" in capsys.readouterr().err
    (dests[0] / "reports" / "ticks.html").write_text("999")
    assert main(["--home", str(tmp_path / "r_bad"), "restore", str(dests[0])]) == 2
    assert "reports/ticks.html" in capsys.readouterr().err
    assert not (tmp_path / "r_bad").exists()
    assert main(["--home", str(layout.home), "backup", "--verify", str(dests[0])]) == 2


@pytest.mark.parametrize(
    "fault",
    [  # killed after the second file copied / with every file and the temp manifest written, before the rename
        pytest.param("backup_file:2", marks=pytest.mark.slow(reason="a second ~10 s CLI subprocess")),
        "backup_manifest",
    ],
)
def test_sigkilled_backup_is_refused(tmp_path, fault):
    layout = _home(tmp_path)
    _writer(layout, 3, threading.Event())
    dest = tmp_path / "killed"
    env = {**os.environ, "NOISYCAL_FAULT": fault, "PYTHONPATH": str(REPO)}
    proc = subprocess.run(
        [sys.executable, "-m", "orchestration.cli", "--home", str(layout.home), "backup", str(dest)],
        env=env, capture_output=True, timeout=120,
    )
    assert proc.returncode == -9  # SIGKILL
    assert dest.is_dir() and any(dest.rglob("*")) and not (dest / MANIFEST).exists()
    with pytest.raises(BackupError, match=r"MANIFEST\.json is missing"):
        verify_snapshot(dest)
    with pytest.raises(BackupError, match="interrupted"):
        restore_home(dest, tmp_path / "restored")
    assert not (tmp_path / "restored").exists()
    # the home itself is untouched and a new backup then succeeds
    assert main(["--home", str(layout.home), "backup", str(tmp_path / "ok")]) == 0
    assert _consistent(tmp_path / "ok") == 3
