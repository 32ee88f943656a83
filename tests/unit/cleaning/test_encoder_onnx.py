"""The frozen EfficientNet-Lite through ONNX Runtime equals the eager PyTorch embedding (float32 rounding)."""

from __future__ import annotations

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("efficientnet_lite_pytorch")
pytest.importorskip("onnxruntime")
pytest.importorskip("onnx")

from noisycal_platform.cleaning.encoder import embed_frozen, load_pretrained  # noqa: E402
from noisycal_platform.cleaning.encoder.onnx_runtime import embed_onnx, onnx_model_path  # noqa: E402
from noisycal_platform.cleaning.encoder.real_data import embed_for_cleaning, resolve_backend  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


def _images(n: int, size: int, seed: int = 0) -> np.ndarray:
    """Smooth random colour textures, uint8 n×3×size×size."""
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.random((n, 3, size // 4, size // 4)).astype(np.float32))
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return (x.numpy() * 255).round().astype(np.uint8)


@pytest.fixture(scope="module")
def artifacts(tmp_path_factory):
    return tmp_path_factory.mktemp("artifacts")


@pytest.mark.parametrize("views", ["none", "c2"])
def test_onnx_rows_equal_the_torch_rows(artifacts, views):
    enc = load_pretrained("efficientnet-lite0", image_size=64, device="cpu", views=views)
    x = _images(5, 64)
    ref = embed_frozen(enc, x, batch_size=2)
    got = embed_onnx(enc, x, artifacts, batch_size=3)
    assert got.shape == (5, 1280) and got.dtype == np.float32
    np.testing.assert_allclose(np.linalg.norm(got, axis=1), 1.0, rtol=1e-6)
    np.testing.assert_allclose(got, ref, rtol=1e-4, atol=1e-6)


def test_export_is_cached_and_reused(artifacts):
    enc = load_pretrained("efficientnet-lite0", image_size=64, device="cpu")
    embed_onnx(enc, _images(1, 64), artifacts)
    path = onnx_model_path(enc, artifacts)
    assert path.is_file() and path.parent == artifacts / "onnx"
    assert enc.weights_sha256[:16] in path.name and "64px" in path.name
    before = path.stat().st_mtime_ns
    embed_onnx(enc, _images(2, 64, seed=1), artifacts)
    assert path.stat().st_mtime_ns == before  # not exported again
    assert not [p for p in path.parent.iterdir() if p.name.endswith(".tmp")]


def test_files_stream_to_the_rows_of_the_decoded_array(tmp_path, artifacts):
    from PIL import Image

    from noisycal_platform.cleaning.images import load_images

    x = _images(7, 48, seed=2)
    paths = []
    for i, im in enumerate(x):
        p = tmp_path / f"im{i}.png"
        Image.fromarray(im.transpose(1, 2, 0)).save(p)
        paths.append(str(p))
    enc = load_pretrained("efficientnet-lite0", image_size=64, device="cpu")
    from_files = embed_onnx(enc, paths, artifacts, batch_size=3)
    from_array = embed_onnx(enc, load_images(paths, 64).numpy(), artifacts, batch_size=7)
    np.testing.assert_allclose(from_files, from_array, rtol=1e-5, atol=1e-7)
    emb, meta = embed_for_cleaning(paths, image_size=64, device="cpu", artifacts=artifacts)
    assert meta["backend"] == "onnxruntime"
    np.testing.assert_allclose(emb, from_files, rtol=1e-5, atol=1e-7)
    ref, meta_t = embed_for_cleaning(paths, image_size=64, device="cpu", backend="torch")
    assert meta_t["backend"] == "torch"
    np.testing.assert_allclose(emb, ref, rtol=1e-4, atol=1e-6)


def test_backend_choice():
    assert resolve_backend("auto", "cpu", "/x") == "onnxruntime"
    assert resolve_backend("auto", "cpu", None) == "torch"
    assert resolve_backend("torch", "cpu", "/x") == "torch"
    with pytest.raises(ValueError, match="artifacts"):
        resolve_backend("onnxruntime", "cpu", None)
    with pytest.raises(ValueError, match="backend"):
        resolve_backend("tvm", "cpu", "/x")


def _png_files(tmp_path, x: np.ndarray) -> list[str]:
    from PIL import Image

    paths = []
    for i, im in enumerate(x):
        p = tmp_path / f"im{i:03d}.png"
        Image.fromarray(im.transpose(1, 2, 0)).save(p)
        paths.append(str(p))
    return paths


def test_several_sizes_from_one_decode_equal_one_pass_per_size(tmp_path):
    from noisycal_platform.cleaning.images import iter_image_batches, iter_image_batches_sizes

    rng = np.random.default_rng(4)
    paths = _png_files(tmp_path, rng.integers(0, 256, size=(9, 3, 30, 41), dtype=np.uint8))
    got = list(iter_image_batches_sizes(paths, (64, 16, 30), 4))
    assert [b[0].shape[0] for b in got] == [4, 4, 1]
    for k, size in enumerate((64, 16, 30)):
        for mine, ref in zip((b[k] for b in got), iter_image_batches(paths, size, 4), strict=True):
            np.testing.assert_array_equal(mine, ref)


def test_the_embedding_step_decodes_once_and_equals_the_separate_passes(tmp_path, artifacts):
    """With ONNX Runtime the frozen encoder's rows and the baseline's come from one decode per file: the rows
    equal the encoder's on the decoded files and the baseline of the images decoded at 64 px, bit for bit."""
    import json

    import polars as pl

    from noisycal_platform.cleaning.baseline import baseline_embedding
    from noisycal_platform.cleaning.images import load_images
    from noisycal_platform.cleaning.pipeline.embeddings import (
        BASELINE_IMAGE_SIZE,
        _frozen_encoder_row,
        embedding_matrices,
    )

    paths = _png_files(tmp_path, _images(11, 48, seed=5))
    images = pl.DataFrame({"idx": list(range(11)), "path": paths, "dataset_hash": ["h"] * 11})
    row = _frozen_encoder_row("efficientnet-lite0", "", "none", image_size=64)
    assert json.loads(row["config_json"])["image_size"] == 64
    emb, base, hit = embedding_matrices(images, row, tmp_path / "cache", device="cpu", artifacts=artifacts)
    assert not hit and str(emb.filename).endswith("-ort.npy")
    enc = load_pretrained("efficientnet-lite0", image_size=64, device="cpu")
    np.testing.assert_array_equal(emb, embed_onnx(enc, paths, artifacts, batch_size=64))
    np.testing.assert_array_equal(base, baseline_embedding(load_images(paths, BASELINE_IMAGE_SIZE)))
    ref = embed_frozen(enc, paths, batch_size=4)
    np.testing.assert_allclose(emb, ref, rtol=1e-4, atol=1e-6)  # the torch rows, to float32 rounding
    emb2, _, hit2 = embedding_matrices(images, row, tmp_path / "cache", device="cpu", artifacts=artifacts)
    assert hit2 and np.array_equal(emb2, emb)


def test_sessions_do_not_spin_and_give_the_spinning_rows_bit_for_bit(artifacts):
    """The cleaning stage's session lets idle intra-op threads sleep (``SPINNING``); that is a scheduling choice
    only: on two threads its rows equal those of a session that spins, bit for bit."""
    import onnxruntime as ort

    from noisycal_platform.cleaning.encoder.onnx_runtime import SPINNING, onnx_session

    enc = load_pretrained("efficientnet-lite0", image_size=64, device="cpu")
    session = onnx_session(enc, artifacts, num_threads=2)
    opts = session.get_session_options()
    assert SPINNING == "0" and opts.get_session_config_entry("session.intra_op.allow_spinning") == "0"
    assert opts.intra_op_num_threads == 2
    spin = ort.SessionOptions()
    spin.intra_op_num_threads = 2
    spin.add_session_config_entry("session.intra_op.allow_spinning", "1")
    spinning = ort.InferenceSession(str(onnx_model_path(enc, artifacts)), spin, providers=["CPUExecutionProvider"])
    x = _images(6, 64, seed=7)
    got = session.run(None, {"pixels": x})[0]
    np.testing.assert_array_equal(got, spinning.run(None, {"pixels": x})[0])


def test_batches_run_side_by_side_give_the_rows_of_one_session_run(artifacts):
    """``embed_onnx_batches`` runs several batches at once (one intra-op thread each): every row equals the row of
    the whole array run at once on a two-thread session, whatever the thread count and batch size (bit for bit on
    the AMD AVX2 box it was measured on; float32 rounding allowed, since other CPUs' kernels may block the work
    differently by batch size)."""
    from noisycal_platform.cleaning.encoder.onnx_runtime import embed_onnx_batches, onnx_session

    enc = load_pretrained("efficientnet-lite0", image_size=64, device="cpu")
    x = _images(11, 64, seed=5)
    v = onnx_session(enc, artifacts, num_threads=2).run(None, {"pixels": x})[0].astype(np.float32)
    want = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)
    for threads, batch in ((1, 11), (3, 2), (2, 4)):
        out = np.full((11, want.shape[1]), np.nan, np.float32)
        embed_onnx_batches(enc, (x[s:s + batch] for s in range(0, 11, batch)), artifacts, out, num_threads=threads)
        np.testing.assert_allclose(out, want, rtol=1e-5, atol=1e-6)
    with pytest.raises(ValueError, match="more than the 11 rows"):
        embed_onnx_batches(enc, iter([x, x[:1]]), artifacts, np.empty((11, want.shape[1]), np.float32))
