"""DINO self-distillation training, teacher embedding, save/load (imports torch and kornia).

Gröger et al. 2023 §3.6: a randomly initialised ViT trained with DINO on the dataset itself; the embedding is
the teacher's last-layer CLS token, L2-normalised. Recipe details: Caron et al. 2021 (Alg. 1) and the
SelfClean defaults (anchors §1.2).
"""

from __future__ import annotations

import hashlib
import io
import json
import math
import os
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from torch import nn

from noisycal_platform.files import atomic_write_bytes

from ._torch import as_uint8_images, build_efficientnet_lite, mixed_precision, resolve_device
from ._vit import IMAGENET_MEAN, IMAGENET_STD, DINOHead, MultiCropNet, ViT, build_backbone
from .config import EncoderConfig

FORMAT_VERSION = 1


class PooledCNN(nn.Module):
    """A pretrained EfficientNet-Lite as a DINO backbone: ImageNet-normalised input (the training
    pipeline's) → the network's own preprocessing (x·255 − 127)/128 → spatially averaged last feature map.

    BatchNorm layers stay in eval mode (ImageNet running statistics; their affine weights still train):
    CPU batches are too small for stable batch statistics ("frozen BN", common when fine-tuning).
    """

    def __init__(self, arch: str, net: nn.Module, dim: int = 1280) -> None:
        super().__init__()
        self.arch = arch
        self.net = net
        self.dim = dim
        self.register_buffer("_mean", torch.tensor(IMAGENET_MEAN).view(1, 3, 1, 1), persistent=False)
        self.register_buffer("_std", torch.tensor(IMAGENET_STD).view(1, 3, 1, 1), persistent=False)

    def train(self, mode: bool = True) -> PooledCNN:
        super().train(mode)
        for m in self.net.modules():
            if isinstance(m, nn.modules.batchnorm._BatchNorm):
                m.eval()
        return self

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        x = ((x * self._std + self._mean) * 255.0 - 127.0) / 128.0
        return self.net.extract_features(x).mean(dim=(-2, -1))


def _init_net(config: EncoderConfig, init: nn.Module | None) -> MultiCropNet:
    """Student network: the ViT of ``config`` from random init, or ``init`` (a pretrained backbone) + a new head."""
    import copy

    net = MultiCropNet(config)
    if init is not None:
        net.backbone = copy.deepcopy(init)
        c = config
        net.head = DINOHead(int(init.dim), c.out_dim, c.head_hidden_dim, c.head_bottleneck_dim)
    return net


@dataclass
class Encoder:
    """A trained encoder: the DINO teacher backbone plus its config and per-epoch mean DINO loss."""

    config: EncoderConfig
    backbone: ViT | PooledCNN
    history: list[float] = field(default_factory=list)
    seconds: float = 0.0
    n_images: int = 0

    @property
    def dim(self) -> int:
        return int(self.backbone.dim) if isinstance(self.backbone, PooledCNN) else self.config.embed_dim


def _to_float(batch: torch.Tensor, size: int, device: torch.device) -> torch.Tensor:
    """uint8 N×3×H×W → float in [0,1] at size×size (bicubic with antialias when resizing)."""
    x = batch.to(device, non_blocking=True).float().div_(255.0)
    if x.shape[-2:] != (size, size):
        x = F.interpolate(x, size=(size, size), mode="bicubic", align_corners=False, antialias=True)
        x = x.clamp_(0, 1)
    return x


def _normalise(x: torch.Tensor) -> torch.Tensor:
    mean = torch.tensor(IMAGENET_MEAN, device=x.device).view(1, 3, 1, 1)
    std = torch.tensor(IMAGENET_STD, device=x.device).view(1, 3, 1, 1)
    return (x - mean) / std


def _blur(size: int, p: float) -> nn.Module:
    """DINO's Gaussian blur (σ ∈ [0.1, 2] at 224 px), σ and kernel scaled to the crop size."""
    import kornia.augmentation as K

    s = size / 224.0
    sig_hi = 2.0 * s
    k = max(3, 2 * math.ceil(3 * sig_hi) + 1)
    return K.RandomGaussianBlur((k, k), (0.1 * s, sig_hi), p=p)


