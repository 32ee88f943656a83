"""Every stage is optional: ``noisycal materialize`` on a home with the inputs of one stage only succeeds and says
which stages had no inputs; and ``materialize``/``tick`` say at the prompt when settings name a cluster executor
that they do not use (they run in one process)."""

import json

import pytest

from orchestration.cli import main
from orchestration.runner import STAGES, tick

ALL_STAGES = {"calibration", "cleaning", "correctness"}


def _materialize(home, capsys) -> tuple[int, str]:
    assert tick(home, automation=False).failed == set()  # the sensors register what arrived (partitions)
    capsys.readouterr()
    rc = main(["--home", str(home), "materialize"])
    return rc, capsys.readouterr().out


def _said_missing(out: str) -> set[str]:
    return {s.name for s in STAGES if f"no inputs for {s.name}:" in out}


def _ran(out: str) -> set[str]:
    """Asset keys of the runs listed as ok."""
    keys: set[str] = set()
    for line in out.splitlines():
        if line.strip().startswith("ok "):
            keys.update(k.strip().split(" [")[0] for k in line.split(":", 1)[1].split(","))
    return keys


@pytest.mark.slow  # ~55 s on the shared 2-core machine
def test_only_calibration_inputs(tmp_path, capsys):
    from noisycal_platform.calibration.demo_data import write_demo_calibration_inputs

    home = tmp_path / "home"
    write_demo_calibration_inputs(home, seed=0)
    rc, out = _materialize(home, capsys)
    assert rc == 0, out
    assert _said_missing(out) == {"cleaning", "correctness"}
    assert "FAIL" not in out
    ran = _ran(out)
    assert {"calibration/nc_ece_report", "reports/calibration"} <= ran
    assert not any(k.startswith(("correctness/", "cleaning/")) or k in ("raw/generations", "reports/cleaning")
                   for k in ran)


@pytest.mark.slow  # trains the demo encoder (~4 min on the shared 2 cores)
def test_only_a_dataset(tmp_path, capsys):
    from noisycal_platform.cleaning.demo_data import write_demo_cleaning_dataset

    home = tmp_path / "home"
    write_demo_cleaning_dataset(home, name="digits_demo", seed=0)
    rc, out = _materialize(home, capsys)
    assert rc == 0, out
    assert _said_missing(out) == {"calibration", "correctness"}
    ran = _ran(out)
    assert {"cleaning/embeddings", "reports/cleaning"} <= ran
    assert not any(k.startswith(("correctness/", "calibration/")) for k in ran)


@pytest.mark.slow  # ~45 s
def test_only_generations(tmp_path, capsys):
    from noisycal_platform.correctness.demo_data import write_demo_correctness_inputs

    home = tmp_path / "home"
    write_demo_correctness_inputs(home, seed=0)
    (home / "settings.json").write_text(json.dumps({"embedding_model_path": ""}))  # no text model: fast
    rc, out = _materialize(home, capsys)
    assert rc == 0, out
    assert _said_missing(out) == {"calibration", "cleaning"}
    ran = _ran(out)
    assert {"raw/generations", "correctness/criterion_audit", "reports/correctness"} <= ran
    assert not any(k.startswith(("cleaning/", "calibration/")) for k in ran)


@pytest.mark.slow  # ~10-20 s
def test_an_empty_home_materializes_nothing_that_fails(tmp_path, capsys):
    rc, out = _materialize(tmp_path / "home", capsys)
    assert rc == 0, out
    assert _said_missing(out) == ALL_STAGES


@pytest.mark.parametrize("executor", ["dask", pytest.param("multiprocess", marks=pytest.mark.slow)])
def test_one_process_note_names_the_executor_and_the_service(tmp_path, capsys, executor):
    home = tmp_path / "home"
    home.mkdir()
    (home / "settings.json").write_text(json.dumps({"executor": executor}))
    assert main(["--home", str(home), "materialize", "--select", "raw/reference_labels"]) == 0
    out = capsys.readouterr().out
    assert f"names the '{executor}' executor" in out and "runs every step in this one process" in out
    assert "`noisycal serve`" in out
    assert main(["--home", str(home), "tick"]) == 0
    out = capsys.readouterr().out
    assert f"names the '{executor}' executor" in out and "`noisycal tick` runs every step in this one process" in out


def test_no_note_for_the_in_process_executor(tmp_path, capsys):
    home = tmp_path / "home"
    assert main(["--home", str(home), "materialize", "--select", "raw/reference_labels"]) == 0
    assert "executor" not in capsys.readouterr().out
