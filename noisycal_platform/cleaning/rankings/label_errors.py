"""Label-error ranking: intra-/extra-class distance ratio (Gröger et al. 2023 §3.2; SelfClean).

Hand-written because it needs, per sample, the exact nearest same-label *and* nearest other-label
neighbour in O(N·D) memory; a k-NN library would need per-class indexes plus a farthest search.

Scheme: samples are sorted by class and cut into class-aligned *micro-blocks* of
``_TILE // _MICRO_PER_TILE`` (64) points (only the last of a class is short); a tile is up to
``_MICRO_PER_TILE`` consecutive micro-blocks of one class. Each upper-triangle tile pair is one integer
screening product (``_lowp.ScreenRows``: a float32 GEMM stored as int32, within a rigorous
margin of the exact inner products) followed by two reductions, per-micro-block maxima along rows and
along columns, folded into a running maximum per point and tracker (same label / other label). Only
(point, micro-block, block max) triples within the screening margin of the running max are recorded;
afterwards the recorded micro-blocks are recomputed in float32 for their points, and the partners within
the float32 margin of each point's best recomputed value are evaluated exactly in float64 (``_kernels``).
Tiles are spread over a few threads, each with a single-threaded BLAS (``_kernels.ordered_map``).
"""

from __future__ import annotations

import itertools
import threading

import numpy as np

import noisycal_platform.cleaning.rankings._pruned as _pruned  # the module: its switches are read per call

from ._kernels import (
    OrderedMap,
    as_unit_embeddings,
    exact_dists,
    floor32,
    ordered_map,
    screen_margin,
    sim_error_bound,
)
from ._lowp import ScreenRows, screen_rows
from .types import Ranking

__all__ = ["label_error_scores", "rank_label_errors", "ratio_scores"]

_TILE = 2048  # tile side (points): a 16 MiB int32 tile per worker
_MICRO_PER_TILE = 32  # micro-blocks per tile side: micro-block = _TILE // 32 = 64 points
_STRIP_ELEMS = 1 << 18  # tile rows reduced both ways while in cache (1 MiB of int32)
_RECORDS_CAP = 1 << 21  # records held before a compaction pass
_MASKED = np.iinfo(np.int32).min  # below every screening product

_TileOut = tuple[tuple[int, int], np.ndarray | None, np.ndarray | None, np.ndarray | None]


def _validate_labels(labels: object, n: int) -> np.ndarray:
    lab = np.asarray(labels)
    if lab.ndim != 1 or lab.shape[0] != n:
        raise ValueError(f"labels must be 1-D with one entry per embedding row ({n}), got shape {lab.shape}")
    if lab.dtype.kind == "f" and np.isnan(lab).any():
        raise ValueError(f"labels contain NaN at index {int(np.flatnonzero(np.isnan(lab))[0])}")
    if lab.dtype.kind == "O" and any(v is None for v in lab):
        raise ValueError(f"labels contain None at index {next(i for i, v in enumerate(lab) if v is None)}")
    try:
        return np.unique(lab, return_inverse=True)[1].astype(np.int64).ravel()
    except TypeError as exc:  # unorderable mixed objects
        raise ValueError(f"labels must be mutually comparable values, got dtype {lab.dtype}: {exc}") from None


