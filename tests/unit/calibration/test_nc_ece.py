"""NC-ECE: per-bin reference loop from the seed, DuckDB peer, identity channels, worked examples."""

from __future__ import annotations

import itertools
import math
from fractions import Fraction

import numpy as np
import pytest

from noisycal_platform.calibration import (
    Channel,
    NotIdentifiableError,
    aggregation_weights,
    bin_index,
    binned_ece,
    corrected_labels,
    estimate_channels,
    nc_ece,
)
from tests.shared_data import needs_shared, shared_path


def _nc_ece_reference(scores, annotations, channels, weights, n_bins):
    """Straight from Hanada and Futami 2026 §3: per bin, Σ_i (Ỹ_i − s_i) with Ỹ_i renormalised over present
    annotators."""
    total = 0.0
    n_used = 0
    for m in range(n_bins):
        acc = 0.0
        for s, row in zip(scores, annotations, strict=True):
            if min(math.floor(s * n_bins), n_bins - 1) != m:
                continue
            num = den = 0.0
            for x, c, w in zip(row, channels, weights, strict=True):
                if not math.isnan(x):
                    num += w * (x - c.fpr) / (1 - c.fpr - c.fnr)
                    den += w
            if den > 0:
                acc += num / den - s
                n_used += 1
        total += abs(acc)
    return total / n_used


EDGE_SCORES = [0.0, 0.3, 0.5, 0.6, 0.7, 1.0, 0.2999999999, 2 / 3, 14 / 15]


def _data(n=400, k=3, seed=0, missing=0.25):
    rng = np.random.default_rng(seed)
    s = np.concatenate([rng.random(n - len(EDGE_SCORES)), EDGE_SCORES])
    y = rng.random(n) < s**1.3
    fpr, fnr = np.array([0.1, 0.05, 0.25, 0.15][:k]), np.array([0.2, 0.1, 0.15, 0.05][:k])
    a = np.where(y[:, None], rng.random((n, k)) >= fnr, rng.random((n, k)) < fpr).astype(float)
    a[rng.random((n, k)) < missing] = np.nan
    a[:5] = np.nan  # unannotated items
    return s, a, [Channel(f, b) for f, b in zip(fpr, fnr, strict=True)]


def test_bin_rule_edges():
    s = np.array([0.0, 0.3, 0.6, 0.7, 1.0, 0.9999999])
    # floor(s·10) — not np.digitize with linspace edges, which puts 0.3/0.6/0.7 one bin lower
    np.testing.assert_array_equal(bin_index(s, 10), [0, 3, 6, 7, 9, 9])


@pytest.mark.parametrize("weights", ["iv", "equal", "gap", "sqgap", np.array([0.2, 0.0, 0.8])])
@pytest.mark.parametrize("n_bins", [1, 10, 15])
def test_matches_reference_loop(weights, n_bins):
    s, a, chans = _data()
    res = nc_ece(s, a, chans, weights=weights, n_bins=n_bins, prevalence=0.45)
    w = res.weights
    assert w.sum() == pytest.approx(1.0)
    assert res.value == pytest.approx(_nc_ece_reference(s, a, chans, w, n_bins), rel=1e-9, abs=1e-12)
    assert res.n_unannotated == int(np.isnan(a).all(axis=1).sum()) >= 5
    assert res.n_items + res.n_unannotated + res.n_zero_weight == len(s)
    assert res.bins["n"].sum() == res.n_items


