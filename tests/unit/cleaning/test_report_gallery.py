"""Cleaning report, "Confirmed issues, as images": exactly the unanimously confirmed candidates, a pair as two
images, label errors with their given label, a per-type cap with a count of the rest, a missing image named."""

import re
from types import SimpleNamespace

import numpy as np
import polars as pl
import pytest
from PIL import Image

from noisycal_platform.cleaning.pipeline.protocol_tables import confirmation_queue, confirmed_issues
from noisycal_platform.cleaning.protocol import answers_from_records
from noisycal_platform.cleaning.report import render_cleaning_report

N = 12
NAMES = [f"f{i:02d}.png" for i in range(N)]
LABELS = ["a", "b"] * (N // 2)
GALLERY = "<h2>Confirmed issues, as images</h2>"


def _queue(tmp_path):
    """Real PNGs (one colour each) and a queue: irrelevant f00..f11, pairs (f00,f01) (f02,f03) (f04,f05), label
    errors f11..f00."""
    root = tmp_path / "ds"
    root.mkdir()
    for i, name in enumerate(NAMES):
        Image.fromarray(np.full((20, 20, 3), 20 * i, dtype=np.uint8)).save(root / name)
    files = pl.DataFrame({"file_name": NAMES, "label": LABELS})
    irrelevant = SimpleNamespace(order=np.arange(N), scores=np.linspace(1, 0, N))
    label_errors = SimpleNamespace(order=np.arange(N)[::-1], scores=np.linspace(1, 0, N))
    pairs = SimpleNamespace(pairs=np.array([[0, 1], [2, 3], [4, 5]]), scores=np.array([0.1, 0.2, 0.3]))
    return root, confirmation_queue("ds", irrelevant, pairs, label_errors, files)


def _answers(queue, votes):
    """``votes``: (issue_type, item_id, item_id_2) -> answers of experts e1, e2 (and lay l1 if a third is given)."""
    pos = {(r["issue_type"], r["item_id"], r["item_id_2"]): r["position"] for r in queue.iter_rows(named=True)}
    recs = []
    for (it, a, b), answers in votes.items():
        for who, role, ans in zip(("e1", "e2", "l1"), ("expert", "expert", "lay"), answers, strict=False):
            recs.append({"answer_id": f"{who}-{len(recs)}", "dataset": "ds", "issue_type": it, "item_id": a,
                         "item_id_2": b, "annotator_id": who, "role": role, "answer": ans,
                         "position": pos[(it, a, b)], "timestamp": "2026-02-01T10:00:00+00:00"})
    return answers_from_records(recs)


def _gallery(root, queue, votes, **kw):
    conf = confirmed_issues(_answers(queue, votes), queue)
    html = render_cleaning_report(queue=queue, confirmed=conf, dataset_roots={"ds": root}, n_thumbnails=0, **kw)
    assert html.rstrip().endswith("</html>")
    return html.split(GALLERY, 1)[1]


def _block(gallery, issue_type):
    """The thumbnails' alt texts (file names) and the cells under one issue type's heading."""
    m = re.search(rf"<h3>ds — {issue_type}[^<]*</h3>(.*?)(?=<h3>|$)", gallery, flags=re.S)
    assert m, issue_type
    return re.findall(r"<img src='data:image/jpeg;base64,[^']+' alt='([^']+)'", m.group(1)), m.group(1)


VOTES = {
    ("irrelevant", "f00.png", None): ("yes", "yes"),  # confirmed
    ("irrelevant", "f01.png", None): ("yes", "no"),  # split vote
    ("irrelevant", "f02.png", None): ("no", "no", "yes"),  # only the lay rater says yes
    ("irrelevant", "f03.png", None): ("yes", "yes", "no"),  # confirmed by the expert panel
    ("near_duplicate", "f00.png", "f01.png"): ("yes", "yes"),  # confirmed
    ("near_duplicate", "f02.png", "f03.png"): ("yes", "no"),  # split vote
    ("label_error", "f11.png", None): ("yes", "yes"),  # confirmed; given label "b"
    ("label_error", "f10.png", None): ("no", "no"),
}


def test_gallery_shows_exactly_the_confirmed_issues(tmp_path):
    root, queue = _queue(tmp_path)
    gallery = _gallery(root, queue, VOTES)
    irrelevant, _ = _block(gallery, "irrelevant")
    assert irrelevant == ["f00.png", "f03.png"]  # rank order; the split and the lay-only yes are absent
    pair, cells = _block(gallery, "near duplicate")
    assert pair == ["f00.png", "f01.png"] and cells.count("<div class='cand'>") == 1  # one pair, two images
    labelled, cells = _block(gallery, "label error")
    assert labelled == ["f11.png"] and "given label: b" in cells
    assert "more confirmed" not in gallery


def test_gallery_cap_and_the_count_of_the_rest(tmp_path):
    root, queue = _queue(tmp_path)
    votes = {("irrelevant", name, None): ("yes", "yes") for name in NAMES}
    votes[("label_error", "f00.png", None)] = ("no", "no")
    gallery = _gallery(root, queue, votes, n_confirmed_thumbnails=5)
    shown, _ = _block(gallery, "irrelevant")
    assert shown == NAMES[:5]  # the first five by rank
    assert f"{N - 5} more confirmed, not shown" in gallery
    assert "<h3>ds — irrelevant (12 confirmed)</h3>" in gallery
    _, cells = _block(gallery, "label error")  # reviewed, nothing confirmed: said, no pictures
    assert "No issue confirmed among the reviewed candidates" in cells and "<img" not in cells
    assert "<h3>ds — near duplicate" not in gallery  # never reviewed
    with pytest.raises(ValueError, match="n_confirmed_thumbnails"):
        render_cleaning_report(n_confirmed_thumbnails=-1)


def test_missing_image_is_named_and_the_page_still_renders(tmp_path):
    root, queue = _queue(tmp_path)
    (root / "f03.png").unlink()
    gallery = _gallery(root, queue, VOTES)
    irrelevant, cells = _block(gallery, "irrelevant")
    assert irrelevant == ["f00.png"] and "[f03.png: no image]" in cells
    pair, _ = _block(gallery, "near duplicate")
    assert pair == ["f00.png", "f01.png"]


def test_day_without_answers_says_nothing_is_confirmed(tmp_path):
    root, queue = _queue(tmp_path)
    gallery = _gallery(root, queue, {})
    assert "No issue is confirmed yet" in gallery and "<img" not in gallery
