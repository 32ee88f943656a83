"""Tests for noisycal_platform.cleaning.demo_data (determinism, truth consistent with the files)."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from noisycal_platform.cleaning.demo_data import load_demo_truth, write_demo_cleaning_dataset
from noisycal_platform.cleaning.images import read_image_dataset

SMALL = {"n_digits": 120, "n_irrelevant": 9, "n_duplicate_pairs": 8, "n_duplicate_triples": 2, "n_flipped": 7}


def _tree_hash(root: Path) -> str:
    h = hashlib.sha256()
    for p in sorted(root.rglob("*")):
        if p.is_file() and p.name != "truth.json":  # truth.json records the absolute root
            h.update(p.relative_to(root).as_posix().encode() + b"\0" + p.read_bytes())
    return h.hexdigest()


def test_deterministic_bit_for_bit(tmp_path: Path) -> None:
    t1 = write_demo_cleaning_dataset(tmp_path / "h1", seed=3, **SMALL)
    t2 = write_demo_cleaning_dataset(tmp_path / "h2", seed=3, **SMALL)
    assert _tree_hash(Path(t1.root)) == _tree_hash(Path(t2.root))
    assert t1.near_duplicates == t2.near_duplicates and t1.flipped == t2.flipped
    t3 = write_demo_cleaning_dataset(tmp_path / "h3", seed=4, **SMALL)
    assert _tree_hash(Path(t3.root)) != _tree_hash(Path(t1.root))
    # rewriting in place replaces the folder and gives the same bytes
    t1b = write_demo_cleaning_dataset(tmp_path / "h1", seed=3, **SMALL)
    assert _tree_hash(Path(t1b.root)) == _tree_hash(Path(t2.root))
    assert [p.name for p in (tmp_path / "h1" / "datasets").iterdir()] == ["digits_demo"]


def test_truth_consistent_with_files(tmp_path: Path) -> None:
    truth = write_demo_cleaning_dataset(tmp_path, name="d", seed=1, **SMALL)
    root = Path(truth.root)
    assert root == (tmp_path / "datasets" / "d").resolve()
    assert load_demo_truth(root) == truth
    ds = read_image_dataset(root)
    assert ds.excluded.height == 0
    expected_n = (SMALL["n_digits"] + SMALL["n_irrelevant"] + SMALL["n_duplicate_pairs"]
                  + 2 * SMALL["n_duplicate_triples"])
    assert len(ds) == truth.n_images == expected_n
    names = set(ds.frame["file_name"].to_list())
    labels = dict(zip(ds.frame["file_name"].to_list(), ds.frame["label"].to_list(), strict=True))
    assert set(labels.values()) <= {str(d) for d in range(10)}
    # irrelevant
    assert len(truth.irrelevant) == SMALL["n_irrelevant"] and set(truth.irrelevant) <= names
    # near duplicates: pairs + 3 pairs per triple, each a<b, and pixel-close but not identical
    assert len(truth.near_duplicates) == SMALL["n_duplicate_pairs"] + 3 * SMALL["n_duplicate_triples"]
    for (a, b), kind in zip(truth.near_duplicates, truth.duplicate_kinds, strict=True):
        assert a < b and {a, b} <= names
        assert labels[a] == labels[b]
        xa = np.asarray(Image.open(root / a).convert("L"), dtype=float)
        xb = np.asarray(Image.open(root / b).convert("L"), dtype=float)
        assert kind.split("+")[-1] in {"shift", "rotate", "brightness", "jpeg"}
        assert not np.array_equal(xa, xb)
        assert np.corrcoef(xa.ravel(), xb.ravel())[0, 1] > 0.5, (a, b, kind)
    # flipped labels: the file carries given_label != true_label
    assert len(truth.flipped) == SMALL["n_flipped"]
    for f in truth.flipped:
        assert labels[f["file_name"]] == f["given_label"] != f["true_label"]
    flipped = {f["file_name"] for f in truth.flipped}
    dup_files = {x for p in truth.near_duplicates for x in p}
    assert not (flipped & set(truth.irrelevant)) and not (flipped & dup_files)
    assert not (set(truth.irrelevant) & dup_files)


def test_irrelevant_images_are_not_digits(tmp_path: Path) -> None:
    truth = write_demo_cleaning_dataset(tmp_path, seed=0, **SMALL)
    root = Path(truth.root)
    # digits are grey (R=G=B); photo crops and textures are coloured (independent property of the sources)
    irr = set(truth.irrelevant)
    for p in sorted(root.glob("*.png")):
        x = np.asarray(Image.open(p).convert("RGB"), dtype=int)
        grey = bool((x[..., 0] == x[..., 1]).all() and (x[..., 1] == x[..., 2]).all())
        if p.name in irr:
            assert not grey, p.name
        else:
            assert grey, p.name


def test_default_size_and_bad_args(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="name"):
        write_demo_cleaning_dataset(tmp_path, name="../x")
    with pytest.raises(ValueError, match="n_digits"):
        write_demo_cleaning_dataset(tmp_path, n_digits=5000)
    with pytest.raises(ValueError, match="must not exceed"):
        write_demo_cleaning_dataset(tmp_path, n_digits=20, n_duplicate_pairs=15, n_flipped=10)
