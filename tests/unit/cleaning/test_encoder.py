"""Tests for the DINO encoder, the non-learned baseline and the embedding cache (Gröger et al. 2023 §3.6)."""

from __future__ import annotations

import io
import json
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

torch = pytest.importorskip("torch")

from noisycal_platform.cleaning.baseline import _area_downsample, baseline_embedding  # noqa: E402
from noisycal_platform.cleaning.embedding_cache import cache_path, cached_embeddings  # noqa: E402
from noisycal_platform.cleaning.encoder import (  # noqa: E402
    DEMO,
    HAM_CPU,
    PAPER,
    EncoderConfig,
    embed,
    load_encoder,
    save_encoder,
    train_encoder,
)
from noisycal_platform.cleaning.encoder._dino import (  # noqa: E402
    cosine_schedule,
    dino_loss,
    koleo_loss,
)
from noisycal_platform.cleaning.encoder._torch import mixed_precision  # noqa: E402
from noisycal_platform.cleaning.encoder._vit import MultiCropNet, ViT  # noqa: E402

TINY = EncoderConfig(image_size=16, patch_size=4, depth=1, heads=2, embed_dim=32, head_hidden_dim=64,
                     head_bottleneck_dim=16, out_dim=64, epochs=3, batch_size=16, lr=5e-3,
                     warmup_epochs=0, warmup_teacher_temp_epochs=0, n_local_crops=2, local_crop_size=8,
                     teacher_momentum=0.9, seed=0, device="cpu", num_threads=1)


def _images(n: int = 48, size: int = 16, seed: int = 0) -> torch.Tensor:
    """Blobs of a few colours on noise: enough structure for the loss to move."""
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 60, (n, 3, size, size))
    yy, xx = np.mgrid[0:size, 0:size]
    for i in range(n):
        cy, cx, r = (*rng.integers(3, size - 3, 2).tolist(), int(rng.integers(2, 5)))
        mask = (yy - cy) ** 2 + (xx - cx) ** 2 <= r * r
        x[i][:, mask] = np.array([[200], [60], [30]]) if i % 2 else np.array([[30], [90], [220]])
    return torch.from_numpy(x.astype(np.uint8))


def test_presets_match_the_seed_and_validate() -> None:
    assert (PAPER.image_size, PAPER.patch_size, PAPER.embed_dim, PAPER.depth, PAPER.heads, PAPER.epochs) == (
        224, 16, 192, 12, 3, 500)  # Gröger et al. 2023 §3.6: ViT-tiny/16, 224 px, dim 192, 500 epochs
    assert DEMO.embed_dim == HAM_CPU.embed_dim == 192
    assert PAPER.config_hash == EncoderConfig().config_hash
    assert PAPER.replace(device="cuda", num_threads=3).config_hash == PAPER.config_hash
    assert PAPER.replace(epochs=499).config_hash != PAPER.config_hash
    assert EncoderConfig.from_dict(json.loads(json.dumps(DEMO.to_dict()))) == DEMO
    with pytest.raises(ValueError, match="patch_size"):
        EncoderConfig(image_size=30, patch_size=16)
    with pytest.raises(ValueError, match="heads"):
        EncoderConfig(embed_dim=190, heads=3)
    with pytest.raises(ValueError, match="device"):
        EncoderConfig(device="tpu")
    with pytest.raises(ValueError, match="unknown keys"):
        EncoderConfig.from_dict({"nope": 1})


def test_vit_and_multicrop_shapes() -> None:
    torch.manual_seed(0)
    vit = ViT(image_size=16, patch_size=4, embed_dim=32, depth=2, heads=2)
    assert vit(torch.randn(5, 3, 16, 16)).shape == (5, 32)
    assert vit(torch.randn(5, 3, 8, 8)).shape == (5, 32)  # interpolated positions for local crops
    assert vit.pos_embed.shape == (1, 1 + 16, 32)
    net = MultiCropNet(TINY)
    crops = [torch.randn(4, 3, 16, 16)] * 2 + [torch.randn(4, 3, 8, 8)] * 2
    out = net(crops)
    assert out.shape == (16, TINY.out_dim)
    # weight-normalised last layer on an L2-normalised bottleneck: every logit is a cosine, |logit| <= 1
    assert float(out.detach().abs().max()) <= 1 + 1e-5