def test_int8_path_and_many_annotator_path_agree_with_float_path():
    s, a, chans = _data(k=4)
    ref = nc_ece(s, a, chans, prevalence=0.4)
    a8 = np.where(np.isnan(a), -1, a).astype(np.int8)
    assert nc_ece(s, a8, chans, prevalence=0.4).value == pytest.approx(ref.value, rel=1e-9, abs=1e-12)
    # 11 annotators forces the per-item path (4^11·15 cells is above the pattern-table limit)
    a11 = np.concatenate([a] + [a[:, :1]] * 7, axis=1)
    c11 = chans + [chans[0]] * 7
    w11 = np.array([0.1] * 4 + [0.6 / 7] * 7)
    r11 = nc_ece(s, a11, c11, weights=w11)
    assert r11.value == pytest.approx(_nc_ece_reference(s, a11, c11, w11 / w11.sum(), 15), rel=1e-9, abs=1e-12)


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5, 6])
def test_pattern_kernel_every_annotator_count_and_dtype_matches_reference_loop(k):
    """The cell kernel reads K <= 4 digit rows as 32-bit words (a multiply and a shift) and K > 4 by shifted
    adds; each K and each annotation dtype must give the seed's per-bin loop and the exact per-bin counts."""
    s, a, chans = _data(n=300, k=4, seed=k)
    a = np.concatenate([a, a[:, ::-1]], axis=1)[:, :k]
    chans = (chans + chans[::-1])[:k]
    w = np.linspace(1.0, 2.0, k)
    expect = _nc_ece_reference(s, a, chans, w / w.sum(), 15)
    a8 = np.where(np.isnan(a), -1, a)
    annotated = ~np.isnan(a).all(axis=1)
    n_expect = np.bincount(np.minimum(np.floor(s[annotated] * 15).astype(int), 14), minlength=15)
    for arr in (a, a8.astype(np.int8), a8.astype(np.int16), a8.astype(np.int64)):
        res = nc_ece(s, arr, chans, weights=w)
        assert res.value == pytest.approx(expect, rel=1e-9, abs=1e-12)
        np.testing.assert_array_equal(res.bins["n"].to_numpy(), n_expect[n_expect > 0])


def test_score_just_above_one_among_exact_ones_is_named():
    """s = 1 is row B (folded into B − 1); a score one ulp above 1 next to many exact ones must still raise."""
    s, a, chans = _data(n=60)
    s[:40] = 1.0
    s[41] = np.nextafter(1.0, 2.0)
    with pytest.raises(ValueError, match="scores"):  # one cell: 40 + (1 + 2^-52) rounds to 41 in float64
        nc_ece(s, np.ones_like(a), chans)
    a8 = np.where(np.isnan(a), -1, a).astype(np.int16)
    for bad in (255, -2, 2):  # 255 + 1 would wrap to a valid digit in 8 bits
        wrong = a8.copy()
        wrong[3, 1] = bad
        with pytest.raises(ValueError, match=f"got .*{bad}"):
            nc_ece(np.full(60, 0.5), wrong, chans)
    wrong8 = a8.astype(np.int8)
    wrong8[3, 1] = -128
    with pytest.raises(ValueError, match="-128"):
        nc_ece(np.full(60, 0.5), wrong8, chans)


def test_zero_weight_items_are_excluded_and_counted():
    s, a, chans = _data()
    only_first = np.isnan(a[:, 1]) & np.isnan(a[:, 2]) & ~np.isnan(a[:, 0])
    res = nc_ece(s, a, chans, weights=np.array([0.0, 0.5, 0.5]))
    assert res.n_zero_weight == int(only_first.sum()) > 0


