"""Embeddings sharded over Dask workers into a memory-mapped cache entry equal a single-process ``embed`` to 1e-5
(per-image inference; only the batch shapes, hence the float rounding, differ)."""

import numpy as np
import pytest

from noisycal_platform.cleaning.embedding_cache import cache_path, load_cached
from noisycal_platform.cleaning.encoder import EncoderConfig, embed, save_encoder
from noisycal_platform.cleaning.encoder._dino import Encoder
from noisycal_platform.cleaning.encoder._vit import build_backbone
from noisycal_platform.cleaning.sharded_embeddings import sharded_embeddings

distributed = pytest.importorskip("distributed")


@pytest.fixture(scope="module")
def encoder(tmp_path_factory):
    import torch

    torch.manual_seed(0)
    config = EncoderConfig(image_size=32, patch_size=8, depth=1, heads=2, embed_dim=32, num_threads=1)
    enc = Encoder(config=config, backbone=build_backbone(config).eval())
    sha, path = save_encoder(enc, tmp_path_factory.mktemp("artifacts"))
    return enc, sha, path


def test_sharded_embeddings_equal_single_process(encoder, tmp_path):
    enc, sha, path = encoder
    images = np.random.default_rng(0).integers(0, 256, size=(150, 3, 32, 32), dtype=np.uint8)
    np.save(tmp_path / "images.npy", images)
    want = embed(enc, images)
    with distributed.Client(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as client:
        out = sharded_embeddings(path, sha, 32, tmp_path / "images.npy", tmp_path / "cache", "d" * 64, "c" * 16,
                                 client=client, shard_rows=40)
    assert out == cache_path(tmp_path / "cache", "d" * 64, "c" * 16)
    got = load_cached(tmp_path / "cache", "d" * 64, "c" * 16, n_rows=150)
    np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
    assert not list((tmp_path / "cache").glob(".*tmp"))  # the temporary file was renamed


def test_a_wrong_weights_hash_writes_no_entry(encoder, tmp_path):
    _, _, path = encoder
    images = np.zeros((4, 3, 32, 32), dtype=np.uint8)
    with pytest.raises(ValueError, match="sha256"):
        sharded_embeddings(path, "0" * 64, 32, images, tmp_path / "cache", "d" * 64, "c" * 16)
    assert list((tmp_path / "cache").iterdir()) == []


def test_shards_of_the_file_list_decode_on_the_workers_and_equal_embed_bit_for_bit(encoder, tmp_path):
    """Each task gets its shard of the file list (never pixels) and decodes it; with shards of whole forward
    batches (shard_rows a multiple of batch_size) the rows equal ``embed`` of every decoded image exactly."""
    from PIL import Image

    from noisycal_platform.cleaning.images import load_images

    enc, sha, path = encoder
    rng = np.random.default_rng(2)
    files = []
    for i in range(150):
        f = tmp_path / "ds" / f"im_{i:03d}.png"
        f.parent.mkdir(exist_ok=True)
        Image.fromarray(rng.integers(0, 256, size=(int(rng.integers(20, 40)), 32, 3), dtype=np.uint8)).save(f)
        files.append(str(f))
    want = embed(enc, load_images(files, 32), batch_size=16)
    with distributed.Client(n_workers=2, threads_per_worker=1, processes=False, dashboard_address=None) as client:
        out = sharded_embeddings(path, sha, 32, files, tmp_path / "cache", "d" * 64, "c" * 16, client=client,
                                 shard_rows=48, batch_size=16)
    got = load_cached(tmp_path / "cache", "d" * 64, "c" * 16, n_rows=150)
    assert out == cache_path(tmp_path / "cache", "d" * 64, "c" * 16)
    np.testing.assert_array_equal(got, want)
    assert [p.name for p in (tmp_path / "cache").iterdir()] == [out.name]