def test_dino_loss_matches_hand_computation() -> None:
    rng = np.random.default_rng(1)
    b, k, n_crops = 3, 5, 4
    s = rng.normal(size=(n_crops * b, k))
    t = rng.normal(size=(2 * b, k))
    c = rng.normal(size=(1, k))
    tt, ts = 0.04, 0.1

    def softmax(z: np.ndarray) -> np.ndarray:
        e = np.exp(z - z.max(1, keepdims=True))
        return e / e.sum(1, keepdims=True)

    terms = []
    for iq in range(2):
        q = softmax((t[iq * b:(iq + 1) * b] - c) / tt)
        for v in range(n_crops):
            if v != iq:
                logp = np.log(softmax(s[v * b:(v + 1) * b] / ts))
                terms.append(np.mean(np.sum(-q * logp, axis=1)))
    got = dino_loss(torch.tensor(s), torch.tensor(t), torch.tensor(c), tt, ts, n_crops)
    assert float(got) == pytest.approx(float(np.mean(terms)), rel=1e-10)
    assert len(terms) == 2 * n_crops - 2


def test_koleo_loss_closed_form() -> None:
    # four unit vectors at 90°: every nearest neighbour is at distance √2 -> −log √2; scale-free
    sq = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]], dtype=torch.float64)
    assert float(koleo_loss(3.0 * sq)) == pytest.approx(-0.5 * np.log(2.0), rel=1e-7)  # eps = 1e-8 in the log
    # a hexagon's nearest neighbours are at 60° -> chord 2 sin(30°) = 1 -> loss 0; unequal spacing
    # (points at 0°, 10°, 180°): nearest chords 2 sin 5°, 2 sin 5°, 2 sin 85°
    ang = torch.arange(6, dtype=torch.float64) * np.pi / 3
    assert float(koleo_loss(torch.stack([ang.cos(), ang.sin()], 1))) == pytest.approx(0.0, abs=1e-7)
    deg = torch.tensor([0.0, 10.0, 180.0], dtype=torch.float64) * np.pi / 180
    want = -np.mean(np.log([2 * np.sin(np.radians(5)), 2 * np.sin(np.radians(5)), 2 * np.sin(np.radians(85))]))
    assert float(koleo_loss(torch.stack([deg.cos(), deg.sin()], 1))) == pytest.approx(want, rel=1e-7)


def test_koleo_term_spreads_the_embedding() -> None:
    """The KoLeo weight changes training and increases the teacher embedding's nearest-neighbour spread."""
    x = _images(48)
    cfg = TINY.replace(epochs=4)
    plain, spread = train_encoder(x, cfg), train_encoder(x, cfg.replace(koleo_weight=1.0))

    def mean_nn_distance(e: np.ndarray) -> float:
        d = 1.0 - e @ e.T
        np.fill_diagonal(d, np.inf)
        return float(d.min(1).mean())

    assert mean_nn_distance(embed(spread, x)) > mean_nn_distance(embed(plain, x))
    assert cfg.replace(koleo_weight=0.1).config_hash != cfg.config_hash
    with pytest.raises(ValueError, match="koleo_weight"):
        EncoderConfig(koleo_weight=-0.1)


def test_cosine_schedule_closed_form() -> None:
    s = cosine_schedule(1.0, 0.0, epochs=4, iters_per_epoch=5, warmup_epochs=1, start_warmup=0.2)
    assert s.shape == (20,)
    np.testing.assert_allclose(s[:5], np.linspace(0.2, 1.0, 5, endpoint=False))
    np.testing.assert_allclose(s[5:], 0.5 * (1 + np.cos(np.pi * np.arange(15) / 15)))
    assert s[5] == 1.0 and s[-1] > 0.0


