"""Demo cleaning dataset: scikit-learn's digits with injected, recorded contamination (Gröger et al. 2023 §3.2).

``write_demo_cleaning_dataset(home)`` writes ``<home>/datasets/<name>/`` (32×32 RGB PNGs +
``labels.csv``) and ``truth.json`` inside it (the image reader ignores non-image files). Contamination:

* irrelevant: crops of the photos shipped with scikit-learn (``china.jpg``, ``flower.jpg``) and
  synthetic textures (gratings, checkerboards, noise), each given a random digit label;
* near duplicates: transformed copies of digits (shift 1–2 px, rotation 4–10°, brightness ×0.8–0.9 or
  ×1.1–1.25, JPEG quality 25–50), as pairs and as triples (source + two copies → three pairs);
* flipped labels: digits whose label is replaced by another digit.

Everything is drawn from ``np.random.default_rng(seed)``; PNGs are written with fixed Pillow settings,
so the folder is identical bit for bit across runs (tested by hashing). The truth is a lower bound:
the digits corpus may contain natural near duplicates.
"""

from __future__ import annotations

import io
import json
import os
import shutil
import tempfile
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np
from PIL import Image, ImageEnhance

from noisycal_platform.cleaning.ranking_quality import TRUTH_FILE

SIZE = 32


@dataclass(frozen=True)
class DemoTruth:
    """Injected contamination, by ``file_name`` (relative to ``root``).

    ``near_duplicates``: pairs ``[a, b]`` with a < b (string order), one per truly duplicated pair
    (a triple contributes its three pairs); ``duplicate_kinds[i]`` names the transform of pair i.
    ``flipped``: ``{"file_name", "true_label", "given_label"}``; ``true_labels``: every digit's real label.
    """

    name: str
    root: str
    seed: int
    n_images: int
    irrelevant: list[str]
    irrelevant_kinds: list[str]
    near_duplicates: list[list[str]]
    duplicate_kinds: list[str]
    flipped: list[dict[str, str]]
    labels: list[str] = field(default_factory=lambda: [str(d) for d in range(10)])

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=1, sort_keys=True)

    @classmethod
    def from_json(cls, text: str) -> DemoTruth:
        return cls(**json.loads(text))


def load_demo_truth(root: str | os.PathLike[str]) -> DemoTruth:
    """Read ``<root>/truth.json`` written by :func:`write_demo_cleaning_dataset`."""
    p = Path(root) / TRUTH_FILE
    if not p.is_file():
        raise ValueError(f"root: {p} does not exist")
    return DemoTruth.from_json(p.read_text())


def _render_digit(img8: np.ndarray) -> Image.Image:
    """8×8 values 0..16 → dark ink on white, bicubic ×4 to 32×32 RGB."""
    g = (255 - np.round(img8 * (255.0 / 16.0))).astype(np.uint8)
    return Image.fromarray(g, mode="L").resize((SIZE, SIZE), Image.Resampling.BICUBIC).convert("RGB")


def _photo_crop(photos: list[np.ndarray], rng: np.random.Generator) -> Image.Image:
    ph = photos[int(rng.integers(len(photos)))]
    h, w = ph.shape[:2]
    side = int(rng.integers(80, min(h, w, 300)))
    y, x = int(rng.integers(0, h - side)), int(rng.integers(0, w - side))
    return Image.fromarray(ph[y:y + side, x:x + side]).resize((SIZE, SIZE), Image.Resampling.BICUBIC)


