"""Ingestion survives SIGKILL at every step, two concurrent ingestions and a full disk: afterwards every batch
is either fully ingested or still in the inbox, never lost and never twice (ledger == archived rows)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
from collections import Counter
from pathlib import Path

import polars as pl
import pytest

from noisycal_platform.ingest import FAULT_ENV, IngestError, accepted_annotations, ingest_annotation_batches
from noisycal_platform.paths import HomeLayout

ROOT = Path(__file__).resolve().parents[2]
HEADER = "item_id,annotator_id,label\n"
# name -> (content, rows that must land)
BATCHES = {
    "a_good.csv": (HEADER + "a,r1,1\nb,r1,0\n", {("a", "r1", 1), ("b", "r1", 0)}),
    "b_partly.csv": (HEADER + "c,r1,1\nd,r1,9\n", {("c", "r1", 1)}),
    "c_bad.csv": (HEADER + "e,r1,7\n", set()),
    "d_good.csv": (HEADER + "f,r2,1\n", {("f", "r2", 1)}),
}
EXPECTED = set().union(*(rows for _, rows in BATCHES.values()))


def _drop_all(layout: HomeLayout) -> None:
    for name, (content, _) in BATCHES.items():
        (layout.annotation_inbox / name).write_text(content)
    # a byte-identical copy of a good batch under another name: must add nothing
    (layout.annotation_inbox / "e_copy.csv").write_text(BATCHES["a_good.csv"][0])


def _ingest_in_subprocess(home: Path, fault: str | None = None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k != FAULT_ENV}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    if fault:
        env[FAULT_ENV] = fault
    code = (
        "import sys; from noisycal_platform.ingest import ingest_annotation_batches; "
        "from noisycal_platform.paths import HomeLayout; ingest_annotation_batches(HomeLayout.at(sys.argv[1]))"
    )
    return subprocess.run([sys.executable, "-c", code, str(home)], env=env, capture_output=True, timeout=120)


def _ledger_lines(layout: HomeLayout) -> list[dict]:
    out = []
    for line in layout.ledger.read_bytes().split(b"\n"):
        try:
            out.append(json.loads(line))
        except json.JSONDecodeError:
            continue  # a torn (uncommitted) line
    return out


def _assert_exactly_once(layout: HomeLayout) -> None:
    inbox = sorted(p.name for p in layout.annotation_inbox.iterdir())
    assert inbox == [], inbox  # nothing left behind
    rows = accepted_annotations(layout)
    got = [tuple(r) for r in rows.select("item_id", "annotator_id", "label").iter_rows()]
    assert len(got) == len(set(got)), "a row was ingested twice"
    assert set(got) == EXPECTED, "a row was lost"
    lines = _ledger_lines(layout)
    accepted = Counter(e["sha256"] for e in lines if e["status"] == "accepted")
    assert accepted and max(accepted.values()) == 1, accepted  # one commit per batch
    # ledger == archived rows: each accepted entry's row count is what its archive holds, and nothing else
    by_batch = rows.group_by("batch_sha256").len()
    assert dict(by_batch.iter_rows()) == {e["sha256"]: e["rows"] for e in lines if e["status"] == "accepted"}
    for e in lines:
        if e["status"] == "accepted":
            assert list((layout.archive / "originals").glob(f"{e['sha256']}.*")), e["file"]
    quarantined = {p.name for p in layout.quarantine.iterdir()}
    assert "c_bad.csv" in quarantined  # the batch without a usable row, whole
    assert any(n.startswith("b_partly.rejected-") and n.endswith(".csv") for n in quarantined)
    assert (layout.quarantine / "c_bad.csv").read_text() == BATCHES["c_bad.csv"][0]


# every step of the commit order, at the first batch that reaches it and at a later one
POINTS = [
    "after_read", "after_read:3", "after_archive", "after_archive:2", "after_rejected", "after_reason",
    "after_ledger", "after_ledger:2", "after_ledger:4", "after_move", "after_move:3",
]


@pytest.mark.parametrize("point", POINTS)
def test_sigkill_at_each_step_then_rerun_is_exactly_once(layout, point):
    _drop_all(layout)
    killed = _ingest_in_subprocess(layout.home, point)
    assert killed.returncode == -signal.SIGKILL, (killed.returncode, killed.stderr.decode()[-2000:])
    # nothing is lost even before the rerun: every batch is committed or still in the inbox
    committed = {e["file"] for e in _ledger_lines(layout)} if layout.ledger.exists() else set()
    waiting = {p.name for p in layout.annotation_inbox.iterdir()}
    assert set(BATCHES) <= committed | waiting
    again = _ingest_in_subprocess(layout.home)
    assert again.returncode == 0, again.stderr.decode()[-2000:]
    _assert_exactly_once(layout)
    # and a third run changes nothing
    before = _ledger_lines(layout)
    ingest_annotation_batches(layout)
    assert _ledger_lines(layout) == before


def test_torn_ledger_line_is_not_a_commit(layout):
    _drop_all(layout)
    ingest_annotation_batches(layout)
    before = accepted_annotations(layout)
    with open(layout.ledger, "ab") as fh:  # a crash in the middle of a later append
        fh.write(b'{"sha256": "ff", "status": "acc')
    assert accepted_annotations(layout).equals(before)
    (layout.annotation_inbox / "z.csv").write_text(HEADER + "z,r9,1\n")
    ingest_annotation_batches(layout)  # the next line starts on a line of its own
    assert ("z", "r9", 1) in set(accepted_annotations(layout).select("item_id", "annotator_id", "label").rows())


def test_two_concurrent_ingestions_are_exactly_once(layout):
    _drop_all(layout)
    for k in range(12):
        (layout.annotation_inbox / f"m{k:02d}.csv").write_text(HEADER + f"m{k},r{k},1\n")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop(FAULT_ENV, None)
    code = (
        "import sys; from noisycal_platform.ingest import ingest_annotation_batches; "
        "from noisycal_platform.paths import HomeLayout; ingest_annotation_batches(HomeLayout.at(sys.argv[1]))"
    )
    procs = [subprocess.Popen([sys.executable, "-c", code, str(layout.home)], env=env, stderr=subprocess.PIPE)
             for _ in range(2)]
    for p in procs:
        _, err = p.communicate(timeout=120)
        assert p.returncode == 0, err.decode()[-2000:]
    expected = EXPECTED | {(f"m{k}", f"r{k}", 1) for k in range(12)}
    got = accepted_annotations(layout).select("item_id", "annotator_id", "label").rows()
    assert len(got) == len(set(got)) and set(got) == expected
    accepted = Counter(e["sha256"] for e in _ledger_lines(layout) if e["status"] == "accepted")
    assert max(accepted.values()) == 1 and len(accepted) == 3 + 12
    assert list(layout.annotation_inbox.iterdir()) == []


def _mount_tmpfs(path: Path, size: str) -> bool:
    path.mkdir(parents=True, exist_ok=True)
    if os.geteuid() != 0:
        return False
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    return r.returncode == 0


def test_full_disk_is_a_clear_error_and_loses_nothing(tmp_path):
    mnt = tmp_path / "small_disk"
    if not _mount_tmpfs(mnt, "2m"):
        pytest.skip("cannot mount a tiny tmpfs here (needs root and CAP_SYS_ADMIN) to simulate a full disk")
    try:
        layout = HomeLayout.at(mnt / "home").ensure()
        content = HEADER + "".join(f"i{k},r1,{k % 2}\n" for k in range(2000))
        (layout.annotation_inbox / "big.csv").write_text(content)
        filler = mnt / "filler"
        fd = os.open(filler, os.O_WRONLY | os.O_CREAT)
        try:  # fill the disk to the last block
            while True:
                os.write(fd, b"\0" * 4096)
        except OSError as exc:
            assert exc.errno == 28  # ENOSPC
        finally:
            os.close(fd)
        with pytest.raises(IngestError, match="disk is full"):
            ingest_annotation_batches(layout)
        # nothing committed, nothing lost: the batch is still in the inbox, byte for byte
        assert (layout.annotation_inbox / "big.csv").read_text() == content
        assert accepted_annotations(layout).height == 0
        filler.unlink()
        report = ingest_annotation_batches(layout)
        assert [e["file"] for e in report.accepted] == ["big.csv"]
        got = accepted_annotations(layout)
        assert got.height == 2000 and got["label"].sum() == 1000
        assert not (layout.annotation_inbox / "big.csv").exists()
    finally:
        subprocess.run(["umount", "-l", str(mnt)], capture_output=True)


def test_sigkill_mid_ingestion_keeps_raw_table_frame_schema(layout):
    # after a crash and a rerun the accepted rows keep the raw/annotations schema (what the asset stores)
    _drop_all(layout)
    assert _ingest_in_subprocess(layout.home, "after_archive:2").returncode == -signal.SIGKILL
    ingest_annotation_batches(layout)
    rows = accepted_annotations(layout)
    assert rows.schema["label"] == pl.Int8 and rows["batch_sha256"].null_count() == 0
