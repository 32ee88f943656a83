"""Clinic encoder checkpoints from a local file (offline; imports torch).

Accepted layouts, all read without executing code (``torch.load(weights_only=True)`` or safetensors):

* a DINO training checkpoint (Caron et al. 2021, as SelfClean writes it): a dict with ``teacher`` and
  ``student`` state dicts of the MultiCropWrapper, keys ``[module.]backbone.*`` and ``[module.]head.*``;
  the teacher's backbone is used (the network DINO evaluates), the head is not needed for embeddings;
* a plain ``state_dict`` (optionally under ``state_dict`` / ``model``), with or without the prefixes above;
* a ``.safetensors`` file holding such a state dict.

Architectures: ``vit_tiny`` (ViT-tiny/16: 192 wide, 12 blocks, 3 heads, 224 px; Dosovitskiy et al. 2021)
in timm / DINO naming (``blocks.N.attn.qkv``…) or in this package's naming, and the EfficientNet-Lite
networks of :mod:`.pretrained`. Keys are matched strictly: missing or unexpected keys raise a
``ValueError`` that lists them. The file's sha256 is returned so it can be recorded with the results.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import torch
from torch import nn

from noisycal_platform.files import sha256_file

from ._torch import ARCHS, build_efficientnet_lite, fmt_keys, load_state_dict_strict

LAYOUTS = ("auto", "dino", "state_dict", "safetensors")


@dataclass
class LoadedCheckpoint:
    """An encoder built from a clinic file: ``encoder`` works with ``embed`` / ``embed_frozen``."""

    encoder: Any
    arch: str
    layout: str
    sha256: str
    path: str


# timm / DINO ViT naming -> this package's ViT (nn.TransformerEncoder) naming
_VIT_RENAMES = [
    (re.compile(r"^patch_embed\.proj\.(weight|bias)$"), r"patch_embed.\1"),
    (re.compile(r"^blocks\.(\d+)\.norm1\.(weight|bias)$"), r"blocks.layers.\1.norm1.\2"),
    (re.compile(r"^blocks\.(\d+)\.norm2\.(weight|bias)$"), r"blocks.layers.\1.norm2.\2"),
    (re.compile(r"^blocks\.(\d+)\.attn\.qkv\.weight$"), r"blocks.layers.\1.self_attn.in_proj_weight"),
    (re.compile(r"^blocks\.(\d+)\.attn\.qkv\.bias$"), r"blocks.layers.\1.self_attn.in_proj_bias"),
    (re.compile(r"^blocks\.(\d+)\.attn\.proj\.(weight|bias)$"), r"blocks.layers.\1.self_attn.out_proj.\2"),
    (re.compile(r"^blocks\.(\d+)\.mlp\.fc1\.(weight|bias)$"), r"blocks.layers.\1.linear1.\2"),
    (re.compile(r"^blocks\.(\d+)\.mlp\.fc2\.(weight|bias)$"), r"blocks.layers.\1.linear2.\2"),
]


def _strip_prefixes(state: Mapping[str, Any]) -> tuple[dict[str, Any], bool]:
    """Drop ``module.`` (DDP) and ``backbone.`` prefixes and the DINO ``head.*`` entries.

    Returns the backbone state dict and whether the input had the backbone/head layout.
    """
    out: dict[str, Any] = {}
    wrapped = any(k.removeprefix("module.").startswith(("backbone.", "head.")) for k in state)
    for k, v in state.items():
        k2 = k.removeprefix("module.")
        if wrapped:
            if k2.startswith("head."):
                continue  # projection head of self-distillation: not part of the embedding
            k2 = k2.removeprefix("backbone.")
        out[k2] = v
    return out, wrapped


def _to_vit_names(state: dict[str, Any]) -> dict[str, Any]:
    if not any(k.startswith("blocks.") and ".attn." in k for k in state):
        return state
    out = {}
    for k, v in state.items():
        for pat, rep in _VIT_RENAMES:
            if pat.match(k):
                k = pat.sub(rep, k)
                break
        out[k] = v
    return out


def _read(path: Path, layout: str) -> tuple[dict[str, Any], str]:
    """The backbone state dict in the file and the layout it was found in."""
    if layout == "safetensors" or (layout == "auto" and path.suffix == ".safetensors"):
        from safetensors.torch import load_file

        try:
            raw: Any = load_file(str(path), device="cpu")
        except Exception as exc:
            raise ValueError(f"{path}: not a readable safetensors file ({exc})") from exc
        state, _ = _strip_prefixes(raw)
        return state, "safetensors"
    try:
        raw = torch.load(str(path), map_location="cpu", weights_only=True)
    except Exception as exc:
        raise ValueError(f"{path}: cannot be loaded with torch.load(weights_only=True) ({exc})") from exc
    if not isinstance(raw, Mapping):
        raise ValueError(f"{path}: expected a dict, got {type(raw).__name__}")
    if layout in ("auto", "dino") and "teacher" in raw:
        teacher = raw["teacher"]
        if not isinstance(teacher, Mapping):
            raise ValueError(f"{path}: 'teacher' is not a state dict ({type(teacher).__name__})")
        state, _ = _strip_prefixes(teacher)
        return state, "dino"
    if layout == "dino":
        raise ValueError(f"{path}: no 'teacher' entry (keys: {fmt_keys(sorted(map(str, raw)))})")
    for key in ("state_dict", "model"):
        if isinstance(raw.get(key), Mapping):
            raw = raw[key]
            break
    state, _ = _strip_prefixes(raw)
    return state, "state_dict"


def load_checkpoint(path: str | Path, *, arch: str = "vit_tiny", layout: str = "auto", image_size: int = 224,
                    device: str = "auto") -> LoadedCheckpoint:
    """Build ``arch`` from the local checkpoint ``path`` and return it with the file's sha256.

    ``vit_tiny`` gives an ``Encoder`` (use :func:`noisycal_platform.cleaning.encoder.embed`: the
    L2-normalised CLS token); an EfficientNet-Lite arch gives a ``FrozenEncoder`` (use ``embed_frozen``).
    A ViT file in timm / DINO naming gets LayerNorm eps = 1e-6, as timm and DINO build it.
    """
    from .config import PAPER
    from .pretrained import FrozenEncoder

    p = Path(path)
    if layout not in LAYOUTS:
        raise ValueError(f"layout: expected one of {LAYOUTS}, got {layout!r}")
    if arch != "vit_tiny" and arch not in ARCHS:
        raise ValueError(f"arch: expected 'vit_tiny' or one of {sorted(ARCHS)}, got {arch!r}")
    if not p.is_file():
        raise ValueError(f"encoder_checkpoint: file {str(path)!r} does not exist")
    sha = sha256_file(p)
    state, found = _read(p, layout)
    if arch == "vit_tiny":
        from ._dino import Encoder
        from ._vit import build_backbone

        cfg = PAPER.replace(image_size=image_size, device=device)
        net = build_backbone(cfg)
        renamed = _to_vit_names(state)
        if renamed is not state:  # timm / DINO naming: their LayerNorms use eps = 1e-6
            for m in net.modules():
                if isinstance(m, nn.LayerNorm):
                    m.eps = 1e-6
        load_state_dict_strict(net, renamed, source=str(p))
        enc: Any = Encoder(config=cfg, backbone=net.eval())
    else:
        net = build_efficientnet_lite(arch)
        load_state_dict_strict(net, state, source=str(p))
        enc = FrozenEncoder(arch=arch, net=net.eval(), image_size=image_size, weights_sha256=sha, source=str(p),
                            device=device)
    return LoadedCheckpoint(encoder=enc, arch=arch, layout=found, sha256=sha, path=str(p))
