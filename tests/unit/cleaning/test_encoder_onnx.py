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
