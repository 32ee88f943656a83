"""The library pieces the cleaning assets call: ranking tables round-trip through ``to_frame``/``from_frame``
with validation, the encoder is trained once per (dataset, config) and then reused, the queue snapshot the
pipeline writes is what the web tool reads, cleaning scores and truth files are validated, and per-dataset
speed-ups plus ``speedup_averages`` equal the all-datasets table."""

import hashlib
import json
from pathlib import Path

import numpy as np
import polars as pl
import pytest

from noisycal_platform.cleaning import embedding_cache
from noisycal_platform.cleaning.pipeline.outcomes import TRUTH_FILE, cleaning_impact_tables
from noisycal_platform.cleaning.pipeline.protocol_tables import confirmation_queue
from noisycal_platform.cleaning.pipeline.schemas import CLEANING_IMPACT_SCHEMA, PAIR_RANKING_SCHEMA, RANKING_SCHEMA
from noisycal_platform.cleaning.ranking_quality import read_truth, speedup_averages
from noisycal_platform.cleaning.rankings.types import PairRanking, Ranking
from noisycal_platform.confirm_app.queue import QueueRegistry, snapshot_folder, write_snapshot
from noisycal_platform.io import InputError, read_cleaning_scores

FILES = pl.DataFrame({"file_name": ["a.png", "b.png", "c.png", "d.png"], "label": ["0", "1", "0", "1"]})


def test_ranking_round_trips_through_its_table():
    r = Ranking(order=[2, 0, 3, 1], scores=[0.5, 0.9, 0.1, 0.7])
    table = r.to_frame(FILES, "dino")
    assert table.columns == list(RANKING_SCHEMA)
    assert table["rank"].to_list() == [0, 1, 2, 3]
    assert table["file_name"].to_list() == ["c.png", "a.png", "d.png", "b.png"]
    assert table["label"].to_list() == ["0", "0", "1", "1"]
    assert table["score"].to_list() == [0.1, 0.5, 0.7, 0.9]
    back = Ranking.from_frame(table.reverse(), FILES.height)  # row order does not matter: rank does
    assert back.order.tolist() == [2, 0, 3, 1] and back.scores.tolist() == [0.5, 0.9, 0.1, 0.7]


def test_a_ranking_table_must_rank_every_item_once():
    table = Ranking(order=[2, 0, 3, 1], scores=[0.5, 0.9, 0.1, 0.7]).to_frame(FILES, "dino")
    with pytest.raises(ValueError, match="each of the 4 items once, got 2 rows"):
        Ranking.from_frame(table.head(2), FILES.height)
    with pytest.raises(ValueError, match="each of the 4 items once"):
        Ranking.from_frame(table.with_columns(pl.lit(1, dtype=pl.Int64).alias("idx")), FILES.height)


def test_ranking_tables_are_validated():
    table = Ranking(order=[0, 1, 2, 3], scores=[0.0, 1.0, 2.0, 3.0]).to_frame(FILES, "dino")
    with pytest.raises(ValueError, match=r"idx must lie in \[0, 3\)"):
        Ranking.from_frame(table, 3)
    with pytest.raises(ValueError, match="missing columns"):
        Ranking.from_frame(table.drop("score"))
    with pytest.raises(ValueError, match="files has 3 rows"):
        Ranking(order=[0, 1, 2, 3], scores=[0.0] * 4).to_frame(FILES.head(3), "dino")


def test_pair_ranking_round_trips_through_its_table():
    p = PairRanking(pairs=[[0, 2], [1, 3]], scores=[0.01, 0.2])
    table = p.to_frame(FILES, "baseline")
    assert table.columns == list(PAIR_RANKING_SCHEMA)
    assert table["file_name_1"].to_list() == ["a.png", "b.png"]
    assert table["file_name_2"].to_list() == ["c.png", "d.png"]
    back = PairRanking.from_frame(table.reverse())
    assert back.pairs.tolist() == [[0, 2], [1, 3]] and back.scores.tolist() == [0.01, 0.2]
    with pytest.raises(ValueError, match="pairs index item 3"):
        p.to_frame(FILES.head(3), "baseline")


