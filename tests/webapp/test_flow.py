"""Issue 4 flow: record schema, resume, two tabs, undo, stopping rule (Gröger et al. 2023 §3.3), admin counts."""

from __future__ import annotations

import json
import re
import time
import uuid
from datetime import UTC, datetime

import pytest
from confirm_fixture import UNDO_RE, form_fields
from starlette.testclient import TestClient

from noisycal_platform.confirm_app import add_annotator, create_app

Q = "/q/derm/irrelevant"
RECORD_KEYS = {"answer_id", "dataset", "issue_type", "item_id", "item_id_2", "annotator_id", "role", "answer",
               "undoes", "position", "timestamp"}


def _answer(c: TestClient, ans: str, url: str = Q) -> dict[str, str]:
    fields = form_fields(c.get(url).text)
    r = c.post(url + "/answer", data={**fields, "answer": ans}, follow_redirects=False)
    assert r.status_code == 303, r.text
    assert r.headers["location"] == url
    return fields


def _undo(c: TestClient, url: str = Q) -> str:
    page = c.get(url).text
    csrf, undoes = form_fields(page)["csrf"], UNDO_RE.search(page).group(1)
    r = c.post(url + "/undo", data={"csrf": csrf, "undoes": undoes}, follow_redirects=False)
    assert r.status_code == 303
    return undoes


def _shown_position(c: TestClient, url: str = Q) -> int | None:
    m = re.search(r'name="position" value="(\d+)"', c.get(url).text)
    return int(m.group(1)) if m else None


def _admin_state(admin: TestClient, name: str, section: str = "derm-irrelevant") -> tuple[str, str]:
    """(answers so far, "consecutive no / stopping count") of ``name`` as the admin page shows them."""
    page = admin.get("/admin").text
    part = page.split(f'id="{section}"')[1].split("<h2")[0]
    row = part.split(f'data-name="{name}"')[1].split("</tr>")[0]
    answered = re.search(r'class="answered">(\d+)<', row).group(1)
    consecutive = re.search(r'class="consecutive-no">([^<]*)<', row).group(1)
    return answered, consecutive


def _progress_hidden(page: str) -> None:
    """Gröger et al. 2023 App. E: no rank, no answer count, no progress against the stopping rule on annotator pages."""
    visible = re.sub(r"<(style|script)[^>]*>.*?</\1>|<[^>]+>", " ", page, flags=re.S).lower()
    for needle in ('id="answered"', 'id="consecutive-no"', 'id="stopping-count"', "<progress"):
        assert needle not in page
    for word in ("consecutive", "in a row", "answered:", "rank", "position"):
        assert word not in visible, word


def test_answer_record_follows_the_contract(fx, login):
    c = login("e1", "lay")
    fields = _answer(c, "yes")
    (rec,) = fx.records("e1")
    assert set(rec) == RECORD_KEYS
    first = fx.candidates("irrelevant")[0]
    assert fields["item_id"] == first["item_id"] == rec["item_id"]
    assert rec["position"] == first["position"] == 0
    assert (rec["dataset"], rec["issue_type"], rec["annotator_id"], rec["role"], rec["answer"]) == (
        "derm", "irrelevant", "e1", "lay", "yes")
    assert rec["item_id_2"] is None and rec["undoes"] is None
    assert uuid.UUID(hex=rec["answer_id"]).version == 4 and len(rec["answer_id"]) == 32
    ts = datetime.fromisoformat(rec["timestamp"])
    assert ts.utcoffset().total_seconds() == 0 and abs((datetime.now(UTC) - ts).total_seconds()) < 60
    raw = fx.answers_file("e1").read_bytes()
    assert raw.endswith(b"\n") and raw.count(b"\n") == 1


def test_candidates_in_ranking_order_and_rank_never_shown(fx, login):
    c = login("e1")
    expected = [r["item_id"] for r in fx.candidates("irrelevant")][:2]
    seen = []
    for _ in range(2):
        page = c.get(Q).text
        seen.append(form_fields(page)["item_id"])
        visible = re.sub(r"<(style|script)[^>]*>.*?</\1>|<[^>]+>", " ", page, flags=re.S)
        assert "position" not in visible.lower() and "rank" not in visible.lower()
        _progress_hidden(page)
        _answer(c, "yes")
    _progress_hidden(c.get("/").text)
    assert seen == expected