def build_augmentations(config: EncoderConfig) -> tuple[nn.Module, nn.Module, nn.Module]:
    """Kornia pipelines for global crop 1, global crop 2 and local crops (DINO + SelfClean rotation)."""
    import kornia.augmentation as K

    def common(size: int, scale: tuple[float, float]) -> list[nn.Module]:
        return [
            K.RandomResizedCrop((size, size), scale=scale, resample="BICUBIC"),
            K.RandomHorizontalFlip(p=0.5),
            K.ColorJitter(0.4, 0.4, 0.2, 0.1, p=0.8),
            K.RandomGrayscale(p=0.2),
        ]

    rot = [K.RandomRotation(180.0, p=config.rotation_p)] if config.rotation_p > 0 else []
    g = config.image_size
    g1 = K.AugmentationSequential(*common(g, config.global_crop_scale), _blur(g, 1.0), *rot)
    g2 = K.AugmentationSequential(*common(g, config.global_crop_scale), _blur(g, 0.1),
                                  K.RandomSolarize(thresholds=0.0, additions=0.0, p=0.2), *rot)
    ls = config.local_crop_size
    loc = K.AugmentationSequential(*common(ls, config.local_crop_scale), _blur(ls, 0.5), *rot)
    return g1, g2, loc


def cosine_schedule(base: float, final: float, epochs: int, iters_per_epoch: int,
                    warmup_epochs: int = 0, start_warmup: float = 0.0) -> np.ndarray:
    """DINO's per-iteration schedule: linear warm-up, then final + (base−final)(1+cos(πt/T))/2."""
    warm_iters = min(warmup_epochs, epochs) * iters_per_epoch
    warm = np.linspace(start_warmup, base, warm_iters, endpoint=False) if warm_iters else np.array([])
    n = epochs * iters_per_epoch - warm_iters
    t = np.arange(n)
    sched = final + 0.5 * (base - final) * (1 + np.cos(np.pi * t / max(n, 1)))
    return np.concatenate([warm, sched])


def dino_loss(student_out: torch.Tensor, teacher_out: torch.Tensor, center: torch.Tensor,
              teacher_temp: float, student_temp: float, n_crops: int) -> torch.Tensor:
    """H(P_t, P_s) averaged over (teacher global crop, student crop) pairs with different views.

    P_t = softmax((t − c)/τ_t) (centring + sharpening), log P_s = log_softmax(s/τ_s)
    (Caron et al. 2021, Alg. 1).
    """
    s = (student_out / student_temp).chunk(n_crops)
    t = F.softmax((teacher_out - center) / teacher_temp, dim=-1).detach().chunk(2)
    total = student_out.new_zeros(())
    n_terms = 0
    for iq, q in enumerate(t):
        for v in range(n_crops):
            if v == iq:
                continue
            total = total + torch.sum(-q * F.log_softmax(s[v], dim=-1), dim=-1).mean()
            n_terms += 1
    return total / n_terms


def koleo_loss(features: torch.Tensor, eps: float = 1e-8) -> torch.Tensor:
    """KoLeo spreading term −mean_i log(min_{j≠i} ||z_i − z_j||), z = L2-normalised features.

    The Kozachenko–Leonenko entropy estimator used as a regulariser by DINOv2 (Oquab et al. 2023,
    §4 and Sablayrolles et al. 2019): it pushes each sample away from its nearest batch neighbour.
    """
    z = F.normalize(features, dim=-1)
    d = torch.cdist(z, z)
    d = d + torch.eye(z.shape[0], device=z.device, dtype=z.dtype) * 1e6
    return -torch.log(d.min(dim=1).values + eps).mean()


def _param_groups(model: nn.Module) -> list[dict]:
    reg, not_reg = [], []
    for name, p in model.named_parameters():
        if not p.requires_grad:
            continue
        (not_reg if name.endswith(".bias") or p.ndim == 1 else reg).append(p)
    return [{"params": reg}, {"params": not_reg, "weight_decay": 0.0}]