def test_duckdb_peer_on_long_table():
    duckdb = pytest.importorskip("duckdb")
    s, a, chans = _data(n=300)
    w = aggregation_weights(chans, 0.45)
    items, annots = np.nonzero(~np.isnan(a))
    con = duckdb.connect()
    con.execute("CREATE TABLE pred(item INTEGER, score DOUBLE)")
    con.executemany("INSERT INTO pred VALUES (?, ?)", [(i, float(v)) for i, v in enumerate(s)])
    con.execute("CREATE TABLE ann(item INTEGER, annot INTEGER, label DOUBLE)")
    con.executemany(
        "INSERT INTO ann VALUES (?, ?, ?)",
        [(int(i), int(j), float(a[i, j])) for i, j in zip(items, annots, strict=True)],
    )
    con.execute("CREATE TABLE ch(annot INTEGER, fpr DOUBLE, gap DOUBLE, weight DOUBLE)")
    con.executemany("INSERT INTO ch VALUES (?, ?, ?, ?)", [(j, c.fpr, c.gap, float(w[j])) for j, c in enumerate(chans)])
    rows = con.execute(
        """
        WITH y AS (
          SELECT item, sum(weight * (label - fpr) / gap) / sum(weight) AS ytilde
          FROM ann JOIN ch USING (annot) GROUP BY item HAVING sum(weight) > 0)
        SELECT least(floor(score * ?::DOUBLE), ? - 1)::INTEGER AS bin, count(*) AS n, avg(score), avg(ytilde)
        FROM pred JOIN y USING (item) GROUP BY bin ORDER BY bin
        """,
        [15, 15],
    ).fetchall()
    res = nc_ece(s, a, chans, weights=w)
    got = res.bins.rows()
    assert [r[0] for r in got] == [r[0] for r in rows]
    assert [r[1] for r in got] == [r[1] for r in rows]
    np.testing.assert_allclose([r[2] for r in got], [r[2] for r in rows], rtol=1e-9, atol=1e-12)
    np.testing.assert_allclose([r[3] for r in got], [r[3] for r in rows], rtol=1e-9, atol=1e-12)
    n = sum(r[1] for r in rows)
    assert res.value == pytest.approx(sum(r[1] * abs(r[3] - r[2]) for r in rows) / n, rel=1e-9, abs=1e-12)


def test_identity_channels_give_ordinary_binned_ece():
    rng = np.random.default_rng(1)
    s = rng.random(500)
    y = (rng.random(500) < s).astype(float)
    res = nc_ece(s, y[:, None], [Channel(0.0, 0.0)], n_bins=10)
    # hand computation of binned ECE
    b = np.minimum(np.floor(s * 10), 9).astype(int)
    expect = sum(abs((y[b == m] - s[b == m]).sum()) for m in range(10)) / 500
    assert res.value == pytest.approx(expect, rel=1e-9, abs=1e-12)
    assert binned_ece(s, y, 10) == pytest.approx(expect, rel=1e-9, abs=1e-12)
    np.testing.assert_allclose(corrected_labels(y[:, None], [Channel(0, 0)], [1.0]), y)


def test_worked_example_c61_iv_weights_residual_and_ncece_variance():
    """Hanada and Futami 2026 §C.6.1: K=2, n=1, s=η=1/2, a=b=1/4: Var R 1 → 5/8, Var NC-ECE 0 → 15/64."""
    ch = [Channel(0.25, 0.25), Channel(0.25, 0.25)]
    w_iv = aggregation_weights(ch, 0.5, rule="iv")
    np.testing.assert_allclose(w_iv, [0.5, 0.5])
    s = np.array([0.5])
    outcomes = []  # (probability as Fraction, A1, A2)
    for y, a1, a2 in itertools.product((0, 1), repeat=3):
        p1 = Fraction(3, 4) if y else Fraction(1, 4)  # P(A=1 | Y)
        pr = Fraction(1, 2) * (p1 if a1 else 1 - p1) * (p1 if a2 else 1 - p1)
        outcomes.append((pr, a1, a2))

    def moments(weights):
        r_vals, e_vals = [], []
        for pr, a1, a2 in outcomes:
            ann = np.array([[a1, a2]], float)
            r = corrected_labels(ann, ch, weights)[0] - 0.5
            e = nc_ece(s, ann, ch, weights=weights, n_bins=15).value
            r_vals.append((pr, r))
            e_vals.append((pr, e))
        mean_r = sum(float(p) * r for p, r in r_vals)
        var_r = sum(float(p) * (r - mean_r) ** 2 for p, r in r_vals)
        mean_e = sum(float(p) * e for p, e in e_vals)
        var_e = sum(float(p) * (e - mean_e) ** 2 for p, e in e_vals)
        return mean_r, var_r, var_e

    m1, v1, ve1 = moments(np.array([1.0, 0.0]))
    assert (m1, v1, ve1) == pytest.approx((0.0, 1.0, 0.0), rel=1e-9, abs=1e-12)
    m2, v2, ve2 = moments(w_iv)
    assert m2 == pytest.approx(0.0, rel=1e-9, abs=1e-12)
    assert v2 == pytest.approx(5 / 8, rel=1e-9, abs=1e-12)
    assert ve2 == pytest.approx(15 / 64, rel=1e-9, abs=1e-12)


