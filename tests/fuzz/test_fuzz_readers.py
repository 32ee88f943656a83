"""Property-based fuzzing of every reader of user input (hypothesis).

Each generated input must end in a validated frame (its contract holds) or in one of our error types naming
the file (``InputError``, ``CorrectnessInputError``, ``ImageDatasetError``, ``InvalidName``) — never another
exception, a hang (hypothesis deadline + pytest timeout) or a half-written table. The default run keeps each
property to a small budget; the ``slow`` twins run the same properties with a much larger one.
"""

from __future__ import annotations

import io
import json
import tempfile
from datetime import timedelta
from pathlib import Path

import numpy as np
import polars as pl
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from PIL import Image

from noisycal_platform.cleaning.protocol import answers_from_records, effective_answers
from noisycal_platform.contracts import MAX_ID_LENGTH
from noisycal_platform.correctness.io import CorrectnessInputError, read_audit_labels, read_generations
from noisycal_platform.ingest import (
    accepted_annotations,
    ingest_annotation_batches,
    ledger_entries,
    read_confirmation_records,
)
from noisycal_platform.io import (
    InputError,
    read_annotation_records,
    read_annotations,
    read_predictions,
    read_reference_labels,
)
from noisycal_platform.paths import HomeLayout, InvalidName, confined, validate_name

pytestmark = pytest.mark.timeout(300)
_SCRATCH = tempfile.TemporaryDirectory(prefix="nc-fuzz-")  # every generated file lives here; removed at exit

FAST = dict(max_examples=60, deadline=timedelta(seconds=10), suppress_health_check=[HealthCheck.too_slow],
            derandomize=True, database=None)
SLOW = dict(max_examples=1500, deadline=timedelta(seconds=30), suppress_health_check=[HealthCheck.too_slow],
            database=None)


def twin(strategy, **kw):
    """A default-run property and its ``slow`` twin with the bigger budget."""

    def deco(prop):
        fast = settings(**{**FAST, **kw})(given(strategy)(prop))
        slow = pytest.mark.slow(settings(**{**SLOW, **kw})(given(strategy)(prop)))
        return fast, slow

    return deco


def _tmp(name: str, data: bytes) -> Path:
    d = Path(tempfile.mkdtemp(prefix="nc-fuzz-", dir=_SCRATCH.name))
    p = d / name
    p.write_bytes(data)
    return p


def _check_id(s: pl.Series) -> None:
    assert s.dtype == pl.String and s.null_count() == 0
    assert (s.str.len_chars() >= 1).all() and (s.str.len_chars() <= MAX_ID_LENGTH).all()
    assert not s.str.contains(r"[\p{Cc}\p{Cf}]").any()


def _valid_or_named_error(reader, path: Path) -> pl.DataFrame | None:
    try:
        return reader(path)
    except InputError as exc:
        assert exc.file == str(path) and str(path) in str(exc) and str(path) in exc.safe
        return None


def _check_annotations(df: pl.DataFrame) -> None:
    _check_id(df["item_id"])
    _check_id(df["annotator_id"])
    assert set(df["label"].to_list()) <= {0, 1}
    assert not df.select("item_id", "annotator_id").is_duplicated().any()


def _check_predictions(df: pl.DataFrame) -> None:
    _check_id(df["item_id"])
    s = df["score"]
    assert s.null_count() == 0 and not s.is_nan().any() and ((s >= 0) & (s <= 1)).all()
    assert df["item_id"].n_unique() == df.height


# ------------------------------------------------------------------ CSV bytes and structured CSVs
NUMBERISH = st.sampled_from(["0", "1", "0.5", "NaN", "nan", "inf", "-inf", "-0", "1.0000001", "-0.0", "1e-320",
                             "1.0", " 1 ", "", "０", "1,5", "0x1", "True", "null"])
CELL = st.one_of(
    NUMBERISH,
    st.text(max_size=12),
    st.text(alphabet=st.characters(codec="utf-8"), min_size=250, max_size=300),  # around the id limit
    st.just("x" * 200_000),  # a huge field (over the CSV module's field limit)
    st.sampled_from(['"', '""', '"a"b', "a\nb", "a\r\nb", "\x00", "\u202e", "\ufeff"]),
)
HEADER_NAMES = st.sampled_from(["item_id", "annotator_id", "label", "score", "timestamp", "extra", "", "label "])


