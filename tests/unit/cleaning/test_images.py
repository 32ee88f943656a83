"""Tests for noisycal_platform.cleaning.images (bad input: clear errors naming the file)."""

from __future__ import annotations

import hashlib
import os
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from noisycal_platform.cleaning.images import (
    ImageDatasetError,
    dataset_content_hash,
    load_images,
    read_image_dataset,
)


def _png(path: Path, color: tuple[int, int, int], size: tuple[int, int] = (10, 8)) -> bytes:
    path.parent.mkdir(parents=True, exist_ok=True)
    Image.new("RGB", size, color).save(path, format="PNG")
    return path.read_bytes()


def _csv(root: Path, rows: list[tuple[str, str]]) -> None:
    (root / "labels.csv").write_text("file_name,label\n" + "".join(f"{f},{lab}\n" for f, lab in rows))


@pytest.fixture
def folder(tmp_path: Path) -> Path:
    root = tmp_path / "ds"
    _png(root / "a.png", (255, 0, 0))
    _png(root / "sub" / "b.png", (0, 255, 0), size=(6, 4))
    _png(root / "c.png", (0, 0, 255))
    return root


def test_labels_csv_frame_schema_and_hashes(folder: Path) -> None:
    _csv(folder, [("a.png", "x"), ("sub/b.png", "y"), ("c.png", "x")])
    ds = read_image_dataset(folder)
    assert ds.layout == "labels_csv"
    assert ds.frame.columns == ["file_name", "label", "path", "width", "height", "sha256", "file_bytes"]
    assert ds.frame["file_name"].to_list() == ["a.png", "c.png", "sub/b.png"]
    row = ds.frame.row(2, named=True)
    assert (row["width"], row["height"], row["label"]) == (6, 4, "y")
    assert row["sha256"] == hashlib.sha256((folder / "sub" / "b.png").read_bytes()).hexdigest()
    assert row["file_bytes"] == os.path.getsize(folder / "sub" / "b.png")
    assert Path(row["path"]).is_absolute() and Path(row["path"]) == (folder / "sub" / "b.png").resolve()
    assert ds.excluded.height == 0
    assert ds.labels == ["x", "y"]
    # content hash: independent recomputation over sorted lines
    lines = sorted(f"{r['file_name']}\t{r['sha256']}\t{r['label']}\n" for r in ds.frame.iter_rows(named=True))
    assert ds.content_hash == hashlib.sha256("".join(lines).encode()).hexdigest()
    # order independent, label sensitive
    assert dataset_content_hash(ds.frame.reverse()) == ds.content_hash
    assert dataset_content_hash(ds.frame.with_columns(pl.lit("z").alias("label"))) != ds.content_hash


