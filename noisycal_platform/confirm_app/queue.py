"""The confirmation queue snapshot the pipeline exports and the web tool reads (both sides of the format here):
``exports/confirmation_queue/<dataset>.parquet`` (one row per candidate, ranking order by ``position``) and
``<dataset>.meta.json`` (dataset_root, stopping_count, p_chance, p_plus, created, queue_version, extending: the
issue types whose ranking is extended as annotators go, so that the end of their queue is not the end of the
candidates).

:func:`write_snapshot` writes both files atomically (Parquet first, so a reader that sees the new meta also finds
its Parquet). A snapshot is parsed once and cached until either file's stat changes; the question page then costs
O(answers of this annotator), never O(dataset size), so a 5,000-image dataset opens at once.
"""

from __future__ import annotations

import hashlib
import io
import json
import threading
from collections.abc import Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path

import polars as pl

from noisycal_platform.contracts import ISSUE_TYPES
from noisycal_platform.files import atomic_write_bytes, atomic_write_text
from noisycal_platform.paths import name_problem

__all__ = [
    "ISSUE_TYPES",
    "Candidate",
    "QueueRegistry",
    "QueueSnapshot",
    "Ranking",
    "pair_key",
    "snapshot_folder",
    "write_snapshot",
]

_COLUMNS = ("dataset", "issue_type", "position", "item_id", "item_id_2", "label")


def pair_key(a: str, b: str | None) -> tuple[str, str | None]:
    return (a, None) if b is None else (min(a, b), max(a, b))


@dataclass(frozen=True)
class Candidate:
    position: int
    item_id: str
    item_id_2: str | None
    label: str | None

    @property
    def key(self) -> tuple[str, str | None]:
        """Identity of the candidate, independent of its rank; a pair is unordered (the pipeline stores
        ``item_id < item_id_2``, the key sorts anyway)."""
        return pair_key(self.item_id, self.item_id_2)


class Ranking(Sequence[Candidate]):
    """One issue type's candidates in ranking order, kept as plain column lists; a ``Candidate`` is built
    only when asked for, so opening a 100k-row snapshot costs a few list copies, not 100k objects."""

    def __init__(self, positions: list[int], item_ids: list[str], item_ids_2: list[str | None],
                 labels: list[str | None]) -> None:
        self._pos, self._a, self._b, self._lab = positions, item_ids, item_ids_2, labels
        self._contiguous = positions == list(range(len(positions)))
        self._index: dict[int, int] | None = None

    def __len__(self) -> int:
        return len(self._pos)

    def __getitem__(self, i: int | slice) -> Candidate | list[Candidate]:  # type: ignore[override]
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        return Candidate(self._pos[i], self._a[i], self._b[i], self._lab[i])

    def index_of(self, position: int) -> int | None:
        """Index of the candidate at ``position`` (None if there is none)."""
        if self._contiguous:
            return position if 0 <= position < len(self._pos) else None
        if self._index is None:
            self._index = {p: i for i, p in enumerate(self._pos)}
        return self._index.get(position)


_EMPTY = Ranking([], [], [], [])


@dataclass(frozen=True)
class QueueSnapshot:
    dataset: str
    dataset_root: Path
    stopping_count: int
    p_chance: float
    p_plus: float
    created: str
    queue_version: str
    by_type: dict[str, Ranking]
    item_ids: frozenset[str] = field(repr=False)
    extending: frozenset[str] = frozenset()

    def candidates(self, issue_type: str) -> Ranking:
        return self.by_type.get(issue_type, _EMPTY)

    def index_of(self, issue_type: str, position: int) -> int | None:
        return self.candidates(issue_type).index_of(position)