@st.composite
def csv_bytes(draw) -> bytes:
    cols = draw(st.lists(HEADER_NAMES, min_size=1, max_size=6))  # duplicates and extra columns included
    n = draw(st.integers(0, 6))
    rows = [[draw(CELL) for _ in range(draw(st.sampled_from([len(cols), len(cols), len(cols) - 1,
                                                             len(cols) + 1])))] for _ in range(n)]
    newline = draw(st.sampled_from(["\n", "\r\n", "\r"]))
    quote_all = draw(st.booleans())

    def fmt(v: str) -> str:
        return '"' + v.replace('"', '""') + '"' if quote_all or any(c in v for c in ',"\r\n') else v

    text = newline.join(",".join(fmt(v) for v in r) for r in [cols, *rows]) + draw(st.sampled_from(["", newline]))
    enc = draw(st.sampled_from(["utf-8", "utf-8-sig", "latin-1", "utf-16", "cp1252"]))
    raw = text.encode(enc, errors="replace")
    if draw(st.booleans()):  # now and then a truncation or a stray byte
        cut = draw(st.integers(0, len(raw)))
        raw = raw[:cut] + draw(st.binary(max_size=3))
    return raw


def _csv_property(raw: bytes) -> None:
    for reader, check in ((read_annotations, _check_annotations), (read_predictions, _check_predictions),
                          (read_reference_labels, lambda df: _check_id(df["item_id"]))):
        df = _valid_or_named_error(reader, _tmp("f.csv", raw))
        if df is not None:
            check(df)
    # record level: the good rows satisfy the contract, every bad row is named, and nothing is counted twice
    p = _tmp("f.csv", raw)
    try:
        good, table, problems = read_annotation_records(p)
    except InputError as exc:
        assert exc.file == str(p)
        return
    _check_annotations(good.drop("row"))
    bad_rows = [q.row for q in problems]
    assert len(set(bad_rows)) == len(bad_rows)
    assert set(bad_rows).isdisjoint(good["row"].to_list())
    assert sorted(bad_rows + good["row"].to_list()) == list(range(1, table.frame.height + 1))


test_csv_readers, test_csv_readers_slow = twin(csv_bytes())(_csv_property)


def _bytes_property(raw: bytes) -> None:
    for name in ("x.csv", "x.parquet"):
        for reader in (read_annotations, read_predictions):
            _valid_or_named_error(reader, _tmp(name, raw))


test_arbitrary_bytes, test_arbitrary_bytes_slow = twin(
    st.one_of(st.binary(max_size=4000), st.sampled_from([b"PAR1", b"PAR1\x00\x00PAR1", b"\x89PNG\r\n\x1a\n"]))
)(_bytes_property)


# ------------------------------------------------------------------ Parquet with wrong dtypes, truncated
COLUMN_VALUES = st.sampled_from([
    pl.Series([0.5, float("nan"), float("inf"), -0.0, 1.0000001], dtype=pl.Float64),
    pl.Series([0, 1, 2, -1, 1], dtype=pl.Int64),
    pl.Series([True, False, True, False, True]),
    pl.Series(["a", "b", None, "", "e"]),
    pl.Series([[1], [2], [], [3], [4]]),
    pl.Series([b"a", b"b", b"c", b"d", b"e"], dtype=pl.Binary),
    pl.Series([None] * 5, dtype=pl.Null),
    pl.Series(["2026-01-01"] * 5).str.to_datetime(),
    pl.Series([0.25, 0.5, 0.75, 1.0, 0.0], dtype=pl.Float32),
    pl.Series(["x"] * 5, dtype=pl.Categorical),
])


@st.composite
def parquet_bytes(draw) -> bytes:
    names = draw(st.lists(st.sampled_from(["item_id", "annotator_id", "label", "score", "timestamp", "z"]),
                          min_size=1, max_size=5, unique=True))
    frame = pl.DataFrame({n: draw(COLUMN_VALUES).alias(n) for n in names})
    buf = io.BytesIO()
    frame.write_parquet(buf)
    data = buf.getvalue()
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]
    return data


