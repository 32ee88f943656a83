"""SQL models under ``dbt_like_sql/``: each ``.sql`` file is one asset, executed in DuckDB.

- The file name is the asset name; the folder gives the schema (``staging/``) unless a ``-- stage: <schema>``
  header line says otherwise (marts live in the schema of the stage they serve).
- Upstream assets are the ``schema.table`` names the SQL references after ``FROM`` / ``JOIN``.
- ``-- param: name = value`` header lines declare named parameters (``$name`` in the SQL), bound by DuckDB —
  values never enter the SQL text. A parameter that the platform settings also define (e.g. ``n_bins``) takes the
  settings' value, so SQL and library share one bin count. DOUBLE parameters avoid DuckDB's slow DECIMAL path
  for literals.
- ``-- column: name Type`` header lines (polars type names) declare the table's columns in order: the asset's
  column schema (shown, with each column's description from ``noisycal_platform.column_docs``, in the UI), and
  the columns the result must have — a query that returns others is rolled back with an error naming both.
- The table is replaced inside one transaction: readers see the old table or the new one, never half of it.
"""

import re
from dataclasses import dataclass, field, replace
from pathlib import Path

import dagster as dg
import polars as pl
from dagster_duckdb import DuckDBResource

from assets.policy import Stage
from resources.settings import SettingsResource
from resources.warehouse import polars_schema, table_exists

__all__ = ["SQL_ROOT", "SqlModel", "build_sql_assets", "parse_sql_model"]

SQL_ROOT = Path(__file__).resolve().parent.parent / "dbt_like_sql"
_REF = re.compile(r"\b(?:from|join)\s+([a-z_][a-z0-9_]*)\.([a-z_][a-z0-9_]*)\b", re.IGNORECASE)
_HEADER = re.compile(r"^--\s*(stage|param|description|column)\s*:\s*(.+?)\s*$", re.IGNORECASE)
SQL_KINDS = frozenset({"duckdb", "sql"})


@dataclass(frozen=True)
class SqlModel:
    path: Path
    schema: str
    name: str
    sql: str
    params: dict[str, float | int | str]
    deps: tuple[tuple[str, str], ...]
    description: str
    #: the declared columns (``-- column:`` lines), in order; empty when the file declares none
    columns: dict[str, pl.DataType] = field(default_factory=dict)

    @property
    def key(self) -> dg.AssetKey:
        return dg.AssetKey([self.schema, self.name])


def _coerce(value: str) -> float | int | str:
    for cast in (int, float):
        try:
            return cast(value)
        except ValueError:
            pass
    return value.strip("'\"")


def parse_sql_model(path: Path) -> SqlModel:
    text = path.read_text(encoding="utf-8")
    schema = path.parent.name
    params: dict[str, float | int | str] = {}
    description = []
    columns: list[dg.TableColumn] = []
    for line in text.splitlines():
        m = _HEADER.match(line.strip())
        if not m:
            continue
        kind, value = m.group(1).lower(), m.group(2)
        if kind == "stage":
            schema = value
        elif kind == "param":
            name, _, raw = value.partition("=")
            params[name.strip()] = _coerce(raw.strip())
        elif kind == "column":
            name, _, dtype = value.partition(" ")
            columns.append(dg.TableColumn(name=name.strip(), type=dtype.strip()))
        else:
            description.append(value)
    body = "\n".join(line for line in text.splitlines() if not line.strip().startswith("--"))
    deps = tuple(sorted({(s.lower(), t.lower()) for s, t in _REF.findall(body)} - {(schema, path.stem)}))
    try:
        declared = polars_schema(dg.TableSchema(columns=columns))
    except ValueError as exc:
        raise ValueError(f"{path.name}: -- column: {exc}") from None
    return SqlModel(path, schema, path.stem, body.strip().rstrip(";"), params, deps, " ".join(description), declared)


def run_sql_model(conn, model: SqlModel) -> int:
    """Replace ``schema.name`` with the model's result in one transaction; returns the row count. A result
    whose columns differ from the declared ones (``model.columns``, when any) is rolled back."""
    conn.execute("BEGIN TRANSACTION")
    try:
        conn.execute(f'CREATE SCHEMA IF NOT EXISTS "{model.schema}"')
        conn.execute(f'CREATE OR REPLACE TABLE "{model.schema}"."{model.name}" AS {model.sql}', model.params or None)
        if model.columns:
            stored = [r[0] for r in conn.execute(f'DESCRIBE "{model.schema}"."{model.name}"').fetchall()]
            if stored != list(model.columns):
                raise ValueError(
                    f"{model.schema}/{model.name}: the query returns columns {stored}, the SQL file declares "
                    f"{list(model.columns)}"
                )
        conn.execute("COMMIT")
    except Exception:
        conn.execute("ROLLBACK")
        raise
    return conn.execute(f'SELECT count(*) FROM "{model.schema}"."{model.name}"').fetchone()[0]


def _build(model: SqlModel) -> dg.AssetsDefinition:
    @Stage(model.schema, kinds=SQL_KINDS).asset(
        name=model.name,
        deps=[dg.AssetKey(list(d)) for d in model.deps],
        description=model.description or f"SQL model {model.path.relative_to(SQL_ROOT)}",
        metadata={"sql_file": str(model.path.relative_to(SQL_ROOT)), "params": str(model.params)},
        schema=model.columns or None,
        output_required=False,
    )
    def _sql_asset(context: dg.AssetExecutionContext, warehouse: DuckDBResource, settings: SettingsResource):
        # parameters the platform settings also define come from there (one bin count for SQL and library)
        bound = replace(model, params={k: getattr(settings, k, v) for k, v in model.params.items()})
        with warehouse.get_connection() as conn:
            missing = [f"{s}.{t}" for s, t in model.deps if not table_exists(conn, s, t)]
            if missing:  # e.g. no model version registered yet: nothing to compute, not an error
                context.log.info(f"{model.schema}.{model.name} skipped: upstream table(s) {missing} do not exist yet")
                return
            rows = run_sql_model(conn, bound)
        yield dg.MaterializeResult(
            metadata={
                "rows": rows,
                "params": str(bound.params),
                "sql": dg.MetadataValue.md(f"```sql\n{model.sql}\n```"),
            }
        )

    return _sql_asset


def build_sql_assets(root: Path = SQL_ROOT) -> list[dg.AssetsDefinition]:
    return [_build(parse_sql_model(p)) for p in sorted(root.glob("*/*.sql"))]