def test_both_rankings_check_lengths_and_freeze_their_arrays():
    with pytest.raises(ValueError, match="order and scores differ in length: 3 vs 2"):
        Ranking(order=[0, 1, 2], scores=[0.1, 0.2])
    with pytest.raises(ValueError, match="pairs and scores differ in length: 2 vs 1"):
        PairRanking(pairs=[[0, 1], [1, 2]], scores=[0.1])
    r, p = Ranking(order=[1, 0], scores=[0.2, 0.1]), PairRanking(pairs=[[0, 1]], scores=[0.3])
    assert (len(r), len(p)) == (2, 1)
    assert r.scores.dtype == p.scores.dtype == np.float64 and r.order.dtype == p.pairs.dtype == np.int64
    for a in (r.order, r.scores, p.pairs, p.scores):
        with pytest.raises(ValueError, match="read-only"):
            a[0] = 0


class _Config:
    """The two fields ``train_or_reuse_encoder`` reads besides the hash."""

    def __init__(self, config_hash: str) -> None:
        self.config_hash, self.image_size, self.epochs = config_hash, 8, 3


@pytest.fixture
def fake_training(monkeypatch):
    """Training that writes a weights file and counts calls (the real DINO loop is tested in test_encoder)."""
    from noisycal_platform.cleaning import encoder, images

    calls = []

    def train(pixels, config, progress=None):  # the real signature: progress receives one event per epoch
        calls.append(config.config_hash)
        return f"weights-{len(calls)}"

    def save(model, artifacts):
        data = model.encode()
        sha = hashlib.sha256(data).hexdigest()
        path = Path(artifacts) / f"{sha}.pt"
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_bytes(data)
        return sha, path

    monkeypatch.setattr(encoder, "train_encoder", train)
    monkeypatch.setattr(encoder, "save_encoder", save)
    monkeypatch.setattr(images, "load_images", lambda paths, size: np.zeros((len(paths), 3, size, size), np.uint8))
    return calls


def test_the_encoder_is_trained_once_per_dataset_and_config(tmp_path, fake_training):
    paths, art = ["x.png"] * 5, tmp_path / "artifacts"
    first = embedding_cache.train_or_reuse_encoder(paths, "d" * 64, _Config("c" * 64), art)
    again = embedding_cache.train_or_reuse_encoder(paths, "d" * 64, _Config("c" * 64), art)
    assert fake_training == ["c" * 64] and not first.reused and again.reused
    assert (again.sha256, again.file) == (first.sha256, first.file)
    other = embedding_cache.train_or_reuse_encoder(paths, "d" * 64, _Config("e" * 64), art)
    assert not other.reused and len(fake_training) == 2  # another config trains its own encoder
    (art / first.file).unlink()  # weights gone: the index entry is stale, so train again
    assert not embedding_cache.train_or_reuse_encoder(paths, "d" * 64, _Config("c" * 64), art).reused
    index = embedding_cache.encoder_index_path(art, "d" * 64, "c" * 64)
    index.write_text("{not json")  # a damaged index entry is a miss, never a crash
    assert not embedding_cache.train_or_reuse_encoder(paths, "d" * 64, _Config("c" * 64), art).reused
    assert len(fake_training) == 4
    entry = json.loads(index.read_text())
    assert set(entry) == {"sha256", "file", "train_seconds", "images_per_second"}


def test_the_snapshot_written_is_the_snapshot_the_web_tool_reads(tmp_path):
    queue = confirmation_queue(
        "ds1",
        Ranking(order=[3, 1, 0, 2], scores=[0.3, 0.1, 0.4, 0.0]),
        PairRanking(pairs=[[2, 0]], scores=[0.05]),
        Ranking(order=[0, 1, 2, 3], scores=[0.0, 0.1, 0.2, 0.3]),
        FILES,
        max_per_type=2,
    )
    folder = snapshot_folder(tmp_path)
    meta = write_snapshot(
        folder, "ds1", queue, dataset_root=str(tmp_path / "ds1"), stopping_count=7, p_chance=0.1, p_plus=0.2
    )
    assert meta["queue_version"] == hashlib.sha256((folder / "ds1.parquet").read_bytes()).hexdigest()
    snap = QueueRegistry(tmp_path).get("ds1")
    assert snap is not None and snap.queue_version == meta["queue_version"] and snap.stopping_count == 7
    assert [c.item_id for c in snap.candidates("irrelevant")] == ["d.png", "b.png"]
    assert [(c.item_id, c.item_id_2) for c in snap.candidates("near_duplicate")] == [("a.png", "c.png")]
    assert snap.extending == frozenset()
    write_snapshot(folder, "ds1", queue, dataset_root=str(tmp_path / "ds1"), stopping_count=7, p_chance=0.1,
                   p_plus=0.2, extending=["near_duplicate"])
    assert QueueRegistry(tmp_path).get("ds1").extending == frozenset({"near_duplicate"})
    with pytest.raises(ValueError, match="cannot name a file"):
        write_snapshot(folder, "../x", queue, dataset_root="/r", stopping_count=1, p_chance=0.1, p_plus=0.1)