def test_pair_and_label_pages(fx, login):
    c = login("e1")
    pair = c.get("/q/derm/near_duplicate").text
    assert pair.count("<figure") == 2 and "Image A" in pair and "Image B" in pair
    assert "pictures of the same object" in pair
    lab = c.get("/q/derm/label_error").text
    assert 'id="current-label"' in lab and "melanoma" in lab and lab.count("<figure") == 1
    assert "the label is an error only if you think it is wrong" in lab
    irr = c.get(Q).text
    assert "Select yes when the image is not a valid input for the task at hand." in irr
    _answer(c, "yes", "/q/derm/near_duplicate")
    (rec,) = fx.records("e1")
    assert (rec["item_id"], rec["item_id_2"]) == ("img_03.png", "img_03_copy.png")


def test_resume_after_restart_and_new_login(fx, login):
    c = login("e1")
    for ans in ("yes", "no"):
        _answer(c, ans)
    assert _shown_position(c) == 2
    # a new server process over the same home, a fresh browser using the same login link
    c2 = login("e1", token=c.token)
    assert _shown_position(c2) == 2
    _progress_hidden(c2.get(Q).text)
    assert _admin_state(login("boss", "admin"), "e1") == ("2", f"1 / {fx.stopping_count}")


def test_two_tabs_never_duplicate_an_answer(fx, login):
    tab1 = login("e1")
    tab2 = login("e1", token=tab1.token)  # same annotator, a second session
    f1 = form_fields(tab1.get(Q).text)
    f2 = form_fields(tab2.get(Q).text)
    assert f1["position"] == f2["position"] == "0"
    assert tab1.post(Q + "/answer", data={**f1, "answer": "yes"}, follow_redirects=False).status_code == 303
    # the stale tab answers the same candidate (even differently): acknowledged, no second record
    assert tab2.post(Q + "/answer", data={**f2, "answer": "no"}, follow_redirects=False).status_code == 303
    assert tab1.post(Q + "/answer", data={**f1, "answer": "yes"}, follow_redirects=False).status_code == 303
    recs = fx.records("e1")
    assert [(r["position"], r["answer"]) for r in recs] == [(0, "yes")]
    assert _shown_position(tab2) == 1


def test_concurrent_posts_record_once(fx, login):
    from concurrent.futures import ThreadPoolExecutor

    c = login("e1")
    fields = {**form_fields(c.get(Q).text), "answer": "no"}
    with ThreadPoolExecutor(8) as ex:
        codes = list(ex.map(lambda _: c.post(Q + "/answer", data=fields, follow_redirects=False).status_code,
                            range(16)))
    assert set(codes) == {303}
    assert len(fx.records("e1")) == 1


def test_undo_is_recorded_not_erased(fx, login):
    c = login("e1")
    _answer(c, "yes")
    _answer(c, "no")
    assert _shown_position(c) == 2
    undone = _undo(c)
    recs = fx.records("e1")
    assert [r["answer"] for r in recs] == ["yes", "no", "undo"]
    assert recs[2]["undoes"] == recs[1]["answer_id"] == undone
    assert recs[2]["position"] == 1 and recs[2]["item_id"] == recs[1]["item_id"]
    assert _shown_position(c) == 1  # the undone candidate is asked again
    # the same undo from a stale tab: acknowledged, not recorded twice
    csrf = form_fields(c.get(Q).text)["csrf"]
    r = c.post(Q + "/undo", data={"csrf": csrf, "undoes": undone}, follow_redirects=False)
    assert r.status_code == 303 and len(fx.records("e1")) == 3
    # only the most recent answer can be undone
    r = c.post(Q + "/undo", data={"csrf": csrf, "undoes": uuid.uuid4().hex}, follow_redirects=False)
    assert r.status_code == 409 and len(fx.records("e1")) == 3
    _answer(c, "yes")
    assert [r["answer"] for r in fx.records("e1")] == ["yes", "no", "undo", "yes"]
    assert _shown_position(c) == 2


def _expected_stop(answers: list[str], k: int) -> int | None:
    """Brute force: 1-based count of answers after which k consecutive 'no' first occur."""
    for i in range(k, len(answers) + 1):
        if answers[i - k:i] == ["no"] * k:
            return i
    return None


@pytest.mark.parametrize("answers", [["no", "no", "no"], ["no", "no", "yes", "no", "no", "no"],
                                     ["yes", "no", "yes", "no", "no", "no"]])
