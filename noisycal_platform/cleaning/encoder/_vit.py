"""ViT backbone and DINO head built from torch.nn (imports torch; Gröger et al. 2023 §3.6, Caron et al. 2021)."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import nn

from .config import EncoderConfig

IMAGENET_MEAN = (0.485, 0.456, 0.406)
IMAGENET_STD = (0.229, 0.224, 0.225)


def _trunc_normal_(t: torch.Tensor, std: float = 0.02) -> None:
    nn.init.trunc_normal_(t, std=std, a=-2 * std, b=2 * std)


class ViT(nn.Module):
    """Vision Transformer: conv patch embedding, CLS token, learned positions, pre-norm GELU blocks.

    Input B×3×H×W (ImageNet-normalised floats); output the final-LayerNorm CLS token, B×embed_dim.
    Positions are bicubically interpolated for crops whose size differs from ``image_size`` (DINO).
    """

    def __init__(self, image_size: int, patch_size: int, embed_dim: int, depth: int, heads: int,
                 mlp_ratio: float = 4.0) -> None:
        super().__init__()
        self.image_size = image_size
        self.patch_size = patch_size
        self.grid = image_size // patch_size
        self.patch_embed = nn.Conv2d(3, embed_dim, kernel_size=patch_size, stride=patch_size)
        self.cls_token = nn.Parameter(torch.zeros(1, 1, embed_dim))
        self.pos_embed = nn.Parameter(torch.zeros(1, 1 + self.grid * self.grid, embed_dim))
        layer = nn.TransformerEncoderLayer(
            d_model=embed_dim, nhead=heads, dim_feedforward=int(embed_dim * mlp_ratio), dropout=0.0,
            activation="gelu", batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, num_layers=depth, enable_nested_tensor=False)
        self.norm = nn.LayerNorm(embed_dim)
        _trunc_normal_(self.pos_embed)
        _trunc_normal_(self.cls_token)
        self.apply(self._init)

    @staticmethod
    def _init(m: nn.Module) -> None:
        if isinstance(m, nn.Linear):
            _trunc_normal_(m.weight)
            if m.bias is not None:
                nn.init.zeros_(m.bias)
        elif isinstance(m, nn.MultiheadAttention):
            _trunc_normal_(m.in_proj_weight)
            nn.init.zeros_(m.in_proj_bias)
        elif isinstance(m, nn.LayerNorm):
            nn.init.ones_(m.weight)
            nn.init.zeros_(m.bias)

    def _pos(self, h: int, w: int) -> torch.Tensor:
        if h == self.grid and w == self.grid:
            return self.pos_embed
        cls_pos, patch_pos = self.pos_embed[:, :1], self.pos_embed[:, 1:]
        d = patch_pos.shape[-1]
        grid = patch_pos.reshape(1, self.grid, self.grid, d).permute(0, 3, 1, 2)
        grid = F.interpolate(grid, size=(h, w), mode="bicubic", align_corners=False)
        return torch.cat([cls_pos, grid.permute(0, 2, 3, 1).reshape(1, h * w, d)], dim=1)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = self.patch_embed(x)
        h, w = x.shape[-2:]
        x = x.flatten(2).transpose(1, 2)
        x = torch.cat([self.cls_token.expand(x.shape[0], -1, -1), x], dim=1) + self._pos(h, w)
        x = self.blocks(x)
        return self.norm(x[:, 0])


class DINOHead(nn.Module):
    """3-layer MLP (GELU) → bottleneck → L2-normalise → weight-normalised linear (norm fixed at 1)."""

    def __init__(self, in_dim: int, out_dim: int, hidden_dim: int, bottleneck_dim: int) -> None:
        super().__init__()
        self.mlp = nn.Sequential(
            nn.Linear(in_dim, hidden_dim), nn.GELU(),
            nn.Linear(hidden_dim, hidden_dim), nn.GELU(),
            nn.Linear(hidden_dim, bottleneck_dim))
        for m in self.mlp:
            if isinstance(m, nn.Linear):
                _trunc_normal_(m.weight)
                nn.init.zeros_(m.bias)
        # weight_norm with g ≡ 1 ("norm_last_layer=True") is exactly a row-normalised weight.
        self.last_weight = nn.Parameter(torch.empty(out_dim, bottleneck_dim))
        nn.init.kaiming_uniform_(self.last_weight, a=math.sqrt(5))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = F.normalize(self.mlp(x), dim=-1)
        return x @ F.normalize(self.last_weight, dim=1).t()


class MultiCropNet(nn.Module):
    """Backbone + head over a list of crops; crops of equal size share one backbone pass."""

    def __init__(self, config: EncoderConfig) -> None:
        super().__init__()
        c = config
        self.backbone = ViT(c.image_size, c.patch_size, c.embed_dim, c.depth, c.heads, c.mlp_ratio)
        self.head = DINOHead(c.embed_dim, c.out_dim, c.head_hidden_dim, c.head_bottleneck_dim)
        self.l2_norm = c.l2_norm_before_head

    def forward(self, crops: list[torch.Tensor]) -> torch.Tensor:
        return self.forward_with_features(crops)[0]

    def forward_with_features(self, crops: list[torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
        """Head logits and the backbone CLS tokens of all crops, both in crop order."""
        feats = []
        start = 0
        while start < len(crops):
            end = start
            while end < len(crops) and crops[end].shape[-1] == crops[start].shape[-1]:
                end += 1
            feats.append(self.backbone(torch.cat(crops[start:end])))
            start = end
        f = torch.cat(feats)
        return self.head(F.normalize(f, dim=-1) if self.l2_norm else f), f


def build_backbone(config: EncoderConfig) -> ViT:
    c = config
    return ViT(c.image_size, c.patch_size, c.embed_dim, c.depth, c.heads, c.mlp_ratio)
