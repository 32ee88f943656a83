"""Simulated confirmation raters for the demo (simulated experts and lay raters, Gröger et al. 2023 §3.3-3.4).

Each rater walks every ranking of the queue snapshot in ``position`` order, answers "yes" with
probability ``sensitivity`` when the candidate is a true (injected) issue and with 1 − ``specificity``
otherwise, and stops after ``n_stop`` consecutive "no" (Gröger et al. 2023 §3.3). With probability ``undo_rate``
an answer is first given wrongly, then undone and answered again, so the undo path of the pipeline is
exercised while the effective answers stay those of the rater model. Output: answer records in the
exact JSON-line format of ``contracts.CONFIRMATION_FIELDS``. Deterministic given ``seed`` (ids, answers, timestamps).
"""

from __future__ import annotations

import uuid
import zlib
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

import numpy as np
import polars as pl

from noisycal_platform.cleaning.protocol import session_stop_index, stopping_count
from noisycal_platform.contracts import ANSWER_ROLES, CONFIRMATION_FIELDS, ISSUE_TYPES, confirmation_problem

__all__ = ["Rater", "Truth", "simulate_answers"]


@dataclass(frozen=True)
class Truth:
    """Injected contamination: irrelevant item_ids, near-duplicate pairs (stored sorted), flipped labels."""

    irrelevant: frozenset[str] = frozenset()
    near_duplicates: frozenset[tuple[str, str]] = frozenset()
    label_errors: frozenset[str] = frozenset()

    @classmethod
    def from_sets(
        cls,
        irrelevant: Iterable[str] = (),
        near_duplicates: Iterable[Sequence[str]] = (),
        label_errors: Iterable[str] = (),
    ) -> Truth:
        pairs = set()
        for p in near_duplicates:
            a, b = p
            if a == b:
                raise ValueError(f"near_duplicates: a pair needs two different items, got {p!r}")
            pairs.add((min(a, b), max(a, b)))
        return cls(frozenset(irrelevant), frozenset(pairs), frozenset(label_errors))

    @classmethod
    def from_demo(cls, demo: Any) -> Truth:
        """From ``demo_data.DemoTruth`` (irrelevant, near_duplicates [[a, b]], flipped[i]["file_name"])."""
        flipped = [f["file_name"] for f in demo.flipped]
        return cls.from_sets(demo.irrelevant, demo.near_duplicates, flipped)

    def flags(self, queue: pl.DataFrame) -> np.ndarray:
        """Boolean truth per queue row (issue_type, item_id, item_id_2)."""
        it = queue["issue_type"].to_list()
        a = queue["item_id"].to_list()
        b = queue["item_id_2"].to_list()
        out = np.zeros(queue.height, bool)
        for k, (t, x, y) in enumerate(zip(it, a, b, strict=True)):
            if t == "irrelevant":
                out[k] = x in self.irrelevant
            elif t == "label_error":
                out[k] = x in self.label_errors
            elif y is not None:
                out[k] = (min(x, y), max(x, y)) in self.near_duplicates
        return out


@dataclass(frozen=True)
class Rater:
    """A simulated rater. ``sensitivity``/``specificity`` are one value or a per-issue-type mapping
    (e.g. lay raters as good as experts on near duplicates but worse on label errors, Gröger et al. 2023 §4.5)."""

    annotator_id: str
    role: str
    sensitivity: float | Mapping[str, float]
    specificity: float | Mapping[str, float]

    def __post_init__(self) -> None:
        if self.role not in ANSWER_ROLES:
            raise ValueError(f"role must be one of {ANSWER_ROLES}, got {self.role!r}")
        for name in ("sensitivity", "specificity"):
            v = getattr(self, name)
            vals = dict(v) if isinstance(v, Mapping) else dict.fromkeys(ISSUE_TYPES, v)
            if set(vals) != set(ISSUE_TYPES) or not all(0 <= x <= 1 for x in vals.values()):
                raise ValueError(
                    f"{name} of rater {self.annotator_id!r} must be in [0, 1] (one value or one per issue "
                    f"type {ISSUE_TYPES}), got {v!r}"
                )

    def rates(self, issue_type: str) -> tuple[float, float]:
        """(sensitivity, specificity) for ``issue_type``."""
        se, sp = self.sensitivity, self.specificity
        return (
            float(se[issue_type]) if isinstance(se, Mapping) else float(se),
            float(sp[issue_type]) if isinstance(sp, Mapping) else float(sp),
        )