def _parquet_property(data: bytes) -> None:
    p = _tmp("p.parquet", data)
    for reader, check in ((read_annotations, _check_annotations), (read_predictions, _check_predictions)):
        df = _valid_or_named_error(reader, p)
        if df is not None:
            check(df)


test_parquet_readers, test_parquet_readers_slow = twin(parquet_bytes())(_parquet_property)


# ------------------------------------------------------------------ ingestion never half-writes
def _ingest_property(raws: list[bytes]) -> None:
    home = Path(tempfile.mkdtemp(prefix="nc-fuzz-home-", dir=_SCRATCH.name))
    layout = HomeLayout.at(home).ensure()
    for k, raw in enumerate(raws):
        (layout.annotation_inbox / f"b{k}.{'csv' if k % 3 else 'parquet'}").write_bytes(raw)
    ingest_annotation_batches(layout)
    assert list(layout.annotation_inbox.iterdir()) == []  # every file was decided
    rows = accepted_annotations(layout)
    _check_annotations(rows)
    ledger = ledger_entries(layout)
    accepted = {h: e["rows"] for h, e in ledger.items() if e["status"] == "accepted"}
    assert dict(rows.group_by("batch_sha256").len().iter_rows()) == accepted  # ledger == archived rows
    assert not [p for p in layout.archive.rglob(".*")]  # no temp file left behind


test_ingestion, test_ingestion_slow = twin(st.lists(csv_bytes(), min_size=1, max_size=4), max_examples=30)(
    _ingest_property
)


# ------------------------------------------------------------------ confirmation JSONL
VALUE = st.one_of(st.none(), st.booleans(), st.integers(-3, 2**70), st.floats(allow_nan=True), st.text(max_size=8),
                  st.lists(st.integers(), max_size=2))
GOOD = {"dataset": "derm", "issue_type": "irrelevant", "item_id": "a.png", "item_id_2": None, "annotator_id": "e1",
        "role": "expert", "answer": "yes", "undoes": None, "position": 0, "timestamp": "2026-01-01T00:00:00+00:00"}


@st.composite
def answer_line(draw) -> bytes:
    rec = dict(GOOD, answer_id=draw(st.sampled_from(["a1", "a2", "a3", "a4"])))
    for key in draw(st.lists(st.sampled_from([*GOOD, "answer_id"]), max_size=3)):
        rec[key] = draw(st.one_of(VALUE, st.sampled_from(["near_duplicate", "label_error", "undo", "no", "lay",
                                                          "a1", "2026-01-01T00:00:00", "b.png"])))
    kind = draw(st.integers(0, 9))
    if kind == 0:
        return draw(st.binary(max_size=40))
    if kind == 1:
        return json.dumps([rec]).encode()
    return json.dumps(rec).encode()


def _jsonl_property(lines: list[bytes]) -> None:
    home = Path(tempfile.mkdtemp(prefix="nc-fuzz-home-", dir=_SCRATCH.name))
    layout = HomeLayout.at(home).ensure()
    data = b"\n".join(lines) + b"\n"
    (layout.confirmation_inbox / "e1.jsonl").write_bytes(data)
    frame, rejected = read_confirmation_records(layout)
    assert frame.height + len(rejected) <= data.count(b"\n")  # one outcome per line at most
    assert len({r["line"] for r in rejected}) == len(rejected)
    # whatever landed goes through the protocol without an error (one bad line never fails the asset)
    effective_answers(answers_from_records(frame.drop("line").to_dicts()))


test_confirmations, test_confirmations_slow = twin(st.lists(answer_line(), max_size=8))(_jsonl_property)


# ------------------------------------------------------------------ generations and audit labels
def _correctness_property(raw: bytes) -> None:
    for name, reader in (("g.jsonl", read_generations), ("a.csv", read_audit_labels)):
        p = _tmp(name, raw)
        try:
            reader(p)
        except CorrectnessInputError as exc:
            assert str(p) in str(exc)
        rejected: list[dict] = []
        reader(p, rejected=rejected)  # record level: never raises for a file it can open
        assert all(r["file"] == name for r in rejected)