def _block_maxima(s: np.ndarray, micro: int, cols: bool) -> tuple[np.ndarray, np.ndarray | None]:
    """Per-micro-block maxima of tile ``s`` (micro-blocks of ``micro`` rows/columns, the last short).

    ``r[p, j]`` = max of row p over column micro-block j; ``c[i, q]`` = max of column q over row
    micro-block i (only if ``cols``). Strips of rows are reduced both ways while they are in cache;
    one reshape per strip (``np.maximum.reduceat`` is ~30x slower).
    """
    na, nb = s.shape
    ma, mb = -(-na // micro), -(-nb // micro)
    kf = nb // micro  # full column micro-blocks
    wf = kf * micro
    r = np.empty((na, mb), dtype=s.dtype)
    c = np.empty((ma, nb), dtype=s.dtype) if cols else None
    tmp = np.empty(nb, dtype=s.dtype)
    h = max(1, min(micro, _STRIP_ELEMS // nb))
    for i in range(ma):
        lo, hi = i * micro, min(na, (i + 1) * micro)
        for a in range(lo, hi, h):
            b = min(hi, a + h)
            st = s[a:b]
            if kf:
                np.max(st[:, :wf].reshape(b - a, kf, micro), axis=2, out=r[a:b, :kf])
            if wf < nb:
                np.max(st[:, wf:], axis=1, out=r[a:b, kf])
            if c is not None:
                if a == lo:
                    np.max(st, axis=0, out=c[i])
                else:
                    np.max(st, axis=0, out=tmp)
                    np.maximum(c[i], tmp, out=c[i])
    return r, c


class _Nearest:
    """Nearest partner of one kind (same or other label) per point, by micro-block records.

    Exactness. The first pass sees integer screening products Q (``_lowp``), ŝ = Q / S² within ``margin``
    of the exact similarity s. Let w be the exact nearest partner of p and q* the partner with the largest
    ŝ, val[p] = ŝ(p, q*). Then s(p, q*) >= val[p] - margin, d(p, w) <= d(p, q*) gives s(p, w) >= s(p, q*)
    - δ (δ = max |‖x‖² - 1|), so ŝ(p, w) >= val[p] - eps2 (eps2 = ``ScreenRows.eps2`` = 2 margin + 2 δ).
    The micro-block containing w therefore has block max >= final val[p] - eps2 >= val[p] - eps2 at the
    time it was folded (the running max only grows), so (p, block) is recorded and survives every
    compaction and the final filter, which use values of val[p] <= final. The recorded micro-blocks are
    recomputed in float32 (s32', within eps32 = ``sim_error_bound`` of s): s32'(p, w) >= val[p] - margin - δ
    - eps32, above the slack eps2 + 2 eps32 used there. Of those candidates only the ones within
    ``screen_margin`` (2 eps32 + 2 δ) of their point's largest s32' can be the nearest (same argument with
    q' = that partner), and only those are evaluated exactly in float64.
    """

    def __init__(self, n: int, lp: ScreenRows) -> None:
        self.val = np.full(n, _MASKED, dtype=np.int32)  # running max of Q per point
        self.lp = lp
        self.e2 = int(np.ceil(lp.eps2 * lp.scale2)) + 1  # eps2 in Q units, rounded up
        self.p: list[np.ndarray] = []
        self.b: list[np.ndarray] = []
        self.v: list[np.ndarray] = []
        self.size = 0
        self.cap = _RECORDS_CAP

    def fold(self, m: np.ndarray, p0: int, b0: int) -> None:
        """Fold block maxima ``m`` (points p0.., micro-blocks b0..) into the running maxima.

        Records (p, block, max) where the max reaches the *updated* running max minus eps2.
        """
        cur = self.val[p0 : p0 + m.shape[0]]  # view: updated in place
        np.maximum(cur, m.max(axis=1), out=cur)
        line, j = np.nonzero(m >= (cur.astype(np.int64) - self.e2)[:, None])
        self.p.append((p0 + line).astype(np.int32))
        self.b.append((b0 + j).astype(np.int32))
        self.v.append(m[line, j])
        self.size += line.size
        if self.size > self.cap:
            self._compact()
            self.cap = max(_RECORDS_CAP, self.size + self.size // 2)  # bounded memory, amortised O(1) per record

    def _compact(self) -> None:
        """Drop records below the current running max minus eps2, one appended array at a time (bounded
        temporaries), then join the survivors."""
        ps, bs, vs = [], [], []
        while self.p:
            p, b, v = self.p.pop(0), self.b.pop(0), self.v.pop(0)
            keep = v >= self.val[p].astype(np.int64) - self.e2
            ps.append(p[keep])
            bs.append(b[keep])
            vs.append(v[keep])
        self.p, self.b, self.v = [np.concatenate(ps)], [np.concatenate(bs)], [np.concatenate(vs)]
        self.size = int(self.p[0].size)

    def exact_dist(
        self, x: np.ndarray, mb_lo: np.ndarray, mb_hi: np.ndarray, same: bool, pmap: OrderedMap
    ) -> np.ndarray:
        """Exact float64 distance to the nearest partner per point (inf where none was seen)."""
        n = self.val.shape[0]
        out = np.full(n, np.inf)
        if not self.p:
            return out
        self._compact()
        o = np.argsort(self.b[0], kind="stable").astype(np.int32)
        p, b = self.p[0][o], self.b[0][o]
        self.p, self.b, self.v = [], [], []  # the records are not needed again
        del o
        cuts = np.r_[0, np.flatnonzero(np.diff(b)) + 1, b.size]
        slack = self.lp.eps2 + 2.0 * sim_error_bound(x.shape[1])
        floor_sim = self.lp.to_sim(self.val) - slack  # float64, per point
        groups = [
            (int(mb_lo[b[g0]]), int(mb_hi[b[g0]]), p[a : min(g1, a + _TILE)])
            for g0, g1 in itertools.pairwise(cuts.tolist())
            for a in range(g0, g1, _TILE)
        ]

        def candidates(g: tuple[int, int, np.ndarray]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            lo, hi, pts = g
            s2 = x[pts] @ x[lo:hi].T
            flat = np.flatnonzero(s2 >= floor32(floor_sim[pts])[:, None])
            pr, q = pts[flat // (hi - lo)], lo + flat % (hi - lo)
            v = s2.ravel()[flat]
            if same:
                keep = pr != q
                pr, q, v = pr[keep], q[keep], v[keep]
            return pr, q, v

        eps2_32 = screen_margin(x)
        best = np.full(n, -np.inf)  # running max of s32' per point
        kp: list[np.ndarray] = []
        kq: list[np.ndarray] = []
        kv: list[np.ndarray] = []
        for pr, q, v in pmap(candidates, groups):
            v64 = v.astype(np.float64)
            np.maximum.at(best, pr, v64)
            keep = v64 >= best[pr] - eps2_32  # best only grows: a superset of the final filter
            kp.append(pr[keep])
            kq.append(q[keep])
            kv.append(v64[keep])
        pr, q, v = np.concatenate(kp), np.concatenate(kq), np.concatenate(kv)
        keep = v >= best[pr] - eps2_32
        pr, q = pr[keep], q[keep]
        np.minimum.at(out, pr, exact_dists(x, pr, q))
        return out


class _Farthest:
    """Running min screening similarity per point plus the (point, partner, ŝ) pairs that may attain it.

    Only for singleton classes (single-line tiles), so plain per-pair screening is cheap. Values in
    similarity units (ŝ = Q / S², negated: the farthest partner has the largest -ŝ).
    """

    def __init__(self, n: int, eps2: float) -> None:
        self.val = np.full(n, -np.inf)  # in units of -s
        self.eps2 = eps2
        self.p: list[np.ndarray] = []
        self.q: list[np.ndarray] = []
        self.s: list[np.ndarray] = []

    def update(self, s: np.ndarray, p0: int, q0: int) -> None:
        """Fold block ``s`` (-ŝ; points p0.. along rows, partners q0.. along columns)."""
        t = s
        cur = self.val[p0 : p0 + t.shape[0]]
        np.maximum(cur, t.max(axis=1), out=cur)
        line, partner = np.nonzero(t >= (cur - self.eps2)[:, None])
        self.p.append(p0 + line)
        self.q.append(q0 + partner)
        self.s.append(t[line, partner])

    def exact_dist(self, x: np.ndarray, n: int) -> np.ndarray:
        """Exact float64 distance to the farthest partner per point (-inf where none was seen)."""
        out = np.full(n, -np.inf)
        if not self.p:
            return out
        p, q, s = np.concatenate(self.p), np.concatenate(self.q), np.concatenate(self.s)
        keep = s >= self.val[p] - self.eps2
        np.maximum.at(out, p[keep], exact_dists(x, p[keep], q[keep]))
        return out


def label_error_scores(emb: np.ndarray, labels: object) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Per-sample ``(score, d_same, d_diff)``, see :func:`rank_label_errors`."""
    x0 = as_unit_embeddings(emb)
    n = x0.shape[0]
    codes = _validate_labels(labels, n)
    n_cls = int(codes.max()) + 1
    if n_cls == 1:
        return np.ones(n), np.full(n, np.nan), np.full(n, np.inf)
    if n >= _pruned.PRUNE_MIN_ROWS and (pruned := _pruned.pruned_label_distances(x0, codes)) is not None:
        return ratio_scores(*pruned), *pruned
    perm = np.argsort(codes, kind="stable")
    x = x0[perm]
    del x0  # only the class-sorted copy is used from here on
    lp = screen_rows(x)
    eps2 = lp.eps2
    cs = codes[perm]
    counts = np.bincount(cs, minlength=n_cls)
    starts = np.concatenate([[0], np.cumsum(counts)])
    micro = max(1, _TILE // _MICRO_PER_TILE)
    tile = micro * _MICRO_PER_TILE
    # class-aligned micro-blocks [mb_lo, mb_hi) (only the last of a class is short)
    mb_lo = np.concatenate([np.arange(starts[c], starts[c + 1], micro) for c in range(n_cls)])
    mb_hi = np.minimum(mb_lo + micro, starts[1:][cs[mb_lo]])
    tiles = []  # (first micro-block, first point, end point, class); never straddles a class
    for c in range(n_cls):
        m0, m1 = (int(v) for v in np.searchsorted(mb_lo, [starts[c], starts[c + 1]]))
        for m in range(m0, m1, _MICRO_PER_TILE):
            tiles.append((m, int(mb_lo[m]), int(mb_hi[min(m + _MICRO_PER_TILE, m1) - 1]), c))
    singleton = counts == 1
    local = threading.local()

    def tile_maxima(pair: tuple[int, int]) -> _TileOut:
        """One GEMM + reductions (runs in a worker): row maxima, column maxima, singleton block."""
        _, alo, ahi, acls = tiles[pair[0]]
        _, blo, bhi, bcls = tiles[pair[1]]
        if not hasattr(local, "buf"):
            local.buf = np.empty(min(tile, n) ** 2, dtype=np.int32)
        s = local.buf[: (ahi - alo) * (bhi - blo)].reshape(ahi - alo, bhi - blo)
        lp.gemm(alo, ahi, blo, bhi, s)
        if pair[0] == pair[1]:  # diagonal tile, same class: its rows cover every ordered pair
            if s.shape[0] == 1:
                return pair, None, None, None
            np.fill_diagonal(s, _MASKED)
            return pair, _block_maxima(s, micro, cols=False)[0], None, None
        r, c = _block_maxima(s, micro, cols=True)
        edge = -lp.to_sim(s) if acls != bcls and (singleton[acls] or singleton[bcls]) else None
        return pair, r, c, edge

    same = _Nearest(n, lp)
    diff = _Nearest(n, lp)
    far = _Farthest(n, eps2)  # singleton classes: farthest other-label sample
    pairs = ((i, j) for i in range(len(tiles)) for j in range(i, len(tiles)))  # lazy: O(#tiles²) pairs
    with ordered_map(n > tile) as pmap:
        for (i, j), r, c, edge in pmap(tile_maxima, pairs):
            ma0, alo, _, acls = tiles[i]
            mb0, blo, _, bcls = tiles[j]
            tgt = same if acls == bcls else diff
            if r is not None:
                tgt.fold(r, alo, mb0)
            if c is not None:
                tgt.fold(c.T, blo, ma0)
            if edge is not None:
                if singleton[acls]:
                    far.update(edge, alo, blo)
                if singleton[bcls]:
                    far.update(edge.T, blo, alo)
        d_same_s = same.exact_dist(x, mb_lo, mb_hi, True, pmap)
        d_diff_s = diff.exact_dist(x, mb_lo, mb_hi, False, pmap)
    single_rows = singleton[cs]
    d_same_s[single_rows] = far.exact_dist(x, n)[single_rows]

    d_same = np.empty(n)
    d_diff = np.empty(n)
    d_same[perm] = d_same_s
    d_diff[perm] = d_diff_s
    return ratio_scores(d_same, d_diff), d_same, d_diff


def ratio_scores(d_same: np.ndarray, d_diff: np.ndarray) -> np.ndarray:
    """score = d_diff² / (d_same² + d_diff²) (SelfClean), 0/0 -> 0.5 (see :func:`rank_label_errors`)."""
    num = d_diff * d_diff
    den = d_same * d_same + num
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(den > 0.0, num / np.where(den > 0.0, den, 1.0), 0.5)


def rank_label_errors(emb: np.ndarray, labels: object) -> Ranking:
    """Rank samples by the intra-/extra-class distance ratio, most suspicious first.

    score(i) = d_diff(i)² / (d_same(i)² + d_diff(i)²), ascending (SelfClean), where d = (1 - cos)/2,
    d_same = distance to the nearest *other* sample with the same label and d_diff = distance to the
    nearest sample with a different label.

    Conventions:
    - a class with a single member uses the **largest** distance to the other-label samples as d_same;
    - 0/0 (an exact duplicate with the same label *and* one with a different label) scores **0.5**,
      the value of the ratio whenever d_same = d_diff; an exact duplicate with only a different label
      scores 0 and comes first;
    - only one distinct label (no other-label neighbour exists, d_diff = inf): every score is 1.0;
    - ties are ordered by sample index (stable sort).

    Exact (equal to a float64 brute force): class-sorted upper-triangle screening tiles are reduced
    to per-micro-block (64-point) maxima per point; only micro-blocks within the screening margin of a
    point's running max are kept, recomputed in float32, and their partners re-evaluated in float64 (see
    the module docstring, ``_Nearest``, ``_lowp`` and ``_kernels``). Memory O(N·D) plus one 2048×2048 int32
    tile per worker thread (at most 4) and the records; the upper triangle is computed once (each tile
    updates its rows and columns).

    From ``_pruned.PRUNE_MIN_ROWS`` rows the cell-pruned form (``_pruned.pruned_label_distances``: the same
    distances, most of the N² inner products skipped on clustered embeddings) runs first; this scan runs where it
    declines.
    """
    score, _, _ = label_error_scores(emb, labels)
    order = np.argsort(score, kind="stable")
    return Ranking(order, score)
