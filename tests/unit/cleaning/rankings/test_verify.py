"""Verified near-duplicate search: exact k-NN candidates, SIFT matching, geometric verification, re-ranking."""

from __future__ import annotations

import numpy as np
import polars as pl
import pytest

from noisycal_platform.cleaning.rankings.verify import (
    LocalFeatures,
    candidate_pairs,
    exact_knn,
    extract_sift,
    rank_verified,
    sift_from_files,
    verified_near_duplicates,
    verify_pairs,
)

from ._brute import clustered, dense_dist, unit32


def _brute_knn(x: np.ndarray, k: int) -> tuple[np.ndarray, np.ndarray]:
    d = dense_dist(x)
    n = len(d)
    idx = np.empty((n, k), np.int64)
    for i in range(n):  # reference only (small N)
        cols = np.array([j for j in range(n) if j != i])
        o = np.lexsort((cols, d[i, cols]))[:k]
        idx[i] = cols[o]
    return idx, np.take_along_axis(d, idx, axis=1)


@pytest.mark.usefixtures("small_tiles")
def test_exact_knn_equals_brute_force_with_ties():
    x = clustered(300, dim=16, seed=4)
    x[50] = x[10]  # exact duplicates: ties at d = 0 resolved by column index
    x[60] = x[10]
    x = unit32(x)
    idx, dist = exact_knn(x, 7)
    bidx, bdist = _brute_knn(x, 7)
    np.testing.assert_array_equal(idx, bidx)
    np.testing.assert_allclose(dist, bdist, rtol=1e-9, atol=1e-15)
    assert idx[10, 0] == 50 and idx[10, 1] == 60 and dist[10, 0] == 0.0  # exact: identical rows give d = 0


def test_exact_knn_clamps_k_and_rejects_bad_input():
    x = unit32(np.random.default_rng(0).standard_normal((4, 3)))
    idx, _ = exact_knn(x, 10)
    assert idx.shape == (4, 3)
    assert exact_knn(x[:1], 3)[0].shape == (1, 0)
    with pytest.raises(ValueError, match="positive integer"):
        exact_knn(x, 0)


def test_candidates_hold_the_global_top_pairs():
    x = unit32(clustered(200, dim=12, seed=1))
    k = 5
    cand = candidate_pairs(exact_knn(x, k)[0])
    assert np.all(cand[:, 0] < cand[:, 1])
    assert len(np.unique(cand, axis=0)) == len(cand) <= 200 * k
    d = dense_dist(x)
    iu = np.triu_indices(200, 1)
    top = np.lexsort((iu[1], iu[0], d[iu]))[:k]  # global top-k pairs by d
    have = {tuple(p) for p in cand.tolist()}
    assert all((int(iu[0][t]), int(iu[1][t])) in have for t in top)


def _texture(seed: int, size: int = 128) -> np.ndarray:
    """Blob texture with many corners (uint8 size×size), no symmetry."""
    from scipy.ndimage import gaussian_filter

    rng = np.random.default_rng(seed)
    g = gaussian_filter(rng.random((size, size)), 2.0)
    g = (g - g.min()) / (g.max() - g.min())
    return (g * 255).round().astype(np.uint8)


def _rotated(img: np.ndarray, angle: float) -> np.ndarray:
    from scipy.ndimage import rotate

    return rotate(img, angle, reshape=False, order=1, mode="reflect")


@pytest.fixture(scope="module", params=["opencv", "kornia"])
def scene(request) -> LocalFeatures:
    pytest.importorskip({"opencv": "cv2", "kornia": "kornia"}[request.param])
    a, b = _texture(0), _texture(1)
    imgs = np.stack([a, np.rot90(a).copy(), _rotated(a, 30.0), b, np.rot90(b).copy()])
    return extract_sift(imgs, num_features=128, backend=request.param, num_threads=1)


def test_identical_images_every_valid_keypoint_is_an_inlier(scene):
    n_valid = int(scene.valid[0].sum())
    got = verify_pairs(scene, np.array([[0, 0]]))[0]
    # every keypoint matches itself at distance 0; the identity maps every point onto itself
    assert 0.9 * n_valid <= got <= n_valid


