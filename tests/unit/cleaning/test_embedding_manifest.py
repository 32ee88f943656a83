"""What stays bounded at a million images: ``cleaning/embeddings`` is a manifest of its cache files (one row per
kind, never the vectors) that the rankings open memory-mapped after checking them; on a cluster the row-block
tasks get the file's path, and wider or longer embeddings get more row blocks; DINO trains on a seeded sample of
a large dataset and on every image of a small one, as before."""

import hashlib
import json

import numpy as np
import polars as pl
import pytest

from noisycal_platform.cleaning import embedding_cache, encoder, images
from noisycal_platform.cleaning.embedding_cache import cache_path, train_sample_rows, writing_npy
from noisycal_platform.cleaning.pipeline import rankings as pipeline_rankings
from noisycal_platform.cleaning.pipeline.embeddings import (
    EMBEDDING_KINDS,
    _embedding_frame,
    embedding_manifest,
    embedding_matrix,
    embedding_source,
)
from noisycal_platform.cleaning.pipeline.schemas import EMBEDDINGS_SCHEMA

DATASET = "d" * 64


def _entries(tmp_path, n=90, seed=3):
    """Two cache entries written the way the step writes them; their memory maps and the arrays."""
    rng = np.random.default_rng(seed)
    dino, base = rng.normal(size=(n, 12)).astype(np.float32), rng.normal(size=(n, 20)).astype(np.float32)
    maps = []
    for key, arr in (("dino-x", dino), ("baseline-v1", base)):
        with writing_npy(cache_path(tmp_path, DATASET, key), arr.shape) as out:
            out[:] = arr
        maps.append(np.load(cache_path(tmp_path, DATASET, key), mmap_mode="r"))
    return maps, (dino, base)


def test_the_manifest_names_each_cache_file_and_its_checksum(tmp_path):
    (emb, base), (dino, baseline) = _entries(tmp_path)
    frame = embedding_manifest(DATASET, emb, base)
    assert frame.schema == pl.Schema(EMBEDDINGS_SCHEMA) and frame["embedding_kind"].to_list() == list(EMBEDDING_KINDS)
    for row, want in zip(frame.iter_rows(named=True), (dino, baseline), strict=True):
        data = open(row["cache_file"], "rb").read()
        assert row["sha256"] == hashlib.sha256(data).hexdigest() and row["file_bytes"] == len(data)
        assert (row["n_rows"], row["dim"]) == want.shape and row["dataset_hash"] == DATASET
    assert frame["cache_key"].to_list() == ["dino-x", "baseline-v1"]
    got = embedding_matrix(frame, "dino")
    assert isinstance(got, np.memmap) and not got.flags.writeable
    np.testing.assert_array_equal(got, dino)
    np.testing.assert_array_equal(embedding_matrix(frame, "baseline"), baseline)
    assert embedding_source(frame, "baseline") == str(cache_path(tmp_path, DATASET, "baseline-v1"))


def test_the_manifest_does_not_grow_with_the_images(tmp_path):
    small = embedding_manifest(DATASET, *_entries(tmp_path / "a", n=10)[0])
    large = embedding_manifest(DATASET, *_entries(tmp_path / "b", n=5000)[0])
    assert small.height == large.height == 2
    assert large.estimated_size() < 2 * small.estimated_size()


def test_a_cache_file_removed_or_changed_since_the_step_is_an_error_naming_it(tmp_path):
    (emb, base), _ = _entries(tmp_path)
    frame = embedding_manifest(DATASET, emb, base)
    del emb, base
    path = cache_path(tmp_path, DATASET, "dino-x")
    data = bytearray(path.read_bytes())
    data[-1] ^= 0xFF  # one byte of the last vector: same size, other content
    path.write_bytes(bytes(data))
    with pytest.raises(ValueError, match=r"dino.*dino-x\.npy changed since cleaning/embeddings"):
        embedding_matrix(frame, "dino")
    path.write_bytes(bytes(data[:-4]))
    with pytest.raises(ValueError, match=r"dino-x\.npy has \d+ bytes, the manifest records"):
        embedding_matrix(frame, "dino")
    path.unlink()
    with pytest.raises(ValueError, match=r"dino-x\.npy is missing; materialise cleaning/embeddings again"):
        embedding_source(frame, "dino")
    with pytest.raises(ValueError, match="one manifest row of embedding_kind 'other', got 0"):
        embedding_matrix(frame, "other")


class _PathClient:
    """The client calls of the row-block kernels, run here; records what each task received as embeddings."""

    def __init__(self) -> None:
        self.sources: list[object] = []

    def scatter(self, data, **_):
        return data

    def submit(self, fn, emb, *args, **_):
        self.sources.append(emb)
        return fn(emb, *args)

    def gather(self, futures):
        return list(futures)