def _uid(rng: np.random.Generator) -> str:
    return uuid.UUID(bytes=rng.bytes(16), version=4).hex


def simulate_answers(
    queue: pl.DataFrame,
    truth: Truth,
    raters: Sequence[Rater | tuple[str, str, float, float]],
    *,
    seed: int = 0,
    n_stop: int | None = None,
    undo_rate: float = 0.02,
    start: datetime | None = None,
    seconds_per_answer: float = 6.0,
) -> list[dict]:
    """Answer records of every rater on every (dataset, issue_type) ranking of ``queue``.

    ``n_stop`` defaults to ``stopping_count()`` (58). Records appear per rater in answering order.
    """
    need = {"dataset", "issue_type", "position", "item_id", "item_id_2"}
    if need - set(queue.columns):
        raise ValueError(f"queue: missing columns {sorted(need - set(queue.columns))}")
    if not 0 <= undo_rate < 1:
        raise ValueError(f"undo_rate must be in [0, 1), got {undo_rate}")
    rs = [r if isinstance(r, Rater) else Rater(*r) for r in raters]
    if len({r.annotator_id for r in rs}) != len(rs):
        raise ValueError(f"raters: duplicate annotator_id in {[r.annotator_id for r in rs]}")
    n = stopping_count() if n_stop is None else int(n_stop)
    t0 = start or datetime(2026, 1, 1, 9, 0, tzinfo=UTC)
    q = queue.sort(["dataset", "issue_type", "position"])
    flags = truth.flags(q)
    groups = q.with_row_index("_r").group_by(["dataset", "issue_type"], maintain_order=True).agg(pl.col("_r"))
    items, items2, positions = q["item_id"].to_list(), q["item_id_2"].to_list(), q["position"].to_list()
    records: list[dict] = []
    for r in rs:
        rng = np.random.default_rng([int(seed), zlib.crc32(r.annotator_id.encode())])
        t = t0
        for ds, it, idx in groups.iter_rows():
            if it not in ISSUE_TYPES:
                raise ValueError(f"queue: unknown issue_type {it!r}")
            idx = np.asarray(idx, dtype=np.int64)
            se, sp = r.rates(it)
            p_yes = np.where(flags[idx], se, 1 - sp)
            yes = rng.random(idx.size) < p_yes
            slips = rng.random(idx.size) < undo_rate
            keep = session_stop_index(~yes, n) if idx.size else 0
            for k in range(keep):
                j = int(idx[k])
                base = dict(
                    dataset=ds,
                    issue_type=it,
                    item_id=items[j],
                    item_id_2=items2[j],
                    annotator_id=r.annotator_id,
                    role=r.role,
                    position=int(positions[j]),
                )
                if slips[k]:
                    wrong = _uid(rng)
                    records.append(
                        dict(
                            answer_id=wrong,
                            **base,
                            answer="no" if yes[k] else "yes",
                            undoes=None,
                            timestamp=t.isoformat(),
                        )
                    )
                    t += timedelta(seconds=seconds_per_answer / 3)
                    records.append(
                        dict(
                            answer_id=_uid(rng), **base, answer="undo", undoes=wrong, timestamp=t.isoformat()
                        )
                    )
                    t += timedelta(seconds=seconds_per_answer / 3)
                records.append(
                    dict(
                        answer_id=_uid(rng),
                        **base,
                        answer="yes" if yes[k] else "no",
                        undoes=None,
                        timestamp=t.isoformat(),
                    )
                )
                t += timedelta(seconds=seconds_per_answer)
    out = [{k: rec[k] for k in CONFIRMATION_FIELDS} for rec in records]
    for rec in out:  # the simulated raters write exactly what the confirmation tool may write
        problem = confirmation_problem(rec)
        if problem is not None:
            raise ValueError(f"simulated record {rec['answer_id']} breaks the confirmation contract: {problem}")
    return out
