"""Optional part timings of the cleaning stage (``NOISYCAL_PROFILE``)."""

from __future__ import annotations

import json
import time

from noisycal_platform.cleaning.profiling import PROFILE_ENV, part


def test_a_part_appends_its_wall_and_cpu_seconds_when_asked(tmp_path, monkeypatch):
    log = tmp_path / "profile.jsonl"
    monkeypatch.setenv(PROFILE_ENV, str(log))
    with part("sleep"):
        time.sleep(0.05)
    with part("spin"):
        t = time.process_time()
        while time.process_time() - t < 0.05:
            pass
    lines = [json.loads(x) for x in log.read_text().splitlines()]
    assert [x["part"] for x in lines] == ["sleep", "spin"]
    assert lines[0]["wall_s"] >= 0.05 and lines[0]["cpu_s"] < 0.04  # sleeping costs no CPU
    assert lines[1]["cpu_s"] >= 0.045


def test_nothing_is_written_when_not_asked(tmp_path, monkeypatch):
    monkeypatch.delenv(PROFILE_ENV, raising=False)
    with part("x"):
        pass
    assert list(tmp_path.iterdir()) == []
