"""Confirmation answer records for the cleaning tests (the field set of Gröger et al. 2023 §3.3's answer log)."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

START = datetime(2026, 1, 1, tzinfo=UTC)


def stamp(seconds: int, start: datetime = START) -> str:
    """ISO-8601 UTC timestamp ``seconds`` after ``start``: answers given one second apart."""
    return (start + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%SZ")


def answer_record(
    answer_id: str,
    annotator_id: str,
    item_id: str,
    answer: str,
    position: int,
    timestamp: str,
    *,
    role: str = "expert",
    dataset: str = "d",
    issue_type: str = "irrelevant",
    item_id_2: str | None = None,
    undoes: str | None = None,
) -> dict:
    """One answer record as the confirmation tool writes it."""
    return dict(
        answer_id=answer_id,
        dataset=dataset,
        issue_type=issue_type,
        item_id=item_id,
        item_id_2=item_id_2,
        annotator_id=annotator_id,
        role=role,
        answer=answer,
        undoes=undoes,
        position=position,
        timestamp=timestamp,
    )