def test_worked_example_d1_one_annotator_not_identified():
    """Hanada and Futami 2026 §D.1: same data (s = 1/2, P(A=1) = 5/8), CE 1/8 (perfect annotator) vs 5/32 (a=b=1/10)."""
    s = np.full(8, 0.5)
    a = np.array([[1.0]] * 5 + [[0.0]] * 3)
    assert nc_ece(s, a, [Channel(0.0, 0.0)]).value == pytest.approx(1 / 8, rel=1e-9, abs=1e-12)
    assert nc_ece(s, a, [Channel(0.1, 0.1)]).value == pytest.approx(5 / 32, rel=1e-9, abs=1e-12)
    with pytest.raises(NotIdentifiableError, match="one annotator"):
        estimate_channels(a, scores=s)


def test_bad_inputs_are_named():
    s, a, chans = _data(n=50)
    with pytest.raises(ValueError, match="scores"):
        nc_ece(np.r_[s[:-1], 1.5], a, chans)
    with pytest.raises(ValueError, match="scores"):
        nc_ece(np.r_[s[:-1], np.nan], a, chans)
    for bad_score in (np.nextafter(1.0, 2.0), -1e-300):  # just outside [0, 1]
        with pytest.raises(ValueError, match="scores"):
            nc_ece(np.r_[s[:-1], bad_score], a, chans, n_bins=7)
    bad = a.copy()
    bad[7, 1] = 0.5
    with pytest.raises(ValueError, match=r"0\.5"):
        nc_ece(s, bad, chans)
    with pytest.raises(ValueError, match="n_bins"):
        nc_ece(s, a, chans, n_bins=0)
    with pytest.raises(ValueError, match="weights"):
        nc_ece(s, a, chans, weights="median")
    with pytest.raises(ValueError, match="gap"):
        nc_ece(s, a, [Channel(0.5, 0.5)] * 3)
    with pytest.raises(ValueError, match="rows"):
        nc_ece(s[:10], a, chans)


def test_large_input_two_item_ranges_match_per_item_sums_and_name_bad_scores():
    """Above 2^20 items the pattern kernel sums two fixed item ranges (on two threads where there are two
    cores): it must equal the per-item formula Σ_k |Σ_{i∈k}(Ỹ_i − s_i)| / N evaluated with explicit
    corrected labels, and a bad score or annotation in the second range must still be named."""
    n = (1 << 20) + 12_345
    rng = np.random.default_rng(7)
    s = rng.random(n)
    s[:3] = [0.0, 1.0, np.nextafter(1.0, 0.0)]
    fpr, fnr = np.array([0.1, 0.05, 0.25]), np.array([0.2, 0.1, 0.15])
    chans = [Channel(f, b) for f, b in zip(fpr, fnr, strict=True)]
    a8 = rng.integers(-1, 2, size=(n, 3)).astype(np.int8)
    w = np.array([0.5, 0.3, 0.2])
    res = nc_ece(s, a8, chans, weights=w, n_bins=15)
    present = a8 >= 0
    wp = present * w
    y = (np.where(present, (a8 - fpr) / (1 - fpr - fnr), 0.0) * wp).sum(axis=1)
    inc = wp.sum(axis=1) > 0
    y = y[inc] / wp.sum(axis=1)[inc]
    b = np.minimum(np.floor(s[inc] * 15).astype(int), 14)
    expect = np.abs(np.bincount(b, weights=y - s[inc], minlength=15)).sum() / inc.sum()
    assert res.n_items == int(inc.sum())
    assert res.n_unannotated == int((~present).all(axis=1).sum())
    assert res.value == pytest.approx(expect, rel=1e-9, abs=1e-12)
    np.testing.assert_array_equal(res.bins["n"].to_numpy(), np.bincount(b, minlength=15)[np.bincount(b) > 0])
    for bad_score in (1e8, np.inf, 1.05, np.nextafter(1.0, 2.0), -0.5):
        with pytest.raises(ValueError, match="scores"):
            nc_ece(np.r_[s[:-9], bad_score, s[-8:]], a8, chans, weights=w)
    bad = a8.copy()
    bad[n - 5, 2] = 2
    with pytest.raises(ValueError, match=r"annotations.*got .*2"):
        nc_ece(s, bad, chans, weights=w)


