"""HTML cleaning report: self-contained, sections present, thumbnails embedded, no path escape."""

import re
from types import SimpleNamespace

import numpy as np
import polars as pl
from PIL import Image

from noisycal_platform.cleaning.pipeline.outcomes import (
    agreement_table,
    annotator_ranking_quality,
    cleaning_impact_table,
    ranking_quality_table,
    sensitivity_table,
    speedup,
)
from noisycal_platform.cleaning.pipeline.protocol_tables import (
    cleaned_file_list,
    confirmation_queue,
    confirmed_issues,
    issue_table,
    label_error_prevalence,
)
from noisycal_platform.cleaning.protocol import answers_from_records
from noisycal_platform.cleaning.ranking_quality import ranking_truth_table
from noisycal_platform.cleaning.report import render_cleaning_report, thumbnail_data_uri
from noisycal_platform.cleaning.simulate import Rater, Truth, simulate_answers


def _dataset(tmp_path, n=30):
    root = tmp_path / "ds"
    root.mkdir()
    rng = np.random.default_rng(0)
    for i in range(n):
        Image.fromarray(rng.integers(0, 255, (40, 40, 3), dtype=np.uint8)).save(root / f"f{i:02d}.png")
    (tmp_path / "secret.png").write_bytes((root / "f00.png").read_bytes())
    return root, pl.DataFrame(
        {"file_name": [f"f{i:02d}.png" for i in range(n)], "label": ["a", "b"] * (n // 2)}
    )


def test_thumbnail_and_path_escape(tmp_path):
    root, _ = _dataset(tmp_path)
    uri = thumbnail_data_uri(root, "f01.png")
    assert uri is not None and uri.startswith("data:image/jpeg;base64,")
    assert thumbnail_data_uri(root, "../secret.png") is None
    assert thumbnail_data_uri(root, "missing.png") is None


def test_full_report_is_self_contained(tmp_path):
    root, files = _dataset(tmp_path)
    n = files.height
    rk = SimpleNamespace(order=np.arange(n), scores=np.linspace(0, 1, n))
    pr = SimpleNamespace(pairs=np.array([[0, 1], [2, 3], [4, 5]]), scores=np.array([0.01, 0.02, 0.3]))
    q = confirmation_queue("ds", rk, pr, rk, files)
    truth = Truth.from_sets(["f00.png"], [("f00.png", "f01.png")], ["f03.png"])
    raters = [
        Rater("e1", "expert", 0.95, 0.95),
        Rater("e2", "expert", 0.9, 0.95),
        Rater("l1", "lay", 0.8, 0.9),
    ]
    answers = answers_from_records(simulate_answers(q, truth, raters, seed=0, n_stop=5))
    conf = confirmed_issues(answers, q)
    kept = cleaned_file_list(files, conf)
    preds = files.select("file_name").with_columns(
        target=pl.Series(np.arange(n) % 2), score=pl.Series(np.linspace(0, 1, n))
    )
    html = render_cleaning_report(
        issues=issue_table(conf, {"ds": n}),
        prevalence=label_error_prevalence(conf, files),
        agreement=agreement_table(answers, n_boot=50),
        ranking_quality=ranking_quality_table(conf),
        annotator_quality=annotator_ranking_quality(answers),
        ranking_truth=ranking_truth_table(
            "ds", files, truth, irrelevant=rk, near_dups=pr, label_errors=rk
        ),
        speedup=speedup(answers, {"ds": n}),
        impact=cleaning_impact_table(preds, files, kept, dataset="ds", model_version="v1", n_boot=50),
        sensitivity=sensitivity_table(answers),
        queue=q,
        confirmed=conf,
        dataset_roots={"ds": root},
        n_thumbnails=5,
        created="2026-02-01T00:00:00Z",
    )
    assert html.startswith("<!doctype html>") and html.rstrip().endswith("</html>")
    for section in (
        "Confirmed issues",
        "Label-error prevalence",
        "Inter-annotator agreement",
        "Ranking quality",
        "Rankings vs known truth",
        "each annotator's answers",
        "speed-up",
        "Impact of cleaning",
        "Top candidates",
    ):
        assert section in html
    assert html.count("data:image/png;base64,") == 2  # agreement plot + stopping-rule sensitivity plot
    n_thumbs = len(re.findall(r"<img src='data:image/jpeg;base64,", html))
    # top candidates (irrelevant + pairs side by side + label errors), then each unanimous issue (a pair twice)
    confirmed_images = conf.filter(pl.col("unanimous")).select(1 + pl.col("item_id_2").is_not_null()).sum().item()
    assert confirmed_images > 0
    assert n_thumbs == 5 + 3 * 2 + 5 + confirmed_images
    assert not re.search(r"(src|href)=['\"](https?:|//|/)", html)  # nothing external


def test_empty_report_renders():
    html = render_cleaning_report()
    assert "(no rows)" in html and "</html>" in html


def test_impact_cells_follow_table2_format():
    impact = pl.DataFrame(
        {
            "dataset": ["d"] * 2,
            "model_version": ["v"] * 2,
            "rule": ["unanimous"] * 2,
            "metric": ["auroc", "auprg"],
            "n_before": [10, 10],
            "n_after": [9, 9],
            "before": [0.9, 0.8],
            "after": [0.89, 0.79],
            "difference": [-0.01, -0.01],
            "median": [-0.003, -0.009],
            "ci_low": [-0.007, -0.025],
            "ci_high": [0.001, 0.0],
            "flag": ["", "°"],
        }
    )
    html = render_cleaning_report(impact=impact)
    assert "-0.3 [-0.7, +0.1]<" in html  # Gröger et al. 2023 Table 2, MED-NODE DeepDerm AUROC
    assert "-0.9 [-2.5, 0.0]°" in html  # exact-zero bound is unsigned and flagged
