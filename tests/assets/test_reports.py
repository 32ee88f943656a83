"""Report assets: a day-one cleaning report (rankings, no answers) says so and shows the candidates; a
calibration report with one failing model version is built from the others and lists the failing one as
missing, with the reason taken from the run records; report files are group-readable."""

from __future__ import annotations

import json
import re
import stat
from types import SimpleNamespace

import dagster as dg
import numpy as np
import polars as pl
import pytest
from PIL import Image

from assets import reports
from definitions import build_definitions
from noisycal_platform.calibration.demo_data import write_demo_calibration_inputs, write_demo_model_version
from noisycal_platform.cleaning.pipeline.outcomes import agreement_table, cleaning_impact_table, ranking_quality_table
from noisycal_platform.cleaning.pipeline.protocol_tables import (
    cleaned_file_list,
    confirmation_queue,
    confirmed_issues,
    label_error_prevalence,
)
from noisycal_platform.cleaning.pipeline.schemas import SESSION_ENDINGS_SCHEMA, SPEEDUP_SCHEMA, TRUTH_SCHEMA
from noisycal_platform.cleaning.protocol import answers_from_records
from orchestration.runner import instance_for
from resources.inbox import InboxResource
from tests.asset_chains import CALIBRATION_INPUTS, CALIBRATION_PER_VERSION
from tests.assets._run import materialize

N_PER_RANKING = 8