test_correctness_readers, test_correctness_readers_slow = twin(
    st.one_of(st.binary(max_size=2000), csv_bytes(), st.lists(answer_line(), max_size=4).map(b"\n".join))
)(_correctness_property)


# ------------------------------------------------------------------ names
NAMES = st.one_of(
    st.text(max_size=140),
    st.sampled_from(["../x", "..", ".", "/etc/passwd", "a/../../b", "x\x00y", "C:\\x", "~root", "a'b;--", "ünï",
                     "%2e%2e", "..\\..", " a", "NUL", "con"]),
)


def _name_property(name: str) -> None:
    base = Path(tempfile.mkdtemp(prefix="nc-fuzz-base-", dir=_SCRATCH.name)).resolve()
    try:
        ok = validate_name(name, "dataset")
    except InvalidName:
        return
    assert ok == name and "/" not in name and "\\" not in name and not name.startswith(".")
    target = confined(base, name, ".parquet")
    assert target.parent == base and target.resolve().is_relative_to(base)


test_names, test_names_slow = twin(NAMES)(_name_property)


# ------------------------------------------------------------------ images
@st.composite
def image_bytes(draw) -> bytes:
    kind = draw(st.sampled_from(["rgb", "cmyk", "i16", "f", "p", "la"]))
    w, h = draw(st.integers(1, 40)), draw(st.integers(1, 40))
    rng = np.random.default_rng(draw(st.integers(0, 2**16)))
    if kind == "i16":
        im = Image.fromarray(rng.integers(0, 65536, (h, w), dtype=np.uint16))
        fmt = "PNG"
    elif kind == "f":
        im = Image.fromarray(rng.normal(size=(h, w)).astype(np.float32))
        fmt = "TIFF"
    elif kind == "cmyk":
        im = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).convert("CMYK")
        fmt = "JPEG"
    else:
        im = Image.fromarray(rng.integers(0, 256, (h, w, 3), dtype=np.uint8)).convert(kind.upper())
        fmt = "PNG"
    buf = io.BytesIO()
    im.save(buf, format=fmt)
    data = buf.getvalue()
    if draw(st.booleans()):
        data = data[: draw(st.integers(0, len(data)))]  # truncated
    return data


def _image_property(data: bytes) -> None:
    from noisycal_platform.cleaning.images import ImageDatasetError, load_images, read_image_dataset

    root = Path(tempfile.mkdtemp(prefix="nc-fuzz-img-", dir=_SCRATCH.name))
    (root / "x.png").write_bytes(data)
    Image.new("RGB", (4, 4)).save(root / "ok.png")
    (root / "labels.csv").write_text("file_name,label\nx.png,a\nok.png,b\n")
    try:
        ds = read_image_dataset(root)
    except ImageDatasetError as exc:
        assert str(root) in str(exc)
        return
    assert set(ds.frame["file_name"].to_list()) | set(ds.excluded["file_name"].to_list()) == {"x.png", "ok.png"}
    if ds.frame.height:
        arr = load_images(ds.frame["path"].to_list(), 8).numpy()
        assert arr.dtype == np.uint8 and arr.shape[1:] == (3, 8, 8)


test_images, test_images_slow = twin(image_bytes(), max_examples=40)(_image_property)


def test_decompression_bomb_is_excluded_not_decoded(tmp_path, monkeypatch):
    from noisycal_platform.cleaning.images import read_image_dataset

    monkeypatch.setattr(Image, "MAX_IMAGE_PIXELS", 1000)  # a 100x100 image is then a 10x bomb
    Image.new("L", (100, 100)).save(tmp_path / "bomb.png")
    Image.new("L", (10, 10)).save(tmp_path / "ok.png")
    (tmp_path / "labels.csv").write_text("file_name,label\nbomb.png,a\nok.png,a\n")
    ds = read_image_dataset(tmp_path)
    assert ds.frame["file_name"].to_list() == ["ok.png"]
    assert "DecompressionBomb" in ds.excluded["reason"][0]


def test_binary_file_named_csv_is_a_named_error(tmp_path):
    p = tmp_path / "labels.csv"
    Image.new("RGB", (8, 8)).save(p, format="PNG")
    with pytest.raises(InputError) as info:
        read_annotations(p)
    assert info.value.file == str(p)