def test_cleaning_scores_are_read_through_their_contract(tmp_path):
    good = tmp_path / "ok.csv"
    good.write_text("file_name,score,target\na.png,0.25,1\nb.png,0.75,0\n")
    frame = read_cleaning_scores(good)
    assert frame.schema == {"file_name": pl.String, "score": pl.Float64, "target": pl.Int8}
    assert frame["score"].to_list() == [0.25, 0.75] and frame["target"].to_list() == [1, 0]
    bad = tmp_path / "bad.csv"
    bad.write_text("file_name,score,target\na.png,0.25,1\nb.png,1.5,0\n")
    with pytest.raises(InputError) as err:
        read_cleaning_scores(bad)
    assert err.value.row == 2 and err.value.column == "score" and "bad.csv" in str(err.value)
    dup = tmp_path / "dup.csv"
    dup.write_text("file_name,score,target\na.png,0.25,1\na.png,0.5,0\n")
    with pytest.raises(InputError, match="duplicate"):
        read_cleaning_scores(dup)


def test_no_scores_give_an_empty_table_with_the_scored_columns():
    empty = cleaning_impact_tables(None, pl.DataFrame(), pl.DataFrame(), dataset="d", model_version=None)
    assert empty.height == 0 and empty.schema == pl.Schema(CLEANING_IMPACT_SCHEMA)


def test_truth_is_read_from_the_dataset_folder(tmp_path):
    assert read_truth(tmp_path) is None
    (tmp_path / TRUTH_FILE).write_text(
        json.dumps(
            {"irrelevant": ["x.png"], "near_duplicates": [["b.png", "a.png"]], "flipped": [{"file_name": "c.png"}]}
        )
    )
    truth = read_truth(tmp_path)
    assert truth.irrelevant == {"x.png"} and truth.label_errors == {"c.png"}
    assert truth.near_duplicates == {("a.png", "b.png")}
    (tmp_path / TRUTH_FILE).write_text('{"irrelevant": []}')
    with pytest.raises(ValueError, match=r"truth\.json: not a truth file"):
        read_truth(tmp_path)


def _answers(dataset: str, n: int, annotators: int) -> list[dict]:
    out = []
    for a in range(annotators):
        for i in range(n):
            out.append(
                dict(dataset=dataset, annotator_id=f"r{a}", issue_type="irrelevant", item_id=f"{dataset}_{i}",
                     item_id_2=None)
            )
    return out


def test_per_dataset_speedups_plus_averages_equal_the_all_datasets_table():
    eff = pl.DataFrame(
        _answers("d1", 4, 2) + _answers("d2", 6, 1),
        schema={"dataset": pl.String, "annotator_id": pl.String, "issue_type": pl.String, "item_id": pl.String,
                "item_id_2": pl.String},
    )
    sizes = {"d1": 40, "d2": 30}
    from noisycal_platform.cleaning.ranking_quality import speedup_table

    whole = speedup_table(eff, sizes)
    parts = pl.concat([speedup_table(eff.filter(pl.col("dataset") == d), {d: n}).head(1) for d, n in sizes.items()])
    combined = speedup_averages(parts)
    assert combined.equals(whole)
    micro = combined.filter(pl.col("dataset") == "micro-average")["speed_up"][0]
    assert micro == pytest.approx((40 + 30) / (4 + 6), rel=1e-12)  # Σ n_total / Σ mean answered
    macro = combined.filter(pl.col("dataset") == "macro-average")["speed_up"][0]
    assert macro == pytest.approx((40 / 4 + 30 / 6) / 2, rel=1e-12)
