"""Issue 4 "Security tests": each refusal has the right status and writes nothing."""

from __future__ import annotations

import hashlib
import json

import pytest
from confirm_fixture import form_fields
from starlette.testclient import TestClient

from noisycal_platform.confirm_app import add_annotator, create_app, list_annotators, revoke_annotator

Q = "/q/derm/irrelevant"


def _nothing_written(fx) -> None:
    folder = fx.home / "inbox" / "confirmations"
    assert not folder.exists() or list(folder.iterdir()) == []


def _valid_answer(client: TestClient) -> dict[str, str]:
    page = client.get(Q)
    assert page.status_code == 200
    return {**form_fields(page.text), "answer": "yes"}


# ---------------------------------------------------------------- tokens
def test_missing_token_is_401_everywhere(fx):
    c = TestClient(create_app(fx.home))
    for url in ("/", Q, "/admin", "/img/derm?f=img_00.png", "/login"):
        assert c.get(url).status_code == 401, url
    r = c.post(Q + "/answer", data={"position": "0", "item_id": "chart.png", "answer": "yes"},
               follow_redirects=False)
    assert r.status_code == 401
    _nothing_written(fx)


def test_wrong_token_is_401(fx):
    token, _ = add_annotator(fx.home, "e1", "expert")
    c = TestClient(create_app(fx.home))
    assert c.get("/login", params={"token": token + "x"}).status_code == 401
    wrong = token[:-1] + ("A" if token[-1] != "A" else "B")  # one character off
    c.cookies.set("nc_session", wrong + ".nonce")
    assert c.get(Q).status_code == 401
    c.cookies.set("nc_session", token)  # no nonce part: malformed session
    assert c.get(Q).status_code == 401
    c.cookies.set("nc_session", "x" * 5000 + ".n")
    assert c.get(Q).status_code == 401
    r = c.post(Q + "/answer", data={"position": "0", "item_id": "chart.png", "answer": "yes"},
               follow_redirects=False)
    assert r.status_code == 401
    _nothing_written(fx)


def test_revoked_token_is_403_and_writes_nothing(fx, login):
    c = login("e1")
    fields = _valid_answer(c)
    revoke_annotator(fx.home, "e1")
    assert c.get(Q).status_code == 403
    assert c.post(Q + "/answer", data=fields, follow_redirects=False).status_code == 403
    assert TestClient(create_app(fx.home)).get("/login", params={"token": c.token}).status_code == 403
    _nothing_written(fx)
    assert list_annotators(fx.home) == [{"name": "e1", "role": "expert", "revoked": True,
                                         "created": list_annotators(fx.home)[0]["created"]}]


def test_tokens_are_stored_hashed_only(fx):
    token, path = add_annotator(fx.home, "e1", "expert")
    text = (fx.home / "annotators.json").read_text()
    assert token not in text
    stored = json.loads(text)[0]
    assert stored["token_sha256"] == hashlib.sha256(token.encode()).hexdigest()
    assert path == f"/login?token={token}"  # token_urlsafe needs no quoting
    assert len(token) >= 43  # 32 random bytes
    assert "token_sha256" not in list_annotators(fx.home)[0]


def test_session_cookie_flags_and_security_headers(fx):
    _token, path = add_annotator(fx.home, "e1", "expert")
    c = TestClient(create_app(fx.home))
    r = c.get(path)
    cookie = r.headers["set-cookie"].lower()
    assert "httponly" in cookie and "samesite=strict" in cookie
    page = c.get(Q)
    csp = page.headers["content-security-policy"]
    assert "script-src 'nonce-" in csp and "frame-ancestors 'none'" in csp
    assert page.headers["cache-control"] == "no-store"
    assert "http://" not in page.text and "https://" not in page.text  # no external asset of any kind