def test_rotated_copies_verify_and_different_textures_do_not(scene):
    pairs = np.array([[0, 1], [0, 2], [3, 4], [0, 3], [1, 4], [2, 3]])
    inl = verify_pairs(scene, pairs, batch_size=2)
    same, diff = inl[:3], inl[3:]
    assert same.min() >= 15, inl
    assert diff.max() <= 6, inl
    np.testing.assert_array_equal(inl, verify_pairs(scene, pairs, batch_size=64))  # batching-independent


def test_verify_runs_on_one_torch_thread_and_restores_the_count(scene):
    torch = pytest.importorskip("torch")
    pairs = np.array([[0, 1], [0, 2], [3, 4], [0, 3], [1, 4], [2, 3]])
    before = torch.get_num_threads()
    torch.set_num_threads(2)
    try:
        inl = verify_pairs(scene, pairs)
        assert torch.get_num_threads() == 2  # the caller's count is back
    finally:
        torch.set_num_threads(before)
    np.testing.assert_array_equal(inl, verify_pairs(scene, pairs, batch_size=1))  # pair by pair, the same counts


def test_chunks_verified_on_several_threads_give_the_counts_of_one_thread(scene, monkeypatch):
    from noisycal_platform.cleaning.rankings import verify

    rng = np.random.default_rng(3)
    pairs = rng.integers(0, len(scene), size=(23, 2))
    one = verify_pairs(scene, pairs, num_threads=1)
    # each pair alone (its own chunk, its own batch): the reference the chunked, threaded call must equal
    alone = np.array([verify_pairs(scene, p[None, :], num_threads=1)[0] for p in pairs])
    np.testing.assert_array_equal(one, alone)
    monkeypatch.setattr(verify, "VERIFY_CHUNK_PAIRS", 4)  # 6 chunks, shared by 3 threads
    np.testing.assert_array_equal(verify_pairs(scene, pairs, num_threads=3, batch_size=3), alone)


def test_verify_rejects_bad_arguments(scene):
    with pytest.raises(ValueError, match="indices"):
        verify_pairs(scene, np.array([[0, 9]]))
    with pytest.raises(ValueError, match="num_threads"):
        verify_pairs(scene, np.array([[0, 1]]), num_threads=0)
    with pytest.raises(ValueError, match="ratio"):
        verify_pairs(scene, np.array([[0, 1]]), ratio=1.5)


def test_rank_verified_order():
    pairs = np.array([[0, 1], [0, 2], [1, 2], [2, 3], [3, 4]])
    dist = np.array([0.01, 0.20, 0.05, 0.05, 0.30])
    inl = np.array([3, 40, 12, 12, 0])
    r = rank_verified(pairs, dist, inl, min_inliers=10, combine="inliers")
    # verified by inliers desc: (0,2)=40, then (1,2) and (2,3) tie at 12 and d -> (i, j); rest by d
    np.testing.assert_array_equal(r.pairs, [[0, 2], [1, 2], [2, 3], [0, 1], [3, 4]])
    np.testing.assert_array_equal(r.verified, [True, True, True, False, False])
    with pytest.raises(ValueError, match="differ in length"):
        rank_verified(pairs, dist[:3], inl, min_inliers=1)


def test_rank_verified_combinations_of_inliers_and_distance():
    pairs = np.array([[0, 1], [0, 2], [1, 2], [1, 3], [2, 3], [3, 4]])
    dist = np.array([0.01, 0.08, 0.05, 0.06, 0.05, 0.30])
    inl = np.array([3, 40, 12, 25, 11, 0])
    tail = [[0, 1], [3, 4]]  # unverified (< 10 inliers): by d in every order
    by = {c: rank_verified(pairs, dist, inl, min_inliers=10, combine=c, cap=20).pairs.tolist()
          for c in ("inliers", "capped", "rank_sum")}
    assert by["inliers"] == [[0, 2], [1, 3], [1, 2], [2, 3], *tail]
    # capped at 20: (0, 2) and (1, 3) tie at 20 and d decides
    assert by["capped"] == [[1, 3], [0, 2], [1, 2], [2, 3], *tail]
    # Borda: inlier ranks 1, 2, 3, 4 for (0,2), (1,3), (1,2), (2,3); d ranks 4, 3, 1.5, 1.5 (tie: mean rank)
    # sums 5, 5, 4.5, 5.5; the tie at 5 by d
    assert by["rank_sum"] == [[1, 2], [1, 3], [0, 2], [2, 3], *tail]
    with pytest.raises(ValueError, match="combine"):
        rank_verified(pairs, dist, inl, min_inliers=10, combine="product")


