"""The confirmation tool (Gröger et al. 2023 §3.3) in a real headless Chromium (Playwright).

Log in, answer with the keyboard until the stopping rule fires, see the page say so, undo once, resume after
a reload and after a fresh browser session; arrow keys between the images of a pair; a screenshot of the
question page of each issue type (``tests/browser/artifacts/`` or ``$NOISYCAL_TEST_ARTIFACTS``); then
``noisycal tick`` ingests the answers into ``raw.confirmations`` and ``cleaning.confirmed_issues``.
"""

from __future__ import annotations

import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest
from confirm_fixture import build

from noisycal_platform.confirm_app import add_annotator

from .conftest import navigate_by, serving

pytestmark = [pytest.mark.browser]

Q = "/q/derm/irrelevant"
IMAGES_LOADED = ("() => Array.from(document.querySelectorAll('#images img'))"
                 ".every(i => i.complete && i.naturalWidth > 0)")


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[dict]:
    fx = build(tmp_path_factory.mktemp("browser"), stopping_count=3)
    logins = {name: add_annotator(fx.home, name, role)[1]
              for name, role in (("e1", "expert"), ("viewer", "expert"), ("boss", "admin"))}
    with serving(fx.home) as base:
        yield {"fx": fx, "base": base, "logins": logins}


def _login(browser, served: dict, name: str, landing: str = "/"):
    ctx = browser.new_context(viewport={"width": 1280, "height": 860}, device_scale_factor=1)
    page = ctx.new_page()
    page.set_default_timeout(15_000)
    page.goto(served["base"] + served["logins"][name])
    page.wait_for_url(served["base"] + landing)  # the login page continues to the start page by itself
    return ctx, page


def _key(page, key: str) -> None:
    navigate_by(page, lambda: page.keyboard.press(key))


def _position(page) -> str | None:
    el = page.query_selector("input[name=position]")
    return el.get_attribute("value") if el else None


def test_question_page_screenshots_for_each_issue_type(browser, served, artifacts_dir):
    ctx, page = _login(browser, served, "viewer")
    try:
        assert page.locator("a.task").count() == 3
        page.screenshot(path=str(artifacts_dir / "start_page.png"), full_page=True)
        expected = {
            "irrelevant": ("Is this image irrelevant?", 1),
            "near_duplicate": ("Do these two images show the same object?", 2),
            "label_error": ("Is this image's label an error?", 1),
        }
        for issue_type, (headline, n_images) in expected.items():
            page.goto(f"{served['base']}/q/derm/{issue_type}")
            page.wait_for_function(IMAGES_LOADED)
            assert page.inner_text("#question") == headline
            assert page.locator("#images img").count() == n_images
            if issue_type == "label_error":
                assert page.inner_text("#current-label") == "Current label: melanoma"
            path = artifacts_dir / f"question_{issue_type}.png"
            page.screenshot(path=str(path), full_page=True)
            assert path.stat().st_size > 10_000
    finally:
        ctx.close()
    assert not served["fx"].answers_file("viewer").exists()  # looking writes nothing


def test_arrow_keys_move_between_the_images_of_a_pair(browser, served, artifacts_dir):
    ctx, page = _login(browser, served, "viewer")
    try:
        page.goto(served["base"] + "/q/derm/near_duplicate")
        page.wait_for_function(IMAGES_LOADED)
        figs = page.locator("#images figure")
        assert "focus" in figs.nth(0).get_attribute("class")
        page.keyboard.press("ArrowRight")
        assert "focus" in figs.nth(1).get_attribute("class")
        assert "focus" not in figs.nth(0).get_attribute("class")
        page.keyboard.press("z")  # enlarge the focused image; arrows now flip between A and B
        assert page.locator("#zoom.open").is_visible()
        assert "img_03_copy.png" in page.get_attribute("#zoom img", "src")
        page.wait_for_function("() => document.querySelector('#zoom img').naturalWidth > 0")
        page.screenshot(path=str(artifacts_dir / "pair_enlarged_image_B.png"))
        page.keyboard.press("ArrowLeft")
        assert "f=img_03.png" in page.get_attribute("#zoom img", "src")
        assert page.inner_text("#zoom-name") == "Image A"
        page.keyboard.press("Escape")
        assert not page.locator("#zoom.open").is_visible()
    finally:
        ctx.close()