def _day_one_frames(root, dataset="derm", n=20):
    """A dataset whose three rankings exist and that nobody has reviewed yet (no confirmation answers)."""
    root.mkdir(parents=True)
    rng = np.random.default_rng(0)
    names = [f"img{i:02d}.png" for i in range(n)]
    for name in names:
        Image.fromarray(rng.integers(0, 255, (24, 24, 3), dtype=np.uint8)).save(root / name)
    files = pl.DataFrame({"file_name": names, "label": ["nevus", "melanoma"] * (n // 2)})
    rk = SimpleNamespace(order=np.arange(n)[::-1], scores=np.linspace(1, 0, n))
    pairs = np.array([[i, i + 1] for i in range(0, n - 1, 2)])
    pr = SimpleNamespace(pairs=pairs, scores=np.linspace(0.01, 0.5, len(pairs)))
    queue = confirmation_queue(dataset, rk, pr, rk, files)
    no_answers = answers_from_records([])
    confirmed = confirmed_issues(no_answers, queue)
    images = files.with_columns(dataset=pl.lit(dataset), root=pl.lit(str(root)))
    empty = pl.DataFrame()  # an undeclared upstream that has produced nothing loads without columns
    return {
        "images": images,
        "confirmation_queue": queue,
        "confirmed_issues": confirmed,
        "label_error_prevalence": label_error_prevalence(confirmed, files, dataset=dataset),
        "agreement": agreement_table(no_answers),
        "ranking_quality": ranking_quality_table(confirmed),
        "ranking_vs_truth": pl.DataFrame(schema=TRUTH_SCHEMA),
        # a declared upstream that has produced nothing loads with its schema (resources/warehouse.py)
        "annotation_speedup": pl.DataFrame(schema=SPEEDUP_SCHEMA),
        "cleaning_impact": empty,
        "stopping_sensitivity": empty,
        "expert_lay_tests": empty,
        "annotation_sessions": pl.DataFrame(schema=SESSION_ENDINGS_SCHEMA),
    }


def test_day_one_cleaning_report_shows_candidates_and_says_no_answers(tmp_path):
    home = tmp_path / "home"
    frames = _day_one_frames(tmp_path / "images")
    with dg.build_asset_context(instance=dg.DagsterInstance.ephemeral()) as context:
        out = reports.cleaning(context, **frames, inbox=InboxResource(home=str(home)))
    path = home / "reports" / "cleaning.html"
    html = path.read_text()
    assert out.value["path"].to_list() == [str(path)]
    assert "No answers have arrived yet" in html
    # every ranking shows its first candidates as thumbnails; near duplicates as two images side by side
    thumbs = re.findall(r"<img src='data:image/jpeg;base64,", html)
    assert len(thumbs) == N_PER_RANKING + 2 * N_PER_RANKING + N_PER_RANKING
    # statistics that need answers say so instead of printing zeros
    assert html.count("not reviewed yet") >= 3 * 2 + 2  # Table 1 cells (2 rules x 3 types) + prevalence rows
    assert "0 (0" not in html and "0.0%" not in html and "CI 0" not in html
    # an empty section always says what would fill it: "(no rows)" is followed by a sentence
    empties = re.findall(r"\(no rows\)([^<]*)</p>", html)
    assert empties and all(re.match(r": \w+.{20,}", e) for e in empties), empties
    assert "truth.json" in html and "near_duplicates" in html
    index = (home / "reports" / "index.html").read_text()
    assert "No answers yet; 50 candidates ranked" in index  # 20 irrelevant + 10 pairs + 20 label errors
    assert "href='cleaning.html'" in index
    for p in (path, home / "reports" / "index.html"):
        assert stat.S_IMODE(p.stat().st_mode) & 0o044 == 0o044, p  # group- and other-readable


def test_dataset_without_cleaning_scores_coexists_with_one_that_has_them(tmp_path):
    """Two datasets, only one scored by a model: its impact rows are shown, the other is named as unscored."""
    home = tmp_path / "home"
    a = _day_one_frames(tmp_path / "a", dataset="scored")
    b = _day_one_frames(tmp_path / "b", dataset="unscored")
    frames = {k: pl.concat([a[k], b[k]], how="vertical") if a[k].width else a[k] for k in a}
    files = a["images"].select("file_name", "label")
    rng = np.random.default_rng(1)
    preds = files.select("file_name").with_columns(target=pl.Series(np.arange(files.height) % 2),
                                                   score=pl.Series(rng.random(files.height)))
    kept = cleaned_file_list(files, a["confirmed_issues"])
    frames["cleaning_impact"] = cleaning_impact_table(preds, files, kept, dataset="scored", model_version="v1",
                                                         n_boot=20)
    with dg.build_asset_context(instance=dg.DagsterInstance.ephemeral()) as context:
        out = reports.cleaning(context, **frames, inbox=InboxResource(home=str(home)))
    html = (home / "reports" / "cleaning.html").read_text()
    assert out.value["scope"].to_list() == ["scored,unscored"]
    impact = html.split("Impact of cleaning", 1)[1].split("<h2>", 1)[0]
    assert "<td class='l'>scored</td><td class='l'>v1</td>" in impact
    assert "No model has scored unscored" in impact and ">unscored<" not in impact


@pytest.fixture(scope="module")
def failing_version_home(tmp_path_factory):
    home = tmp_path_factory.mktemp("reports") / "home"
    write_demo_calibration_inputs(home, seed=0)  # v1, good
    (home / "settings.json").write_text(json.dumps({"n_bootstrap": 50}))  # intervals are not under test here
    write_demo_model_version(home, "v2", seed=0)  # registered, never run
    (home / "models" / "v3").mkdir(parents=True)
    (home / "models" / "v3" / "predictions.csv").write_text("item_id,score\nitem_0001,2.5\n")  # breaks its contract
    defs = build_definitions(home)
    instance = instance_for(home)
    instance.add_dynamic_partitions("model_versions", ["v1", "v2", "v3"])

    def run(names, partition=None):
        return materialize(home, names, partition, checks=False, defs=defs, instance=instance)

    assert run(CALIBRATION_INPUTS).success
    assert run(CALIBRATION_PER_VERSION, "v1").success
    assert not run(CALIBRATION_PER_VERSION, "v3").success
    result = run(["reports/calibration"])
    return home, result


def test_calibration_report_built_from_the_good_versions(failing_version_home):
    home, result = failing_version_home
    assert result.success
    frame = result.output_for_node("reports__calibration")
    assert frame["scope"].to_list() == ["v1"]
    assert (home / "reports" / "calibration" / "v1.html").is_file()
    assert not (home / "reports" / "calibration" / "v3.html").exists()


def test_failing_version_listed_as_missing_with_its_reason(failing_version_home):
    home, _ = failing_version_home
    overview = (home / "reports" / "calibration.html").read_text()
    front = (home / "reports" / "index.html").read_text()
    for page in (overview, front):
        assert "Not in this report" in page
        v3 = re.search(r"<li><b>v3</b>: ([^<]*)</li>", page)
        assert v3 is not None, page
        assert "latest run" in v3.group(1) and "failed" in v3.group(1) and "score must lie in [0, 1]" in v3.group(1)
        v2 = re.search(r"<li><b>v2</b>: ([^<]*)</li>", page)
        assert v2 is not None and "not computed yet" in v2.group(1)
        assert "<b>v1</b>" not in page
    assert re.search(r"model v1: (within|above|not enough evidence)", front)
    assert "built " in front and "newest input " in front