def test_on_a_cluster_the_tasks_open_the_cache_file_and_the_tables_equal_the_vector_tables(tmp_path):
    (emb, base), (dino, baseline) = _entries(tmp_path, n=150, seed=8)
    n = dino.shape[0]
    labels = np.random.default_rng(1).integers(0, 3, n)
    images_ = pl.DataFrame({"idx": np.arange(n), "file_name": [f"i{i:03d}.png" for i in range(n)],
                            "label": labels.astype(str)})
    manifest = embedding_manifest(DATASET, emb, base)
    vectors = _embedding_frame(images_, dino, baseline)  # the former table, with the vectors in it
    want = pipeline_rankings.neighbour_rankings(images_, vectors, 200)
    client = _PathClient()
    got = pipeline_rankings.neighbour_rankings(images_, manifest, 200, client=client)
    assert got[0].equals(want[0]) and got[1].equals(want[1])
    per_kind = pipeline_rankings.ROW_BLOCKS * (pipeline_rankings.ROW_BLOCKS + 1) // 2
    assert client.sources == [str(cache_path(tmp_path, DATASET, k)) for k in ("dino-x", "baseline-v1")
                              for _ in range(per_kind)]
    assert pipeline_rankings.rank_irrelevant(images_, manifest).equals(pipeline_rankings.rank_irrelevant(images_,
                                                                                                         vectors))


def test_more_rows_or_wider_vectors_get_more_row_blocks():
    block = pipeline_rankings.BLOCK_BYTES
    assert pipeline_rankings.row_block_count(100_000, 192) == pipeline_rankings.ROW_BLOCKS
    assert pipeline_rankings.row_block_count(1_000_000, 192) == pipeline_rankings.ROW_BLOCKS  # 768 MB: 4 blocks
    rows = 1_000_000 * 832 * 4  # the baseline's 832 float32 columns at a million images: 3.3 GB
    assert pipeline_rankings.row_block_count(1_000_000, 832) == 13 == -(-rows // block)
    assert rows / 13 <= block < rows / 12


def test_the_training_sample_is_every_image_up_to_its_size_and_a_seeded_subset_beyond():
    np.testing.assert_array_equal(train_sample_rows(500, 500, seed=0), np.arange(500))
    rows = train_sample_rows(10_000, 300, seed=4)
    assert rows.size == 300 == np.unique(rows).size and rows.min() >= 0 and rows.max() < 10_000
    assert np.all(np.diff(rows) > 0)  # kept in row order
    np.testing.assert_array_equal(rows, train_sample_rows(10_000, 300, seed=4))
    assert not np.array_equal(rows, train_sample_rows(10_000, 300, seed=5))
    # uniform without replacement: each row is drawn with probability 300/10,000; over 200 seeds the share of the
    # first half of the rows is 1/2 within a few standard errors (sd 0.5/sqrt(60,000) ≈ 0.002)
    share = np.mean([np.mean(train_sample_rows(10_000, 300, seed=s) < 5_000) for s in range(200)])
    assert abs(share - 0.5) < 0.01
    with pytest.raises(ValueError, match="encoder_train_sample: must be an int >= 2, got 1"):
        train_sample_rows(10, 1, seed=0)


class _Config:
    def __init__(self, config_hash: str, seed: int = 0) -> None:
        self.config_hash, self.image_size, self.epochs, self.seed = config_hash, 8, 3, seed


def test_a_large_dataset_trains_on_its_sample_and_a_small_one_on_every_image(tmp_path, monkeypatch):
    decoded, trained = [], []

    def train(pixels, config, progress=None):
        trained.append(len(pixels))
        return f"weights-{len(trained)}"

    def save(model, artifacts):
        data = model.encode()
        path = artifacts / f"{hashlib.sha256(data).hexdigest()}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return hashlib.sha256(data).hexdigest(), path

    def load(paths, size):
        decoded.append(list(paths))
        return np.zeros((len(paths), 3, size, size), np.uint8)

    monkeypatch.setattr(encoder, "train_encoder", train)
    monkeypatch.setattr(encoder, "save_encoder", save)
    monkeypatch.setattr(images, "load_images", load)
    paths, art = [f"img_{i:03d}.png" for i in range(40)], tmp_path / "artifacts"
    whole = embedding_cache.train_or_reuse_encoder(paths, DATASET, _Config("c" * 64), art, train_sample=40)
    assert decoded[-1] == paths and trained == [40] and whole.train_images is None
    entry = json.loads(embedding_cache.encoder_index_path(art, DATASET, "c" * 64).read_text())
    assert set(entry) == {"sha256", "file", "train_seconds", "images_per_second"}  # as before the sample existed
    sampled = embedding_cache.train_or_reuse_encoder(paths, DATASET, _Config("c" * 64), art, train_sample=16)
    want = [paths[i] for i in train_sample_rows(40, 16, seed=0)]
    assert decoded[-1] == want and trained == [40, 16] and sampled.train_images == 16
    assert sampled.sha256 != whole.sha256 and not sampled.reused
    again = embedding_cache.train_or_reuse_encoder(paths, DATASET, _Config("c" * 64), art, train_sample=16)
    assert again.reused and again.train_images == 16 and again.sha256 == sampled.sha256 and trained == [40, 16]
    assert embedding_cache.train_or_reuse_encoder(paths, DATASET, _Config("c" * 64), art, train_sample=40).reused