def test_verified_search_puts_true_copies_first(scene):
    # embeddings where each true copy is a candidate but an unrelated image is closer in embedding space
    rng = np.random.default_rng(3)
    base = rng.standard_normal((5, 8))
    emb = base.copy()
    emb[1] = base[0] + 0.30 * rng.standard_normal(8)
    emb[2] = base[0] + 0.35 * rng.standard_normal(8)
    emb[3] = base[0] + 0.05 * rng.standard_normal(8)  # a different texture, nearest to image 0
    emb[4] = base[3] + 0.05 * rng.standard_normal(8)
    v = verified_near_duplicates(emb, scene, k=4, min_inliers=10)
    first = {tuple(p) for p in v.pairs[: int(v.verified.sum())].tolist()}
    assert {(0, 1), (0, 2), (1, 2), (3, 4)} <= first
    assert not first & {(0, 3), (0, 4), (1, 3), (2, 3)}
    with pytest.raises(ValueError, match="rows"):
        verified_near_duplicates(emb[:4], scene, k=2)


def test_images_of_different_sizes_and_their_own_tolerance():
    pytest.importorskip("kornia")
    a = _texture(5, 160)
    crop = a[10:130, 20:150].copy()  # a crop of a, another size: the same scene at the same scale
    feats = extract_sift([a, crop, _texture(6, 96)], num_features=96, num_threads=1)
    np.testing.assert_allclose(feats.diagonal, [np.hypot(160, 160), np.hypot(120, 130), np.hypot(96, 96)])
    inl = verify_pairs(feats, np.array([[0, 1], [0, 2]]))
    assert inl[0] >= 15 and inl[1] <= 6, inl
    with pytest.raises(ValueError, match=r"gray\[1\]"):
        extract_sift([a, a.astype(np.float32)])


def test_sift_from_files_decodes_each_file_once_shrinks_large_ones_and_names_a_bad_file(tmp_path):
    pytest.importorskip("cv2")
    from PIL import Image

    a = _texture(8, 160)
    Image.fromarray(a).save(tmp_path / "a.png")
    Image.fromarray(np.rot90(a).copy()).save(tmp_path / "a_rot.png")
    Image.fromarray(np.kron(_texture(9, 100), np.ones((2, 4), np.uint8))).save(tmp_path / "wide.png")  # 400×200
    files = [tmp_path / "a.png", tmp_path / "a_rot.png", tmp_path / "wide.png"]
    feats = sift_from_files(files, max_side=200, num_features=96, num_threads=2)
    np.testing.assert_allclose(feats.diagonal, [np.hypot(160, 160), np.hypot(160, 160), np.hypot(200, 100)])
    assert feats.descriptors.dtype == np.uint8 and feats.valid.sum(1).min() > 0
    inl = verify_pairs(feats, np.array([[0, 1], [0, 2]]))
    assert inl[0] >= 15 and inl[1] <= 6, inl
    one = sift_from_files(files, max_side=200, num_features=96, num_threads=1)  # threads do not change it
    np.testing.assert_array_equal(one.descriptors, feats.descriptors)
    (tmp_path / "bad.png").write_bytes(b"not an image")
    with pytest.raises(ValueError, match=r"bad\.png"):
        sift_from_files([tmp_path / "a.png", tmp_path / "bad.png"])