# ---------------------------------------------------------------- cross-site writes
@pytest.mark.parametrize(
    "headers",
    [{"sec-fetch-site": "cross-site"}, {"sec-fetch-site": "same-site"},
     {"sec-fetch-site": "cross-site", "origin": "http://testserver"}, {"origin": "http://evil.example"},
     {"origin": "null"}, {"origin": "http://testserver.evil.example"}],
)
def test_cross_site_post_is_403_even_with_csrf_token(fx, login, headers):
    c = login("e1")
    r = c.post(Q + "/answer", data=_valid_answer(c), headers=headers, follow_redirects=False)
    assert r.status_code == 403
    _nothing_written(fx)


@pytest.mark.parametrize("csrf", [None, "", "0" * 64])
def test_post_without_the_sessions_csrf_token_is_403(fx, login, csrf):
    c = login("e1")
    fields = _valid_answer(c)
    if csrf is None:
        del fields["csrf"]
    else:
        fields["csrf"] = csrf
    assert c.post(Q + "/answer", data=fields, follow_redirects=False).status_code == 403
    _nothing_written(fx)


def test_csrf_token_of_another_session_is_403(fx, login):
    a, b = login("e1"), login("e2")
    fields = _valid_answer(a)
    fields["csrf"] = form_fields(b.get(Q).text)["csrf"]
    assert a.post(Q + "/answer", data=fields, follow_redirects=False).status_code == 403
    _nothing_written(fx)


@pytest.mark.parametrize(
    "headers",
    [{"sec-fetch-site": "same-origin", "origin": "http://testserver"},
     {"sec-fetch-site": "same-origin", "origin": "null"},  # what Chrome sends under a strict referrer policy
     {"origin": "http://testserver"}, {}],
)
def test_same_origin_posts_with_the_csrf_token_are_accepted(fx, login, headers):
    c = login("e1")
    r = c.post(Q + "/answer", data=_valid_answer(c), follow_redirects=False, headers=headers)
    assert r.status_code == 303
    assert len(fx.records("e1")) == 1


# ---------------------------------------------------------------- image paths
@pytest.mark.parametrize(
    "name",
    ["../secret.png", "../../../../etc/passwd", "sub/../../secret.png", "/etc/passwd", None,
     "link_out.png", "..\\secret.png", "img_00.png\x00.jpg", "C:/Windows/win.ini"],
)
def test_image_paths_outside_the_root_are_403(fx, login, name):
    c = login("e1")
    if name is None:
        name = str(fx.secret)  # the absolute path of a real file outside the root
    r = c.get("/img/derm", params={"f": name})
    assert r.status_code == 403, (name, r.status_code)
    assert r.headers["content-type"].startswith("text/html")
    assert not (fx.home / "cache" / "thumbnails").exists()


def test_raw_encoded_traversal_in_url_is_403(fx, login):
    c = login("e1")
    for raw in ("/img/derm?f=%2e%2e%2fsecret.png", "/img/derm?f=..%2F..%2Fsecret.png",
                "/img/derm?f=%2Fetc%2Fpasswd"):
        assert c.get(raw).status_code == 403, raw


def test_image_inside_root_is_served_as_cached_thumbnail(fx, login):
    c = login("e1")
    r = c.get("/img/derm", params={"f": "sub/nested.png", "s": "m"})
    assert r.status_code == 200 and r.headers["content-type"] == "image/jpeg"
    assert r.content[:3] == b"\xff\xd8\xff"
    cached = list((fx.home / "cache" / "thumbnails").glob("*.jpg"))
    assert len(cached) == 1
    before = cached[0].stat().st_mtime_ns
    assert c.get("/img/derm", params={"f": "sub/nested.png"}).content == r.content
    assert cached[0].stat().st_mtime_ns == before  # served from the cache, not regenerated


