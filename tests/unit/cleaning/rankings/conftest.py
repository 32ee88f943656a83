"""Fixtures for the ranking tests."""

from __future__ import annotations

import pytest


@pytest.fixture
def small_tiles(monkeypatch: pytest.MonkeyPatch) -> None:
    """Shrink every block/tile so that small inputs exercise the multi-tile code paths."""
    from noisycal_platform.cleaning.rankings import _kernels, _mst, label_errors, near_duplicates

    monkeypatch.setattr(near_duplicates, "_TILE", 96)
    monkeypatch.setattr(_mst, "_TILE", 96)
    monkeypatch.setattr(label_errors, "_TILE", 80)
    monkeypatch.setattr(label_errors, "_MICRO_PER_TILE", 8)  # micro-blocks of 10 points
    monkeypatch.setattr(_kernels, "BLOCK_ELEMS", 40_000)