def _load(meta_path: Path, parquet_path: Path, dataset: str) -> QueueSnapshot:
    meta = json.loads(meta_path.read_text(encoding="utf-8"))
    if meta.get("dataset") != dataset:
        raise ValueError(f"{meta_path}: 'dataset' is {meta.get('dataset')!r}, expected {dataset!r}")
    root = Path(str(meta["dataset_root"]))
    if not root.is_absolute():
        raise ValueError(f"{meta_path}: dataset_root must be absolute, got {root!s}")
    stopping_count = int(meta["stopping_count"])
    if stopping_count < 0:
        raise ValueError(f"{meta_path}: stopping_count must be >= 0, got {stopping_count}")
    stopping_count = max(stopping_count, 1)  # as cleaning.protocol.session_stop_index: 0 stops after one "no"
    df = pl.read_parquet(parquet_path)
    missing = [c for c in _COLUMNS if c not in df.columns]
    if missing:
        raise ValueError(f"{parquet_path}: missing columns {missing}")
    df = (
        df.select(_COLUMNS)
        .filter(pl.col("dataset") == dataset)
        .with_columns(pl.col("position").cast(pl.Int64),
                      pl.col("item_id", "item_id_2", "label").cast(pl.Utf8))
        .sort("issue_type", "position")
    )
    by_type: dict[str, Ranking] = {}
    for issue_type in ISSUE_TYPES:
        part = df.filter(pl.col("issue_type") == issue_type)
        if part.height:
            by_type[issue_type] = Ranking(part["position"].to_list(), part["item_id"].to_list(),
                                          part["item_id_2"].to_list(), part["label"].to_list())
    items = set(df["item_id"].to_list())
    items.update(df["item_id_2"].drop_nulls().to_list())
    return QueueSnapshot(
        dataset=dataset,
        dataset_root=root,
        stopping_count=stopping_count,
        p_chance=float(meta.get("p_chance", float("nan"))),
        p_plus=float(meta.get("p_plus", float("nan"))),
        created=str(meta.get("created", "")),
        queue_version=str(meta.get("queue_version", "")),
        by_type=by_type,
        item_ids=frozenset(items),
        extending=frozenset(str(t) for t in meta.get("extending", ()) if t in ISSUE_TYPES),
    )


def snapshot_folder(home: str | Path) -> Path:
    """``<home>/exports/confirmation_queue``: where snapshots are written and read."""
    return Path(home) / "exports" / "confirmation_queue"


def write_snapshot(
    folder: str | Path,
    dataset: str,
    queue: pl.DataFrame,
    *,
    dataset_root: str | Path,
    stopping_count: int,
    p_chance: float,
    p_plus: float,
    extending: Sequence[str] = (),
) -> dict[str, object]:
    """Write ``<folder>/<dataset>.parquet`` (``queue``, columns as the reader needs) and ``<dataset>.meta.json``
    atomically; ``queue_version`` = sha256 of the Parquet bytes. Returns the meta written."""
    if not dataset or dataset in (".", "..") or any(c in dataset for c in "/\\\0"):
        raise ValueError(f"dataset: {dataset!r} cannot name a file in {folder}")
    missing = [c for c in _COLUMNS if c not in queue.columns]
    if missing:
        raise ValueError(f"queue: missing columns {missing}")
    buf = io.BytesIO()
    queue.write_parquet(buf)
    data = buf.getvalue()
    meta: dict[str, object] = {
        "dataset": dataset,
        "dataset_root": str(dataset_root),
        "stopping_count": int(stopping_count),
        "p_chance": p_chance,
        "p_plus": p_plus,
        "created": datetime.now(UTC).isoformat(timespec="seconds"),
        "queue_version": hashlib.sha256(data).hexdigest(),
        "extending": sorted(extending),
    }
    folder = Path(folder)
    atomic_write_bytes(folder / f"{dataset}.parquet", data)
    atomic_write_text(folder / f"{dataset}.meta.json", json.dumps(meta, indent=1, sort_keys=True))
    return meta


class QueueRegistry:
    """The datasets that have an exported snapshot, each parsed lazily and cached by file stat."""

    def __init__(self, home: Path) -> None:
        self.folder = snapshot_folder(home)
        self._lock = threading.Lock()
        self._cache: dict[str, tuple[tuple[int, ...], QueueSnapshot]] = {}

    def datasets(self) -> list[str]:
        """Names with both ``<name>.meta.json`` and ``<name>.parquet``, sorted."""
        if not self.folder.is_dir():
            return []
        out = []
        for meta in self.folder.glob("*.meta.json"):
            name = meta.name[: -len(".meta.json")]
            if name_problem(name) is None and (self.folder / f"{name}.parquet").is_file():
                out.append(name)
        return sorted(out)

    def get(self, dataset: str) -> QueueSnapshot | None:
        """The snapshot of ``dataset`` or None when the name is malformed or has no snapshot."""
        if name_problem(dataset) is not None:  # the one name rule (paths.name_problem)
            return None
        meta = self.folder / f"{dataset}.meta.json"
        parquet = self.folder / f"{dataset}.parquet"
        try:
            sm, sp = meta.stat(), parquet.stat()
        except (FileNotFoundError, NotADirectoryError):
            return None
        key = (sm.st_ino, sm.st_size, sm.st_mtime_ns, sp.st_ino, sp.st_size, sp.st_mtime_ns)
        with self._lock:
            hit = self._cache.get(dataset)
            if hit is not None and hit[0] == key:
                return hit[1]
        snap = _load(meta, parquet, dataset)
        with self._lock:
            self._cache[dataset] = (key, snap)
        return snap
