"""The correctness question routes in-process: login is required, bad answers are refused with nothing
written, a stale page gets 409, an admin sees the page read-only and cannot answer."""

import json
import re

import polars as pl
import pytest
from starlette.testclient import TestClient

from noisycal_platform.confirm_app import add_annotator, create_app
from noisycal_platform.correctness import audit_workflow as aw


@pytest.fixture()
def client_home(tmp_path):
    home = tmp_path / "home"
    (home / "exports").mkdir(parents=True)
    rows = [{"position": i, "dataset": "d", "model": "m", "case_id": f"c{i}", "task_question": "q",
             "candidate_labels": json.dumps(["A", "B"]), "reference_labels": json.dumps(["A"]),
             "multi_label": True, "answer": "A", "raw_output": json.dumps({"reasoning": "r", "answer": "A"})}
            for i in range(2)]
    (home / "exports" / "audit_sample.csv").write_text(aw.sample_csv_text(pl.DataFrame(rows)), encoding="utf-8")
    logins = {n: add_annotator(home, n, r)[1] for n, r in (("e1", "expert"), ("boss", "admin"))}
    return TestClient(create_app(home), base_url="http://127.0.0.1"), home, logins


def _csrf(client) -> str:
    html = client.get("/correctness").text
    return re.search(r'name="csrf" value="([^"]+)"', html).group(1)


def _post(client, data):
    return client.post("/correctness/answer", data=data, follow_redirects=False)


def test_routes_refuse_bad_answers_and_write_only_good_ones(client_home):
    client, home, logins = client_home
    assert client.get("/correctness").status_code == 401
    client.get(logins["e1"])
    tok = _csrf(client)
    base = {"csrf": tok, "position": "0", "dataset": "d", "model": "m", "case_id": "c0"}
    log = home / "inbox" / "correctness_audit" / "e1.jsonl"
    assert _post(client, {**base, "answer": "incorrect"}).status_code == 422  # no category
    assert _post(client, {**base, "answer": "correct", "error_category": "extra/wrong"}).status_code == 422
    assert _post(client, {**base, "answer": "maybe"}).status_code == 422
    assert _post(client, {**base, "answer": "correct", "csrf": "x"}).status_code == 403
    assert _post(client, {**base, "answer": "correct", "case_id": "c1"}).status_code == 409  # stale page
    assert not log.exists()
    assert _post(client, {**base, "answer": "correct"}).status_code == 303
    assert _post(client, {**base, "answer": "correct"}).status_code == 303  # a repeat: acknowledged, not rewritten
    assert len(log.read_text().splitlines()) == 1
    assert _post(client, {**base, "position": "5", "answer": "correct"}).status_code == 409


def test_admin_is_read_only(client_home):
    client, _home, logins = client_home
    client.get(logins["boss"])
    page = client.get("/correctness")
    assert page.status_code == 200 and 'id="btn-correct"' not in page.text and 'id="model-answer"' in page.text
    tok = re.search(r'name="csrf" value="([^"]+)"', page.text).group(1)
    data = {"csrf": tok, "position": "0", "dataset": "d", "model": "m", "case_id": "c0", "answer": "correct"}
    assert _post(client, data).status_code == 403