def test_training_decreases_loss_and_is_deterministic() -> None:
    x = _images(32)
    state = torch.random.get_rng_state()
    enc1 = train_encoder(x, TINY)
    assert torch.equal(torch.random.get_rng_state(), state)  # global RNG untouched
    assert len(enc1.history) == TINY.epochs
    assert enc1.history[-1] < enc1.history[0]
    enc2 = train_encoder(x, TINY)
    sd1, sd2 = enc1.backbone.state_dict(), enc2.backbone.state_dict()
    assert all(torch.equal(sd1[k], sd2[k]) for k in sd1)
    e1, e2 = embed(enc1, x), embed(enc2, x)
    np.testing.assert_array_equal(e1, e2)
    enc3 = train_encoder(x, TINY.replace(seed=1, epochs=1))
    assert not np.array_equal(embed(enc3, x), e1)


def test_training_changes_teacher_from_init() -> None:
    x = _images(32)
    one = train_encoder(x, TINY.replace(epochs=1))
    torch.manual_seed(TINY.seed)
    init = MultiCropNet(TINY).backbone  # the same initial weights train_encoder draws first
    diffs = [float((one.backbone.state_dict()[k] - v).abs().max()) for k, v in init.state_dict().items()]
    assert max(diffs) > 0  # EMA moved the teacher


def test_embed_float32_unit_norm_and_resizes() -> None:
    x = _images(10, size=24)  # resized to image_size=16 inside
    enc = train_encoder(_images(32), TINY.replace(epochs=1))
    e = embed(enc, x, batch_size=3)
    assert e.dtype == np.float32 and e.shape == (10, TINY.embed_dim)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(e[:3], embed(enc, x[:3]))  # batching does not change rows
    with pytest.raises(ValueError, match="images"):
        embed(enc, x.float())


def test_mixed_precision_autocasts_on_cuda_only() -> None:
    """Training and embedding autocast to bfloat16 (the frozen CNN: float16) on a CUDA device and run plain float32
    elsewhere, so the CPU numbers are those of the float32 network. (The CUDA side is checked here by the context
    chosen only where there is no GPU: autocast then disables itself with a warning.)"""
    import contextlib
    import warnings

    assert isinstance(mixed_precision(torch.device("cpu")), contextlib.nullcontext)
    with warnings.catch_warnings():
        warnings.filterwarnings("ignore", "CUDA is not available", UserWarning)
        ctx = mixed_precision(torch.device("cuda"))
        half = mixed_precision(torch.device("cuda:0"), torch.float16)
    assert isinstance(ctx, torch.autocast) and ctx.device == "cuda" and ctx.fast_dtype == torch.bfloat16
    assert half.fast_dtype == torch.float16


def test_save_load_round_trip_weights_only(tmp_path: Path) -> None:
    x = _images(32)
    enc = train_encoder(x, TINY.replace(epochs=1))
    sha, path = save_encoder(enc, tmp_path / "artifacts")
    assert path == tmp_path / "artifacts" / f"{sha}.pt"
    import hashlib

    assert hashlib.sha256(path.read_bytes()).hexdigest() == sha
    assert save_encoder(enc, tmp_path / "artifacts") == (sha, path)  # content-addressed, deterministic bytes
    loaded = load_encoder(path)
    assert loaded.config == enc.config and loaded.history == pytest.approx(enc.history)
    np.testing.assert_array_equal(embed(loaded, x), embed(enc, x))
    # the payload is loadable by torch's safe unpickler on its own
    payload = torch.load(path, weights_only=True)
    assert set(payload) == {"format", "config", "history", "state_dict"}
    # tampered bytes: sha256 mismatch is refused
    bad = tmp_path / "artifacts" / ("0" * 64 + ".pt")
    bad.write_bytes(path.read_bytes())
    with pytest.raises(ValueError, match="sha256"):
        load_encoder(bad)
    # a file carrying an arbitrary pickled object is refused by weights_only=True
    evil = tmp_path / "evil.pt"
    buf = io.BytesIO()
    torch.save({"format": 1, "config": "{}", "history": [], "state_dict": {}, "x": _Evil()}, buf)
    evil.write_bytes(buf.getvalue())
    with pytest.raises(Exception, match=r"(?i)weights_only|unpickl|global"):
        load_encoder(evil)


class _Evil:
    pass


