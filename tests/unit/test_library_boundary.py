"""The domain library never imports the orchestrator (a layering rule): checked on the source, statically."""

import ast
from pathlib import Path

import noisycal_platform

FORBIDDEN = (
    "dagster",
    "dagster_duckdb",
    "dagster_duckdb_polars",
    "assets",
    "resources",
    "orchestration",
    "definitions",
)


def _imports(path: Path) -> set[str]:
    tree = ast.parse(path.read_text(encoding="utf-8"))
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            found.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            found.add(node.module.split(".")[0])
    return found


def test_library_never_imports_the_shell():
    root = Path(noisycal_platform.__file__).parent
    offenders = {
        str(p.relative_to(root)): sorted(_imports(p) & set(FORBIDDEN))
        for p in root.rglob("*.py")
        if _imports(p) & set(FORBIDDEN)
    }
    assert offenders == {}
