"""A dataset and a model version named like SQL injections materialise, and every table stays intact: partition
keys reach DuckDB only as bound parameters, never as SQL text."""

import dagster as dg
import duckdb

from definitions import build_definitions
from noisycal_platform.calibration.demo_data import write_demo_calibration_inputs
from noisycal_platform.cleaning.demo_data import write_demo_cleaning_dataset
from orchestration.runner import instance_for
from tests.assets.test_cleaning import CHAIN

HOSTILE = "v1'; DROP TABLE x;--"
HOSTILE_DATASET = "ds\"'); DELETE FROM raw.images;--"
CALIBRATION_CHAIN = ["raw/annotations", "raw/predictions", "calibration/channel_estimates", "calibration/nc_ece_report"]
CLEANING_CHAIN = [k for k in CHAIN if k != "cleaning/ranking_vs_truth"]


def _run(home, names, partition):
    defs = build_definitions(home)
    return dg.materialize(
        [*defs.assets, *defs.asset_checks],
        selection=[dg.AssetKey(n.split("/")) for n in names],
        partition_key=partition,
        instance=instance_for(home),
        resources=defs.resources,
        raise_on_error=False,
    )


def _counts(con) -> dict[str, int]:
    tables = con.execute(
        "select table_schema, table_name from information_schema.tables order by 1, 2"
    ).fetchall()
    return {f"{s}.{t}": con.execute(f'select count(*) from "{s}"."{t}"').fetchone()[0] for s, t in tables}


def test_hostile_partition_names_materialise_and_leave_every_table_intact(tmp_path):
    home = tmp_path / "home"
    home.mkdir()
    # the interval's replicate count is not under test here (50 instead of 500 bootstrap replicates per version)
    (home / "settings.json").write_text(
        '{"encoder_overrides": {"epochs": 1, "depth": 1, "batch_size": 64}, "n_bootstrap": 50}'
    )
    write_demo_calibration_inputs(home, seed=0)
    (home / "models" / HOSTILE).mkdir(parents=True)
    v1 = (home / "models" / "v1" / "predictions.csv").read_bytes()
    (home / "models" / HOSTILE / "predictions.csv").write_bytes(v1)
    write_demo_cleaning_dataset(
        home, name="plain", seed=0, n_digits=60, n_irrelevant=2, n_duplicate_pairs=2, n_duplicate_triples=0,
        n_flipped=2,
    )
    write_demo_cleaning_dataset(
        home, name=HOSTILE_DATASET, seed=1, n_digits=60, n_irrelevant=2, n_duplicate_pairs=2,
        n_duplicate_triples=0, n_flipped=2,
    )
    instance = instance_for(home)
    instance.add_dynamic_partitions("model_versions", ["v1", HOSTILE])
    instance.add_dynamic_partitions("datasets", ["plain", HOSTILE_DATASET])
    for names, partition in ((CALIBRATION_CHAIN, "v1"), (CLEANING_CHAIN, "plain")):
        assert _run(home, names, partition).success
    with duckdb.connect(str(home / "warehouse.duckdb")) as con:
        con.execute("create table main.x as select 42 as sentinel")
        before = _counts(con)
        plain_before = con.execute("select * from raw.images where dataset = 'plain' order by idx").pl()
    for names, partition in ((CALIBRATION_CHAIN, HOSTILE), (CLEANING_CHAIN, HOSTILE_DATASET)):
        result = _run(home, names, partition)
        assert result.success, [e.message for e in result.all_events if e.is_step_failure]
    with duckdb.connect(str(home / "warehouse.duckdb"), read_only=True) as con:
        after = _counts(con)
        assert con.execute("select sentinel from main.x").fetchall() == [(42,)]
        versions = con.execute("select distinct model_version from raw.predictions order by 1").pl()
        datasets = con.execute("select distinct dataset from cleaning.confirmation_queue order by 1").pl()
        plain_after = con.execute("select * from raw.images where dataset = 'plain' order by idx").pl()
        v1_scores = con.execute("select count(*) from raw.predictions where model_version = 'v1'").fetchone()[0]
    assert set(after) == set(before)  # no table dropped, none created by the names
    assert versions["model_version"].to_list() == sorted(["v1", HOSTILE])
    assert set(datasets["dataset"]) == {"plain", HOSTILE_DATASET}
    assert plain_after.equals(plain_before)  # the plain slice is untouched
    assert 2 * v1_scores == after["raw.predictions"]  # the hostile version holds its own copy of v1's scores
    for table, n in before.items():
        assert after[table] >= n, table  # the hostile partitions only add their own slices
