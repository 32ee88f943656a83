"""The two-pass verification (pairs grouped by match count) gives each pair the inlier count of the one-pass
form it replaced (every pair's hypotheses padded to its input batch's largest match count)."""

from __future__ import annotations

import numpy as np
import pytest

from noisycal_platform.cleaning.rankings import verify
from noisycal_platform.cleaning.rankings.verify import LocalFeatures, extract_sift, verify_pairs

torch = pytest.importorskip("torch")
pytest.importorskip("cv2")


def _one_pass(features: LocalFeatures, pairs: np.ndarray, *, ratio: float = 0.8, inlier_tol: float = 0.03,
              max_scale: float = 4.0, batch_size: int = 64) -> np.ndarray:
    """The verification before the two-pass form (commit 9264715), kept as the reference."""
    frames = torch.from_numpy(np.ascontiguousarray(features.frames, dtype=np.float32))
    desc = torch.from_numpy(np.ascontiguousarray(features.descriptors))
    valid = torch.from_numpy(np.ascontiguousarray(features.valid))
    tol2_img = torch.from_numpy((inlier_tol * np.asarray(features.diagonal, np.float64)) ** 2).float()
    lo_s, hi_s = 1.0 / max_scale ** 2, max_scale ** 2
    eye = torch.eye(2)
    out = np.zeros(pairs.shape[0], np.int64)
    with torch.no_grad():
        for a in range(0, pairs.shape[0], batch_size):
            pi = torch.from_numpy(pairs[a:a + batch_size, 0])
            pj = torch.from_numpy(pairs[a:a + batch_size, 1])
            v1, v2 = valid[pi], valid[pj]
            dm = torch.cdist(desc[pi].float(), desc[pj].float())
            dm.masked_fill_(~v2[:, None, :], float("inf"))
            two = dm.topk(2, dim=-1, largest=False)
            best, second, nn = two.values[..., 0], two.values[..., 1], two.indices[..., 0]
            ok = v1 & torch.isfinite(best) & (best < ratio * second)
            keep = int(ok.sum(1).max()) if ok.numel() else 0
            if keep == 0:
                continue
            front = torch.argsort((~ok).to(torch.int8), dim=1, stable=True)[:, :keep]
            ok = torch.gather(ok, 1, front)
            nn = torch.gather(nn, 1, front)
            f1 = torch.gather(frames[pi], 1, front[..., None, None].expand(-1, -1, 2, 3))
            f2 = torch.gather(frames[pj], 1, nn[..., None, None].expand(-1, -1, 2, 3))
            a1 = torch.where(ok[..., None, None], f1[..., :2], eye)
            m = f2[..., :2] @ torch.linalg.inv(a1)
            p1, p2 = f1[..., 2], f2[..., 2]
            t = p2 - (m @ p1[..., None])[..., 0]
            det = torch.linalg.det(m).abs()
            hyp = ok & (det >= lo_s) & (det <= hi_s)
            pred = torch.einsum("bmij,bnj->bmni", m, p1) + t[:, :, None, :]
            err2 = ((pred - p2[:, None, :, :]) ** 2).sum(-1)
            inl = (err2 <= tol2_img[pj][:, None, None]) & ok[:, None, :] & hyp[:, :, None]
            out[a:a + pi.shape[0]] = inl.sum(-1).amax(-1).numpy()
    return out


@pytest.fixture(scope="module")
def mixed() -> LocalFeatures:
    """Textures, their rotations, crops and noisy copies: pairs with 0 to ~all keypoints matched."""
    from scipy.ndimage import gaussian_filter, rotate

    rng = np.random.default_rng(3)
    imgs = []
    for _ in range(4):
        g = gaussian_filter(rng.random((128, 128)), 2.0)
        g = ((g - g.min()) / (g.max() - g.min()) * 255).round().astype(np.uint8)
        noisy = np.clip(g + rng.normal(0, 12, g.shape), 0, 255).astype(np.uint8)
        imgs += [g, np.rot90(g).copy(), rotate(g, 20.0, reshape=False, order=1, mode="reflect"), noisy]
    return extract_sift(np.stack(imgs), num_features=96, num_threads=1)


def test_two_pass_equals_one_pass(mixed, monkeypatch):
    n = len(mixed)
    iu = np.triu_indices(n)
    pairs = np.stack(iu, 1)[np.random.default_rng(0).permutation(len(iu[0]))]
    ref = _one_pass(mixed, pairs, batch_size=16)
    assert len(np.unique(ref)) > 10  # match counts from none to many
    np.testing.assert_array_equal(verify_pairs(mixed, pairs), ref)
    np.testing.assert_array_equal(verify_pairs(mixed, pairs, batch_size=5), ref)
    monkeypatch.setattr(verify, "HYPOTHESIS_BLOCK", 500)  # many small blocks
    monkeypatch.setattr(verify, "MAX_BLOCK_PAIRS", 3)
    np.testing.assert_array_equal(verify_pairs(mixed, pairs, batch_size=7), ref)


def test_no_pairs_and_no_matches(mixed):
    assert verify_pairs(mixed, np.empty((0, 2), np.int64)).shape == (0,)
    empty = LocalFeatures(mixed.frames, mixed.descriptors, np.zeros_like(mixed.valid), mixed.diagonal)
    np.testing.assert_array_equal(verify_pairs(empty, np.array([[0, 1], [2, 3]])), [0, 0])
