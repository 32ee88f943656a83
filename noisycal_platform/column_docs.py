"""What every column of every warehouse table means, for a clinic user: one glossary, read by the Dagster shell
(``resources.warehouse.table_schema``) to describe each declared column in the UI.
"""

from __future__ import annotations

GLOSSARY: dict[str, str] = {}
TABLE_OVERRIDES: dict[str, dict[str, str]] = {}


def describe(table: str, column: str) -> str:
    """The description of ``column`` in ``table`` (``<stage>/<name>``): the table's override when it has one,
    else the glossary's entry; ``""`` when neither knows the column."""
    return TABLE_OVERRIDES.get(table, {}).get(column) or GLOSSARY.get(column, "")