def test_sift_from_files_scale_is_sift_of_the_lanczos_resized_image(tmp_path):
    pytest.importorskip("cv2")
    from PIL import Image

    a = _texture(10, 160)
    Image.fromarray(a).save(tmp_path / "a.png")
    Image.fromarray(np.rot90(a).copy()).save(tmp_path / "a_rot.png")
    files = [tmp_path / "a.png", tmp_path / "a_rot.png"]
    half = sift_from_files(files, num_features=64, num_threads=2, scale=0.5)
    # the same features as OpenCV SIFT on images resized by hand (Pillow Lanczos to 80×80)
    small = [np.asarray(Image.open(f).convert("L").resize((80, 80), Image.Resampling.LANCZOS)) for f in files]
    ref = extract_sift(small, num_features=64, num_threads=1)
    np.testing.assert_array_equal(half.descriptors, ref.descriptors)
    np.testing.assert_array_equal(half.frames, ref.frames)
    np.testing.assert_allclose(half.diagonal, [np.hypot(80, 80)] * 2)
    assert verify_pairs(half, np.array([[0, 1]]))[0] >= 8
    Image.fromarray(_texture(11, 40)[:, :20].copy()).save(tmp_path / "narrow.png")  # 20×40: kept at 16 px wide
    small = sift_from_files([tmp_path / "narrow.png"], num_features=16, scale=0.5)
    np.testing.assert_allclose(small.diagonal, [np.hypot(16, 32)])
    for bad in (0, 1.5, True):
        with pytest.raises(ValueError, match="scale"):
            sift_from_files(files, scale=bad)


def test_reranked_table_is_the_verified_dino_ranking_and_the_plain_baseline_one(tmp_path, monkeypatch):
    """``neighbour_rankings(rerank=True)``: the DINO rows are ``verified_near_duplicates`` of the DINO vectors and the
    files' SIFT features, the baseline rows its plain top-k pairs, the label errors those without rerank; the plain
    DINO pairs, which the verified ranking replaces, are never computed (one plain near-duplicate pass: the
    baseline's)."""
    pytest.importorskip("cv2")
    from PIL import Image

    from noisycal_platform.cleaning import rankings as formulas
    from noisycal_platform.cleaning.pipeline import rankings as pipeline_rankings
    from noisycal_platform.cleaning.pipeline.embeddings import _embedding_frame
    from noisycal_platform.cleaning.rankings.types import PairRanking

    n, rng = 12, np.random.default_rng(5)
    paths = []
    for i in range(n):  # six textures, each with a rotated copy
        t = _texture(20 + i // 2, 96)
        paths.append(tmp_path / f"im{i:02d}.png")
        Image.fromarray(t if i % 2 == 0 else np.rot90(t).copy()).save(paths[-1])
    images = pl.DataFrame({"idx": np.arange(n), "file_name": [p.name for p in paths], "path": [str(p) for p in paths],
                           "label": [str(i % 3) for i in range(n)]})
    dino = rng.standard_normal((n, 8)).astype(np.float32)
    base = rng.standard_normal((n, 6)).astype(np.float32)
    emb = _embedding_frame(images, dino, base)

    calls = []
    plain_pass = formulas.rank_near_duplicates
    monkeypatch.setattr(formulas, "rank_near_duplicates", lambda x, k: calls.append(x.shape) or plain_pass(x, k))
    pairs, errors = pipeline_rankings.neighbour_rankings(images, emb, 20, rerank=True, k=3)
    assert calls == [base.shape]  # the baseline's plain pass only
    monkeypatch.setattr(formulas, "rank_near_duplicates", plain_pass)

    feats = sift_from_files(paths, max_side=pipeline_rankings.VERIFY_MAX_SIDE, scale=pipeline_rankings.VERIFY_SCALE)
    want = verified_near_duplicates(dino, feats, k=3)
    got = pairs.filter(pl.col("embedding_kind") == "dino").sort("rank")
    files = images["file_name"].to_list()
    assert got["file_name_1"].to_list() == [files[i] for i in want.pairs[:, 0]]
    assert got["file_name_2"].to_list() == [files[j] for j in want.pairs[:, 1]]
    assert got["inliers"].to_list() == want.inliers.tolist() and got["verified"].to_list() == want.verified.tolist()
    np.testing.assert_array_equal(got["score"].to_numpy(), want.dist)
    assert got["verified"].sum() >= 1  # a rotated copy verifies

    plain_base = PairRanking.from_frame(pairs.filter(pl.col("embedding_kind") == "baseline"))
    direct = plain_pass(base, 20)
    np.testing.assert_array_equal(plain_base.pairs, direct.pairs)
    np.testing.assert_array_equal(plain_base.scores, direct.scores)
    assert pairs["embedding_kind"].unique(maintain_order=True).to_list() == ["dino", "baseline"]
    assert errors.equals(pipeline_rankings.rank_label_errors(images, emb))