def _texture(kind: str, rng: np.random.Generator) -> Image.Image:
    yy, xx = np.mgrid[0:SIZE, 0:SIZE].astype(np.float64)
    col_a, col_b = rng.integers(0, 256, 3), rng.integers(0, 256, 3)
    if kind == "grating":
        theta, freq = rng.uniform(0, np.pi), rng.uniform(0.15, 0.6)
        t = 0.5 + 0.5 * np.sin(freq * (xx * np.cos(theta) + yy * np.sin(theta)))
    elif kind == "checker":
        cell = int(rng.integers(2, 8))
        t = ((yy // cell + xx // cell) % 2).astype(np.float64)
    else:  # noise
        t = rng.random((SIZE, SIZE))
    rgb = col_a[None, None, :] * (1 - t[..., None]) + col_b[None, None, :] * t[..., None]
    return Image.fromarray(np.round(rgb).astype(np.uint8), mode="RGB")


def _near_duplicate(src: Image.Image, kind: str, rng: np.random.Generator) -> Image.Image:
    white = (255, 255, 255)
    if kind == "shift":
        dx, dy = (int(rng.choice([-2, -1, 1, 2])) for _ in range(2))
        return src.transform(src.size, Image.Transform.AFFINE, (1, 0, -dx, 0, 1, -dy), fillcolor=white)
    if kind == "rotate":
        angle = float(rng.choice([-1, 1]) * rng.uniform(4, 10))
        return src.rotate(angle, resample=Image.Resampling.BICUBIC, fillcolor=white)
    if kind == "brightness":
        f = float(rng.uniform(0.8, 0.9) if rng.random() < 0.5 else rng.uniform(1.1, 1.25))
        return ImageEnhance.Brightness(src).enhance(f)
    buf = io.BytesIO()  # jpeg
    src.save(buf, format="JPEG", quality=int(rng.integers(25, 51)))
    return Image.open(io.BytesIO(buf.getvalue())).convert("RGB")


def write_demo_cleaning_dataset(
    home: str | os.PathLike[str], name: str = "digits_demo", seed: int = 0, *,
    n_digits: int = 1400, n_irrelevant: int = 30, n_duplicate_pairs: int = 40, n_duplicate_triples: int = 5,
    n_flipped: int = 30,
) -> DemoTruth:
    """Write ``<home>/datasets/<name>/`` (PNGs, ``labels.csv``, ``truth.json``) and return the truth.

    Defaults give 1,400 + 30 + 40 + 10 = 1,480 images. An existing folder of that name is replaced
    atomically (written beside it, then swapped in).
    """
    from sklearn.datasets import load_digits, load_sample_images

    if not name or "/" in name or "\\" in name or name.startswith("."):
        raise ValueError(f"name: must be a plain folder name, got {name!r}")
    digits = load_digits()
    for arg, v, hi in (("n_digits", n_digits, len(digits.images)), ("n_irrelevant", n_irrelevant, 10_000),
                       ("n_duplicate_pairs", n_duplicate_pairs, 10_000),
                       ("n_duplicate_triples", n_duplicate_triples, 10_000),
                       ("n_flipped", n_flipped, 10_000)):
        if not isinstance(v, int) or v < 0 or v > hi:
            raise ValueError(f"{arg}: must be an int in [0, {hi}], got {v!r}")
    if n_digits < 10:
        raise ValueError(f"n_digits: need at least 10, got {n_digits}")
    if n_duplicate_pairs + n_duplicate_triples + n_flipped > n_digits:
        raise ValueError("n_duplicate_pairs + n_duplicate_triples + n_flipped must not exceed n_digits "
                         f"({n_duplicate_pairs} + {n_duplicate_triples} + {n_flipped} > {n_digits})")
    rng = np.random.default_rng(seed)

    chosen = np.sort(rng.choice(len(digits.images), n_digits, replace=False))
    items: list[dict] = []  # {"img", "label", "role", ...}
    for idx in chosen:
        lab = str(int(digits.target[idx]))
        items.append({"img": _render_digit(digits.images[idx]), "label": lab, "true": lab, "role": "digit"})

    photos = [np.asarray(p) for p in load_sample_images().images]
    n_photo = (2 * n_irrelevant) // 3
    textures = ("grating", "checker", "noise")
    irr_kinds = ["photo"] * n_photo + [textures[i % 3] for i in range(n_irrelevant - n_photo)]
    for kind in irr_kinds:
        img = _photo_crop(photos, rng) if kind == "photo" else _texture(kind, rng)
        items.append({"img": img, "label": str(int(rng.integers(10))), "true": None, "role": "irrelevant",
                      "kind": kind})

    special = rng.permutation(n_digits)[: n_duplicate_pairs + n_duplicate_triples + n_flipped]
    dup_src = special[: n_duplicate_pairs + n_duplicate_triples]
    flip_idx = special[n_duplicate_pairs + n_duplicate_triples:]
    kinds = ("shift", "rotate", "brightness", "jpeg")
    dup_groups: list[tuple[int, list[int], list[str]]] = []
    for g, src in enumerate(dup_src):
        n_copies = 1 if g < n_duplicate_pairs else 2
        copies, ks = [], []
        for _ in range(n_copies):
            kind = kinds[int(rng.integers(len(kinds)))]
            base = items[int(src)]
            items.append({"img": _near_duplicate(base["img"], kind, rng), "label": base["label"],
                          "true": base["true"], "role": "duplicate", "kind": kind})
            copies.append(len(items) - 1)
            ks.append(kind)
        dup_groups.append((int(src), copies, ks))
    flips = []
    for i in flip_idx:
        true = items[int(i)]["true"]
        given = str((int(true) + int(rng.integers(1, 10))) % 10)
        items[int(i)]["label"] = given
        flips.append(int(i))

    order = rng.permutation(len(items))  # item index -> position in file naming
    names = [""] * len(items)
    for pos, item_idx in enumerate(order):
        names[int(item_idx)] = f"img_{pos:04d}.png"

    home_p = Path(home)
    ds_dir = home_p / "datasets"
    ds_dir.mkdir(parents=True, exist_ok=True)
    target = ds_dir / name
    tmp = Path(tempfile.mkdtemp(dir=ds_dir, prefix=f".{name}.tmp-"))
    try:
        for it, fn in zip(items, names, strict=True):
            it["img"].save(tmp / fn, format="PNG", optimize=False, compress_level=6)
        rows = sorted(zip(names, (it["label"] for it in items), strict=True))
        (tmp / "labels.csv").write_text("file_name,label\n" + "".join(f"{f},{lab}\n" for f, lab in rows))

        pairs, pair_kinds = [], []
        for src, copies, ks in dup_groups:
            members = [src, *copies]
            member_kinds = ["source", *ks]
            for a in range(len(members)):
                for b in range(a + 1, len(members)):
                    pa, pb = sorted((names[members[a]], names[members[b]]))
                    pairs.append([pa, pb])
                    pair_kinds.append(member_kinds[b] if a == 0 else f"{member_kinds[a]}+{member_kinds[b]}")
        by_pair = sorted(zip(pairs, pair_kinds, strict=True))
        irr = sorted((names[i], it["kind"]) for i, it in enumerate(items) if it["role"] == "irrelevant")
        truth = DemoTruth(
            name=name, root=str(target.resolve()), seed=int(seed), n_images=len(items),
            irrelevant=[f for f, _ in irr], irrelevant_kinds=[k for _, k in irr],
            near_duplicates=[p for p, _ in by_pair], duplicate_kinds=[k for _, k in by_pair],
            flipped=sorted(({"file_name": names[i], "true_label": items[i]["true"],
                             "given_label": items[i]["label"]} for i in flips), key=lambda d: d["file_name"]),
        )
        (tmp / TRUTH_FILE).write_text(truth.to_json())
        if target.exists():
            old = Path(tempfile.mkdtemp(dir=ds_dir, prefix=f".{name}.old-"))
            os.replace(target, old / name)
            os.replace(tmp, target)
            shutil.rmtree(old)
        else:
            os.replace(tmp, target)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
    return truth
