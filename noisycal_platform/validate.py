"""``noisycal validate``: check one user file against its reader and its Great Expectations contract."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from noisycal_platform import contracts, io

__all__ = ["KINDS", "FileCheck", "validate_file"]

KINDS = ("annotations", "predictions", "references")


@dataclass(frozen=True)
class FileCheck:
    """``ok`` and the one line to show: ``OK ...`` or ``INVALID ...``."""

    ok: bool
    message: str


def validate_file(kind: str, path: str | Path, classes: tuple[str, ...] | None) -> FileCheck:
    """Read ``path`` as ``kind`` (the home's declared ``classes`` for annotations), then run the contract."""
    if kind not in KINDS:
        raise ValueError(f"kind must be one of {KINDS}, got {kind!r}")
    reader = {
        "annotations": lambda f: io.read_annotations(f, classes),
        "predictions": io.read_predictions,
        "references": io.read_reference_labels,
    }[kind]
    try:
        frame = reader(path)
    except io.InputError as exc:
        return FileCheck(False, f"INVALID {exc}")
    contract = contracts.CONTRACTS[{"references": "reference_labels"}.get(kind, kind)]
    if kind == "annotations" and classes:
        contract = contracts.STORED_ANNOTATIONS  # class names: label_text holds them, label 0/1 where it applies
    outcome = contracts.validate_frame(frame, contract)
    if not outcome["success"]:
        return FileCheck(False, f"INVALID {path}: Great Expectations contract failed: {outcome['failed']}")
    return FileCheck(True, f"OK {path}: {frame.height} rows, columns {frame.columns}; "
                           f"contract (Great Expectations): {outcome['evaluated']} expectations passed")
