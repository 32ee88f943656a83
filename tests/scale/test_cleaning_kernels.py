"""The cleaning tables computed on a Dask cluster (row-block rankings, sharded embeddings) equal the
single-process tables: pair for pair and score for score for the rankings (every distance is the same float64
function of the same two rows in every task, ``row_blocks`` docstring), to 1e-5 for the embeddings (per-image
inference; only the batch shapes, hence the float rounding, differ)."""

import numpy as np
import polars as pl
import pytest

from noisycal_platform.cleaning.encoder import EncoderConfig, embed, save_encoder
from noisycal_platform.cleaning.encoder._dino import Encoder
from noisycal_platform.cleaning.encoder._vit import build_backbone
from noisycal_platform.cleaning.pipeline import embeddings as pipeline_embeddings
from noisycal_platform.cleaning.pipeline import rankings as pipeline_rankings
from noisycal_platform.cleaning.pipeline.embeddings import EMBEDDING_KINDS, _embedding_frame, embedding_matrix
from noisycal_platform.cleaning.pipeline.protocol_tables import image_files
from noisycal_platform.cleaning.rankings import rank_label_errors, rank_near_duplicates
from resources.executor import kernel_client
from resources.settings import SettingsResource

distributed = pytest.importorskip("distributed")


class _InlineClient:
    """The ``distributed.Client`` calls the kernels use, run here; counts the submitted tasks."""

    def __init__(self) -> None:
        self.submitted = 0

    def scatter(self, data, **_):
        return data

    def submit(self, fn, *args, **_):
        self.submitted += 1
        return fn(*args)

    def gather(self, futures):
        return list(futures)


def _tables(n=240, d=16, seed=5):
    """An ``images`` table and an ``EMBEDDINGS_SCHEMA`` table with duplicates and a one-member class."""
    rng = np.random.default_rng(seed)
    dino, base = rng.normal(size=(n, d)), rng.normal(size=(n, d + 4))
    dino[7] = dino[n - 3]  # an exact duplicate across row blocks
    dino[n - 60 : n - 50] = dino[30] + 1e-4 * rng.normal(size=(10, d))  # a tight cluster spanning blocks
    labels = rng.integers(0, 4, size=n)
    labels[99] = 8
    images = pl.DataFrame({"idx": np.arange(n)[::-1].copy(), "file_name": [f"img_{i:04d}.png" for i in range(n)],
                           "label": labels.astype(str)})
    ordered = images.sort("idx")
    return images, _embedding_frame(ordered, dino.astype(np.float32), base.astype(np.float32))


def test_the_chooser_runs_row_block_tasks_only_with_a_client():
    images, emb = _tables(n=120)
    x, labels = embedding_matrix(emb, "dino"), image_files(images)["label"].to_numpy()
    inline = _InlineClient()
    got, want = pipeline_rankings.near_duplicate_pairs(x, 200, inline), rank_near_duplicates(x, 200)
    blocks = pipeline_rankings.ROW_BLOCKS
    assert inline.submitted == blocks * (blocks + 1) // 2  # B_a × B_b, a <= b
    np.testing.assert_array_equal(got.pairs, want.pairs)
    np.testing.assert_array_equal(got.scores, want.scores)
    got, want = pipeline_rankings.label_error_ranking(x, labels, inline), rank_label_errors(x, labels)
    assert inline.submitted == 2 * pipeline_rankings.ROW_BLOCKS * (pipeline_rankings.ROW_BLOCKS + 1) // 2
    np.testing.assert_array_equal(got.order, want.order)
    np.testing.assert_array_equal(got.scores, want.scores)
    pairs, errors = pipeline_rankings.near_duplicates_and_label_errors(x, 200, labels, inline)  # one pass for both
    assert inline.submitted == 3 * pipeline_rankings.ROW_BLOCKS * (pipeline_rankings.ROW_BLOCKS + 1) // 2
    np.testing.assert_array_equal(errors.order, want.order)
    np.testing.assert_array_equal(errors.scores, want.scores)
    want = rank_near_duplicates(x, 200)
    np.testing.assert_array_equal(pairs.pairs, want.pairs)
    np.testing.assert_array_equal(pairs.scores, want.scores)


def test_both_neighbour_rankings_share_one_pass_of_row_block_tasks():
    images, emb = _tables(n=120)
    per_pass = pipeline_rankings.ROW_BLOCKS * (pipeline_rankings.ROW_BLOCKS + 1) // 2
    want = pipeline_rankings.rank_near_duplicates(images, emb, 300), pipeline_rankings.rank_label_errors(images, emb)
    inline = _InlineClient()
    pairs, errors = pipeline_rankings.neighbour_rankings(images, emb, 300, client=inline)
    assert inline.submitted == len(EMBEDDING_KINDS) * per_pass  # one pass per kind, not one per ranking
    assert pairs.equals(want[0]) and errors.equals(want[1])
    assert pipeline_rankings.neighbour_rankings(images, emb, 300)[0].equals(want[0])  # and in this process, no client
    inline = _InlineClient()
    pairs, errors = pipeline_rankings.neighbour_rankings(images, emb, 300, label_errors=False, client=inline)
    assert errors is None and pairs.equals(want[0]) and inline.submitted == len(EMBEDDING_KINDS) * per_pass
    pairs, errors = pipeline_rankings.neighbour_rankings(images, emb, 300, near_duplicates=False)
    assert pairs is None and errors.equals(want[1])


def _on_worker(executor: str) -> str:
    with kernel_client(SettingsResource(executor=executor)) as client:
        return type(client).__name__


def test_kernel_client_only_with_the_dask_executor():
    for executor in ("in_process", "multiprocess", "dask"):  # outside a worker and no scheduler: none
        with kernel_client(SettingsResource(executor=executor)) as client:
            assert client is None
    with distributed.Client(n_workers=1, threads_per_worker=1, processes=False, dashboard_address=None) as c:
        assert c.submit(_on_worker, "dask", pure=False).result() == "Client"
        assert c.submit(_on_worker, "in_process", pure=False).result() == "NoneType"


def test_cleaning_tables_on_a_local_cluster_equal_the_single_process_tables(tmp_path):
    import torch

    images, emb = _tables()
    torch.manual_seed(0)
    config = EncoderConfig(image_size=32, patch_size=8, depth=1, heads=2, embed_dim=32, num_threads=1)
    enc = Encoder(config=config, backbone=build_backbone(config).eval())
    sha, path = save_encoder(enc, tmp_path / "artifacts")
    pixels = np.random.default_rng(1).integers(0, 256, size=(90, 3, 32, 32), dtype=np.uint8)
    with distributed.Client(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as client:
        pairs, errors = pipeline_rankings.neighbour_rankings(images, emb, 500, client=client)
        kernels_sharded = pipeline_embeddings.SHARD_ROWS
        pipeline_embeddings.SHARD_ROWS = 25  # four shards of 90 images
        try:
            vectors = pipeline_embeddings.dino_embeddings(path, sha, pixels, tmp_path / "cache", device="cpu",
                                                          client=client)
        finally:
            pipeline_embeddings.SHARD_ROWS = kernels_sharded
    assert pairs.equals(pipeline_rankings.rank_near_duplicates(images, emb, 500))
    assert errors.equals(pipeline_rankings.rank_label_errors(images, emb))
    assert pairs.height == 2 * 500 and errors.height == 2 * images.height
    np.testing.assert_allclose(vectors, embed(enc, pixels), rtol=0, atol=1e-5)
    assert not list((tmp_path / "cache").iterdir())  # the shard file lived in a removed temporary folder
