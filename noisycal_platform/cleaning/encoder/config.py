"""Encoder configuration and presets (no torch import here; Gröger et al. 2023 §3.6, DINO Caron et al. 2021)."""

from __future__ import annotations

import dataclasses
import hashlib
import json
from dataclasses import dataclass, field
from typing import Any

#: symmetry groups a frozen CNN embedding can be averaged over (``pretrained.group_views``): identity, the
#: half-turn, the four quarter-turns, the eight flips and quarter-turns
VIEWS = ("none", "c2", "c4", "d4")
#: native input size of the frozen ImageNet EfficientNet-Lite architectures (``pretrained.ARCHS``)
NATIVE_SIZE: dict[str, int] = {"efficientnet-lite0": 224, "efficientnet-lite1": 240, "efficientnet-lite2": 260}
#: input size of the cleaning stage's real-data embedding per architecture. Lite0: 112 px, chosen on HAM10000's
#: tuning half (benchmarks/bench_ham10000_tune.py, "Input size", 2026-12-07) with SIFT at half size, F 96, k 5: the
#: smallest of 160/144/128/112 px whose recall@501 of the half's same-lesion pairs (0.2987 against 0.2999 at 160 px)
#: stays within 0.005, whose audited count holds (10 of 12) and whose label-error ranking finds planted flips as
#: well (AUROC 0.949 against 0.952; 144 and 128 px fell below: 0.941, 0.932); the embedding (decode + forward
#: pass) took 0.56× the CPU seconds of 160 px. Before, with k = 10 and full-size SIFT, 160 px had matched 224 px
#: and 128 px had lost 4 points (benchmarks/bench_ham10000.py). Lite1/2: their native size (not measured).
#: ``load_pretrained`` without ``image_size`` always uses the native size.
REAL_DATA_SIZE: dict[str, int] = {**NATIVE_SIZE, "efficientnet-lite0": 112}

# Fields that select hardware / threading only; they are left out of config_hash.
_NON_SEMANTIC = ("device", "num_threads")


