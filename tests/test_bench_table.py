"""`make bench`'s runner and README renderer (issue 22) on synthetic results: the table, the README block, the
goal verdicts (judged from the numbers, never from a stored flag), "not run" and "failed" rows."""

import json
import sys
from datetime import UTC, datetime
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "benchmarks"))

import render_readme  # noqa: E402
import results_table as rt  # noqa: E402
import run_all  # noqa: E402

MACHINE = {"model": "Test CPU 9000", "cores": 2}
STAMP = {"machine": MACHINE, "measured_at": "2026-12-03T15:00:00Z", "commit": "abc123"}


def _doc(rows, date="2026-12-03"):
    return {"schema": 1, "date": date, "written_at": f"{date}T15:00:00Z", "machine": MACHINE, "commit": "abc123",
            "rows": rows}


def _rows():
    met = rt.row("nc_ece", "NC-ECE 10M", 0.1, "s", peer="DuckDB", peer_value=1.2, goal=("ratio", ">=", 10.0),
                 note="|diff| 1e-12")
    missed = rt.row("rankings", "top pairs", 4.0, "s", peer="faiss", peer_value=12.0, goal=("ratio", ">=", 5.0))
    missed["met"] = True  # a stale stored verdict: the renderer judges again from ratio 3.0 < 5
    floor = rt.row("nc_ece", "floor", 0.1, "s", peer="floor", peer_value=0.02, ratio_of="ours/peer",
                   goal=("ratio", "<=", 4.0))
    latency = rt.row("service_latency", "latency", 31.5, "s", goal=("ours", "<", 30.0), quick=True)
    for r in (met, missed, floor, latency):
        r.update(STAMP)
    absent = rt.placeholder("setup", "make demo", "not run", "< 360 s")
    return [met, missed, floor, latency, absent]


def test_row_ratios_and_goals():
    rows = _rows()
    assert rows[0]["ratio"] == pytest.approx(12.0, rel=1e-12)
    assert rows[1]["ratio"] == pytest.approx(3.0, rel=1e-12)
    assert rows[2]["ratio"] == pytest.approx(5.0, rel=1e-12)  # ours / floor
    assert [rt.goal_met(r) for r in rows] == [True, False, False, False, None]
    with pytest.raises(ValueError, match="ratio_of"):
        rt.row("x", "x", 1.0, "s", peer_value=2.0, ratio_of="peer-ours")


def test_table_cells():
    table = rt.markdown_table(_rows()).splitlines()
    assert table[0] == "| what | ours | peer | ratio | goal | machine | date |"
    assert table[1] == "|---|---|---|---|---|---|---|"
    assert table[2] == ("| NC-ECE 10M | 0.100 s | DuckDB: 1.20 s | 12.0× | peer/ours ≥ 10×: met "
                        "| Test CPU 9000, 2 cores | 2026-12-03 |")
    assert table[3] == ("| top pairs | 4.00 s | faiss: 12.0 s | 3.00× | peer/ours ≥ 5×: **not met** "
                        "| Test CPU 9000, 2 cores | 2026-12-03 |")
    assert table[4].split(" | ")[3:5] == ["5.00×", "ours/peer ≤ 4×: **not met**"]
    assert table[5] == ("| latency [quick] | 31.5 s | — | — | < 30 s: **not met** | Test CPU 9000, 2 cores "
                        "| 2026-12-03 |")
    assert table[6] == "| make demo | not run | — | — | < 360 s: not run | — | — |"