def test_image_not_in_queue_or_not_decodable(fx, login):
    c = login("e1")
    assert c.get("/img/derm", params={"f": "img_03_copy.png", "s": "xl"}).status_code == 422
    (fx.root / "other.png").write_bytes((fx.root / "img_00.png").read_bytes())
    # inside the root but not a candidate of the queue
    assert c.get("/img/derm", params={"f": "other.png"}).status_code == 404
    assert c.get("/img/derm", params={"f": "nope.png"}).status_code == 404
    assert c.get("/img/derm", params={"f": "not_an_image.png"}).status_code == 422
    assert c.get("/img/nodata", params={"f": "img_00.png"}).status_code == 404


# ---------------------------------------------------------------- oversized / malformed
def _post_raw(c: TestClient, body: bytes, ctype: str = "application/x-www-form-urlencoded"):
    return c.post(Q + "/answer", content=body, headers={"content-type": ctype}, follow_redirects=False)


def test_oversized_and_malformed_fields_are_refused(fx, login):
    from urllib.parse import urlencode

    c = login("e1")
    good = _valid_answer(c)

    def enc(**over: str) -> bytes:
        return urlencode({**good, **over}).encode()

    cases = [
        (413, enc(item_id="a" * 20_000)),                       # whole body over the limit
        (413, enc(item_id="a" * 2_000)),                        # one field over the limit
        (422, enc(position="abc")),
        (422, enc(position="-1")),
        (422, enc(position="9" * 40)),
        (422, enc(answer="maybe")),
        (422, enc(answer="")),
        (422, enc(item_id="")),
        (422, enc(item_id="chart.png\n")),
        (422, enc(extra="1")),
        (422, enc() + b"&answer=no"),                           # a field twice
        (400, enc() + b"&%ZZ=1&broken"),                       # not a form
        (400, "answer=yés".encode()),                           # not ASCII
        (409, enc(item_id="img_00.png")),                       # does not match the candidate at position 0
        (409, enc(position="5", item_id="img_04.png")),         # not the next question
    ]
    for status, body in cases:
        r = _post_raw(c, body)
        assert r.status_code == status, (status, r.status_code, body[:80])
    assert _post_raw(c, json.dumps(good).encode(), "application/json").status_code == 415
    assert _post_raw(c, b"x", "multipart/form-data; boundary=x").status_code == 415
    assert c.post(Q + "/undo", data={"csrf": good["csrf"], "undoes": "../../x"},
                  follow_redirects=False).status_code == 422
    assert c.post("/q/derm/nonsense/answer", data=good, follow_redirects=False).status_code == 404
    assert c.post("/q/..%2f..%2fetc/irrelevant/answer", data=good, follow_redirects=False).status_code == 404
    _nothing_written(fx)
    assert _post_raw(c, enc()).status_code == 303  # the same session still works
    assert len(fx.records("e1")) == 1


def test_admin_cannot_answer_and_annotators_cannot_see_admin(fx, login):
    admin = login("boss", "admin")
    assert admin.get("/", follow_redirects=False).headers["location"] == "/admin"
    fields = _valid_answer(admin)
    assert admin.post(Q + "/answer", data=fields, follow_redirects=False).status_code == 403
    _nothing_written(fx)
    assert login("e1").get("/admin").status_code == 403


def test_logout_needs_the_csrf_token_and_ends_the_session(fx, login):
    c = login("e1")
    csrf = form_fields(c.get(Q).text)["csrf"]
    assert c.post("/logout", data={"csrf": ""}, follow_redirects=False).status_code == 403
    assert c.get(Q).status_code == 200
    assert c.post("/logout", data={"csrf": csrf}, follow_redirects=False).status_code == 200
    assert c.get(Q).status_code == 401


def test_unreadable_snapshot_is_503_and_writes_nothing(fx, login):
    c = login("e1")
    fields = _valid_answer(c)
    (fx.home / "exports" / "confirmation_queue" / "derm.parquet").write_bytes(b"PAR1 not really")
    assert c.get(Q).status_code == 503
    assert c.post(Q + "/answer", data=fields, follow_redirects=False).status_code == 503
    assert c.get("/").status_code == 200  # the start page still works, without the broken dataset
    _nothing_written(fx)