CIFAR = shared_path("data", "cifar10n", "cifar10n_binary_vehicle.csv")


@needs_shared(CIFAR, "shared CIFAR-10N fixture")
def test_cifar10n_semi_synthetic_nc_ece_tracks_clean_ece():
    """Real human noise, synthetic score logit = 1.5(2Y − 1) + N(0, 1.5²) (research notes §1a): NC-ECE with
    Dawid–Skene channels lands near the clean-label ECE; naive ECEs are biased low."""
    import polars as pl

    from noisycal_platform.calibration import dawid_skene, naive_targets

    df = pl.read_csv(CIFAR)
    a = df.select("annotator_1", "annotator_2", "annotator_3").to_numpy().astype(float)
    y = df["clean_label"].to_numpy().astype(float)
    z = 1.5 * (2 * y - 1) + np.random.default_rng(0).normal(0, 1.5, len(y))
    s = 1 / (1 + np.exp(-z))
    clean = binned_ece(s, y, 15)
    fit = dawid_skene(a)
    nc = nc_ece(s, a, fit.channels, weights=aggregation_weights(fit.channels, fit.prevalence)).value
    mv = binned_ece(s, naive_targets(a, "majority_vote"), 15)
    single = binned_ece(s, a[:, 0], 15)
    assert abs(nc - clean) < 0.003
    assert abs(nc - clean) < abs(mv - clean) < abs(single - clean)


def _plain_cells(s, a, n_bins):
    """Independent per-(bin, pattern) counts and score sums: plain numpy, per item, no kernel code."""
    x = np.asarray(a, np.float64)
    x = np.where(np.isnan(x) | (x < 0), -1.0, x)  # NaN (float) and -1 (integer) are missing
    k = x.shape[1]
    pattern = ((x + 1).astype(np.int64) * 3 ** np.arange(k)).sum(axis=1)
    b = np.minimum(np.floor(s * n_bins).astype(np.int64), n_bins - 1)
    code = b * 3**k + pattern
    counts = np.bincount(code, minlength=n_bins * 3**k).reshape(n_bins, 3**k)
    sums = np.bincount(code, weights=s, minlength=n_bins * 3**k).reshape(n_bins, 3**k)
    return counts, sums


@pytest.mark.parametrize("k", [1, 2, 3, 4, 5])
def test_compiled_cell_kernel_equals_plain_numpy(k):
    """The compiled one-pass kernel (`_cell_sums`) against per-item numpy: random labels with missing ones, edge
    scores (0, 1, bin edges, 1 ulp below 1), every annotation dtype it is built for and non-contiguous and
    big-endian inputs; counts exact, score sums to relative 1e-12 (the kernel adds s·B and divides by B)."""
    from noisycal_platform.calibration.nc_ece import _cell_sums

    rng = np.random.default_rng(100 + k)
    n, n_bins = 5_000, 15
    edges = [0.0, 1.0, np.nextafter(1.0, 0.0), 1 / 15, 2 / 15, 0.2, 14 / 15, np.nextafter(1 / 15, 0.0)]
    s = np.concatenate([rng.random(n - len(edges)), edges])
    a8 = rng.integers(-1, 2, size=(n, k)).astype(np.int8)
    a8[:7] = -1  # unannotated items
    expect_counts, expect_sums = _plain_cells(s, a8, n_bins)
    af = np.where(a8 < 0, np.nan, a8.astype(np.float64))
    inputs = [
        a8,
        a8.astype(np.int16),
        a8.astype(np.int64),
        af,
        af.astype(np.float32),
        np.asfortranarray(a8),
        af.astype(">f8"),
        np.repeat(a8, 2, axis=1)[:, ::2],
    ]
    for arr in inputs:
        counts, sums = _cell_sums(s, arr, n_bins)
        np.testing.assert_array_equal(counts, expect_counts, err_msg=str(arr.dtype))
        np.testing.assert_allclose(sums, expect_sums, rtol=1e-12, atol=1e-12, err_msg=str(arr.dtype))
    labelled = rng.integers(0, 2, size=(n, k))  # unsigned: no missing value
    counts, sums = _cell_sums(s, labelled.astype(np.uint8), n_bins)
    np.testing.assert_array_equal(counts, _plain_cells(s, labelled, n_bins)[0])


