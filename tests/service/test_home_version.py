"""A versioned home: home.json names the release; a newer home or a table without a column this release needs
is refused naming both versions / the table and column; an older home (the layout before home.json, with
raw.annotations lacking label_text) is backed up and then migrated in place."""

import json

import duckdb
import pytest

from noisycal_platform.backup import verify_snapshot
from noisycal_platform.home_version import (
    HOME_FILE,
    HOME_SCHEMA_VERSION,
    IncompatibleHome,
    open_home,
    package_version,
    read_record,
    record_home,
)
from noisycal_platform.paths import HomeLayout
from orchestration.cli import main

OLD_ROWS = [("a", "r1", 1), ("a", "r2", 0), ("b", "r1", 1)]


def _old_home(tmp_path, columns="item_id varchar, annotator_id varchar, label tinyint", rows=OLD_ROWS):
    """A home as an older release wrote it: no home.json, raw.annotations without label_text, a report."""
    layout = HomeLayout.at(tmp_path / "home").ensure()
    con = duckdb.connect(str(layout.warehouse))
    con.execute("create schema raw")
    con.execute(f"create table raw.annotations ({columns})")
    width = len(columns.split(","))
    con.executemany(f"insert into raw.annotations values ({', '.join('?' * width)})", [r[:width] for r in rows])
    con.close()
    (layout.reports / "index.html").write_text("<p>old report</p>")
    return layout


def test_new_home_is_recorded(tmp_path):
    home = tmp_path / "new"
    _rec, before = open_home(home)
    assert before is None and not home.exists()  # opening touches nothing; creating records it
    record_home(home)
    raw = json.loads((home / HOME_FILE).read_text())
    assert raw["schema_version"] == HOME_SCHEMA_VERSION and raw["package_version"] == package_version()
    assert package_version() != "unknown"


def test_newer_home_refused(tmp_path, capsys):
    home = tmp_path / "home"
    home.mkdir()
    (home / HOME_FILE).write_text(json.dumps({"schema_version": HOME_SCHEMA_VERSION + 5, "package_version": "9.9.9"}))
    with pytest.raises(IncompatibleHome) as err:
        open_home(home)
    msg = str(err.value)
    assert "9.9.9" in msg and f"home schema {HOME_SCHEMA_VERSION + 5}" in msg
    assert package_version() in msg and f"home schema {HOME_SCHEMA_VERSION} and older" in msg
    assert main(["--home", str(home), "status"]) == 2
    assert "9.9.9" in capsys.readouterr().err


def test_incompatible_table_refused(tmp_path, capsys):
    layout = _old_home(tmp_path, columns="item_id varchar, label tinyint", rows=[("a", 1, 0)])
    with pytest.raises(IncompatibleHome, match=r"table raw\.annotations has no column 'annotator_id'"):
        open_home(layout.home)
    assert not (layout.home / HOME_FILE).exists()
    assert main(["--home", str(layout.home), "status"]) == 2
    assert "annotator_id" in capsys.readouterr().err


def test_older_home_backed_up_then_migrated(tmp_path):
    layout = _old_home(tmp_path)
    assert read_record(layout.home) is None
    rec, before = open_home(layout.home)
    assert rec.schema_version == HOME_SCHEMA_VERSION and before is not None
    manifest = verify_snapshot(before)  # the backup holds the home as it was: three rows, no label_text
    assert manifest["tables"]["raw.annotations"]["rows"] == 3
    con = duckdb.connect(str(before / "warehouse.duckdb"), read_only=True)
    assert "label_text" not in [r[0] for r in con.execute("describe raw.annotations").fetchall()]
    con.close()
    assert (before / "reports" / "index.html").read_text() == "<p>old report</p>"
    con = duckdb.connect(str(layout.warehouse), read_only=True)
    got = con.execute("select item_id, annotator_id, label, label_text from raw.annotations order by all").fetchall()
    con.close()
    assert got == [(i, a, lab, str(lab)) for i, a, lab in sorted(OLD_ROWS)]
    assert read_record(layout.home).schema_version == HOME_SCHEMA_VERSION
    assert open_home(layout.home)[1] is None  # migrated once


def test_cli_migrates_older_home(tmp_path, capsys):
    layout = _old_home(tmp_path)
    assert main(["--home", str(layout.home), "status"]) == 0
    out = capsys.readouterr().out
    assert "migrated" in out and read_record(layout.home).schema_version == HOME_SCHEMA_VERSION