def test_readme_block_replaced_from_newest_file(tmp_path):
    results = tmp_path / "results"
    results.mkdir()
    (results / "2026-12-02.json").write_text(json.dumps(_doc([], "2026-12-02")))
    (results / "2026-12-03.json").write_text(json.dumps(_doc(_rows())))
    (results / "notes.json").write_text("{}")  # not a dated results file
    readme = tmp_path / "README.md"
    head, tail = "# title\n\nintro\n\n", "\n\n## next\nmore\n"
    readme.write_text(f"{head}{rt.BEGIN}\n| old | hand-typed |\n{rt.END}{tail}")
    assert render_readme.main(["--results-dir", str(results), "--readme", str(readme), "--check"]) == 1
    assert render_readme.main(["--results-dir", str(results), "--readme", str(readme)]) == 0
    text = readme.read_text()
    assert text.startswith(head + rt.BEGIN + "\n") and text.endswith(rt.END + tail)
    inner = text[len(head) + len(rt.BEGIN): -len(rt.END + tail)]
    assert "hand-typed" not in inner and "2026-12-03.json" in inner
    assert "| top pairs | 4.00 s | faiss: 12.0 s | 3.00× | peer/ours ≥ 5×: **not met** |" in inner
    assert inner.count("**not met**") == 3 and inner.count(": met |") == 1
    assert "- NC-ECE 10M: |diff| 1e-12" in inner
    assert render_readme.main(["--results-dir", str(results), "--readme", str(readme), "--check"]) == 0
    readme.write_text("no markers here\n")
    with pytest.raises(ValueError, match="bench:begin"):
        render_readme.main(["--results-dir", str(results), "--readme", str(readme)])


FAKE = """import sys
sys.path.insert(0, {bench!r})
import results_table as rt
args = sys.argv[1:]
quick = "--quick" in args
path = args[args.index("--rows-json") + 1]
if "--fail" in args:
    sys.exit(3)
rt.write_rows(path, [rt.row("fake", "fake kernel", 2.0, "s", peer="peer", peer_value=5.0,
                            goal=("ratio", ">=", 3.0), quick=quick)])
"""


def test_runner_writes_stamped_results(tmp_path):
    script = tmp_path / "bench_fake.py"
    script.write_text(FAKE.format(bench=str(REPO / "benchmarks")))
    benches = (run_all.Bench("fake", str(script), "fake kernel vs peer", "peer/ours ≥ 3×"),
               run_all.Bench("broken", str(script), "broken vs peer", "peer/ours ≥ 3×", ("--fail",)),
               run_all.Bench("idle", str(script), "idle vs peer", "≥ 1×"))
    out = tmp_path / "results"
    assert run_all.main(["--results-dir", str(out), "--skip", "idle", "--quick"], benches=benches) == 0
    date = datetime.now(UTC).strftime("%Y-%m-%d")
    doc = json.loads((out / f"{date}.json").read_text())
    assert doc["date"] == date and doc["quick"] is True and doc["machine"]["cores"] >= 1
    by = {r["bench"]: r for r in doc["rows"]}
    assert list(by) == ["fake", "broken", "idle", "setup"]
    fake = by["fake"]
    assert (fake["status"], fake["what"], fake["met"]) == ("measured", "fake kernel [quick]", False)
    assert fake["ratio"] == pytest.approx(2.5, rel=1e-12)
    assert fake["machine"] == doc["machine"] and fake["measured_at"] == doc["written_at"]
    assert (by["broken"]["status"], by["broken"]["note"]) == ("failed", "exit status 3")
    assert by["idle"]["status"] == "not run" and "machine" not in by["idle"]
    assert [r["status"] for r in doc["rows"] if r["bench"] == "setup"] == ["not run", "not run"]
    # --merge keeps today's measured rows of benchmarks not run now; a plain run does not
    assert run_all.main(["--results-dir", str(out), "--only", "idle", "--merge"], benches=benches) == 0
    merged = {r["bench"]: r for r in json.loads((out / f"{date}.json").read_text())["rows"]}
    assert merged["fake"] == fake and merged["idle"]["status"] == "measured"
    assert run_all.main(["--results-dir", str(out), "--only", "idle"], benches=benches) == 0
    plain = {r["bench"]: r for r in json.loads((out / f"{date}.json").read_text())["rows"]}
    assert plain["fake"]["status"] == "not run"
