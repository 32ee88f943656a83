"""Demo inputs: deterministic bytes, schemas, later batch and model version."""

from __future__ import annotations

import polars as pl

from noisycal_platform.calibration.demo_data import (
    DEMO_CHANNELS,
    write_demo_annotation_batch,
    write_demo_calibration_inputs,
    write_demo_model_version,
)


def _tree(root):
    return {p.relative_to(root).as_posix(): p.read_bytes() for p in sorted(root.rglob("*")) if p.is_file()}


def test_deterministic_bit_for_bit(tmp_path):
    for d in ("a", "b"):
        write_demo_calibration_inputs(tmp_path / d, seed=3)
        write_demo_model_version(tmp_path / d, "v2", seed=3)
        write_demo_annotation_batch(tmp_path / d, "batch_003", seed=3)
    assert _tree(tmp_path / "a") == _tree(tmp_path / "b")


def test_layout_and_contents(tmp_path):
    out = write_demo_calibration_inputs(tmp_path)
    assert [p.name for p in out["annotations"]] == ["batch_001.csv", "batch_002.csv"]
    ann = pl.concat([pl.read_csv(p) for p in out["annotations"]])
    assert ann.columns == ["item_id", "annotator_id", "label", "timestamp"]
    assert set(ann["annotator_id"]) == set(DEMO_CHANNELS)
    assert set(ann["label"]) <= {0, 1}
    assert not ann.select("item_id", "annotator_id").is_duplicated().any()
    pred = pl.read_csv(out["predictions"][0])
    assert pred.columns == ["item_id", "score"] and pred.height == 341
    assert pred["score"].min() >= 0 and pred["score"].max() <= 1
    ref = pl.read_csv(out["references"][0])
    assert set(ref["item_id"]) == set(pred["item_id"]) and set(ref["label"]) == {0, 1}
    later = pl.read_csv(write_demo_annotation_batch(tmp_path, "batch_003"))
    both = pl.concat([ann, later])
    assert later.height > 0 and not both.select("item_id", "annotator_id").is_duplicated().any()
    assert both.height == 341 * 3
    v2 = pl.read_csv(write_demo_model_version(tmp_path, "v2"))
    assert v2["item_id"].to_list() == pred["item_id"].to_list()
    assert (v2["score"] - pred["score"]).abs().max() > 0.05
