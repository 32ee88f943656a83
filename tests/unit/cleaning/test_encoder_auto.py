"""``encoder: auto``: the encoder and near-duplicate search chosen per dataset from the sizes of its images.

Expected choices follow from the rule as stated (median short side >= 64 px: real photographs -> frozen
EfficientNet-Lite0 with SIFT verification; smaller: the DINO trained on the dataset, seed's ranking) and from the
sizes the test writes, never from running the function first."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from noisycal_platform.cleaning.demo_data import write_demo_cleaning_dataset
from noisycal_platform.cleaning.encoder import choose_encoder
from noisycal_platform.cleaning.encoder.auto import CHOICE_SCHEMA, MIN_PHOTO_SIDE
from noisycal_platform.cleaning.images import read_image_dataset
from noisycal_platform.cleaning.pipeline.embeddings import encoder_choice
from noisycal_platform.cleaning.pipeline.schemas import ENCODER_SCHEMA


def _write_images(root, sizes: list[tuple[int, int]], seed: int = 0) -> None:
    """Random RGB pictures of the given (width, height) and a labels.csv."""
    root.mkdir(parents=True)
    rng = np.random.default_rng(seed)
    rows = ["file_name,label"]
    for i, (w, h) in enumerate(sizes):
        Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(root / f"im{i:03d}.png")
        rows.append(f"im{i:03d}.png,{'ab'[i % 2]}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")


def _images(root, name: str):
    return read_image_dataset(root).table(name)


def test_photographs_get_the_frozen_lite0_with_verification_and_tiny_images_the_dino(tmp_path):
    _write_images(tmp_path / "photos", [(200, 150)] * 6 + [(150, 200)] * 4)  # HAM10000-like, both orientations
    _write_images(tmp_path / "tiny", [(32, 32)] * 10)
    photos = encoder_choice(_images(tmp_path / "photos", "photos"))
    assert (photos.encoder, photos.rerank, photos.k, photos.input_size) == ("efficientnet-lite0", True, 5, 112)
    assert photos.short_side == 150.0 and photos.setting == "auto"
    assert "real photographs" in photos.reason and "150 px" in photos.reason
    tiny = encoder_choice(_images(tmp_path / "tiny", "tiny"))
    assert (tiny.encoder, tiny.rerank, tiny.input_size, tiny.views) == ("dino", False, 0, "none")
    assert tiny.short_side == 32.0 and "tiny images" in tiny.reason


def test_the_threshold_is_on_the_median_short_side():
    assert choose_encoder([MIN_PHOTO_SIDE] * 3).encoder == "efficientnet-lite0"
    assert choose_encoder([MIN_PHOTO_SIDE - 1] * 3).encoder == "dino"
    # five of nine images are 200 px: the median is 200, although the smallest (and the mean, 102) are not
    assert choose_encoder([32] * 4 + [200] * 5).encoder == "efficientnet-lite0"
    # five of nine are 32 px: the median is 32, although the mean (107) is above the threshold
    assert choose_encoder([32] * 5 + [200] * 4).encoder == "dino"


def test_the_demo_digits_resolve_to_the_previous_defaults(tmp_path):
    """The bundled demo (32 px digits) keeps the trained DINO, the ``demo`` preset and the plain ranking."""
    demo = write_demo_cleaning_dataset(tmp_path, name="digits", seed=0, n_digits=40, n_irrelevant=2,
                                       n_duplicate_pairs=2, n_duplicate_triples=0, n_flipped=2)
    choice = encoder_choice(_images(Path(demo.root), "digits"), encoder="auto", rerank="auto", preset="demo")
    assert (choice.encoder, choice.checkpoint, choice.views, choice.image_size, choice.rerank) == (
        "dino", "", "none", 0, False)


def test_explicit_settings_win():
    photos, tiny = [150] * 5, [32] * 5
    assert choose_encoder(photos, encoder="dino").encoder == "dino"
    assert not choose_encoder(photos, encoder="dino").rerank  # auto follows the DINO: the seed's ranking
    assert choose_encoder(tiny, encoder="efficientnet-lite2").encoder == "efficientnet-lite2"
    assert choose_encoder(tiny, encoder="efficientnet-lite2").input_size == 260
    assert not choose_encoder(photos, rerank=False).rerank
    assert not choose_encoder(photos, rerank="false").rerank
    assert choose_encoder(photos, rerank=False).encoder == "efficientnet-lite0"
    assert choose_encoder(tiny, rerank=True).rerank and choose_encoder(tiny, rerank=True).encoder == "dino"
    assert choose_encoder(photos, image_size=224).input_size == 224
    assert choose_encoder(photos, k=25, views="d4").k == 25
    assert "set in settings" in choose_encoder(photos, encoder="dino").reason
    # the seed's configuration and the other chosen DINO preset keep the DINO on photographs
    for preset in ("paper", "ham_cpu"):
        chosen = choose_encoder(photos, preset=preset)
        assert (chosen.encoder, chosen.rerank) == ("dino", False) and preset in chosen.reason
    # a clinic checkpoint under auto is SelfClean's ViT-tiny/16 (224 px); its pretrained embedding is verified
    ckpt = choose_encoder(photos, checkpoint="/models/selfclean.pth")
    assert (ckpt.encoder, ckpt.checkpoint, ckpt.input_size, ckpt.rerank) == ("dino", "/models/selfclean.pth", 224, True)
    assert not choose_encoder(tiny, checkpoint="/models/selfclean.pth").rerank


def test_bad_settings_are_named():
    with pytest.raises(ValueError, match="encoder must be 'auto' or one of"):
        choose_encoder([150], encoder="resnet50")
    with pytest.raises(ValueError, match="near_duplicate_rerank"):
        choose_encoder([150], rerank="yes")
    with pytest.raises(ValueError, match="no images"):
        choose_encoder([])


def test_metadata_fills_exactly_the_choice_columns():
    meta = choose_encoder([150] * 3).metadata()
    assert list(meta) == list(CHOICE_SCHEMA)
    assert set(CHOICE_SCHEMA) <= set(ENCODER_SCHEMA)
    assert meta["encoder_resolved"] == "efficientnet-lite0" and meta["near_duplicate_rerank"] is True
