"""Web tool hardening: every route refuses a wrong or revoked token; annotators are isolated from each other;
answers are validated with the confirmation contract before any acknowledgement; parallel answering and a
SIGKILL in the middle of an answer write lose nothing and record nothing twice."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import threading

import httpx
import polars as pl
import pytest
from confirm_fixture import build, form_fields, free_port, start_server, stop_server
from starlette.testclient import TestClient

from noisycal_platform.cleaning.protocol import answers_from_records, effective_answers
from noisycal_platform.confirm_app import add_annotator, create_app, revoke_annotator
from noisycal_platform.ingest import FAULT_ENV, read_confirmation_records
from noisycal_platform.paths import HomeLayout

Q = "/q/derm/irrelevant"
GETS = ("/", Q, "/admin", "/img/derm?f=img_00.png", "/q/derm/near_duplicate", "/q/derm/label_error")
POSTS = (Q + "/answer", Q + "/undo", "/logout")


def _no_answers(home) -> None:
    folder = home / "inbox" / "confirmations"
    assert not folder.exists() or all(p.stat().st_size == 0 for p in folder.iterdir())


@pytest.mark.parametrize("kind", ["wrong", "revoked", "malformed"])
def test_every_route_refuses_a_bad_token(fx, login, kind):
    admin_token, _ = add_annotator(fx.home, "boss", "admin")
    c = login("e1")
    form = {**form_fields(c.get(Q).text), "answer": "yes"}
    wrong = c.token[:-2] + ("zz" if c.token[-2:] != "zz" else "yy") + ".nonce"  # two characters off
    if kind in ("wrong", "malformed"):
        c = TestClient(create_app(fx.home))  # a browser holding only the bad cookie
        c.cookies.set("nc_session", wrong if kind == "wrong" else "%2e%2e/" * 50)
    else:
        revoke_annotator(fx.home, "e1")
    expected = 403 if kind == "revoked" else 401
    for url in GETS:
        assert c.get(url).status_code == expected, url
    for url in POSTS:
        assert c.post(url, data=form, follow_redirects=False).status_code == expected, url
    _no_answers(fx.home)
    # a revoked admin loses the admin page and images too
    a = TestClient(create_app(fx.home))
    assert a.get("/login", params={"token": admin_token}).status_code == 200
    revoke_annotator(fx.home, "boss")
    assert a.get("/admin").status_code == 403 and a.get("/img/derm?f=img_00.png").status_code == 403


def test_one_annotator_cannot_read_or_write_anothers_answers(fx, login):
    e1, e2 = login("e1"), login("e2")
    f1 = form_fields(e1.get(Q).text)
    assert e1.post(Q + "/answer", data={**f1, "answer": "yes"}, follow_redirects=False).status_code == 303
    mine = fx.records("e1")
    # e2 does not see e1's progress: e2's next question is still the first one
    page = e2.get(Q).text
    assert form_fields(page)["position"] == "0" and mine[0]["answer_id"] not in page
    # e2 cannot undo e1's answer, even knowing its id
    r = e2.post(Q + "/undo", data={"csrf": form_fields(page)["csrf"], "undoes": mine[0]["answer_id"]},
                follow_redirects=False)
    assert r.status_code == 409
    # e2's own answer goes to e2's log only, under e2's name whatever the form says
    r = e2.post(Q + "/answer", data={**form_fields(page), "answer": "no"}, follow_redirects=False)
    assert r.status_code == 303
    assert fx.records("e1") == mine
    assert [(x["annotator_id"], x["answer"]) for x in fx.records("e2")] == [("e2", "no")]
    r = e2.post(Q + "/answer", data={**form_fields(page), "answer": "no", "annotator_id": "e1"},
                follow_redirects=False)
    assert r.status_code == 422 and fx.records("e1") == mine


def _rewrite_queue(fx, mutate) -> None:
    qdir = fx.home / "exports" / "confirmation_queue"
    q = pl.read_parquet(qdir / "derm.parquet")
    mutate(q).write_parquet(qdir / "derm.parquet")
    meta = json.loads((qdir / "derm.meta.json").read_text())
    meta["queue_version"] = hashlib.sha256((qdir / "derm.parquet").read_bytes()).hexdigest()
    (qdir / "derm.meta.json").write_text(json.dumps(meta))


def test_an_answer_that_breaks_the_contract_is_refused_before_any_ack(fx, login):
    long_id = "x" * 300 + ".png"  # over the id length limit: ingestion would quarantine it
    _rewrite_queue(fx, lambda q: q.with_columns(
        pl.when((pl.col("issue_type") == "irrelevant") & (pl.col("position") == 0))
        .then(pl.lit(long_id)).otherwise(pl.col("item_id")).alias("item_id")))
    c = login("e1")
    fields = form_fields(c.get(Q).text)
    assert fields["item_id"] == long_id
    r = c.post(Q + "/answer", data={**fields, "answer": "yes"}, follow_redirects=False)
    assert r.status_code == 422 and "cannot be recorded" in r.text
    _no_answers(fx.home)


def test_two_annotators_answer_200_each_in_parallel_nothing_lost_or_twice(tmp_path):
    fx = build(tmp_path, stopping_count=10_000, n_extra=200)
    n = 200
    clients = {}
    for name in ("e1", "e2"):
        token, _ = add_annotator(fx.home, name, "expert")
        tabs = []
        for _ in range(2):  # two tabs per annotator, racing on the same questions
            c = TestClient(create_app(fx.home))
            assert c.get("/login", params={"token": token}).status_code == 200
            tabs.append(c)
        clients[name] = tabs
    errors: list[str] = []

    def walk(c: TestClient, answer: str) -> None:
        with c:  # one event-loop portal for the tab's requests (outside `with`, starlette starts one per request)
            for _ in range(n):
                f = form_fields(c.get(Q).text)
                if int(f["position"]) >= n:
                    return
                r = c.post(Q + "/answer", data={**f, "answer": answer}, follow_redirects=False)
                if r.status_code not in (303, 409):  # 409: the other tab answered it first
                    errors.append(f"{r.status_code} {r.text[:200]}")

    threads = [threading.Thread(target=walk, args=(c, "yes" if name == "e1" else "no"))
               for name, tabs in clients.items() for c in tabs]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not errors, errors[:3]
    frame, rejected = read_confirmation_records(HomeLayout.at(fx.home))
    assert rejected == []
    eff = effective_answers(answers_from_records(frame.drop("line").to_dicts()))
    for name, answer in (("e1", "yes"), ("e2", "no")):
        mine = eff.filter(pl.col("annotator_id") == name)
        assert sorted(mine["position"].to_list()) == list(range(n))  # every answer once, none lost
        assert set(mine["answer"].to_list()) == {answer}
        assert frame.filter(pl.col("annotator_id") == name).height == n  # and no duplicate record


@pytest.mark.parametrize("point, kept", [("answer_before_write", 0), ("answer_after_fsync", 1)])
def test_sigkill_in_the_middle_of_an_answer_write(fx, point, kept):
    _token, login_path = add_annotator(fx.home, "e1", "expert")
    port = free_port()
    os.environ[FAULT_ENV] = point
    try:
        proc = start_server(fx.home, port)
    finally:
        os.environ.pop(FAULT_ENV)
    base = f"http://127.0.0.1:{port}"
    try:
        with httpx.Client(base_url=base, timeout=10) as c:
            assert c.get(login_path).status_code == 200
            fields = form_fields(c.get(Q).text)
            with pytest.raises(httpx.TransportError):  # killed before it could acknowledge
                c.post(Q + "/answer", data={**fields, "answer": "yes"})
            proc.wait(timeout=10)
            assert proc.returncode == -signal.SIGKILL
            assert len(fx.records("e1")) == kept  # durable exactly when fsync'd; never torn
            proc = start_server(fx.home, port)
            r = c.post(Q + "/answer", data={**fields, "answer": "yes"})  # the browser retries
            assert r.status_code in (200, 303)
            recs = fx.records("e1")
            assert [(x["position"], x["answer"]) for x in recs] == [(0, "yes")]  # once, whatever happened
    finally:
        stop_server(proc)
