"""Frozen ImageNet EfficientNet-Lite encoders from the offline weight wheels."""

from __future__ import annotations

import hashlib

import numpy as np
import pytest

torch = pytest.importorskip("torch")
pytest.importorskip("efficientnet_lite_pytorch")

from noisycal_platform.cleaning.encoder import embed_frozen, load_pretrained  # noqa: E402
from noisycal_platform.cleaning.encoder.pretrained import ARCHS, dihedral_views, weights_path  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


@pytest.fixture(scope="module")
def lite0():
    return load_pretrained("efficientnet-lite0", device="cpu")


def _textured(seed: int, size: int) -> np.ndarray:
    """Smooth random colour texture, uint8 1×3×size×size (no symmetry)."""
    rng = np.random.default_rng(seed)
    x = torch.from_numpy(rng.random((1, 3, size // 4, size // 4)).astype(np.float32))
    x = torch.nn.functional.interpolate(x, size=(size, size), mode="bilinear", align_corners=False)
    return (x.numpy() * 255).round().astype(np.uint8)


def test_weights_sha256_is_the_files_hash(lite0):
    path = weights_path("efficientnet-lite0")
    assert lite0.weights_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert lite0.image_size == 224


@pytest.mark.parametrize("arch", ["efficientnet-lite1", "efficientnet-lite2"])
def test_larger_lites_load_strictly(arch):
    enc = load_pretrained(arch, image_size=64, device="cpu")
    e = embed_frozen(enc, _textured(0, 64))
    assert e.shape == (1, 1280)
    assert ARCHS[arch][0] in (240, 260)


def test_imagenet_weights_and_preprocessing_classify_a_daisy(lite0):
    """scikit-learn's sample ``flower.jpg`` is a daisy: ImageNet class 985 must be the top-1 logit.

    Fails if the weights are not the ImageNet ones or the (x − 127)/128 preprocessing is wrong (with the
    ImageNet mean/std preprocessing the top-1 is not 985).
    """
    from sklearn.datasets import load_sample_image

    img = np.array(load_sample_image("flower.jpg"))
    x = torch.from_numpy(img).permute(2, 0, 1)[None].float()
    x = torch.nn.functional.interpolate(x, size=(224, 224), mode="bicubic", antialias=True).clamp(0, 255)
    with torch.no_grad():
        logits = lite0.net((x - 127.0) / 128.0)
    assert int(logits.argmax()) == 985


def test_embedding_is_pooled_last_feature_map(lite0):
    x = np.concatenate([_textured(1, 224), _textured(2, 224)])
    e = embed_frozen(lite0, x, batch_size=1)
    with torch.no_grad():
        f = lite0.net.extract_features((torch.from_numpy(x).float() - 127.0) / 128.0)
    ref = f.mean(dim=(2, 3))
    ref = (ref / ref.norm(dim=1, keepdim=True)).numpy()
    np.testing.assert_allclose(e, ref, rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, rtol=1e-6)


def test_d4_views_make_the_embedding_rotation_and_flip_invariant():
    enc = load_pretrained("efficientnet-lite0", image_size=64, device="cpu", views="d4")
    plain = load_pretrained("efficientnet-lite0", image_size=64, device="cpu")
    x = _textured(3, 64)
    variants = np.concatenate([x, np.rot90(x, 1, axes=(2, 3)), np.rot90(x, 2, axes=(2, 3)), x[..., ::-1],
                               np.rot90(x[..., ::-1], 1, axes=(2, 3))]).copy()
    e = embed_frozen(enc, variants)
    # the eight views of each variant are the same eight images: equal up to summation order
    np.testing.assert_allclose(e, np.repeat(e[:1], len(e), axis=0), atol=2e-6)
    p = embed_frozen(plain, variants)
    assert np.abs(p - p[:1]).max() > 1e-3  # without the views it is not invariant


def test_dihedral_views_are_the_eight_distinct_symmetries():
    x = torch.arange(9.0).reshape(1, 1, 3, 3)
    views = dihedral_views(x)
    assert len(views) == 8
    assert len({tuple(v.flatten().tolist()) for v in views}) == 8


def test_bad_arguments():
    with pytest.raises(ValueError, match="arch"):
        load_pretrained("efficientnet-b0")
    with pytest.raises(ValueError, match="views"):
        load_pretrained("efficientnet-lite0", views="d8")
    enc = load_pretrained("efficientnet-lite0", image_size=64, device="cpu")
    with pytest.raises(ValueError, match="uint8"):
        embed_frozen(enc, np.zeros((1, 3, 64, 64), np.float32))


def _finetune_config(**kw):
    from noisycal_platform.cleaning.encoder import DEMO

    base = dict(image_size=64, epochs=1, batch_size=4, warmup_epochs=1, min_lr=0.0, n_local_crops=2,
                local_crop_size=32, out_dim=64, head_hidden_dim=64, head_bottleneck_dim=32, seed=0)
    base.update(kw)
    return DEMO.replace(**base)


def test_finetune_at_zero_learning_rate_keeps_the_imagenet_encoder():
    """One iteration at lr = 0 (the first warm-up step is exactly 0): the teacher is the ImageNet network,
    BatchNorm statistics untouched, so its embedding is the frozen encoder's (up to the EMA's rounding)."""
    from noisycal_platform.cleaning.encoder import embed, pretrained_init, train_encoder

    init = pretrained_init("efficientnet-lite0")
    x = np.concatenate([_textured(s, 64) for s in range(4)])
    enc = train_encoder(x, _finetune_config(), init=init)
    buffers = dict(enc.backbone.net.named_buffers())
    for k, v in init.net.named_buffers():
        assert torch.equal(buffers[k], v), k  # eval-mode BatchNorm never updates its running statistics
    frozen = load_pretrained("efficientnet-lite0", image_size=64, device="cpu")
    np.testing.assert_allclose(embed(enc, x), embed_frozen(frozen, x), rtol=1e-4, atol=1e-5)


def test_finetune_moves_the_teacher_and_round_trips(tmp_path):
    from noisycal_platform.cleaning.encoder import embed, load_encoder, pretrained_init, save_encoder, train_encoder

    init = pretrained_init("efficientnet-lite0")
    x = np.concatenate([_textured(s, 64) for s in range(8)])
    enc = train_encoder(x, _finetune_config(epochs=2, warmup_epochs=0, lr=5e-2, teacher_momentum=0.5), init=init)
    assert all(np.isfinite(enc.history))
    moved = max(float((a - b).detach().abs().max())
                for a, b in zip(enc.backbone.parameters(), init.parameters(), strict=True))
    assert moved > 1e-4
    _, path = save_encoder(enc, tmp_path)
    back = load_encoder(path, device="cpu")
    assert back.dim == 1280
    np.testing.assert_allclose(embed(back, x), embed(enc, x), rtol=1e-6, atol=1e-7)


def test_group_views_average_makes_the_embedding_invariant_to_its_group_only():
    x = _textured(4, 64)
    turns = np.concatenate([np.rot90(x, k, axes=(2, 3)) for k in range(4)]).copy()
    c4 = embed_frozen(load_pretrained("efficientnet-lite0", image_size=64, device="cpu", views="c4"), turns)
    np.testing.assert_allclose(c4, np.repeat(c4[:1], 4, axis=0), atol=2e-6)  # same four images, summed
    c2 = embed_frozen(load_pretrained("efficientnet-lite0", image_size=64, device="cpu", views="c2"), turns)
    np.testing.assert_allclose(c2[2], c2[0], atol=2e-6)  # the half-turn is in C2
    assert np.abs(c2[1] - c2[0]).max() > 1e-3  # a quarter-turn is not


def test_streaming_from_files_equals_the_in_memory_embedding_and_reads_one_batch_at_a_time(tmp_path, monkeypatch):
    """Files decoded batch by batch give the embedding of the decoded array; no decode call sees more than a
    batch, so memory is O(batch) whatever N is."""
    from PIL import Image

    from noisycal_platform.cleaning import images as images_mod

    paths = []
    for a in range(7):
        p = tmp_path / f"im{a}.png"
        Image.fromarray(_textured(10 + a, 48)[0].transpose(1, 2, 0)).save(p)
        paths.append(str(p))
    enc = load_pretrained("efficientnet-lite0", image_size=64, device="cpu")
    whole = embed_frozen(enc, images_mod.load_images(paths, 64), batch_size=3)
    calls: list[int] = []
    real = images_mod.load_images

    def counting(chunk, size):
        calls.append(len(chunk))
        return real(chunk, size)

    monkeypatch.setattr(images_mod, "load_images", counting)
    streamed = embed_frozen(enc, paths, batch_size=3)
    assert calls == [3, 3, 1]
    np.testing.assert_allclose(streamed, whole, rtol=1e-5, atol=1e-6)  # same pixels, same batches
    np.testing.assert_allclose(embed_frozen(enc, paths, batch_size=3, channels_last=False), whole, rtol=1e-4,
                               atol=1e-5)  # the memory layout changes only the summation order
