"""The warehouse IO manager: it adds the partition column, replaces a slice in one transaction (a failing write
leaves the old rows), loads a table that does not exist yet as an empty frame with the declared columns, adds
the columns an upgraded asset gained, and refuses a frame whose columns differ from the declaration."""

import dagster as dg
import duckdb
import polars as pl
import pytest

from assets.policy import Stage
from resources.warehouse import polars_schema, table_schema, warehouse_io_manager

PARTS = dg.StaticPartitionsDefinition(["a", "b"])
STAGE = Stage("demo", partitions_def=PARTS, partition_column="part", automation_condition=None)
SCHEMA = {"x": pl.Int64(), "v": pl.List(pl.Float32()), "t": pl.Datetime("us", "UTC"), "s": pl.String()}


def _run(home, assets, partition=None):
    return dg.materialize(
        assets,
        partition_key=partition,
        resources={"io_manager": warehouse_io_manager(home / "w.duckdb")},
        raise_on_error=False,
    )


def _rows(home):
    with duckdb.connect(str(home / "w.duckdb"), read_only=True) as con:
        return con.execute("select * from demo.values order by part, x").pl()


def test_schema_round_trips_through_dagster_metadata():
    assert polars_schema(table_schema(SCHEMA)) == SCHEMA


def test_partition_column_added_and_slice_replaced_atomically(tmp_path):
    state = {"n": 2}

    @STAGE.asset(name="values", schema={"x": pl.Int64()})
    def values(context: dg.AssetExecutionContext) -> pl.DataFrame:
        return pl.DataFrame({"x": list(range(state["n"]))}, schema={"x": pl.Int64()})

    assert _run(tmp_path, [values], "a").success and _run(tmp_path, [values], "b").success
    assert _rows(tmp_path)["part"].to_list() == ["a", "a", "b", "b"]
    assert _rows(tmp_path).columns == ["part", "x"]
    state["n"] = 3
    assert _run(tmp_path, [values], "a").success
    assert _rows(tmp_path)["part"].to_list() == ["a", "a", "a", "b", "b"]


def test_a_frame_with_other_columns_is_refused_and_the_table_kept(tmp_path):
    @STAGE.asset(name="values", schema={"x": pl.Int64()})
    def values() -> pl.DataFrame:
        return pl.DataFrame({"x": [1]})

    assert _run(tmp_path, [values], "a").success

    @STAGE.asset(name="values", schema={"x": pl.Int64()})
    def values_changed() -> pl.DataFrame:
        return pl.DataFrame({"y": [1.0]})

    result = _run(tmp_path, [values_changed], "b")
    assert not result.success
    failure = next(e for e in result.all_events if e.is_step_failure).event_specific_data.error
    assert "declares" in str(failure)
    assert not any(e.event_type_value == "STEP_UP_FOR_RETRY" for e in result.all_events)  # it cannot heal
    assert _rows(tmp_path)["x"].to_list() == [1]


def test_columns_added_by_an_upgrade_read_as_null_in_older_partitions(tmp_path):
    @STAGE.asset(name="values", schema={"x": pl.Int64()})
    def values() -> pl.DataFrame:
        return pl.DataFrame({"x": [1]})

    assert _run(tmp_path, [values], "a").success

    @STAGE.asset(name="values", schema={"x": pl.Int64(), "kind": pl.String()})
    def values_upgraded() -> pl.DataFrame:
        return pl.DataFrame({"x": [2], "kind": ["top_label"]})

    assert _run(tmp_path, [values_upgraded], "b").success
    rows = _rows(tmp_path)
    assert rows.select("part", "x", "kind").rows() == [("a", 1, None), ("b", 2, "top_label")]
    assert rows.schema["kind"] == pl.String


def test_a_missing_table_loads_empty_with_its_declared_columns(tmp_path):
    plain = Stage("demo", automation_condition=None)

    @plain.asset(name="upstream", schema=SCHEMA)
    def upstream() -> pl.DataFrame:
        raise AssertionError("not materialised in this test")

    seen = {}

    @plain.asset(name="downstream", ins={"upstream": dg.AssetIn(plain.key("upstream"))})
    def downstream(upstream: pl.DataFrame) -> pl.DataFrame:
        seen["schema"] = dict(upstream.schema)
        return pl.DataFrame({"n": [upstream.height]})

    result = dg.materialize(
        [upstream, downstream],
        selection=[plain.key("downstream")],
        resources={"io_manager": warehouse_io_manager(tmp_path / "w.duckdb")},
    )
    assert result.success
    assert seen["schema"] == SCHEMA


def test_an_undeclared_missing_table_is_an_error_naming_it(tmp_path):
    plain = Stage("demo", automation_condition=None)

    @plain.asset(name="upstream")
    def upstream() -> pl.DataFrame:
        raise AssertionError("not materialised in this test")

    @plain.asset(name="downstream", ins={"upstream": dg.AssetIn(plain.key("upstream"))})
    def downstream(upstream: pl.DataFrame) -> pl.DataFrame:
        return upstream

    with pytest.raises(FileNotFoundError, match=r"demo\.upstream does not exist yet"):
        dg.materialize(
            [upstream, downstream],
            selection=[plain.key("downstream")],
            resources={"io_manager": warehouse_io_manager(tmp_path / "w.duckdb")},
        )
