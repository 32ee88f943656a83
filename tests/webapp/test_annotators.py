"""``add_annotator`` / ``revoke_annotator`` / ``list_annotators`` (behind `noisycal annotators`)."""

from __future__ import annotations

import pytest
from starlette.testclient import TestClient

from noisycal_platform.confirm_app import add_annotator, create_app, list_annotators, revoke_annotator


@pytest.mark.parametrize("name", ["", "a/b", "../x", ".hidden", "x" * 65, "sp ace", None, 7])
def test_bad_names_are_refused(tmp_path, name):
    with pytest.raises(ValueError, match="name"):
        add_annotator(tmp_path, name, "expert")
    assert not (tmp_path / "annotators.json").exists()


def test_bad_role_and_duplicates(tmp_path):
    with pytest.raises(ValueError, match="role"):
        add_annotator(tmp_path, "e1", "root")
    t1, _ = add_annotator(tmp_path, "e1", "expert")
    with pytest.raises(ValueError, match="already exists"):
        add_annotator(tmp_path, "e1", "lay")
    with pytest.raises(ValueError, match="not a known annotator"):
        revoke_annotator(tmp_path, "nobody")
    revoke_annotator(tmp_path, "e1")
    t2, path2 = add_annotator(tmp_path, "e1", "expert")  # a revoked name gets a fresh token
    assert t2 != t1
    assert [(a["name"], a["revoked"]) for a in list_annotators(tmp_path)] == [("e1", False)]
    c = TestClient(create_app(tmp_path))
    assert c.get("/login", params={"token": t1}).status_code == 401  # the old token is gone
    assert c.get(path2).status_code == 200


def test_tokens_are_unique_and_random(tmp_path):
    tokens = {add_annotator(tmp_path, f"a{i}", "lay")[0] for i in range(20)}
    assert len(tokens) == 20
    assert all(len(t) >= 43 for t in tokens)
