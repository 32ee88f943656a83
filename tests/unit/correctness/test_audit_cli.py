"""`noisycal audit sample` on the synthetic demo generations: writes the blind sample with exact quotas,
refuses to replace a different sample without --force, and names a too-small stratum."""

import polars as pl

from noisycal_platform.correctness import audit_workflow as aw
from noisycal_platform.correctness.demo_data import write_demo_correctness_inputs
from orchestration.cli import main


def test_audit_sample_cli(tmp_path, capsys):
    home = tmp_path / "home"
    write_demo_correctness_inputs(home, seed=0, n_per_group=100)
    assert main(["--home", str(home), "audit", "sample", "--per-stratum", "25", "--seed", "0"]) == 0
    path = home / "exports" / "audit_sample.csv"
    sample = aw.read_audit_sample(path)
    n_groups = sample.select("dataset", "model").n_unique()
    assert sample.height == 50 * n_groups
    assert set(pl.read_csv(path).columns) == set(aw.AUDIT_SAMPLE_COLUMNS)
    text = path.read_text()
    assert main(["--home", str(home), "audit", "sample", "--seed", "0"]) == 0  # same sample: fine
    assert main(["--home", str(home), "audit", "sample", "--seed", "1"]) == 2
    assert "--force" in capsys.readouterr().err and path.read_text() == text
    assert main(["--home", str(home), "audit", "sample", "--per-stratum", "99"]) == 2
    assert "strata smaller than --per-stratum 99" in capsys.readouterr().err
    assert main(["--home", str(home), "audit", "sample", "--seed", "1", "--force"]) == 0
    assert path.read_text() != text