def test_compiled_cell_kernel_two_ranges_equal_plain_numpy_and_do_not_depend_on_threads(monkeypatch):
    """Above 2^20 items: two fixed item ranges; the same cells on one worker thread as on two, and from several
    calling threads at once."""
    import importlib
    from concurrent.futures import ThreadPoolExecutor

    module = importlib.import_module("noisycal_platform.calibration.nc_ece")  # the package exports the function

    n = (1 << 20) + 777
    rng = np.random.default_rng(5)
    s = rng.random(n)
    s[[0, 1, n - 1]] = [0.0, 1.0, 1.0]
    a8 = rng.integers(-1, 2, size=(n, 3)).astype(np.int8)
    expect_counts, expect_sums = _plain_cells(s, a8, 15)
    counts, sums = module._cell_sums(s, a8, 15)
    np.testing.assert_array_equal(counts, expect_counts)
    np.testing.assert_allclose(sums, expect_sums, rtol=1e-12, atol=1e-12)
    with ThreadPoolExecutor(3) as ex:
        for c, t in ex.map(lambda _: module._cell_sums(s, a8, 15), range(3)):
            np.testing.assert_array_equal(c, counts)
            np.testing.assert_array_equal(t, sums)
    monkeypatch.setattr(module.os, "sched_getaffinity", lambda pid: {0}, raising=False)
    c1, t1 = module._cell_sums(s, a8, 15)
    np.testing.assert_array_equal(c1, counts)
    np.testing.assert_array_equal(t1, sums)  # bit for bit: the ranges, not the threads, fix the sums


@pytest.mark.parametrize(
    ("scores_edit", "ann", "message"),
    [
        (
            (3, np.nextafter(1.0, 2.0)),
            None,
            "scores must lie in [0, 1] with no NaN, got np.float64(1.0000000000000002)",
        ),
        ((3, -1e-300), None, "scores must lie in [0, 1] with no NaN, got np.float64(-1e-300)"),
        ((3, np.nan), None, "scores must lie in [0, 1] with no NaN, got np.float64(nan)"),
        ((3, -np.inf), None, "scores must lie in [0, 1] with no NaN, got np.float64(-inf)"),
        (None, ("int8", -128), "annotations (integer) must contain only 0, 1 or -1 (missing), got np.int8(-128)"),
        (None, ("int8", 2), "annotations (integer) must contain only 0, 1 or -1 (missing), got np.int8(2)"),
        (None, ("int16", 255), "annotations (integer) must contain only 0, 1 or -1 (missing), got np.int16(255)"),
        (None, ("uint8", 2), "annotations (integer) must contain only 0, 1 or -1 (missing), got np.uint8(2)"),
        (None, ("float64", 0.5), "annotations must contain only 0, 1 or NaN (missing), got np.float64(0.5)"),
        (None, ("float32", np.inf), "annotations must contain only 0, 1 or NaN (missing), got np.float32(inf)"),
        (None, ("float64", -1.0), "annotations must contain only 0, 1 or NaN (missing), got np.float64(-1.0)"),
    ],
)
def test_compiled_kernel_names_bad_inputs_as_before(scores_edit, ann, message):
    s = np.linspace(0.0, 1.0, 40)
    a = np.zeros((40, 3), np.int8)
    a[::3, 1] = 1
    if ann is not None:
        dtype, value = ann
        a = a.astype(dtype)
        a[17, 2] = value
    elif scores_edit is not None:
        s[scores_edit[0]] = scores_edit[1]
    with pytest.raises(ValueError) as err:
        nc_ece(s, a, [Channel(0.1, 0.1)] * 3)
    assert str(err.value) == message