def test_corrupt_and_truncated_images_are_excluded_by_name(folder: Path) -> None:
    (folder / "corrupt.png").write_bytes(b"not an image at all")
    buf = (folder / "a.png").read_bytes()
    Image.new("RGB", (64, 64)).save(folder / "trunc.jpg", format="JPEG")
    data = (folder / "trunc.jpg").read_bytes()
    (folder / "trunc.jpg").write_bytes(data[: len(data) // 2])
    _csv(folder, [("a.png", "x"), ("corrupt.png", "x"), ("trunc.jpg", "y"), ("c.png", "y")])
    ds = read_image_dataset(folder)
    assert ds.frame["file_name"].to_list() == ["a.png", "c.png"]
    ex = {r["file_name"]: r for r in ds.excluded.iter_rows(named=True)}
    assert set(ex) == {"corrupt.png", "trunc.jpg"}
    assert ex["corrupt.png"]["row"] == 2 and "unreadable" in ex["corrupt.png"]["reason"]
    assert ex["trunc.jpg"]["row"] == 3 and "truncated" in ex["trunc.jpg"]["reason"]
    assert buf == (folder / "a.png").read_bytes()
    with pytest.raises(ImageDatasetError, match=r"corrupt\.png.*row 2"):
        read_image_dataset(folder, strict=True)


def test_missing_file_empty_and_unknown_label(folder: Path) -> None:
    _csv(folder, [("a.png", "x"), ("missing.png", "x"), ("c.png", ""), ("sub/b.png", "dog")])
    ds = read_image_dataset(folder, allowed_labels={"x", "y"})
    assert ds.frame["file_name"].to_list() == ["a.png"]
    ex = {r["file_name"]: r for r in ds.excluded.iter_rows(named=True)}
    assert (ex["missing.png"]["row"], ex["missing.png"]["column"]) == (2, "file_name")
    assert "does not exist" in ex["missing.png"]["reason"]
    assert (ex["c.png"]["row"], ex["c.png"]["column"], ex["c.png"]["reason"]) == (3, "label", "empty label")
    assert (ex["sub/b.png"]["row"], ex["sub/b.png"]["column"]) == (4, "label")
    assert "unknown label 'dog'" in ex["sub/b.png"]["reason"]
    with pytest.raises(ImageDatasetError) as err:
        read_image_dataset(folder, allowed_labels={"x", "y"}, strict=True)
    msg = str(err.value)
    assert "missing.png" in msg and "'dog'" in msg and "c.png" in msg


@pytest.mark.parametrize("bad", ["../outside.png", "sub/../../outside.png", "/etc/passwd"])
def test_path_leaving_root_is_fatal_and_named(folder: Path, bad: str) -> None:
    _png(folder.parent / "outside.png", (1, 2, 3))
    _csv(folder, [("a.png", "x"), (bad, "x")])
    with pytest.raises(ImageDatasetError, match=r"row 2 \(line 3\) column file_name=.*leave|absolute"):
        read_image_dataset(folder)


def test_symlink_loop_is_reported_not_crashing(folder: Path) -> None:
    os.symlink(folder / "loop.png", folder / "loop.png")
    _csv(folder, [("a.png", "x"), ("loop.png", "x")])
    with pytest.raises(ImageDatasetError, match=r"row 2 .*loop\.png"):
        read_image_dataset(folder)


def test_symlink_escaping_root_is_fatal(folder: Path) -> None:
    outside = folder.parent / "secret.png"
    _png(outside, (9, 9, 9))
    os.symlink(outside, folder / "link.png")
    os.symlink(folder / "a.png", folder / "inside_link.png")  # stays inside: allowed
    _csv(folder, [("a.png", "x"), ("inside_link.png", "x"), ("link.png", "x")])
    with pytest.raises(ImageDatasetError, match=r"link\.png.*leaves the dataset root"):
        read_image_dataset(folder)
    _csv(folder, [("a.png", "x"), ("inside_link.png", "x")])
    assert len(read_image_dataset(folder)) == 2


def test_duplicates_and_schema_errors(folder: Path) -> None:
    _csv(folder, [("a.png", "x"), ("a.png", "x"), ("c.png", "y")])
    ds = read_image_dataset(folder)
    assert ds.frame.height == 2
    assert ds.excluded.row(0, named=True)["reason"] == "duplicate of row 1"
    _csv(folder, [("a.png", "x"), ("a.png", "y")])
    with pytest.raises(ImageDatasetError, match=r"conflicting|listed again"):
        read_image_dataset(folder)
    (folder / "labels.csv").write_text("name,label\na.png,x\n")
    with pytest.raises(ImageDatasetError, match=r"missing column\(s\) \['file_name'\]"):
        read_image_dataset(folder)
    with pytest.raises(ImageDatasetError, match="does not exist"):
        read_image_dataset(folder / "nope")
    _csv(folder, [("missing.png", "x")])
    with pytest.raises(ImageDatasetError, match="no usable image"):
        read_image_dataset(folder)
    assert issubclass(ImageDatasetError, ValueError)


def test_labels_csv_with_bom_and_crlf(folder: Path) -> None:
    (folder / "labels.csv").write_bytes("\ufefffile_name,label\r\na.png,x\r\nc.png, y \r\n".encode())
    ds = read_image_dataset(folder)
    assert ds.frame.select("file_name", "label").rows() == [("a.png", "x"), ("c.png", "y")]


def test_image_folder_layout(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    _png(root / "cat" / "1.png", (10, 10, 10))
    _png(root / "cat" / "2.jpg", (20, 20, 20))
    _png(root / "dog" / "3.png", (30, 30, 30))
    (root / "dog" / "notes.txt").write_text("ignored")
    (root / "dog" / "bad.png").write_bytes(b"\x89PNG garbage")
    _png(root / "stray.png", (0, 0, 0))  # not under a label folder
    ds = read_image_dataset(root)
    assert ds.layout == "image_folder"
    assert ds.frame.select("file_name", "label").rows() == [
        ("cat/1.png", "cat"), ("cat/2.jpg", "cat"), ("dog/3.png", "dog")]
    assert set(ds.excluded["file_name"].to_list()) == {"dog/bad.png", "stray.png"}
    assert ds.excluded["row"].null_count() == ds.excluded.height


def test_image_folder_symlinked_dir_escaping_root(tmp_path: Path) -> None:
    root = tmp_path / "tree"
    _png(root / "cat" / "1.png", (10, 10, 10))
    _png(tmp_path / "elsewhere" / "x.png", (1, 1, 1))
    os.symlink(tmp_path / "elsewhere", root / "dog")
    with pytest.raises(ImageDatasetError, match=r"dog/x\.png.*leaves the dataset root"):
        read_image_dataset(root)


def test_load_images_shape_dtype_and_pixels(folder: Path) -> None:
    arr = load_images([folder / "a.png", folder / "c.png", folder / "sub" / "b.png"], 5, batch_size=2)
    assert tuple(arr.shape) == (3, 3, 5, 5)
    assert str(arr.dtype) == "torch.uint8"
    a = arr.numpy()
    # uniform images stay uniform under any resampling: independent check on the colours
    np.testing.assert_array_equal(a[0, :, 2, 2], [255, 0, 0])
    np.testing.assert_array_equal(a[1, :, 0, 0], [0, 0, 255])
    np.testing.assert_array_equal(a[2, :, 4, 4], [0, 255, 0])
    with pytest.raises(ValueError, match="size"):
        load_images([folder / "a.png"], 0)
