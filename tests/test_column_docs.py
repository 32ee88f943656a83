"""Every warehouse table declares its columns, and every declared column is described for the Dagster UI from
one glossary (``noisycal_platform.column_docs``) that holds no entry no table uses."""

import dagster as dg
import polars as pl
import pytest

from assets.policy import Stage
from definitions import build_definitions
from noisycal_platform.column_docs import GLOSSARY, TABLE_OVERRIDES, describe
from resources.warehouse import COLUMN_SCHEMA, polars_schema, table_schema


@pytest.fixture(scope="module")
def schemas(tmp_path_factory) -> dict[str, dg.TableSchema | None]:
    """Asset key → declared column schema (None when the asset declares none), for every asset in the graph."""
    graph = build_definitions(tmp_path_factory.mktemp("home")).resolve_asset_graph()
    return {
        k.to_user_string(): (graph.get(k).metadata or {}).get(COLUMN_SCHEMA)
        for k in graph.materializable_asset_keys
    }


def test_every_asset_declares_its_columns(schemas):
    # every asset of the graph stores a warehouse table (IO manager or SQL model), so every one declares them
    assert schemas  # the asset keys themselves are pinned in tests/test_definitions.py
    assert sorted(k for k, s in schemas.items() if not isinstance(s, dg.TableSchema)) == []
    assert all(s.columns for s in schemas.values())


def test_every_declared_column_has_a_description(schemas):
    missing = [f"{k}.{c.name}" for k, s in schemas.items() for c in s.columns if not (c.description or "").strip()]
    assert missing == []


def test_the_description_shown_is_the_glossary_text(schemas):
    for key, schema in schemas.items():
        for column in schema.columns:
            assert column.description == describe(key, column.name)


def test_every_glossary_entry_and_override_is_used(schemas):
    columns = {(k, c.name) for k, s in schemas.items() for c in s.columns}
    # a glossary entry is used where a table has the column and no override of that table replaces it
    used = {c for k, c in columns if c not in TABLE_OVERRIDES.get(k, {})}
    assert sorted(set(GLOSSARY) - used) == []
    stale = [f"{k}.{c}" for k, over in TABLE_OVERRIDES.items() for c in over if (k, c) not in columns]
    assert stale == []


def test_no_description_cites_internal_documents():
    texts = [*GLOSSARY.values(), *(t for over in TABLE_OVERRIDES.values() for t in over.values())]
    assert [t for t in texts if "seed 0" in t.lower() or "§" in t] == []


def test_an_override_wins_over_the_glossary_only_in_its_table():
    assert describe("cleaning/rank_label_errors", "score") != GLOSSARY["score"]
    assert describe("raw/predictions", "score") == GLOSSARY["score"]
    assert describe("nowhere/table", "no_such_column") == ""


def test_declared_schema_feeds_the_ui_and_the_empty_table_load():
    """One dict: the UI's columns (names, types, descriptions) and the empty frame a missing table loads as."""
    schema = {"item_id": pl.String(), "subgroups": pl.List(pl.Struct({"column": pl.String(), "value": pl.String()}))}
    declared = Stage("raw").column_schema("predictions", schema)
    assert [c.name for c in declared.columns] == ["item_id", "subgroups"]
    assert [c.description for c in declared.columns] == [GLOSSARY["item_id"], GLOSSARY["subgroups"]]
    assert polars_schema(declared) == schema
    assert pl.DataFrame(schema=polars_schema(declared)).schema == pl.Schema(schema)
    # without a key the columns carry no description (frames of no table, e.g. run-time metadata of a test)
    assert all(c.description is None for c in table_schema(schema).columns)


def test_a_sql_model_returning_other_columns_than_it_declares_is_rolled_back(tmp_path):
    import duckdb

    from assets.sql_models import parse_sql_model, run_sql_model

    path = tmp_path / "staging" / "stg_demo.sql"
    path.parent.mkdir()
    path.write_text("-- column: a Int64\n-- column: b String\nSELECT 1 AS a, 2 AS c\n", encoding="utf-8")
    model = parse_sql_model(path)
    assert model.columns == {"a": pl.Int64(), "b": pl.String()}
    con = duckdb.connect()
    with pytest.raises(ValueError, match=r"returns columns \['a', 'c'\], the SQL file declares \['a', 'b'\]"):
        run_sql_model(con, model)
    tables = con.execute("select table_name from information_schema.tables").fetchall()
    assert ("stg_demo",) not in tables
