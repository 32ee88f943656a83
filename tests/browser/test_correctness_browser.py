"""The correctness question type in a real headless Chromium (Playwright): an annotator logs in with the
tool's login link, answers "Is this answer correct for this case?" with clicks and keys (correct, and
incorrect with a category), undoes once, resumes after a reload, finishes; the page never shows the model's
confidence or a verdict; every answer is in ``inbox/correctness_audit/<annotator>.jsonl`` and the cleaning
confirmation log is not touched. A screenshot goes to ``tests/browser/artifacts/``.
"""

from __future__ import annotations

import json
from collections.abc import Iterator

import polars as pl
import pytest

from noisycal_platform.confirm_app import add_annotator
from noisycal_platform.correctness import audit_workflow as aw
from noisycal_platform.correctness.audit_workflow import effective_correctness_answers

from .conftest import navigate_by, serving

pytestmark = [pytest.mark.browser]

ITEMS = [
    ("ehrshot", "gemma", "c1", ["Sepsis", "Heart failure"], ["Sepsis"], "Sepsis"),
    ("ehrshot", "gemma", "c2", ["Sepsis", "Heart failure"], [], "Heart failure"),
    ("mcmed", "medgemma", "c3", ["Admit", "Discharge"], ["Admit"], "admit or discharge"),
]


def _sample() -> pl.DataFrame:
    rows = []
    for i, (ds, m, c, cands, refs, ans) in enumerate(ITEMS):
        raw = json.dumps({"reasoning": f"Because of finding {i}.", "answer": ans})
        rows.append({"position": i, "dataset": ds, "model": m, "case_id": c, "task_question": "Which diagnoses?",
                     "candidate_labels": json.dumps(cands), "reference_labels": json.dumps(refs),
                     "multi_label": ds != "mcmed", "answer": ans, "raw_output": raw})
    return pl.DataFrame(rows)


@pytest.fixture(scope="module")
def served(tmp_path_factory) -> Iterator[dict]:
    home = tmp_path_factory.mktemp("corr_browser") / "home"
    (home / "exports").mkdir(parents=True)
    (home / "exports" / "audit_sample.csv").write_text(aw.sample_csv_text(_sample()), encoding="utf-8")
    logins = {name: add_annotator(home, name, "expert")[1] for name in ("ann_a",)}
    with serving(home) as base:
        yield {"home": home, "base": base, "logins": logins}


def _records(served: dict, name: str) -> list[dict]:
    p = served["home"] / "inbox" / "correctness_audit" / f"{name}.jsonl"
    return [json.loads(x) for x in p.read_text().splitlines()] if p.exists() else []


def test_annotator_answers_correctness_questions(browser, served, artifacts_dir):
    ctx = browser.new_context(viewport={"width": 1280, "height": 900})
    page = ctx.new_page()
    page.set_default_timeout(15_000)
    try:
        page.goto(served["base"] + served["logins"]["ann_a"])
        page.wait_for_url(served["base"] + "/")
        page.goto(served["base"] + "/correctness")
        assert page.inner_text("#question") == "Is this answer correct for this case?"
        assert page.inner_text("#task") == "Which diagnoses?"
        assert [c.inner_text() for c in page.query_selector_all("#candidates .chip")] == ["Sepsis", "Heart failure"]
        assert page.inner_text("#references").strip() == "Sepsis"
        assert page.inner_text("#model-answer") == "Sepsis"
        assert page.inner_text("#reasoning") == "Because of finding 0."
        body = page.inner_text("body").lower()
        for hidden in ("confidence", "uncertainty", "em-accepted", "em-rejected", "exact match", "score"):
            assert hidden not in body
        page.screenshot(path=str(artifacts_dir / "correctness_question.png"), full_page=True)

        navigate_by(page, lambda: page.click("#btn-correct"))  # item 1: correct (click)
        assert page.inner_text("#answered") == "1" and page.inner_text("#model-answer") == "Heart failure"
        assert page.inner_text("#references").strip() == "none"
        navigate_by(page, lambda: page.keyboard.press("2"))  # item 2: incorrect, extra/wrong (key)
        assert page.inner_text("#answered") == "2"
        navigate_by(page, lambda: page.keyboard.press("u"))  # undo item 2
        assert page.inner_text("#answered") == "1" and page.inner_text("#model-answer") == "Heart failure"
        navigate_by(page, lambda: page.click("#btn-incorrect-2"))
        page.reload()  # resumes where it stood
        assert page.inner_text("#model-answer") == "admit or discharge"
        assert "exactly one" in page.inner_text("#candidates")
        navigate_by(page, lambda: page.keyboard.press("3"))  # item 3: incorrect, invalid/uncertain
        assert page.is_visible("#finished") and page.inner_text("#answered") == "3"
    finally:
        ctx.close()

    recs = _records(served, "ann_a")
    assert [r["answer"] for r in recs] == ["correct", "incorrect", "undo", "incorrect", "incorrect"]
    assert all(r["record_type"] == "correctness_audit" for r in recs)
    eff = effective_correctness_answers(recs)
    assert [(r["case_id"], r["answer"], r["error_category"]) for r in eff] == [
        ("c1", "correct", None), ("c2", "incorrect", "extra/wrong"), ("c3", "incorrect", "invalid/uncertain")]
    assert not (served["home"] / "inbox" / "confirmations" / "ann_a.jsonl").exists()