def test_stopping_rule_fires_after_stopping_count_consecutive_no(fx, login, answers):
    c = login("e1")
    k = fx.stopping_count
    stop = _expected_stop(answers, k)
    assert stop == len(answers)
    for i, ans in enumerate(answers):
        assert 'id="finished"' not in c.get(Q).text, i
        _answer(c, ans)
    page = c.get(Q).text
    assert 'id="finished"' in page and "the stopping rule fired" in page
    assert 'name="position"' not in page
    _progress_hidden(page)
    assert str(k) not in re.sub(r"<(style|script)[^>]*>.*?</\1>|<[^>]+>", " ", page.split('id="finished"')[1])
    admin = login("boss", "admin")
    assert _admin_state(admin, "e1") == (str(stop), f"{k} / {k}")
    # no more answers are accepted: the next candidate is refused and nothing is written
    nxt = fx.candidates("irrelevant")[stop]
    r = c.post(Q + "/answer", data={"csrf": form_fields(page)["csrf"], "position": str(nxt["position"]),
                                    "item_id": nxt["item_id"], "answer": "yes"}, follow_redirects=False)
    assert r.status_code == 409 and len(fx.records("e1")) == len(answers)
    # undo reopens the session at the last answered candidate
    _undo(c)
    assert 'id="finished"' not in c.get(Q).text and _shown_position(c) == stop - 1
    assert _admin_state(admin, "e1") == (str(stop - 1), f"{k - 1} / {k}")


def test_session_ends_when_the_ranking_is_exhausted(fx, login):
    c = login("e1")
    url = "/q/derm/near_duplicate"
    n = len(fx.candidates("near_duplicate"))
    for ans in ["yes", "no", "yes", "no"][:n]:
        _answer(c, ans, url)
    page = c.get(url).text
    assert 'id="finished"' in page and "every candidate has been answered" in page
    _progress_hidden(page)
    index = c.get("/").text
    assert "finished" in index


def test_large_queue_opens_without_work_proportional_to_its_size(tmp_path):
    import confirm_fixture

    fx = confirm_fixture.build(tmp_path, stopping_count=58, n_extra=5000)
    _token, path = add_annotator(fx.home, "e1", "expert")
    c = TestClient(create_app(fx.home))
    c.get(path)
    t0 = time.perf_counter()
    first = c.get(Q)  # the first request also parses the 5,000-row snapshot (once, cached by file stat)
    t1 = time.perf_counter()
    page = c.get(Q)
    t2 = time.perf_counter()
    assert first.status_code == page.status_code == 200
    assert t1 - t0 < 1.0 and t2 - t1 < 0.5, (t1 - t0, t2 - t1)
    # nothing was generated for the dataset: thumbnails are made only when an image is requested
    assert not (fx.home / "cache" / "thumbnails").exists()
    assert c.get("/").text.count('class="task"') == 3


def test_admin_page_counts(fx, login):
    # irrelevant candidates 0..2 answered by two experts and one lay rater (hand-computed expectations)
    plan = {"e1": ("expert", ["yes", "yes", "no"]), "e2": ("expert", ["yes", "no", "no"]),
            "e3": ("expert", ["yes", "yes"]), "l1": ("lay", ["no", "yes", "no", "no", "no"])}
    for name, (role, answers) in plan.items():
        c = login(name, role)
        for a in answers:
            _answer(c, a)
    # experts: cand0 yes x3 -> unanimous & majority; cand1 yes x2 of 3 -> majority; cand2 none
    # lay (1 rater): cand1 yes -> unanimous & majority; l1 finished by the stopping rule (3 no in a row)
    admin = login("boss", "admin")
    page = admin.get("/admin").text
    section = page.split('id="derm-irrelevant"')[1].split("<h2")[0]
    assert '<strong class="expert-unanimous">1</strong>' in section
    assert '<strong class="expert-majority">2</strong>' in section
    assert '<strong class="lay-unanimous">1</strong>' in section
    assert '<strong class="lay-majority">1</strong>' in section
    rows = dict(re.findall(r'data-name="(\w+)">.*?(finished \(stopping rule\)|in progress)', section, re.S))
    assert rows == {"e1": "in progress", "e2": "in progress", "e3": "in progress",
                    "l1": "finished (stopping rule)"}
    answered = dict(re.findall(r'data-name="(\w+)">.*?class="answered">(\d+)<', section, re.S))
    assert answered == {"e1": "3", "e2": "3", "e3": "2", "l1": "5"}


def test_end_of_an_extending_queue_is_not_called_the_end_of_the_candidates(fx, login):
    meta_path = fx.home / "exports" / "confirmation_queue" / "derm.meta.json"
    meta = json.loads(meta_path.read_text())
    meta_path.write_text(json.dumps({**meta, "extending": ["near_duplicate"]}))
    c = login("e1")
    url = "/q/derm/near_duplicate"
    for ans in ["yes", "no", "yes", "no"][: len(fx.candidates("near_duplicate"))]:
        _answer(c, ans, url)
    page = c.get(url).text
    assert 'id="finished"' in page and "every candidate prepared so far" in page
    assert "every candidate has been answered" not in page
    _progress_hidden(page)
