"""The streaming image source: ``raw/images`` is a file list, the embedding step decodes it a batch at a time.

The peers: :func:`load_images` (every image decoded into one array) for the reader, and the in-memory
computations of today (``embed`` and ``baseline_embedding`` of all decoded images) for the embeddings, which the
streamed rows must equal bit for bit (the same forward-pass batches, row-by-row arithmetic). Memory is measured
with ``tracemalloc`` (NumPy reports its allocations to it): the traced peak must not grow with N.
"""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap
import tracemalloc
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from PIL import Image

from noisycal_platform.cleaning.baseline import BaselineStream, baseline_dim, baseline_embedding
from noisycal_platform.cleaning.embedding_cache import cache_path, load_cached, writing_npy
from noisycal_platform.cleaning.images import ImageDatasetError, iter_image_batches, load_images
from noisycal_platform.cleaning.pipeline import embeddings as pipeline_embeddings

SIZE = 32


def _mixed_folder(root: Path, n: int, seed: int = 0) -> list[str]:
    """``n`` images of several sizes and modes (RGB PNG, JPEG, 16-bit grey, palette, RGBA); their paths."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        w, h = int(rng.integers(8, 50)), int(rng.integers(8, 50))
        kind = i % 5
        if kind in (0, 1):  # PNG, JPEG
            im = Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8))
        elif kind == 2:
            im = Image.fromarray(rng.integers(0, 65536, size=(h, w), dtype=np.uint16))
        elif kind == 3:
            im = Image.fromarray(rng.integers(0, 256, size=(h, w, 3), dtype=np.uint8)).convert("P")
        else:
            im = Image.fromarray(rng.integers(0, 256, size=(h, w, 4), dtype=np.uint8), mode="RGBA")
        p = root / f"im_{i:05d}.{'jpg' if kind == 1 else 'png'}"
        im.save(p)
        paths.append(str(p))
    return paths


def _tiny_folder(root: Path, n: int, seed: int = 0) -> list[str]:
    """``n`` random 32×32 RGB PNGs (the size the tiny encoder embeds at); their paths."""
    rng = np.random.default_rng(seed)
    root.mkdir(parents=True, exist_ok=True)
    paths = []
    for i in range(n):
        p = root / f"t_{i:05d}.png"
        Image.fromarray(rng.integers(0, 256, size=(SIZE, SIZE, 3), dtype=np.uint8)).save(p, compress_level=0)
        paths.append(str(p))
    return paths


def _images_table(paths: list[str], dataset_hash: str = "a" * 64) -> pl.DataFrame:
    """The ``raw/images`` columns the embedding step reads (idx, file_name, label, path, dataset_hash)."""
    return pl.DataFrame({
        "idx": np.arange(len(paths), dtype=np.int64),
        "file_name": [Path(p).name for p in paths],
        "label": [str(i % 3) for i in range(len(paths))],
        "path": paths,
        "dataset_hash": [dataset_hash] * len(paths),
    })


@pytest.fixture(scope="module")
def tiny_encoder(tmp_path_factory):
    """A random-init ViT (one block, 32 wide) saved content-addressed, and its ``ENCODER_SCHEMA``-like row."""
    import torch

    from noisycal_platform.cleaning.encoder import EncoderConfig, save_encoder
    from noisycal_platform.cleaning.encoder._dino import Encoder
    from noisycal_platform.cleaning.encoder._vit import build_backbone

    torch.manual_seed(0)
    config = EncoderConfig(image_size=SIZE, patch_size=8, depth=1, heads=2, embed_dim=32, num_threads=1,
                           device="cpu")
    enc = Encoder(config=config, backbone=build_backbone(config).eval())
    sha, path = save_encoder(enc, tmp_path_factory.mktemp("artifacts"))
    row = {"artifact": str(path), "sha256": sha, "config_json": json.dumps(config.to_dict(), sort_keys=True),
           "preset": "tiny"}
    return enc, row


def test_batches_equal_load_images_for_every_batch_size(tmp_path):
    paths = _mixed_folder(tmp_path / "ds", 11)
    want = load_images(paths, 12).numpy()
    for batch, prefetch in ((1, True), (3, True), (4, False), (11, True), (100, False)):
        got = list(iter_image_batches(paths, 12, batch, prefetch=prefetch))
        assert [b.shape[0] for b in got] == [min(batch, 11 - s) for s in range(0, 11, batch)]
        assert all(b.dtype == np.uint8 and b.flags.c_contiguous for b in got)
        np.testing.assert_array_equal(np.concatenate(got), want)
    assert list(iter_image_batches([], 12, 4)) == []


def test_a_uniform_image_decodes_to_its_colour(tmp_path):
    p = tmp_path / "u.png"
    Image.new("RGB", (7, 5), (10, 200, 30)).save(p)  # uniform stays uniform under any resampling
    (batch,) = iter_image_batches([p], 4, 2)
    assert batch.shape == (1, 3, 4, 4)
    np.testing.assert_array_equal(batch[0, :, 1, 2], [10, 200, 30])


def test_bad_arguments_and_a_changed_file_are_named(tmp_path):
    paths = _mixed_folder(tmp_path / "ds", 3)
    with pytest.raises(ValueError, match="size"):
        next(iter_image_batches(paths, 0, 2))
    with pytest.raises(ValueError, match="batch_size"):
        next(iter_image_batches(paths, 8, 0))
    Path(paths[2]).write_bytes(b"not an image any more")
    batches = iter_image_batches(paths, 8, 2)
    assert next(batches).shape[0] == 2
    with pytest.raises(ImageDatasetError, match=r"im_00002\.png: cannot decode image"):
        next(batches)


def test_the_streamed_baseline_equals_the_in_memory_one_bit_for_bit(tmp_path):
    rng = np.random.default_rng(3)
    x = rng.integers(0, 256, size=(1103, 3, 20, 24), dtype=np.uint8)
    x[5] = 77  # a uniform image
    x[9] = x[10]  # an exact duplicate
    want = baseline_embedding(x)
    out = np.full((len(x), baseline_dim()), np.nan, np.float32)
    with BaselineStream(len(x), tmp_path / "scratch", block_rows=250) as stream:
        for s in range(0, len(x), 97):
            stream.add(x[s:s + 97])
        stream.finish(out)
        assert len(list((tmp_path / "scratch").iterdir())) == 1  # the scratch file, in its own folder
    np.testing.assert_array_equal(out, want)
    assert list((tmp_path / "scratch").iterdir()) == []  # removed on close
    with BaselineStream(2, tmp_path) as stream, pytest.raises(ValueError, match="n=2"):
        stream.add(x[:3])
    with BaselineStream(2, tmp_path) as stream, pytest.raises(ValueError, match="1 rows added"):
        stream.add(x[:1])
        stream.finish(np.empty((2, baseline_dim()), np.float32))


def test_embed_batches_equal_embed_with_the_same_batches(tiny_encoder):
    from noisycal_platform.cleaning.encoder import embed, embed_batches

    enc, _ = tiny_encoder
    x = np.random.default_rng(4).integers(0, 256, size=(70, 3, SIZE, SIZE), dtype=np.uint8)
    want = embed(enc, x, batch_size=16)
    out = np.empty((70, enc.dim), np.float32)
    got = embed_batches(enc, (x[s:s + 16] for s in range(0, 70, 16)), out)
    assert got is out
    np.testing.assert_array_equal(got, want)
    with pytest.raises(ValueError, match="60 rows given"):
        embed_batches(enc, (x[s:min(s + 16, 60)] for s in range(0, 60, 16)), out)


def test_the_embedding_step_streams_the_file_list_and_equals_todays_in_memory_rows(tmp_path, tiny_encoder):
    from noisycal_platform.cleaning.encoder import embed

    enc, row = tiny_encoder
    paths = _mixed_folder(tmp_path / "ds", 300, seed=1)
    pixels = load_images(paths, SIZE)  # the old step: every image in one array
    want_dino, want_base = embed(enc, pixels), baseline_embedding(pixels)
    table = _images_table(paths).sample(fraction=1.0, shuffle=True, seed=2)  # rows in any order: idx decides
    emb, base, hit = pipeline_embeddings.embedding_matrices(table, row, tmp_path / "cache", device="cpu")
    assert not hit and isinstance(emb, np.memmap) and isinstance(base, np.memmap)
    np.testing.assert_array_equal(emb, want_dino)
    np.testing.assert_array_equal(base, want_base)
    cached = sorted(p.name for p in (tmp_path / "cache").iterdir())
    assert cached == sorted([cache_path(tmp_path / "cache", "a" * 64, f"dino-{row['sha256'][:32]}").name,
                             cache_path(tmp_path / "cache", "a" * 64, "baseline-v1").name])  # no scratch left
    frame, hit = pipeline_embeddings.embeddings_table(table, row, tmp_path / "cache", device="cpu")
    assert hit
    np.testing.assert_array_equal(pipeline_embeddings.embedding_matrix(frame, "dino"), want_dino)
    np.testing.assert_array_equal(pipeline_embeddings.embedding_matrix(frame, "baseline"), want_base)
    for missing in sorted(cached):  # one entry lost: only that one is computed again, equal as before
        (tmp_path / "cache" / missing).unlink()
        emb, base, hit = pipeline_embeddings.embedding_matrices(table, row, tmp_path / "cache", device="cpu")
        assert hit == missing.endswith("baseline-v1.npy")
        np.testing.assert_array_equal(emb, want_dino)
        np.testing.assert_array_equal(base, want_base)
        assert sorted(p.name for p in (tmp_path / "cache").iterdir()) == cached


def _traced_peak(fn) -> int:
    tracemalloc.start()
    try:
        tracemalloc.reset_peak()
        fn()
        return tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()


def test_the_embedding_steps_memory_follows_the_batch_not_the_number_of_images(tmp_path, tiny_encoder):
    _, row = tiny_encoder
    batch = 16
    paths = _tiny_folder(tmp_path / "ds", 2000, seed=5)
    peaks = {}
    for n in (500, 2000):
        table = _images_table(paths[:n], dataset_hash=f"{n:064d}")
        peaks[n] = _traced_peak(lambda t=table, n=n: pipeline_embeddings.embedding_matrices(
            t, row, tmp_path / f"cache{n}", device="cpu", batch_size=batch))
    image = 3 * SIZE * SIZE  # bytes of one image as uint8; the old step held N of them, and 2.2·N·image as float64
    batch_float64 = batch * 3 * (SIZE + 1) ** 2 * 8  # one batch as float64 (the baseline's summed-area table)
    # what grows with N is the file list (a path string per image, about 200 bytes), not pixels or vectors
    assert (peaks[2000] - peaks[500]) / 1500 < image / 6, peaks
    assert peaks[2000] < 8 * batch_float64, (peaks, 8 * batch_float64)
    assert peaks[2000] < 2000 * image / 2, peaks


def test_a_run_that_fails_mid_way_leaves_no_cache_entry(tmp_path, tiny_encoder):
    _, row = tiny_encoder
    paths = _tiny_folder(tmp_path / "ds", 80, seed=6)
    good = Path(paths[50]).read_bytes()
    Path(paths[50]).write_bytes(good[:40])  # truncated after raw/images read it
    table = _images_table(paths)
    cache = tmp_path / "cache"
    with pytest.raises(ImageDatasetError, match=r"t_00050\.png"):
        pipeline_embeddings.embedding_matrices(table, row, cache, device="cpu", batch_size=16)
    assert list(cache.iterdir()) == []  # neither entry, nor their temporary files, nor the baseline's scratch
    Path(paths[50]).write_bytes(good)
    emb, _, hit = pipeline_embeddings.embedding_matrices(table, row, cache, device="cpu", batch_size=16)
    assert not hit and emb.shape == (80, 32)


def test_a_killed_writer_leaves_only_a_hidden_temporary_file(tmp_path):
    final = tmp_path / "cache" / ("d" * 64 + "__c.npy")
    script = textwrap.dedent(f"""
        import sys, time
        import numpy as np
        from noisycal_platform.cleaning.embedding_cache import writing_npy
        with writing_npy({str(final)!r}, (1000, 8)) as out:
            out[:500] = 1.0
            print("half", flush=True)
            time.sleep(60)
            out[500:] = 1.0
    """)
    proc = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, text=True,
                            cwd=Path(__file__).resolve().parents[3])
    try:
        assert proc.stdout.readline().strip() == "half"
    finally:
        proc.kill()  # SIGKILL: no finally block, no clean-up runs in the writer
        proc.wait(timeout=30)
    assert not final.exists()
    assert load_cached(tmp_path / "cache", "d" * 64, "c") is None  # a later run sees a miss
    (left,) = (tmp_path / "cache").iterdir()
    assert left.name.startswith(f".{final.name}.") and left.name.endswith(".tmp")
    with writing_npy(final, (3, 2)) as out:
        out[:] = 2.0
    np.testing.assert_array_equal(load_cached(tmp_path / "cache", "d" * 64, "c", n_rows=3), np.full((3, 2), 2.0))


def test_shards_get_file_lists_not_pixels_and_equal_the_in_process_rows(tmp_path, tiny_encoder, monkeypatch):
    """The Dask path with a recording client (``submit``/``gather`` run here): every task gets only its shard of
    the file list, and the rows equal the in-process step bit for bit (shards are whole forward batches)."""

    class Recording:
        def __init__(self):
            self.args = []

        def submit(self, fn, *args, **_):
            self.args.append(args)
            return fn(*args)

        def gather(self, futures):
            return list(futures)

        def scatter(self, *_a, **_k):  # pragma: no cover - pixels are never scattered
            raise AssertionError("pixels scattered from the client")

    _, row = tiny_encoder
    paths = _tiny_folder(tmp_path / "ds", 100, seed=7)
    table = _images_table(paths)
    want, want_base, _ = pipeline_embeddings.embedding_matrices(table, row, tmp_path / "here", device="cpu",
                                                                batch_size=16)
    monkeypatch.setattr(pipeline_embeddings, "SHARD_ROWS", 32)
    client = Recording()
    got, got_base, _ = pipeline_embeddings.embedding_matrices(table, row, tmp_path / "dask", device="cpu",
                                                              client=client, batch_size=16)
    assert len(client.args) == 4  # 32 + 32 + 32 + 4 files
    for k, args in enumerate(client.args):
        assert not any(isinstance(a, np.ndarray) for a in args)
        (files,) = [a for a in args if isinstance(a, list)]
        assert files == paths[32 * k:32 * (k + 1)]
    np.testing.assert_array_equal(got, want)
    np.testing.assert_array_equal(got_base, want_base)