def _clip_per_tensor(params: list[torch.Tensor], clip: float) -> None:
    """DINO clips each parameter's gradient to norm ``clip`` separately (utils.clip_gradients)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads or clip <= 0:
        return
    norms = torch._foreach_norm(grads)
    for g, n in zip(grads, norms, strict=True):
        g.mul_(torch.clamp(clip / (n + 1e-6), max=1.0))


def train_encoder(images: object, config: EncoderConfig, *,
                  progress: Callable[[dict], None] | None = None, init: PooledCNN | None = None) -> Encoder:
    """Train a ViT with DINO from random initialisation on ``images`` (uint8 N×3×H×W).

    ``init``: start instead from a pretrained backbone (:func:`pretrained_init`, an ImageNet
    EfficientNet-Lite) with a freshly initialised head, SelfClean's default of continuing
    self-supervised training from ImageNet weights, with a CNN backbone; ``config``'s ViT fields are
    then unused.

    Per iteration: 2 global + ``n_local_crops`` local augmented crops; student sees all, teacher (EMA of
    the student, momentum cosine m→1) sees the globals; loss :func:`dino_loss`; centre
    c ← λc + (1−λ)·mean(teacher out). With ``koleo_weight`` > 0 the student's CLS tokens of each global
    crop also get the KoLeo spreading term (:func:`koleo_loss`). ``history``: per-epoch mean DINO loss
    (ln(out_dim) = uniform collapse). Seeded: bit-for-bit reproducible on CPU with the same thread count.
    Global torch RNG state is restored on exit.
    """
    if not isinstance(config, EncoderConfig):
        raise ValueError(f"config: expected EncoderConfig, got {type(config).__name__}")
    images = as_uint8_images(images)
    n = images.shape[0]
    if n < 2:
        raise ValueError(f"images: DINO needs at least 2 images, got {n}")
    c = config
    device = resolve_device(c.device)
    batch = min(c.batch_size, n)
    iters = n // batch
    t0 = time.perf_counter()
    old_threads = torch.get_num_threads()
    if c.num_threads is not None:
        torch.set_num_threads(c.num_threads)
    fork_devices = [device.index or 0] if device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=fork_devices):
            torch.manual_seed(c.seed)
            student = _init_net(c, init).to(device)
            teacher = _init_net(c, init).to(device)
            teacher.load_state_dict(student.state_dict())
            for p in teacher.parameters():
                p.requires_grad_(False)
            aug_g1, aug_g2, aug_loc = build_augmentations(c)
            opt = torch.optim.AdamW(_param_groups(student), lr=0.0)
            lr_s = cosine_schedule(c.lr * batch / 256.0, c.min_lr, c.epochs, iters, c.warmup_epochs)
            wd_s = cosine_schedule(c.weight_decay, c.weight_decay_end, c.epochs, iters)
            mom_s = cosine_schedule(c.teacher_momentum, 1.0, c.epochs, iters)
            wt = min(c.warmup_teacher_temp_epochs, c.epochs)
            tt_s = np.concatenate([np.linspace(c.warmup_teacher_temp, c.teacher_temp, wt),
                                   np.full(c.epochs - wt, c.teacher_temp)])
            center = torch.zeros(1, c.out_dim, device=device)
            s_params = [p for p in student.parameters()]
            t_params = [p for p in teacher.parameters()]
            perm_gen = torch.Generator().manual_seed(c.seed)
            n_crops = 2 + c.n_local_crops
            history: list[float] = []
            step = 0
            for epoch in range(c.epochs):
                perm = torch.randperm(n, generator=perm_gen)
                losses = []
                for it in range(iters):
                    for gi, group in enumerate(opt.param_groups):
                        group["lr"] = float(lr_s[step])
                        if gi == 0:
                            group["weight_decay"] = float(wd_s[step])
                    x = _to_float(images[perm[it * batch:(it + 1) * batch]], c.image_size, device)
                    crops = [_normalise(aug_g1(x)), _normalise(aug_g2(x))]
                    if c.n_local_crops:  # one kornia call for all local crops (per-call overhead dominates)
                        crops += list(_normalise(aug_loc(x.repeat(c.n_local_crops, 1, 1, 1)))
                                      .chunk(c.n_local_crops))
                    with torch.no_grad(), mixed_precision(device):
                        t_out = teacher(crops[:2])
                    with mixed_precision(device):
                        s_out, s_feat = student.forward_with_features(crops)
                    # the losses in float32 (on the CPU the outputs are float32 already and .float() is a no-op)
                    t_out, s_out, s_feat = t_out.float(), s_out.float(), s_feat.float()
                    dino = dino_loss(s_out, t_out, center, float(tt_s[epoch]), c.student_temp, n_crops)
                    loss = dino
                    if c.koleo_weight > 0:  # per global crop, as in DINOv2
                        g1, g2 = s_feat[: 2 * x.shape[0]].chunk(2)
                        loss = dino + c.koleo_weight * (koleo_loss(g1) + koleo_loss(g2)) / 2
                    if not torch.isfinite(loss):
                        raise RuntimeError(f"DINO loss is not finite at epoch {epoch}, iteration {it}")
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    _clip_per_tensor(s_params, c.clip_grad)
                    if epoch < c.freeze_last_layer_epochs:
                        student.head.last_weight.grad = None
                    opt.step()
                    with torch.no_grad():
                        m = float(mom_s[step])
                        torch._foreach_mul_(t_params, m)
                        torch._foreach_add_(t_params, s_params, alpha=1.0 - m)
                        center.mul_(c.center_momentum).add_(t_out.mean(0, keepdim=True),
                                                            alpha=1.0 - c.center_momentum)
                    losses.append(dino.detach())
                    step += 1
                history.append(float(torch.stack(losses).mean()))
                if progress is not None:
                    progress({"epoch": epoch + 1, "epochs": c.epochs, "loss": history[-1],
                              "seconds": time.perf_counter() - t0, "images": n,
                              "teacher": Encoder(c, teacher.backbone, list(history))})
    finally:
        torch.set_num_threads(old_threads)
    backbone = teacher.backbone.cpu().eval()
    return Encoder(config=c, backbone=backbone, history=history, seconds=time.perf_counter() - t0, n_images=n)


def embed(encoder: Encoder, images: object, *, batch_size: int = 256) -> np.ndarray:
    """L2-normalised teacher CLS token (or pooled CNN features), float32 N×dim, images resized to ``image_size``."""
    if not isinstance(encoder, Encoder):
        raise ValueError(f"encoder: expected Encoder, got {type(encoder).__name__}")
    if batch_size < 1:
        raise ValueError(f"batch_size: must be >= 1, got {batch_size!r}")
    images = as_uint8_images(images)
    out = np.empty((images.shape[0], encoder.dim), dtype=np.float32)
    batches = (images[s:s + batch_size] for s in range(0, images.shape[0], batch_size))
    return embed_batches(encoder, batches, out)


def embed_batches(encoder: Encoder, batches: Iterable[object], out: np.ndarray) -> np.ndarray:
    """:func:`embed` of images that arrive in batches (uint8 B×3×H×W arrays or tensors, in row order), one
    forward pass per batch, the rows written into ``out`` (float32 N×dim, e.g. a memory-mapped file); returns
    ``out``. The rows equal :func:`embed` with the same batch boundaries bit for bit."""
    if not isinstance(encoder, Encoder):
        raise ValueError(f"encoder: expected Encoder, got {type(encoder).__name__}")
    if out.ndim != 2 or out.shape[1] != encoder.dim:
        raise ValueError(f"out: expected N×{encoder.dim}, got shape {out.shape}")
    c = encoder.config
    net = encoder.backbone
    device = resolve_device(c.device)
    home = next(net.parameters()).device
    was_training = net.training
    net.to(device).eval()
    old_threads = torch.get_num_threads()
    if c.num_threads is not None:
        torch.set_num_threads(c.num_threads)
    s = 0
    try:
        with torch.no_grad(), mixed_precision(device):
            for batch in batches:
                x = _normalise(_to_float(as_uint8_images(batch), c.image_size, device))
                if s + x.shape[0] > out.shape[0]:
                    raise ValueError(f"batches: more than the {out.shape[0]} rows of out")
                out[s:s + x.shape[0]] = F.normalize(net(x).float(), dim=-1).cpu().numpy()
                s += x.shape[0]
    finally:
        torch.set_num_threads(old_threads)
        net.to(home).train(was_training)
    if s != out.shape[0]:
        raise ValueError(f"batches: {s} rows given, out has {out.shape[0]}")
    return out


def encoder_bytes(encoder: Encoder) -> bytes:
    """Serialise {format, config JSON, history, teacher state_dict} with torch.save (weights_only-safe)."""
    payload = {
        "format": FORMAT_VERSION,
        "config": json.dumps(encoder.config.to_dict(), sort_keys=True),
        "history": [float(h) for h in encoder.history],
        "state_dict": {k: v.detach().cpu().contiguous() for k, v in encoder.backbone.state_dict().items()},
    }
    if isinstance(encoder.backbone, PooledCNN):  # ViT files keep their layout (and their sha256)
        payload["backbone"] = encoder.backbone.arch
    buf = io.BytesIO()
    torch.save(payload, buf)
    return buf.getvalue()


def save_encoder(encoder: Encoder, artifacts_dir: str | os.PathLike[str]) -> tuple[str, Path]:
    """Write ``<artifacts_dir>/<sha256>.pt`` atomically (content-addressed); return (sha256, path)."""
    if not isinstance(encoder, Encoder):
        raise ValueError(f"encoder: expected Encoder, got {type(encoder).__name__}")
    d = Path(artifacts_dir)
    d.mkdir(parents=True, exist_ok=True)
    data = encoder_bytes(encoder)
    sha = hashlib.sha256(data).hexdigest()
    path = d / f"{sha}.pt"
    if not path.exists():
        atomic_write_bytes(path, data)
    return sha, path


def load_encoder(path: str | os.PathLike[str], *, expected_sha256: str | None = None,
                 device: str | None = None) -> Encoder:
    """Load an encoder written by :func:`save_encoder` with ``torch.load(weights_only=True)``.

    ``expected_sha256`` (default: the file stem when it looks like a sha256) is checked against the bytes.
    ``device`` overrides the stored config's device (e.g. "cpu").
    """
    p = Path(path)
    if not p.is_file():
        raise ValueError(f"path: encoder file {str(path)!r} does not exist")
    data = p.read_bytes()
    sha = hashlib.sha256(data).hexdigest()
    if expected_sha256 is None and len(p.stem) == 64 and all(ch in "0123456789abcdef" for ch in p.stem):
        expected_sha256 = p.stem
    if expected_sha256 is not None and sha != expected_sha256:
        raise ValueError(f"path: {p} has sha256 {sha}, expected {expected_sha256} (corrupt or modified)")
    payload = torch.load(io.BytesIO(data), map_location="cpu", weights_only=True)
    if not isinstance(payload, dict) or payload.get("format") != FORMAT_VERSION:
        raise ValueError(f"path: {p} is not a noisycal encoder file (format {FORMAT_VERSION})")
    cfg = EncoderConfig.from_dict(json.loads(payload["config"]))
    if device is not None:
        cfg = cfg.replace(device=device)
    arch = payload.get("backbone", "vit")
    if arch == "vit":
        backbone: ViT | PooledCNN = build_backbone(cfg)
    else:
        backbone = PooledCNN(str(arch), build_efficientnet_lite(str(arch)))
    backbone.load_state_dict(payload["state_dict"])
    return Encoder(config=cfg, backbone=backbone.eval(), history=list(payload["history"]))