def test_keyboard_until_stopping_rule_then_undo_and_resume(browser, served, artifacts_dir):
    fx = served["fx"]
    ctx, page = _login(browser, served, "e1")
    try:
        page.click("a.task >> nth=0")  # irrelevant samples (first row)
        page.wait_for_url(served["base"] + Q)
        # ranking order: chart.png is the irrelevant one; then "no" until the stopping rule fires (k = 3)
        expected_items = [c["item_id"] for c in fx.candidates("irrelevant")]
        keys = ["y", "n", "n", "n"]
        for i, key in enumerate(keys):
            assert page.get_attribute("input[name=item_id]", "value") == expected_items[i]
            assert _position(page) == str(i)
            # Gröger et al. 2023 App. E: no answer count and no progress against the stopping rule on the page
            assert page.locator("#answered, #consecutive-no, progress").count() == 0
            _key(page, key)
        assert page.locator("#finished").is_visible()
        text = page.inner_text("#finished")
        assert "the stopping rule fired" in text and "in a row" not in text
        page.screenshot(path=str(artifacts_dir / "finished_stopping_rule.png"), full_page=True)
        assert [r["answer"] for r in fx.records("e1")] == ["yes", "no", "no", "no"]

        _key(page, "u")  # undo once: recorded, not erased; the last candidate is asked again
        recs = fx.records("e1")
        assert [r["answer"] for r in recs] == ["yes", "no", "no", "no", "undo"]
        assert recs[-1]["undoes"] == recs[-2]["answer_id"]
        assert _position(page) == "3"

        page.reload()
        assert _position(page) == "3" and page.locator("#answered, #consecutive-no").count() == 0
    finally:
        ctx.close()

    # the browser is closed and comes back: a fresh session from the same login link continues there
    ctx, page = _login(browser, served, "e1")
    try:
        assert "in progress" in page.inner_text("table")
        page.goto(served["base"] + Q)
        assert _position(page) == "3"
        _key(page, "n")
        assert "the stopping rule fired" in page.inner_text("#finished")
    finally:
        ctx.close()
    assert [r["answer"] for r in fx.records("e1")] == ["yes", "no", "no", "no", "undo", "no"]


def test_admin_page_in_browser(browser, served, artifacts_dir):
    ctx, page = _login(browser, served, "boss", landing="/admin")
    try:
        row = page.locator("tr.annotator-row[data-name=e1]")
        if served["fx"].records("e1"):
            assert "finished (stopping rule)" in row.inner_text()
        page.screenshot(path=str(artifacts_dir / "admin.png"), full_page=True)
    finally:
        ctx.close()


# ---------------------------------------------------------------- the pipeline step (`noisycal tick`)
def _noisycal() -> Path:
    exe = Path(sys.executable).with_name("noisycal")
    if not exe.exists():
        pytest.skip(f"the `noisycal` console script is not installed next to {sys.executable} (pip install -e .)")
    return exe


def test_tick_ingests_answers_into_the_warehouse(served):
    """Run the sensors once (``noisycal tick``) and read the warehouse read-only."""
    exe = _noisycal()
    import duckdb

    fx = served["fx"]
    # the pipeline knows the dataset by path (so cleaning/confirmed_issues has its partition)
    (fx.home / "datasets.json").write_text(json.dumps({"derm": str(fx.root)}))
    # the cheapest encoder a user can set: this test is about the answers' path, not embedding quality. With
    # ``encoder: auto`` these 480x360 images would get the frozen EfficientNet-Lite0 (its ONNX export on first use),
    # and the DINO overrides would do nothing; a one-epoch, one-block DINO at 64 px without local crops and with a
    # small head costs about 3 CPU s less (the whole cleaning chain still runs, as before)
    (fx.home / "settings.json").write_text(json.dumps({"encoder": "dino", "encoder_overrides": {
        "epochs": 1, "depth": 1, "image_size": 64, "n_local_crops": 0, "head_hidden_dim": 64, "out_dim": 64}}))
    records = [json.loads(line) for p in sorted((fx.home / "inbox" / "confirmations").glob("*.jsonl"))
               for line in p.read_text().splitlines()]
    assert records, "the browser test above should have written answers"
    res = subprocess.run([str(exe), "--home", str(fx.home), "tick"], capture_output=True, text=True,
                         timeout=1200)
    assert res.returncode == 0, res.stdout[-2000:] + res.stderr[-2000:]
    con = duckdb.connect(str(fx.home / "warehouse.duckdb"), read_only=True)
    try:
        ids = {r[0] for r in con.execute("select answer_id from raw.confirmations").fetchall()}
        assert ids == {r["answer_id"] for r in records}
        rows = con.execute(
            "select item_id, n_yes, n_no, unanimous from cleaning.confirmed_issues "
            "where dataset = 'derm' and issue_type = 'irrelevant' and (n_yes > 0 or n_no > 0) "
            "order by item_id"
        ).fetchall()
    finally:
        con.close()
    # e1 (the only expert who answered): yes to chart.png, then no, no, no (the undone "no" was re-given)
    assert rows == [("chart.png", 1, 0, True), ("img_00.png", 0, 1, False), ("img_01.png", 0, 1, False),
                    ("sub/nested.png", 0, 1, False)]