def test_cache_hit_miss_and_corrupt(tmp_path: Path) -> None:
    calls = []

    def compute() -> np.ndarray:
        calls.append(1)
        return np.arange(12, dtype=np.float64).reshape(4, 3)

    a, hit = cached_embeddings(tmp_path, "d" * 64, "c" * 64, compute, n_rows=4)
    assert not hit and a.dtype == np.float32 and len(calls) == 1
    b, hit = cached_embeddings(tmp_path, "d" * 64, "c" * 64, compute, n_rows=4)
    assert hit and len(calls) == 1
    np.testing.assert_array_equal(a, b)
    _, hit = cached_embeddings(tmp_path, "d" * 64, "e" * 64, compute)  # other config -> miss
    assert not hit and len(calls) == 2
    cache_path(tmp_path, "d" * 64, "c" * 64).write_bytes(b"garbage")
    _, hit = cached_embeddings(tmp_path, "d" * 64, "c" * 64, compute, n_rows=4)
    assert not hit and len(calls) == 3
    assert not list(tmp_path.glob(".*tmp"))  # no temp files left behind
    with pytest.raises(ValueError, match="dataset_hash"):
        cache_path(tmp_path, "../x", "c")


def test_baseline_embedding_properties() -> None:
    rng = np.random.default_rng(0)
    x = rng.integers(0, 256, (6, 3, 32, 32), dtype=np.uint8)
    x[1] = x[0]
    e = baseline_embedding(x, thumb_size=8, bins=4)
    assert e.dtype == np.float32 and e.shape == (6, 3 * 64 + 64)
    np.testing.assert_allclose(np.linalg.norm(e, axis=1), 1.0, atol=1e-6)
    np.testing.assert_array_equal(e[0], e[1])
    # area downsampling equals a block mean when the size divides (independent reshape computation)
    blocks = x.astype(float).reshape(6, 3, 8, 4, 8, 4).mean(axis=(3, 5))
    np.testing.assert_allclose(_area_downsample(x, 8), blocks)
    # the thumbnail block's cosine is the Pearson correlation of the thumbnails
    t = baseline_embedding(torch.from_numpy(x), thumb_size=8)[:, : 3 * 64] * np.sqrt(2)
    corr = np.corrcoef(blocks[2].ravel(), blocks[3].ravel())[0, 1]
    cos = float(t[2] @ t[3]) / (np.linalg.norm(t[2]) * np.linalg.norm(t[3]))
    assert cos == pytest.approx(corr, abs=1e-5)
    single = baseline_embedding(np.full((1, 3, 8, 8), 7, np.uint8), thumb_size=4)
    assert np.linalg.norm(single) == pytest.approx(1.0)
    with pytest.raises(ValueError, match="thumb_size"):
        baseline_embedding(x, thumb_size=64)


@pytest.mark.parametrize(("h", "w", "t"), [(64, 64, 16), (61, 50, 7), (33, 17, 17), (5, 9, 1)])
def test_area_downsample_equals_each_cells_mean_bit_for_bit(h, w, t) -> None:
    """Cells with edges at floor(i·H/t), uneven when t does not divide the side: each value is the float64 mean of
    the cell's pixels (exact integer sum / count), so the comparison is exact."""
    x = np.random.default_rng(h * w + t).integers(0, 256, (3, 3, h, w), dtype=np.uint8)
    ye, xe = (np.arange(t + 1) * h) // t, (np.arange(t + 1) * w) // t
    ref = np.empty((3, 3, t, t))
    for a in range(t):
        for b in range(t):
            ref[:, :, a, b] = x[:, :, ye[a]:ye[a + 1], xe[b]:xe[b + 1]].astype(np.float64).mean(axis=(2, 3))
    np.testing.assert_array_equal(_area_downsample(x, t), ref)


def test_packages_do_not_import_torch() -> None:
    code = ("import sys; import noisycal_platform.cleaning.encoder, noisycal_platform.cleaning.images, "
            "noisycal_platform.cleaning.baseline, noisycal_platform.cleaning.embedding_cache, "
            "noisycal_platform.cleaning.demo_data; assert 'torch' not in sys.modules, 'torch imported'")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=Path(__file__).resolve().parents[3])
