"""Layout of ``$NOISYCAL_HOME``: the one place that names every folder the platform reads or writes.

Everything the platform computes lives in ``warehouse.duckdb``; everything a person drops in or takes away
lives in plain folders beside it (see README "Where data lives").
"""

from __future__ import annotations

import json
import os
import unicodedata
from dataclasses import dataclass
from pathlib import Path

__all__ = [
    "MAX_NAME_LENGTH",
    "HomeLayout",
    "HomePath",
    "InvalidName",
    "confined",
    "default_home",
    "name_problem",
    "validate_name",
]

HOME_ENV = "NOISYCAL_HOME"
MAX_NAME_LENGTH = 128


class InvalidName(ValueError):
    """A user-given name (dataset, model version, annotator) that cannot name a file inside the home."""


def name_problem(name: object) -> str | None:
    """Why ``name`` cannot be a dataset / model-version / annotator name, or None.

    A name becomes one path component under the home, so it must be a non-empty string of at most
    ``MAX_NAME_LENGTH`` characters, without ``/`` or ``\\``, not ``.``/``..`` nor starting with a dot, without
    control or format characters (Unicode Cc, Cf) and without surrounding blanks. Quotes, semicolons and
    other Unicode are harmless here (no SQL or shell is built from names) and stay allowed.
    """
    if not isinstance(name, str) or not name:
        return "must be a non-empty string"
    if len(name) > MAX_NAME_LENGTH:
        return f"is longer than {MAX_NAME_LENGTH} characters"
    if "/" in name or "\\" in name:
        return "must not contain a path separator ('/' or '\\')"
    if name.startswith("."):
        return "must not start with a dot (no '.', '..' or hidden names)"
    if any(unicodedata.category(c) in ("Cc", "Cf") for c in name):
        return "must not contain control characters"
    if name != name.strip():
        return "must not start or end with blanks"
    return None


def validate_name(name: object, kind: str = "name") -> str:
    """``name`` itself if :func:`name_problem` finds nothing; raises InvalidName (without echoing the name's
    control characters) otherwise. The one check every user-given name passes before it names a path."""
    why = name_problem(name)
    if why:
        shown = "".join(c if c.isprintable() else "?" for c in str(name))[:MAX_NAME_LENGTH]
        raise InvalidName(f"{kind} name {shown!r} refused: it {why}")
    return name  # type: ignore[return-value]


def confined(base: str | Path, name: str, suffix: str = "", kind: str = "name") -> Path:
    """``base / (name + suffix)`` for a validated ``name``, checked to resolve inside ``base``."""
    base = Path(base)
    path = base / (validate_name(name, kind) + suffix)
    if not path.resolve().is_relative_to(base.resolve()):
        raise InvalidName(f"{kind} name refused: it resolves outside {base}")
    return path


def default_home() -> Path:
    """``$NOISYCAL_HOME`` if set, else ``./.noisycal`` (absolute)."""
    return Path(os.environ.get(HOME_ENV, ".noisycal")).expanduser().resolve()


class HomePath:
    """A fixed path below a home folder, ``home / parts``, read as an attribute of an object with a ``home``;
    a folder unless ``file`` (then :meth:`HomeLayout.ensure` creates the folder that holds it)."""

    def __init__(self, *parts: str, file: bool = False) -> None:
        self.parts = parts
        self.file = file
        self.__doc__ = "home / " + " / ".join(parts)

    def __get__(self, obj: object | None, owner: type | None = None) -> Path:
        if obj is None:
            return self  # type: ignore[return-value]  # the descriptor itself, read on the class
        return obj.home.joinpath(*self.parts)  # type: ignore[attr-defined]


@dataclass(frozen=True)
class HomeLayout:
    """Named paths under one home folder. Creating the object touches nothing; call :meth:`ensure`."""

    home: Path

    @classmethod
    def at(cls, home: str | Path | None = None) -> HomeLayout:
        return cls(Path(home).expanduser().resolve() if home is not None else default_home())

    # --- the warehouse and binary artifacts ---
    warehouse = HomePath("warehouse.duckdb", file=True)
    artifacts = HomePath("artifacts")
    cache = HomePath("cache")

    # --- drop folders (inputs that arrive over time) ---
    annotation_inbox = HomePath("inbox", "annotations")
    confirmation_inbox = HomePath("inbox", "confirmations")
    quarantine = HomePath("inbox", "quarantine")
    # accepted annotation batches, stored once under their content hash
    archive = HomePath("archive", "annotations")
    # append-only record of every batch seen: content hash -> accepted/quarantined/duplicate
    ledger = HomePath("ledger", "annotations.jsonl", file=True)

    # --- registries ---
    models = HomePath("models")
    datasets = HomePath("datasets")
    dataset_registry = HomePath("datasets.json", file=True)
    references = HomePath("references", "labels.csv", file=True)
    generations = HomePath("correctness", "generations")
    audit_labels = HomePath("correctness", "audit")

    # --- outputs people take away ---
    exports = HomePath("exports")
    queue_exports = HomePath("exports", "confirmation_queue")
    cleaned_lists = HomePath("exports", "cleaned_file_lists")
    recalibrator_exports = HomePath("exports", "recalibrators")
    reports = HomePath("reports")

    def ensure(self) -> HomeLayout:
        """Create every folder of the layout, and the folder of each file (idempotent)."""
        for named in vars(HomeLayout).values():
            if isinstance(named, HomePath):
                path = self.home.joinpath(*named.parts)
                (path.parent if named.file else path).mkdir(parents=True, exist_ok=True)
        return self

    # --- discovery used by sensors and assets ---
    def model_versions(self) -> list[str]:
        """Folders under ``models/`` holding ``predictions.csv`` or ``predictions.parquet``, sorted by name."""
        if not self.models.is_dir():
            return []
        out = []
        for d in sorted(self.models.iterdir()):
            if name_problem(d.name) is None and d.is_dir() and any(
                (d / f"predictions.{ext}").is_file() for ext in ("csv", "parquet")
            ):
                out.append(d.name)
        return out

    def predictions_file(self, version: str) -> Path:
        folder = confined(self.models, version, kind="model version")
        for ext in ("parquet", "csv"):
            p = folder / f"predictions.{ext}"
            if p.is_file():
                return p
        raise FileNotFoundError(f"model version {version!r} has no predictions.csv|parquet in {self.models / version}")

    def registered_datasets(self) -> dict[str, Path]:
        """Datasets under ``datasets/<name>/`` plus those registered by path in ``datasets.json``.

        Only names that pass :func:`validate_name` are datasets (a hand-edited registry entry such as
        ``../../x`` is ignored here; ``noisycal datasets add`` refuses it up front)."""
        found: dict[str, Path] = {}
        if self.datasets.is_dir():
            for d in sorted(self.datasets.iterdir()):
                if name_problem(d.name) is None and d.is_dir():
                    found[d.name] = d.resolve()
        if self.dataset_registry.is_file():
            for name, path in json.loads(self.dataset_registry.read_text(encoding="utf-8")).items():
                if name_problem(name) is None and isinstance(path, str):
                    found[name] = Path(path).resolve()
        return dict(sorted(found.items()))