@dataclass(frozen=True)
class EncoderConfig:
    """ViT + DINO self-distillation hyper-parameters.

    Defaults follow the SelfClean recipe (anchors §1.2): AdamW, lr = ``lr`` × batch/256 with linear
    warm-up then cosine to ``min_lr``; weight decay cosine 0.04→0.4; teacher EMA momentum cosine
    ``teacher_momentum``→1; teacher temperature 0.04, student 0.1, centre momentum 0.9; 2 global crops
    (scale 0.7–1) + ``n_local_crops`` local crops (scale 0.05–0.4); L2-normalised backbone output before
    the head; last head layer frozen for the first epoch; gradient clipping 3.0.
    ``koleo_weight``: weight of DINOv2's KoLeo term on the student's global-crop CLS tokens (0 = off, the
    paper's DINO); it keeps small-budget runs from collapsing onto class-level clusters (see DEMO).
    ``device``: "auto" (cuda when present, else cpu), "cpu", "cuda", "cuda:N".
    """

    image_size: int = 224
    patch_size: int = 16
    depth: int = 12
    heads: int = 3
    embed_dim: int = 192
    mlp_ratio: float = 4.0
    head_hidden_dim: int = 2048
    head_bottleneck_dim: int = 256
    out_dim: int = 4096
    epochs: int = 500
    batch_size: int = 64
    lr: float = 5e-4
    min_lr: float = 1e-6
    warmup_epochs: int = 10
    weight_decay: float = 0.04
    weight_decay_end: float = 0.4
    global_crop_scale: tuple[float, float] = (0.7, 1.0)
    n_local_crops: int = 12
    local_crop_size: int = 96
    local_crop_scale: tuple[float, float] = (0.05, 0.4)
    rotation_p: float = 0.5
    teacher_momentum: float = 0.996
    teacher_temp: float = 0.04
    warmup_teacher_temp: float = 0.04
    warmup_teacher_temp_epochs: int = 30
    student_temp: float = 0.1
    center_momentum: float = 0.9
    clip_grad: float = 3.0
    koleo_weight: float = 0.0
    freeze_last_layer_epochs: int = 1
    l2_norm_before_head: bool = True
    seed: int = 0
    device: str = "auto"
    num_threads: int | None = field(default=None)

    def __post_init__(self) -> None:
        pos_int = ("image_size", "patch_size", "depth", "heads", "embed_dim", "head_hidden_dim",
                   "head_bottleneck_dim", "out_dim", "epochs", "batch_size", "local_crop_size")
        for name in pos_int:
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 1:
                raise ValueError(f"{name}: must be a positive int, got {v!r}")
        for name in ("n_local_crops", "warmup_epochs", "warmup_teacher_temp_epochs",
                     "freeze_last_layer_epochs", "seed"):
            v = getattr(self, name)
            if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                raise ValueError(f"{name}: must be an int >= 0, got {v!r}")
        if self.image_size % self.patch_size:
            raise ValueError(
                f"image_size: {self.image_size} is not a multiple of patch_size {self.patch_size}")
        if self.n_local_crops and self.local_crop_size % self.patch_size:
            raise ValueError(
                f"local_crop_size: {self.local_crop_size} is not a multiple of patch_size {self.patch_size}")
        if self.embed_dim % self.heads:
            raise ValueError(f"heads: embed_dim {self.embed_dim} is not divisible by heads={self.heads}")
        if self.batch_size < 2:
            raise ValueError(f"batch_size: DINO centring needs >= 2, got {self.batch_size}")
        for name in ("lr", "teacher_temp", "warmup_teacher_temp", "student_temp", "mlp_ratio"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}: must be > 0, got {getattr(self, name)!r}")
        for name in ("min_lr", "weight_decay", "weight_decay_end", "clip_grad", "koleo_weight"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name}: must be >= 0, got {getattr(self, name)!r}")
        for name in ("teacher_momentum", "center_momentum", "rotation_p"):
            if not 0 <= getattr(self, name) <= 1:
                raise ValueError(f"{name}: must be in [0, 1], got {getattr(self, name)!r}")
        for name in ("global_crop_scale", "local_crop_scale"):
            lo, hi = getattr(self, name)
            if not 0 < lo <= hi <= 1:
                raise ValueError(f"{name}: need 0 < lo <= hi <= 1, got {(lo, hi)!r}")
        if not (self.device == "auto" or self.device == "cpu" or self.device.startswith("cuda")):
            raise ValueError(f"device: expected 'auto', 'cpu' or 'cuda[:N]', got {self.device!r}")
        if self.num_threads is not None and self.num_threads < 1:
            raise ValueError(f"num_threads: must be >= 1 or None, got {self.num_threads!r}")

    def to_dict(self) -> dict[str, Any]:
        d = dataclasses.asdict(self)
        for k in ("global_crop_scale", "local_crop_scale"):
            d[k] = list(d[k])
        return d

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> EncoderConfig:
        known = {f.name for f in dataclasses.fields(cls)}
        unknown = set(d) - known
        if unknown:
            raise ValueError(f"config: unknown keys {sorted(unknown)}")
        d = dict(d)
        for k in ("global_crop_scale", "local_crop_scale"):
            if k in d:
                d[k] = tuple(d[k])
        return cls(**d)

    def replace(self, **changes: Any) -> EncoderConfig:
        return dataclasses.replace(self, **changes)

    @property
    def config_hash(self) -> str:
        """sha256 of the canonical JSON of all fields except ``device`` and ``num_threads``."""
        d = {k: v for k, v in self.to_dict().items() if k not in _NON_SEMANTIC}
        return hashlib.sha256(json.dumps(d, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


#: The paper's configuration (Gröger et al. 2023 §3.6): ViT-tiny, 16×16 patches, 224 px, 500 epochs, random init.
PAPER = EncoderConfig()

#: Small CPU preset for the digits demo (~1,500 images of 32 px; about a minute on 2 cores).
#: Measured with benchmarks/bench_dino_demo.py (AUROC on the 55 injected near-duplicate pairs; the
#: non-learned baseline scores 0.763): without the KoLeo term every budget we tried (depth 2–4, 1–60
#: epochs, lr, temperatures, out_dim 256–8192, BatchNorm head, weak augmentations) collapsed to
#: uniform or class-level outputs (0.57–0.69); with koleo_weight 0.3 it reaches 0.800 (seeds 1, 2:
#: 0.781, 0.790) in 6 epochs. Depth 2 beats depth 4 at this budget (0.772); 180° rotation is off
#: because a digit's orientation is part of its identity (with it: 0.772).
DEMO = EncoderConfig(
    image_size=32, patch_size=8, depth=2, heads=3, embed_dim=192,
    head_hidden_dim=512, head_bottleneck_dim=128, out_dim=1024,
    epochs=6, batch_size=128, lr=2e-3, warmup_epochs=1, warmup_teacher_temp_epochs=0,
    n_local_crops=2, local_crop_size=16, teacher_momentum=0.99, rotation_p=0.0, koleo_weight=0.3,
    # one intra-op thread: on the shared 2-core box two OpenMP threads spin against other jobs and ran
    # ~14x slower (05:20 UTC: 11.8 s vs 0.84 s wall per step); set None to use torch's default.
    num_threads=1,
)

#: CPU preset for HAM10000 (10,015 images): the DEMO network (32 px, 4×4 patches of 8 px, depth 2,
#: KoLeo) with SelfClean's random rotation back on (skin images have no canonical orientation),
#: 15 epochs; sized to train in under an hour on 2 cores.
HAM_CPU = DEMO.replace(epochs=15, rotation_p=0.5)

PRESETS: dict[str, EncoderConfig] = {"paper": PAPER, "demo": DEMO, "ham_cpu": HAM_CPU}
